"""Ensembles: many training runs of one architecture in one process, as one batched model.

``EnsembleTrainer`` trains M members (each a shipped ``LanguageModel`` instance built under its
own seed, with its own ``PFADataModule``) with stacked ``[M, ...]`` weights: every member gets the
initialisation, data order, clipping, Adam state, LR schedule, early stopping and best checkpoint
of its own sequential run. :mod:`~cfl_lightning.ensemble.run` trains ``fit`` command lines this
way (``python -m cfl_lightning.ensemble SPEC.json``) and writes each member's ``results.json``;
:mod:`cfl_lightning.sweep.jobs` groups a sweep's points into such jobs
(``python -m cfl_lightning sweep ... --ensemble M``). The CLI-facing modules (``members``,
``evaluate``, ``run``) import Lightning and are not imported here.
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
