"""What an ensemble reproduces of a run: its settings, the Trainer values it needs, its models.

A member of an ensemble is a run of ``python -m cfl_lightning fit ARGS``. The CLI layer
(:mod:`cfl_lightning.cli.ensemble_job`) reads the run's parsed config and builds its
:class:`TrainSettings`; this module says what the ensemble can honour:

* :data:`TRAINER_VALUES`, the one list of the Trainer settings it reproduces only at their
  Lightning defaults: :func:`refused_trainer_setting` checks a run's values against it, and
  :func:`check_trainer` checks the Trainer that fits an ensemble (the job builds that one);
* :func:`check_ensembleable`: a ``LanguageModel`` whose training the ensemble reproduces (its
  own forward, ``LanguageModel``'s step and optimizer);
* :func:`ensemble_key`: which members can share an ensemble.

A run the ensemble does not reproduce raises :class:`NotEnsembleable`, and is trained the
ordinary way instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cfl_lightning.errors import CflError

__all__ = [
    "TrainSettings",
    "NotEnsembleable",
    "TRAINER_VALUES",
    "refused_trainer_setting",
    "check_trainer",
    "check_ensembleable",
    "ensemble_key",
]

#: Trainer settings an ensemble reproduces only at these values (their Lightning defaults; None:
#: not given). ``check_val_every_n_epoch``, ``val_check_interval`` and ``limit_*_batches`` must
#: also hold for the Trainer that fits an ensemble.
TRAINER_VALUES: dict[str, tuple[Any, ...]] = {
    "accumulate_grad_batches": (1, None),
    "check_val_every_n_epoch": (1, None),
    "val_check_interval": (1.0, 1, None),
    "limit_train_batches": (1.0, None),
    "limit_val_batches": (1.0, None),
    "max_steps": (-1, None),
    "min_epochs": (None, 0, 1),
    "min_steps": (None,),
    "max_time": (None,),
    "precision": (None, 32, "32", "32-true"),
    "num_nodes": (1, None),
    "overfit_batches": (0, 0.0, None),
    "fast_dev_run": (False, 0, None),
    "gradient_clip_algorithm": ("norm", None),
    "reload_dataloaders_every_n_epochs": (0, None),
}

#: the methods of ``LanguageModel`` whose behaviour the ensemble reproduces (a subclass must
#: not override them)
_REPRODUCED = ("training_step", "configure_optimizers", "optimizer_step",
               "configure_gradient_clipping")


class NotEnsembleable(CflError):
    """A run uses a setting the ensemble does not reproduce (train it on its own)."""


@dataclass(frozen=True)
class TrainSettings:
    """The Trainer / callback settings of a sequential run that the ensemble reproduces.

    Args:
        max_epochs: ``trainer.max_epochs``.
        gradient_clip_val: ``trainer.gradient_clip_val`` (norm clipping; None: no clipping).
        patience: ``early_stopping.patience``.
        min_delta: ``early_stopping.min_delta``.
    """

    max_epochs: int = 50
    gradient_clip_val: float | None = 5.0
    patience: int = 10
    min_delta: float = 0.0


def refused_trainer_setting(trainer: Mapping[str, Any]) -> str | None:
    """``"trainer.NAME=VALUE"`` of the first of a run's Trainer settings that
    :data:`TRAINER_VALUES` refuses, or None (absent keys count as None)."""
    for key, allowed in TRAINER_VALUES.items():
        value = trainer.get(key)
        if value not in allowed:
            return f"trainer.{key}={value!r}"
    return None


def check_trainer(trainer: Any) -> None:
    """The Trainer fitting an ensemble plans every epoch anew and validates every member every
    epoch: it reloads its dataloaders every epoch, validates every epoch on every batch, and runs
    on one device (:data:`TRAINER_VALUES` otherwise).

    Raises:
        ValueError: naming what the Trainer needs.
    """

    def has(key: str) -> bool:
        value = getattr(trainer, key)
        return value is not None and value in TRAINER_VALUES[key]

    wrong = []
    if trainer.reload_dataloaders_every_n_epochs != 1:
        wrong.append("reload_dataloaders_every_n_epochs=1")
    if not (has("check_val_every_n_epoch") and has("val_check_interval")):
        wrong.append("check_val_every_n_epoch=1 and val_check_interval=1.0")
    if not (has("limit_val_batches") and has("limit_train_batches")):
        wrong.append("limit_train_batches=1.0 and limit_val_batches=1.0")
    if trainer.world_size != 1:
        wrong.append("one device")
    if wrong:
        raise ValueError(
            "EnsembleLanguageModel needs a Trainer with " + ", ".join(wrong)
            + ": every epoch's ticks are planned anew and every member validates every epoch"
        )


def check_ensembleable(model: Any) -> None:
    """An ensemble trains ``LanguageModel`` s as ``LanguageModel.training_step`` does.

    Any subclass qualifies (without a stacked network its members run their own forward one
    after another), unless it overrides the training step, the optimizer or the clipping.

    Raises:
        NotEnsembleable: naming the model and why.
    """
    from cfl_lightning.models import LanguageModel

    name = type(model).__name__
    if not isinstance(model, LanguageModel):
        raise NotEnsembleable(f"model {name} is not a LanguageModel")
    for method in _REPRODUCED:
        if getattr(type(model), method) is not getattr(LanguageModel, method):
            raise NotEnsembleable(f"model {name} overrides LanguageModel.{method}")


def ensemble_key(model: Any, settings: TrainSettings) -> tuple:
    """Members with equal keys can share an ensemble (architecture, hyperparameters, settings)."""
    hparams = tuple(
        sorted((k, repr(v)) for k, v in model.hparams.items() if not str(k).startswith("_"))
    )
    shapes = tuple((n, tuple(p.shape)) for n, p in model.named_parameters())
    return (type(model).__qualname__, hparams, shapes, settings)
