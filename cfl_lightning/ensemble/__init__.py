"""Ensembles: many training runs of one architecture in one process, as one batched model.

``EnsembleTrainer`` trains M members (each a shipped ``LanguageModel`` instance built under its
own seed, with its own ``PFADataModule``) with stacked ``[M, ...]`` weights: every member gets the
initialisation, data order, clipping, Adam state, LR schedule, early stopping and best checkpoint
of its own sequential run.
"""

from cfl_lightning.ensemble.lstm import StackedLSTM
from cfl_lightning.ensemble.optim import StackedAdam, clip_rows_
from cfl_lightning.ensemble.packing import PackedBatch, PackedCorpora
from cfl_lightning.ensemble.schedule import MemberSchedule
from cfl_lightning.ensemble.stacking import ParameterLayout
from cfl_lightning.ensemble.trainer import (
    EnsembleTrainer,
    MemberOutcome,
    TrainSettings,
    stacked_network,
)
from cfl_lightning.ensemble.transformer import StackedTransformer

__all__ = [
    "EnsembleTrainer",
    "MemberOutcome",
    "TrainSettings",
    "stacked_network",
    "StackedLSTM",
    "StackedTransformer",
    "StackedAdam",
    "clip_rows_",
    "PackedBatch",
    "PackedCorpora",
    "MemberSchedule",
    "ParameterLayout",
]
