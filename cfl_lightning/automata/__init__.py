"""Pure automaton core: the automaton protocol, the PFSA, events, generators, loading by kind
(no Lightning imports)."""

from cfl_lightning.automata.events import EVENT_KINDS, Event
from cfl_lightning.automata.generators import (
    default_alphabet,
    parity_starfree_pfsa,
    random_pfsa,
    random_topology,
    random_weights,
    resampled_parity_starfree_pfsa,
)
from cfl_lightning.automata.diagram import Arc, Diagram
from cfl_lightning.automata.loading import automaton_kinds, load_automaton, register_automaton_kind
from cfl_lightning.automata.pfsa import NORMALIZATION_TOLERANCE, PFSA, RESERVED_SYMBOLS, check_names
from cfl_lightning.automata.protocol import (
    Automaton,
    class_tables,
    counting_table,
    expected_event_count,
    spread_events,
)
from cfl_lightning.automata.pushdown import KEEP, POP, PushdownAutomaton
from cfl_lightning.automata.pushdown.events import PushEvent, parse_event
from cfl_lightning.automata.pushdown.generators import (
    anbn_pda,
    dyck_pda,
    random_pda,
)

__all__ = [
    "Automaton",
    "expected_event_count",
    "counting_table",
    "class_tables",
    "spread_events",
    "load_automaton",
    "register_automaton_kind",
    "automaton_kinds",
    "Diagram",
    "Arc",
    "PFSA",
    "NORMALIZATION_TOLERANCE",
    "RESERVED_SYMBOLS",
    "check_names",
    "Event",
    "EVENT_KINDS",
    "default_alphabet",
    "parity_starfree_pfsa",
    "random_pfsa",
    "random_topology",
    "random_weights",
    "resampled_parity_starfree_pfsa",
    "PushdownAutomaton",
    "KEEP",
    "POP",
    "PushEvent",
    "parse_event",
    "anbn_pda",
    "dyck_pda",
    "random_pda",
]
