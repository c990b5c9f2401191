"""Event kinds: the sets of transitions an intervention can count, one entry each.

Built in (:data:`EVENT_KIND_REGISTRY`, registration order), with their text forms:

* ``state:NAME`` -- every transition leaving state ``NAME``;
* ``symbol:SYM`` -- every transition emitting ``SYM``;
* ``transition:SOURCE:SYM`` -- the one transition leaving ``SOURCE`` on ``SYM``;
* ``push:X`` -- every step that pushes stack symbol ``X`` (a pushdown automaton's nesting);
* ``pop:X`` -- every step that pops ``X`` (a nesting closed; pushdown);
* ``class:STATE/TOP`` -- every step from one (state, top of stack) class (pushdown);
* ``rule:A -> 'a' B`` -- every use of one grammar rule in a string's derivation (a PCFG; the
  whole text after ``rule:`` is the rule, as the grammar writes it).

Most kinds count steps of the string (``from_tokens``: a ``[C, S]`` table recounts them from the
tokens); a ``rule`` event counts steps of the *derivation*, which an ambiguous grammar does not
recover from the string: its per-string counts are the sampler's (``Corpus.counts``) and nothing
recounts them (:func:`counted_from_tokens`).

An :class:`EventKind` names the fields of an :class:`~cfl_lightning.automata.Event` its text
carries (``fields``, in text order, the last one read whole so that it may contain ``:``), the
tables it brings for automaton kinds (``tables``: ``{"pushdown": ref}``, a function ``(event,
automaton) -> [C, S] int64``; an automaton kind brings the tables of the event kinds it has in its
own entry, :mod:`cfl_lightning.kinds.automata`, which looks both up), where it lives in a
decomposed KL (``locate``, on a PFSA), and how the analysis
names its contribution (``quantity``, ``weight``, ``signed``, ``title``). Parsing and formatting
(:func:`parse_event_text`, :func:`format_event`) are generic over the fields. Pure Python (no
torch at import): the analysis reads the labels without torch.

Adding a kind (a pushdown automaton's ``push:X``, see docs/design.md): write its table function
in its automaton's module, then ``register_event_kind(EventKind(..., tables={kind: ref}))``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cfl_lightning.errors import EventError
from cfl_lightning.kinds.registry import Names, Ref, Registry

__all__ = [
    "EventKind",
    "EVENT_KIND_REGISTRY",
    "EVENT_KINDS",
    "EVENT_FIELDS",
    "event_kind",
    "register_event_kind",
    "parse_event_text",
    "format_event",
    "event_forms",
    "counted_from_tokens",
]

#: the built-in fields of an :class:`~cfl_lightning.automata.Event` (its accessors); a kind may
#: name others (any identifier but ``kind``), read from ``Event.fields``
EVENT_FIELDS = ("state", "symbol", "stack")
_PLACEHOLDERS = {"state": "NAME", "symbol": "SYM", "stack": "X"}


@dataclass(frozen=True)
class EventKind:
    """One event kind.

    Attributes:
        name: the text form's first field (``state`` in ``state:NAME``).
        fields: the names of the :class:`~cfl_lightning.automata.Event` fields that follow, in
            text order (identifiers; :data:`EVENT_FIELDS` have accessors).
        description: one line for the docs and ``--help``.
        tables: ``{automaton kind: ref}``: the table functions this event kind brings for
            automaton kinds that do not list it themselves (``AutomatonKind.events``),
            ``(event, automaton) -> [C, S]`` int64 counting the occurrences each (class, symbol)
            step adds (raises ``EventError`` for an unknown name); looked up by
            :func:`cfl_lightning.kinds.automata.event_table_ref`.
        locate: ``(event, pfsa) -> (family, index)``: where the event lives in a decomposed
            KL (``("state", q)``); or None.
        placeholders: how the docs write each field (``("SOURCE", "SYM")``); default
            ``NAME``/``SYM``/``X``, a new field's name in capitals.
        quantity: the analysis name of its KL contribution (``"per-state"``).
        weight: the weight of the weighted reading in plot labels (``"p_π(q)"``).
        signed: its contribution can be negative (a single-symbol log ratio), so the
            causal/correlational gap is a difference, not a ratio.
        title: ``title(rest)`` -> a plot panel's title from the text after ``kind:``; or None
            for ``"kind rest"``.
        from_tokens: its occurrences are a function of the string, counted from the tokens
            with the ``[C, S]`` table. False (``rule``): a property of the derivation; its
            table (``tables``) is then per rule, ``[R]`` int64, and the per-string counts come
            from the sampler (``Corpus.counts``), never from the tokens.
    """

    name: str
    fields: tuple[str, ...]
    description: str
    tables: Mapping[str, Ref] = field(default_factory=dict)
    locate: Ref | None = None
    placeholders: tuple[str, ...] = ()
    quantity: str = ""
    weight: str = ""
    signed: bool = False
    title: Callable[[str], str] | None = None
    from_tokens: bool = True

    def __post_init__(self) -> None:
        bad = [f for f in self.fields if not (isinstance(f, str) and f.isidentifier())]
        if not self.fields or bad or "kind" in self.fields or len(set(self.fields)) < len(
            self.fields
        ):
            raise EventError(
                f"event kind {self.name!r}: fields must be distinct identifiers other than "
                f"'kind' (such as {', '.join(EVENT_FIELDS)}), got {self.fields!r}"
            )
        if not self.placeholders:
            object.__setattr__(
                self, "placeholders", tuple(_PLACEHOLDERS.get(f, f.upper()) for f in self.fields)
            )
        if not self.quantity:
            object.__setattr__(self, "quantity", f"per-{self.name}")

    @property
    def form(self) -> str:
        """The text form with placeholders: ``transition:SOURCE:SYM``."""
        return ":".join((self.name, *self.placeholders))

    def parse_rest(self, rest: str) -> dict[str, str] | None:
        """The field values of the text after ``kind:``, or None when it does not fit."""
        parts = rest.split(":", len(self.fields) - 1)
        if len(parts) != len(self.fields) or not all(parts):
            return None
        return dict(zip(self.fields, parts))

    def panel_title(self, rest: str) -> str:
        """A plot panel's title for the event ``kind:rest``."""
        return self.title(rest) if self.title is not None else f"{self.name} {rest}"


