"""Structural checks shared by the automaton JSON readers: keys, value types, the missing kind.

Each reader (:meth:`~cfl_lightning.automata.pfsa.PFSA.from_dict`,
:func:`~cfl_lightning.automata.pushdown_json.pda_from_dict`) names the keys its format has; a
key outside them is refused in one line naming it and where it is (the top level or which
transition), with the closest known key (``"pops"``: did you mean ``'pop'``?). A value of the
wrong JSON type is described in the format's words (``null``, ``a list``), never as Python's
``None``. A file without ``"kind"`` that carries pushdown fields is told to add
``"kind": "pushdown"`` (:func:`pushdown_hint`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["json_type", "check_keys", "require_name", "pushdown_hint", "PUSHDOWN_FIELDS"]

#: fields only a pushdown automaton's JSON has (top level, then per transition)
PUSHDOWN_FIELDS = ("stack_alphabet", "top", "push", "pop")


def json_type(value: Any) -> str:
    """What ``value`` is in JSON's words: ``null``, ``true``, ``a number``, ``a list``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__  # pragma: no cover - not produced by json.load


def check_keys(
    obj: Mapping[str, Any], allowed: Iterable[str], *, where: str, place: str, error: type
) -> None:
    """Refuse a key of ``obj`` outside ``allowed``, naming it and ``place``.

    Args:
        obj: a JSON object of the file.
        allowed: the keys the format defines there.
        where: the message prefix (``"FILE: "`` or ``""``).
        place: where ``obj`` is, e.g. ``"the top level"`` or a transition's label.
        error: the exception type to raise (the reader's own).

    Raises:
        error: ``FILE: unknown key 'pops' in transition ... (did you mean 'pop'? known keys:
            ...)``.
    """
    known = tuple(allowed)
    for key in obj:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise error(
                f"{where}unknown key {key!r} in {place} ({hint}known keys: {', '.join(known)})"
            )


def require_name(value: Any, what: str, *, where: str, error: type) -> str:
    """``value`` if it is a string (a name), else ``error``: ``WHAT must be a name (a string),
    got null``."""
    if not isinstance(value, str):
        raise error(f"{where}{what} must be a name (a string), got {json_type(value)}")
    return value


def pushdown_hint(data: Mapping[str, Any]) -> str | None:
    """The pushdown fields of a file without ``"kind"`` (None when it has none): the evidence
    for the message ``add "kind": "pushdown"``."""
    found = [key for key in PUSHDOWN_FIELDS if key in data]
    arcs = data.get("transitions")
    if isinstance(arcs, list):
        for arc in arcs:
            if isinstance(arc, Mapping):
                found += [key for key in PUSHDOWN_FIELDS[1:] if key in arc and key not in found]
    if not found:
        return None
    return ", ".join(repr(key) for key in found)
