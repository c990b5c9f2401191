"""Where the product varies: registries of automaton kinds, automaton generators, event kinds and
intervention kinds (pure Python; no torch at import).

Each registry is a :class:`~cfl_lightning.kinds.registry.Registry` of frozen entries; the CLI's
choices, the configs' validation, the analysis labels and the docs' lists read it. Adding a kind
is one module (its code) plus one ``register_*`` call (docs/design.md, "Where things vary").
"""

from cfl_lightning.kinds.automata import (
    AUTOMATON_KINDS,
    AutomatonKind,
    automaton_kind,
    check_position_classes,
    event_table_ref,
    register_automaton_kind,
)
from cfl_lightning.kinds.events import (
    EVENT_KIND_REGISTRY,
    EventKind,
    counted_from_tokens,
    event_kind,
    register_event_kind,
)
from cfl_lightning.kinds.generators import (
    GENERATOR_REGISTRY,
    Generator,
    GeneratorParam,
    generator,
    register_generator,
)
from cfl_lightning.kinds.interventions import (
    INTERVENTION_KINDS,
    InterventionKind,
    intervention_kind,
    register_intervention,
)
from cfl_lightning.kinds.registry import Registry, resolve

__all__ = [
    "Registry",
    "resolve",
    "AutomatonKind",
    "AUTOMATON_KINDS",
    "automaton_kind",
    "register_automaton_kind",
    "event_table_ref",
    "check_position_classes",
    "Generator",
    "GeneratorParam",
    "GENERATOR_REGISTRY",
    "generator",
    "register_generator",
    "EventKind",
    "EVENT_KIND_REGISTRY",
    "event_kind",
    "register_event_kind",
    "counted_from_tokens",
    "InterventionKind",
    "INTERVENTION_KINDS",
    "intervention_kind",
    "register_intervention",
]
