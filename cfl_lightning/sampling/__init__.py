"""Pure sampling core: unconstrained, exact-intervention and rejection samplers."""

from cfl_lightning.sampling.budget import MemoryEstimate, check_sampling_memory, estimate_sampling
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.intervention import Intervention
from cfl_lightning.sampling.sampler import INTERVENTIONS, METHODS, sample_corpus
from cfl_lightning.sampling.visits import reach_probability, sample_visiting, stake_states

__all__ = [
    "Corpus",
    "Intervention",
    "sample_corpus",
    "INTERVENTIONS",
    "METHODS",
    "MemoryEstimate",
    "estimate_sampling",
    "check_sampling_memory",
    "stake_states",
    "reach_probability",
    "sample_visiting",
]
