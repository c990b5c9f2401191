"""Automata by kind: reading any registered kind from its JSON form.

The JSON field ``"kind"`` names the implementation (``"pfsa"`` when absent, as in every file
written before pushdown automata). Each kind's loader is its registry entry's ``loader``
(:class:`~cfl_lightning.kinds.automata.AutomatonKind`); :func:`load_automaton` dispatches on the
field.

Example:
    >>> from cfl_lightning.automata import parity_starfree_pfsa
    >>> load_automaton(parity_starfree_pfsa(0.3).to_dict()).kind
    'pfsa'
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from cfl_lightning.automata.protocol import Automaton
from cfl_lightning.errors import PFSAError
from cfl_lightning.io import read_json
from cfl_lightning.kinds.automata import (
    AUTOMATON_KINDS,
    DEFAULT_KIND,
    automaton_kind,
    register_automaton_kind,
)
from cfl_lightning.kinds.registry import call

__all__ = ["register_automaton_kind", "automaton_kinds", "load_automaton", "DEFAULT_KIND"]


def automaton_kinds() -> tuple[str, ...]:
    """The registered kinds, in registration order."""
    return AUTOMATON_KINDS.names()


def load_automaton(
    source: str | os.PathLike | Mapping[str, Any], *, where: str | None = None
) -> Automaton:
    """Read and validate an automaton of any registered kind.

    Args:
        source: a JSON file, or its parsed object.
        where: the name used in messages for a parsed object (a file's own name otherwise).

    Raises:
        PFSAError: the file is missing or not JSON, the top level is not an object, the
            ``"kind"`` is unknown; or the kind's own error for an invalid automaton.
    """
    if isinstance(source, Mapping):
        data: Any = source
    else:
        where = os.fspath(source)
        data = read_json(where, error=PFSAError, what="automaton")
    prefix = f"{where}: " if where else ""
    if not isinstance(data, Mapping):
        raise PFSAError(f"{prefix}expected a JSON object at the top level")
    kind = data.get("kind", DEFAULT_KIND)
    try:
        entry = automaton_kind(kind)
    except PFSAError as err:
        raise PFSAError(f"{prefix}{err}") from None
    return call(entry.loader, data, source=where)
