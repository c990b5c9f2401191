"""cfl_lightning: causal evaluation of formal-language learnability with PyTorch Lightning.

Every public name is imported on first access (``cfl_lightning.PFSA``, ``from cfl_lightning
import PFSA``): the pure core (automata, binning semiring, samplers, the loss
``kl_to_automaton_loss``) pulls in torch, and the Lightning and torchmetrics layers
(``PFADataModule``, the language models, ``DecomposedKL``, the callbacks ``DecomposedKLCallback``
and ``ResultsWriter``) Lightning. So ``python -m cfl_lightning sample`` never imports Lightning or
wandb, and ``python -m cfl_lightning --help`` (and the ``--help`` and usage errors of ``sweep``,
``stratify``, ``analyze`` and ``draw``) not even torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from cfl_lightning.version import __version__

# name -> module, imported on first access: the core's pull in torch, the rest lightning /
# torchmetrics, so that ``python -m cfl_lightning --help`` (and sweep, stratify, analyze and draw
# until they need it) start without importing torch.
_LAZY = {
    "PFSA": "cfl_lightning.automata",
    "Event": "cfl_lightning.automata",
    "parity_starfree_pfsa": "cfl_lightning.automata",
    "random_pfsa": "cfl_lightning.automata",
    "resampled_parity_starfree_pfsa": "cfl_lightning.automata",
    "CflError": "cfl_lightning.errors",
    "EventError": "cfl_lightning.errors",
    "InterventionError": "cfl_lightning.errors",
    "OutputError": "cfl_lightning.errors",
    "PFSAError": "cfl_lightning.errors",
    "SizeError": "cfl_lightning.errors",
    "kl_to_automaton_loss": "cfl_lightning.losses",
    "Corpus": "cfl_lightning.sampling",
    "Intervention": "cfl_lightning.sampling",
    "reach_probability": "cfl_lightning.sampling",
    "sample_corpus": "cfl_lightning.sampling",
    "sample_visiting": "cfl_lightning.sampling",
    "stake_states": "cfl_lightning.sampling",
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

__all__ = list(_LAZY)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cfl_lightning' has no attribute {name!r}")
