"""The binning semiring and backward weights of binning-lifted automata (pure core)."""

from cfl_lightning.semiring.backward import (
    ScaledBins,
    backward_fast,
    backward_lehmann,
    count_operator,
    initial_count_law,
    lifted_transition_matrix,
)
from cfl_lightning.semiring.binning import BinningSemiring

__all__ = [
    "BinningSemiring",
    "ScaledBins",
    "backward_fast",
    "backward_lehmann",
    "count_operator",
    "initial_count_law",
    "lifted_transition_matrix",
]
