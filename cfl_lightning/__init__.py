"""cfl_lightning: causal evaluation of formal-language learnability with PyTorch Lightning.

The pure core (automata, binning semiring, samplers, the loss ``kl_to_automaton_loss``) is imported
eagerly; the Lightning and torchmetrics layers (``PFADataModule``, the language models,
``DecomposedKL``, the callbacks ``DecomposedKLCallback`` and ``ResultsWriter``) are imported lazily
on first attribute access, so ``python -m cfl_lightning sample`` never imports Lightning or wandb.
"""

from __future__ import annotations

import importlib
from typing import Any

from cfl_lightning.automata import (
    PFSA,
    Event,
    parity_starfree_pfsa,
    random_pfsa,
    resampled_parity_starfree_pfsa,
)
from cfl_lightning.errors import (
    CflError,
    EventError,
    InterventionError,
    OutputError,
    PFSAError,
    SizeError,
)
from cfl_lightning.losses import kl_to_automaton_loss
from cfl_lightning.sampling import (
    Corpus,
    Intervention,
    reach_probability,
    sample_corpus,
    sample_visiting,
    stake_states,
)
from cfl_lightning.version import __version__

# name -> module, imported on first access (these pull in lightning / torchmetrics).
_LAZY = {
    "PFADataModule": "cfl_lightning.data",
    "LanguageModel": "cfl_lightning.models",
    "LSTMLanguageModel": "cfl_lightning.models",
    "TransformerLanguageModel": "cfl_lightning.models",
    "DecomposedKL": "cfl_lightning.metrics",
    "StateVisits": "cfl_lightning.metrics",
    "decomposed_kl": "cfl_lightning.metrics",
    "pfsa_kl": "cfl_lightning.metrics",
    "DecomposedKLCallback": "cfl_lightning.callbacks",
    "ResultsWriter": "cfl_lightning.callbacks",
    "EnsembleLanguageModel": "cfl_lightning.ensemble",
}

__all__ = [
    "PFSA",
    "Event",
    "Corpus",
    "Intervention",
    "sample_corpus",
    "sample_visiting",
    "stake_states",
    "reach_probability",
    "kl_to_automaton_loss",
    "parity_starfree_pfsa",
    "random_pfsa",
    "resampled_parity_starfree_pfsa",
    "CflError",
    "PFSAError",
    "EventError",
    "InterventionError",
    "OutputError",
    "SizeError",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cfl_lightning' has no attribute {name!r}")
