"""Automaton kinds: one registration each (loader, sampler backend, event tables, estimates).

Built in (:data:`AUTOMATON_KINDS`, registration order):

* ``pfsa`` -- probabilistic finite-state automata (``"kind"`` absent from the JSON, or ``"pfsa"``);
* ``pushdown`` -- real-time deterministic probabilistic pushdown automata;
* ``pcfg`` -- probabilistic context-free grammars (a ``*.pcfg`` file in NLTK's notation, or
  JSON with ``"kind": "pcfg"``); no position classes; ``symbol:`` and ``rule:`` events
  (docs/guide/pcfg.md).

An :class:`AutomatonKind` says everything the layers ask of a kind, each piece of code as a
callable or a ``"package.module:attribute"`` reference imported on first use (so this registry,
on the floor of ``io``, names the loaders and backends of ``automata/`` and ``sampling/`` above
it): how to read its JSON form (``loader``: :func:`~cfl_lightning.automata.load_automaton`), its
sampler backend (``backend``: :func:`~cfl_lightning.sampling.backend.backend_for`), the tables of
the event kinds it has (``events``, beside the tables an event kind brings for it:
:func:`event_table_ref`), its sampling estimate (``estimate``: a hook, None for the generic
PFSA-shaped one) and whether it offers position classes (``position_classes``; without them the
decomposed KL refuses the automaton in one line).

Adding a kind (a PCFG, see docs/design.md, "Where things vary"): write its automaton (the
:class:`~cfl_lightning.automata.Automaton` protocol), its sampler backend and its event tables in
modules of their own, then ``register_automaton_kind(AutomatonKind(...))``: nothing else changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cfl_lightning.errors import EventError, PFSAError
from cfl_lightning.kinds.events import EVENT_KIND_REGISTRY
from cfl_lightning.kinds.registry import Names, Ref, Registry

__all__ = [
    "AutomatonKind",
    "AUTOMATON_KINDS",
    "AUTOMATON_KIND_NAMES",
    "DEFAULT_KIND",
    "automaton_kind",
    "register_automaton_kind",
    "event_table_ref",
    "check_position_classes",
]

#: the kind of a JSON object without a ``"kind"`` field (every file written before pushdown)
DEFAULT_KIND = "pfsa"


@dataclass(frozen=True)
class AutomatonKind:
    """One automaton kind.

    Attributes:
        name: the JSON ``"kind"`` and the automaton's ``kind`` attribute.
        description: one line for the docs.
        loader: ``loader(data, *, source=None) -> Automaton``: builds and validates an automaton
            from its parsed JSON object (``source``: the file name, for messages); raises the
            kind's own :class:`~cfl_lightning.errors.PFSAError` subclass.
        backend: ``backend(automaton) -> SamplerBackend``
            (:class:`~cfl_lightning.sampling.backend.SamplerBackend`); None: not sampled.
        events: ``{event kind: table}``: the table function ``(event, automaton) -> [C, S]``
            int64 of each event kind this automaton kind has (an event kind registered later
            may bring its own table for this kind instead, ``EventKind.tables``; the same pair
            from both is refused).
        estimate: ``estimate(automaton, request) -> Estimate``: the time and memory of a
            sampling request on this kind, before any work (``request`` has ``num_strings``,
            ``intervention`` and optionally ``method``); None: the generic (PFSA-shaped)
            estimate. The per-kind estimators of ``sampling/estimates.py`` have this form.
        position_classes: whether the automaton has finitely many position classes (the
            decomposed KL, a batch's ``states``); a kind without them (a PCFG) says False and
            ``DecomposedKLCallback`` refuses it in one line (:func:`check_position_classes`).
    """

    name: str
    description: str
    loader: Ref
    backend: Ref | None = None
    events: Mapping[str, Ref] = field(default_factory=dict)
    estimate: Ref | None = None
    position_classes: bool = True


_REGISTRY: Registry[AutomatonKind] = Registry("automaton kind", PFSAError)
#: the registry of automaton kinds
AUTOMATON_KINDS = _REGISTRY
#: the kinds' names, a live tuple-like view
AUTOMATON_KIND_NAMES: Names = _REGISTRY.view()


def automaton_kind(name: str) -> AutomatonKind:
    """The kind ``name`` (``PFSAError`` naming the known kinds otherwise)."""
    return _REGISTRY.get(name)


def register_automaton_kind(kind: AutomatonKind, *, replace: bool = False) -> None:
    """Register an automaton kind (see :class:`AutomatonKind`).

    Raises:
        PFSAError: the name is taken (unless ``replace``), or is not text without ``:``.
        EventError: an event table the kind brings is already brought by the event kind.
    """
    for event in kind.events:
        if event in EVENT_KIND_REGISTRY and kind.name in EVENT_KIND_REGISTRY.get(event).tables:
            raise EventError(
                f"automaton kind {kind.name!r}: the {event} event kind already has a table for "
                f"it; give the table once"
            )
    _REGISTRY.register(kind, replace=replace)


def check_position_classes(kind: str, what: str) -> None:
    """Refuse an automaton of a kind registered without position classes (one line).

    Args:
        kind: the automaton's ``kind``; an unregistered kind is not refused here.
        what: who needs them, for the message (e.g. ``"DecomposedKLCallback"``).

    Raises:
        PFSAError: the kind says ``position_classes=False``.
    """
    if kind in _REGISTRY and not _REGISTRY.get(kind).position_classes:
        raise PFSAError(
            f"{what} needs position classes, and automata of kind {kind!r} have none "
            "(its registration says position_classes=False)"
        )


def event_table_ref(event: str, automaton: str) -> Ref:
    """The table function of event kind ``event`` on automata of kind ``automaton``.

    Looked up in the automaton kind's ``events``, then in the event kind's ``tables``.

    Raises:
        EventError: an unknown event kind; no table (``push events need a pushdown
            automaton``); a table given by both entries.
    """
    entry = EVENT_KIND_REGISTRY.get(event)
    own = _REGISTRY.get(automaton).events.get(event) if automaton in _REGISTRY else None
    brought = entry.tables.get(automaton)
    if own is not None and brought is not None:
        raise EventError(f"{event} events have two tables on {automaton} automata; give one")
    if own is None and brought is None:
        where = [k.name for k in _REGISTRY if event in k.events] + list(entry.tables)
        raise EventError(f"{event} events need a {' or '.join(where) or 'another'} automaton")
    return own if own is not None else brought


_AUTOMATA, _SAMPLING = "cfl_lightning.automata", "cfl_lightning.sampling"
for _kind in (
    AutomatonKind(
        "pfsa",
        "probabilistic finite-state automaton; position classes are its states",
        loader=f"{_AUTOMATA}.pfsa:PFSA.from_dict",
        backend=f"{_SAMPLING}.pfsa.backend:PFSABackend",
        estimate=f"{_SAMPLING}.estimates:pfsa_estimate",
        events={
            name: f"{_AUTOMATA}.events:{name}_table" for name in ("state", "symbol", "transition")
        },
    ),
    AutomatonKind(
        "pushdown",
        "real-time deterministic probabilistic pushdown automaton; classes are (state, top)",
        loader=f"{_AUTOMATA}.pushdown:PushdownAutomaton.from_dict",
        backend=f"{_SAMPLING}.pushdown.backend:PushdownBackend",
        estimate=f"{_SAMPLING}.estimates:pushdown_estimate",
        events={
            name: f"{_AUTOMATA}.pushdown.events:{name}_table"
            for name in ("state", "symbol", "transition")
        },
    ),
    AutomatonKind(
        "pcfg",
        "probabilistic context-free grammar (rules in NLTK's notation); no position classes",
        loader=f"{_AUTOMATA}.pcfg.automaton:load_pcfg",
        backend=f"{_SAMPLING}.pcfg.backend:PCFGBackend",
        events={name: f"{_AUTOMATA}.pcfg.automaton:{name}_table" for name in ("symbol", "rule")},
        estimate=f"{_SAMPLING}.pcfg.backend:pcfg_estimate",
        position_classes=False,
    ),
):
    register_automaton_kind(_kind)
del _kind
