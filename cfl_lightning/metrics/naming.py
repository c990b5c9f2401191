"""Readable names for decomposed-KL results: flat logger dicts and the intervened event's value.

Names use the automaton's class names (a PFSA's states; a pushdown automaton's ``STATE/TOP``) and
symbol names, ``EOS`` for the end-of-string column: ``kl/total``, ``kl/state/<class>``,
``kl/symbol/<sym|EOS>``, ``kl/transition/<class>:<sym|EOS>`` (weighted) and
``kl_unweighted/...`` for the unweighted parts (no ``total``). Transitions are listed only where
they exist in the automaton (:meth:`~cfl_lightning.automata.Automaton.class_transitions`): symbol
transitions with a target (including zero-weight ones) and EOS where ending has positive weight.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from torch import Tensor

from cfl_lightning.automata import Automaton, Event, class_tables, spread_events
from cfl_lightning.errors import EventError

__all__ = ["EOS_NAME", "kl_log_dict", "kl_nested_dict", "kl_target_names", "target_values"]

EOS_NAME = "EOS"


def _symbol_name(automaton: Automaton, s: int) -> str:
    return EOS_NAME if s == automaton.eos else automaton.alphabet[s]


def _transitions(automaton: Automaton) -> list[tuple[int, int, str]]:
    """``(c, s, "CLASS:SYM")`` for every transition of the automaton, EOS included."""
    exists = automaton.class_transitions().cpu().tolist()
    return [
        (c, s, f"{name}:{_symbol_name(automaton, s)}")
        for c, name in enumerate(automaton.class_names)
        for s in range(automaton.num_symbols + 1)
        if exists[c][s]
    ]


def kl_nested_dict(
    result: Mapping[str, Tensor], automaton: Automaton, *, unweighted: bool = False
) -> dict[str, dict[str, float | None]]:
    """``{"state": {name: v}, "symbol": {name|EOS: v}, "transition": {"SRC:SYM": v}}``, and
    for every kind of :func:`~cfl_lightning.automata.spread_events` (a pushdown automaton's
    ``push`` and ``pop``: ``{"pop": {X: v}}``) its events' :func:`target_values`.

    Args:
        result: the dict of :meth:`DecomposedKL.compute` / :func:`decomposed_kl`.
        automaton: the automaton the result refers to (for names).
        unweighted: take the ``*_unweighted`` parts.

    Returns:
        nested dict of Python floats, NaN replaced by ``None`` (JSON ``null``), as in
        ``results.json``.
    """
    suffix = "_unweighted" if unweighted else ""
    state = result["state" + suffix].tolist()
    symbol = result["symbol" + suffix].tolist()
    trans = result["transition" + suffix].tolist()

    def clean(v: float) -> float | None:
        return None if math.isnan(v) else float(v)

    out = {
        "state": {name: clean(state[q]) for q, name in enumerate(automaton.class_names)},
        "symbol": {_symbol_name(automaton, s): clean(v) for s, v in enumerate(symbol)},
        "transition": {key: clean(trans[q][s]) for q, s, key in _transitions(automaton)},
    }
    column = 1 if unweighted else 0
    for kind, names in spread_events(automaton).items():
        out[kind] = {
            name: clean(target_values(result, f"{kind}:{name}", automaton)[column])
            for name in names
        }
    return out


def kl_log_dict(
    result: Mapping[str, Tensor], automaton: Automaton, prefix: str = "kl", *, skip_nan: bool = True
) -> dict[str, float]:
    """Flat ``{name: float}`` dict for ``LightningModule.log_dict`` / W&B.

    Args:
        result: the dict of :meth:`DecomposedKL.compute` / :func:`decomposed_kl`.
        automaton: the automaton the result refers to (for names).
        prefix: weighted entries go under ``<prefix>/``, unweighted under ``<prefix>_unweighted/``.
        skip_nan: leave out NaN entries (undefined unweighted parts: unvisited states,
            zero-probability transitions); with False they are kept as ``nan``.

    Returns:
        e.g. ``{"kl/total": 0.12, "kl/state/odd": 0.03, "kl_unweighted/transition/odd:a": ...}``.
    """
    out = {f"{prefix}/total": float(result["total"])}
    for unweighted, head in ((False, prefix), (True, f"{prefix}_unweighted")):
        nested = kl_nested_dict(result, automaton, unweighted=unweighted)
        for part, values in nested.items():
            for name, value in values.items():
                if value is None and skip_nan:
                    continue
                out[f"{head}/{part}/{name}"] = math.nan if value is None else value
    return out


def kl_target_names(event: str | Event, automaton: Automaton, prefix: str = "kl") -> tuple[str, str]:
    """The :func:`kl_log_dict` keys of an event's weighted and unweighted contributions.

    Example:
        >>> from cfl_lightning import parity_starfree_pfsa
        >>> kl_target_names("transition:odd:a", parity_starfree_pfsa())
        ('kl/transition/odd:a', 'kl_unweighted/transition/odd:a')

    Raises:
        EventError: an unknown name, or an event spread over several entries (e.g. a pushdown
            automaton's ``state:NAME`` over its classes ``NAME/TOP``): it has no single key.
    """
    kind, places = _locate(event, automaton)
    if len(places) != 1:
        raise EventError(f"event {event} spans {len(places)} {kind} entries: it has no single key")
    q, s = places[0]
    name = {
        "state": lambda: automaton.class_names[q],
        "symbol": lambda: _symbol_name(automaton, s),
        "transition": lambda: f"{automaton.class_names[q]}:{_symbol_name(automaton, s)}",
    }[kind]()
    return f"{prefix}/{kind}/{name}", f"{prefix}_unweighted/{kind}/{name}"


def _locate(event: str | Event, automaton: Automaton) -> tuple[str, list[tuple[int, int]]]:
    """The event's part of the decomposition and its ``(class, symbol)`` places (-1: none)."""
    event = Event.parse(event) if isinstance(event, str) else event
    kind, indices = automaton.event_location(event)  # raises EventError on unknown names
    if kind == "state":
        return kind, [(c, -1) for c in indices]
    if kind == "symbol":
        return kind, [(-1, s) for s in indices]
    return kind, [divmod(i, automaton.num_symbols + 1) for i in indices]


def target_values(
    result: Mapping[str, Tensor], event_spec: str | Event, automaton: Automaton
) -> tuple[float, float]:
    """The intervened event's contribution: ``(weighted, unweighted)``.

    A state event reads ``state[c]``, a symbol event ``symbol[s]``, a transition event
    ``transition[c, s]``. An event spread over several entries (a pushdown automaton's
    ``state:NAME`` over its classes, a ``push:X`` over its transitions) sums the weighted
    entries; its unweighted value is the mean of the entries' unweighted values weighted by
    their exact weights (``p_pi(c)``, or ``p_pi(c) p(s | c)``), over the entries the strings
    visited (NaN where none).

    Args:
        result: the dict of :meth:`DecomposedKL.compute` / :func:`decomposed_kl`.
        event_spec: ``"state:NAME"``, ``"symbol:SYM"``, ``"transition:SOURCE:SYM"`` or an
            :class:`~cfl_lightning.automata.Event`.
        automaton: the automaton the result refers to.

    Returns:
        two Python floats; the unweighted one may be NaN (undefined, see :class:`DecomposedKL`).

    Raises:
        EventError: the event is malformed or names an unknown state or symbol.
    """
    kind, places = _locate(event_spec, automaton)
    index = [(q,) if kind == "state" else (s,) if kind == "symbol" else (q, s) for q, s in places]
    if len(index) == 1:
        return float(result[kind][index[0]]), float(result[f"{kind}_unweighted"][index[0]])
    weighted = sum(float(result[kind][i]) for i in index)
    probs, visits = class_tables(automaton)
    weights = visits if kind == "state" else visits[:, None] * probs
    mass = total = 0.0
    for i in index:
        value, weight = float(result[f"{kind}_unweighted"][i]), float(weights[i])
        if not math.isnan(value) and weight > 0:
            mass, total = mass + weight, total + weight * value
    return weighted, total / mass if mass > 0 else math.nan
