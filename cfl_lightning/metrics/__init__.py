"""Decomposed KL divergence between an automaton and a language model (torchmetrics layer)."""

from cfl_lightning.metrics.decomposed_kl import DecomposedKL
from cfl_lightning.metrics.entries import KL_ENTRIES, kl_entries
from cfl_lightning.metrics.epoch_loss import EPOCH_LOSS_NAMES, EpochLoss
from cfl_lightning.metrics.functional import (
    _decomposed_kl_compute,
    _decomposed_kl_update,
    decomposed_kl,
)
from cfl_lightning.metrics.naming import (
    EOS_NAME,
    kl_log_dict,
    kl_nested_dict,
    kl_target_names,
    target_values,
)
from cfl_lightning.metrics.pfsa_kl import pfsa_kl, pfsa_kl_decomposed
from cfl_lightning.metrics.state_visits import StateVisits
from cfl_lightning.metrics.symbol_kl import SymbolKL, symbol_unweighted

__all__ = [
    "DecomposedKL",
    "StateVisits",
    "SymbolKL",
    "symbol_unweighted",
    "EpochLoss",
    "EPOCH_LOSS_NAMES",
    "decomposed_kl",
    "_decomposed_kl_update",
    "_decomposed_kl_compute",
    "pfsa_kl",
    "pfsa_kl_decomposed",
    "kl_log_dict",
    "kl_nested_dict",
    "kl_target_names",
    "target_values",
    "EOS_NAME",
    "kl_entries",
    "KL_ENTRIES",
]
