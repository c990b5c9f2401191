"""Ensembles: many training runs of one architecture in one process, as one LightningModule.

:class:`EnsembleLanguageModel` holds M members (each a ``LanguageModel`` instance built
under its own seed, with its own ``PFADataModule``) as stacked ``[M, ...]`` weights and trains
them with a plain ``lightning.Trainer``: every member gets the initialisation, data order,
clipping, Adam state, LR schedule, early stopping and best weights of its own sequential run,
and its own test. :class:`LastCheckpoint` makes a killed ensemble resumable. The CLI layer runs
``fit`` command lines this way (``python -m cfl_lightning.cli.ensemble_job SPEC.json``, started
by ``python -m cfl_lightning sweep --ensemble M``) and writes each member's ``results.json``
(:mod:`cfl_lightning.ensemble.results`); :mod:`cfl_lightning.sweep.jobs` groups a sweep's
points into such jobs.

Any ``LanguageModel`` subclass that keeps ``LanguageModel``'s training step and optimizer
ensembles (:func:`~cfl_lightning.ensemble.settings.check_ensembleable`). An architecture that
owns a stacked form (``LanguageModel.stacked_network``: the shipped LSTM and transformer) can
run all members as one batched computation; without one, each member runs its own forward in
turn (the loop engine). A member's data module offers what
:mod:`~cfl_lightning.ensemble.requirements` lists (:class:`MemberData`; a ``PFADataModule``
does), checked by :func:`check_member_data`.
"""

from cfl_lightning.ensemble.checkpoint import LastCheckpoint
from cfl_lightning.ensemble.module import EnsembleLanguageModel, MemberOutcome, stacked_network
from cfl_lightning.ensemble.optim import StackedAdam, clip_rows_
from cfl_lightning.ensemble.packing import PackedBatch, PackedCorpora
from cfl_lightning.ensemble.requirements import MemberData, check_member_data
from cfl_lightning.ensemble.schedule import MemberSchedules
from cfl_lightning.ensemble.settings import NotEnsembleable, TrainSettings
from cfl_lightning.ensemble.stacking import ParameterLayout
from cfl_lightning.models.lstm import StackedLSTM
from cfl_lightning.models.transformer import StackedTransformer

__all__ = [
    "EnsembleLanguageModel",
    "MemberOutcome",
    "TrainSettings",
    "NotEnsembleable",
    "MemberData",
    "check_member_data",
    "LastCheckpoint",
    "stacked_network",
    "StackedLSTM",
    "StackedTransformer",
    "StackedAdam",
    "clip_rows_",
    "PackedBatch",
    "PackedCorpora",
    "MemberSchedules",
    "ParameterLayout",
]
