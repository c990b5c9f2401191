"""The probabilistic deterministic finite automaton (PFSA) kind: the automaton
(:mod:`~cfl_lightning.automata.pfsa.automaton`) and its state walk
(:mod:`~cfl_lightning.automata.pfsa.walk`). Its generators are
:mod:`cfl_lightning.automata.generators`; its sampler backend is
:mod:`cfl_lightning.sampling.pfsa.backend`; its registration, the ``pfsa`` entry of
:mod:`cfl_lightning.kinds.automata`."""

from cfl_lightning.automata.pfsa.automaton import (
    NORMALIZATION_TOLERANCE,
    PFSA,
    RESERVED_SYMBOLS,
    check_names,
)

__all__ = ["PFSA", "NORMALIZATION_TOLERANCE", "RESERVED_SYMBOLS", "check_names"]
