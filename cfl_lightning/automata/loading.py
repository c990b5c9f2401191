"""Automata by kind: reading any registered kind from its JSON form.

The JSON field ``"kind"`` names the implementation (``"pfsa"`` when absent, as in every file
written before pushdown automata). Each kind registers its ``from_dict`` here, in the module that
defines it; :func:`load_automaton` dispatches on the field.

Example:
    >>> from cfl_lightning.automata import parity_starfree_pfsa
    >>> load_automaton(parity_starfree_pfsa(0.3).to_dict()).kind
    'pfsa'
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from cfl_lightning.automata.pfsa import PFSA
from cfl_lightning.automata.protocol import Automaton
from cfl_lightning.errors import PFSAError
from cfl_lightning.io import read_json

__all__ = ["register_automaton_kind", "automaton_kinds", "load_automaton", "DEFAULT_KIND"]

DEFAULT_KIND = "pfsa"
_KINDS: dict[str, Callable[..., Automaton]] = {}


def register_automaton_kind(kind: str, from_dict: Callable[..., Automaton]) -> None:
    """Register ``from_dict(data, *, source=None)`` for JSON objects of this ``"kind"``."""
    _KINDS[kind] = from_dict


def automaton_kinds() -> tuple[str, ...]:
    """The registered kinds, in registration order."""
    return tuple(_KINDS)


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
    factory = _KINDS.get(kind) if isinstance(kind, str) else None
    if factory is None:
        raise PFSAError(
            f"{prefix}unknown automaton kind {kind!r}; expected one of {', '.join(_KINDS)}"
        )
    return factory(data, source=where)


register_automaton_kind("pfsa", PFSA.from_dict)