_REGISTRY: Registry[EventKind] = Registry("event kind", EventError)
#: the registry of event kinds
EVENT_KIND_REGISTRY = _REGISTRY
#: the kinds' names, a live tuple-like view
EVENT_KINDS: Names = _REGISTRY.view()


def event_kind(name: str) -> EventKind:
    """The kind ``name`` (``EventError`` naming the known kinds otherwise)."""
    return _REGISTRY.get(name)


def register_event_kind(kind: EventKind, *, replace: bool = False) -> None:
    """Register an event kind (see :class:`EventKind`)."""
    _REGISTRY.register(kind, replace=replace)


def event_forms() -> str:
    """``"state:NAME, symbol:SYM or transition:SOURCE:SYM"``: the text forms, for messages."""
    forms = [k.form for k in _REGISTRY]
    return forms[0] if len(forms) == 1 else f"{', '.join(forms[:-1])} or {forms[-1]}"


def parse_event_text(spec: Any) -> tuple[str, dict[str, str]]:
    """``(kind, {field: value})`` of an event's text form.

    Raises:
        EventError: not text, an unknown kind or fields that do not fit the kind's form (one
            line naming the text and the forms expected).
    """
    if isinstance(spec, str) and ":" in spec:
        name, rest = spec.split(":", 1)
        if name in _REGISTRY:
            values = _REGISTRY.get(name).parse_rest(rest)
            if values is not None:
                return name, values
    raise EventError(f"bad event {spec!r}: expected {event_forms()}")


def counted_from_tokens(event: Any) -> bool:
    """Whether ``event`` (an :class:`~cfl_lightning.automata.Event`) is counted from a string's
    tokens (its kind's ``from_tokens``; False for a grammar's ``rule`` events, whose counts are
    the derivation's: the sampler's per-string counts)."""
    return _REGISTRY.get(event.kind).from_tokens


def format_event(kind: str, values: Mapping[str, Any]) -> str:
    """The text form of an event of ``kind`` with field ``values``."""
    entry = _REGISTRY.get(kind)
    return ":".join((kind, *(str(values.get(f)) for f in entry.fields)))


def _transition_title(rest: str) -> str:
    if ":" in rest:
        source, symbol = rest.rsplit(":", 1)
        return f"transition {source} -{symbol}->"
    return f"transition {rest}"


_EVENTS = "cfl_lightning.automata.events"
for _kind in (
    EventKind(
        "state",
        ("state",),
        "every transition leaving state NAME (stopping at it is not an occurrence)",
        locate=f"{_EVENTS}:state_index",
        weight="p_π(q)",
    ),
    EventKind(
        "symbol",
        ("symbol",),
        "every transition emitting SYM",
        locate=f"{_EVENTS}:symbol_index",
        weight="p_π(s)",
        signed=True,
    ),
    EventKind(
        "transition",
        ("state", "symbol"),
        "the one transition leaving SOURCE on SYM",
        locate=f"{_EVENTS}:transition_index",
        placeholders=("SOURCE", "SYM"),
        weight="p_π(q,s)",
        signed=True,
        title=_transition_title,
    ),
    EventKind(
        "push",
        ("stack",),
        "every step that pushes stack symbol X: one more level of nesting (pushdown automata)",
        tables={"pushdown": "cfl_lightning.automata.pushdown.events:push_table"},
        weight="p_π(push X)",
        signed=True,
        title=lambda rest: f"push {rest}",
    ),
    EventKind(
        "pop",
        ("stack",),
        "every step that pops stack symbol X: a level of nesting closed (pushdown automata)",
        tables={"pushdown": "cfl_lightning.automata.pushdown.events:pop_table"},
        weight="p_π(pop X)",
        signed=True,
        title=lambda rest: f"pop {rest}",
    ),
    EventKind(
        "class",
        ("state",),
        "every step from one (state, top of stack) class, STATE/- on the empty stack "
        "(pushdown automata)",
        tables={"pushdown": "cfl_lightning.automata.pushdown.events:class_table"},
        placeholders=("STATE/TOP",),
        quantity="per-class",
        weight="p_π(c)",
        title=lambda rest: f"class {rest}",
    ),
    EventKind(
        "rule",
        ("rule",),
        "every use of the grammar rule in the string's derivation (pcfg; counted by the "
        "sampler: an ambiguous grammar's string does not tell its derivation)",
        placeholders=("A -> 'a' B",),
        quantity="none (kl_target null)",
        title=lambda rest: f"rule {rest}",
        from_tokens=False,
    ),
):
    register_event_kind(_kind)
del _kind
