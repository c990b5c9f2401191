"""Pure sampling core: unconstrained, exact-intervention and rejection samplers."""

from cfl_lightning.sampling.backend import EventCounts, SamplerBackend, backend_for
from cfl_lightning.sampling.budget import (
    MemoryEstimate,
    check_corpora_memory,
    check_sampling_memory,
    estimate_sampling,
)
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.intervention import Intervention
from cfl_lightning.sampling.request import SamplingRequest, check_request, resolve_device
from cfl_lightning.sampling.sampler import INTERVENTIONS, METHODS, draw, sample_corpus
from cfl_lightning.sampling.samplers import SamplingJob
from cfl_lightning.sampling.visits import reach_probability, sample_visiting, stake_states

__all__ = [
    "SamplerBackend",
    "EventCounts",
    "backend_for",
    "SamplingJob",
    "Corpus",
    "Intervention",
    "sample_corpus",
    "SamplingRequest",
    "check_request",
    "draw",
    "resolve_device",
    "INTERVENTIONS",
    "METHODS",
    "MemoryEstimate",
    "estimate_sampling",
    "check_sampling_memory",
    "check_corpora_memory",
    "stake_states",
    "reach_probability",
    "sample_visiting",
]
