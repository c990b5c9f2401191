"""Pure automaton core: the PFSA class, events and generators (no Lightning imports)."""

from cfl_lightning.automata.events import EVENT_KINDS, Event
from cfl_lightning.automata.generators import (
    default_alphabet,
    parity_starfree_pfsa,
    random_pfsa,
    random_topology,
    random_weights,
    resampled_parity_starfree_pfsa,
)
from cfl_lightning.automata.pfsa import NORMALIZATION_TOLERANCE, PFSA, RESERVED_SYMBOLS, check_names

__all__ = [
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
]
