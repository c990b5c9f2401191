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

from cfl_lightning.automata.declared import check_load_memory, declared_names
from cfl_lightning.automata.json_checks import pushdown_hint
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

__all__ = [
    "register_automaton_kind",
    "automaton_kinds",
    "load_automaton",
    "read_automaton_json",
    "DEFAULT_KIND",
]


def automaton_kinds() -> tuple[str, ...]:
    """The registered kinds, in registration order."""
    return AUTOMATON_KINDS.names()


def read_automaton_json(
    source: str | os.PathLike | Mapping[str, Any], *, where: str | None = None
) -> tuple[Mapping[str, Any], str | None, str]:
    """Read an automaton's JSON object and its kind, without building it (cheap).

    Args:
        source: a JSON file, or its parsed object.
        where: the name used in messages for a parsed object (a file's own name otherwise).

    Returns:
        ``(data, where, kind)``: the object, the name for messages, the registered kind.

    Raises:
        PFSAError: the file is missing or not JSON, the top level is not an object, the
            ``"kind"`` is unknown, or a file without ``"kind"`` has pushdown fields (it is told
            to add ``"kind": "pushdown"``).
    """
    if isinstance(source, Mapping):
        data: Any = source
    else:
        where = os.fspath(source)
        data = read_json(where, error=PFSAError, what="automaton")
    prefix = f"{where}: " if where else ""
    if not isinstance(data, Mapping):
        raise PFSAError(f"{prefix}expected a JSON object at the top level")
    if "kind" not in data:
        fields = pushdown_hint(data)
        if fields is not None:
            raise PFSAError(
                f"{prefix}no \"kind\", so read as a PFSA, but it has pushdown fields ({fields}): "
                'add "kind": "pushdown"'
            )
    kind = data.get("kind", DEFAULT_KIND)
    try:
        automaton_kind(kind)
    except PFSAError as err:
        raise PFSAError(f"{prefix}{err}") from None
    return data, where, kind


def load_automaton(
    source: str | os.PathLike | Mapping[str, Any], *, where: str | None = None
) -> Automaton:
    """Read and validate an automaton of any registered kind.

    Before the automaton is built, its declared sizes are checked against the memory available
    (:func:`~cfl_lightning.automata.declared.check_load_memory`: a pushdown automaton's fixed
    point grows as ``(G Q^2 + Q)^2``), so growth past what fits is refused in one line.

    Args:
        source: a JSON file, or its parsed object.
        where: the name used in messages for a parsed object (a file's own name otherwise).

    Raises:
        PFSAError: as :func:`read_automaton_json`; or the kind's own error for an invalid
            automaton.
        SizeError: building it would not fit in memory.
    """
    data, where, kind = read_automaton_json(source, where=where)
    declared = declared_names(data, kind)
    if declared is not None:
        check_load_memory(declared, f"{where}: " if where else "")
    return call(automaton_kind(kind).loader, data, source=where)
