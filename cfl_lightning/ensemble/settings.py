"""The Trainer and callback settings of a ``fit`` run that an ensemble reproduces.

A member of an ensemble is a run of ``python -m cfl_lightning fit ARGS`` (built by the CLI layer,
:mod:`cfl_lightning.cli.ensemble_job`). :func:`train_settings` reads, from the run's parsed
config, the settings the ensemble reproduces (:class:`TrainSettings`) and refuses
(:class:`NotEnsembleable`) any that it does not, so that such a run is trained the ordinary way
instead; :func:`ensemble_key` says which members can share an ensemble.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cfl_lightning.callbacks import MONITOR
from cfl_lightning.errors import CflError

__all__ = ["TrainSettings", "NotEnsembleable", "train_settings", "ensemble_key"]

# Trainer settings the ensemble reproduces only at these values (their Lightning defaults)
_TRAINER_DEFAULTS = {
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


def _get(config: Any, dotted: str, default: Any = None) -> Any:
    node = config
    for part in dotted.split("."):
        if node is None:
            return default
        try:
            node = node[part]
        except (KeyError, TypeError):
            node = getattr(node, part, None)
    return default if node is None else node


def train_settings(config: Any, model: Any) -> TrainSettings:
    """The :class:`TrainSettings` of a parsed CLI config, or :class:`NotEnsembleable`."""
    from cfl_lightning.models import LSTMLanguageModel, TransformerLanguageModel

    if not isinstance(model, (LSTMLanguageModel, TransformerLanguageModel)):
        raise NotEnsembleable(f"model {type(model).__name__} has no stacked network")
    trainer = _get(config, "trainer", {})
    for key, allowed in _TRAINER_DEFAULTS.items():
        value = _get(trainer, key)
        if value not in allowed:
            raise NotEnsembleable(f"trainer.{key}={value!r}")
    for group in ("early_stopping", "checkpoint"):
        if _get(config, f"{group}.monitor", MONITOR) != MONITOR:
            raise NotEnsembleable(f"{group}.monitor is not {MONITOR}")
        if _get(config, f"{group}.mode", "min") != "min":
            raise NotEnsembleable(f"{group}.mode is not min")
    if _get(config, "early_stopping.check_finite", True) is not True:
        raise NotEnsembleable("early_stopping.check_finite is False")
    if _get(config, "early_stopping.stopping_threshold") is not None or _get(
        config, "early_stopping.divergence_threshold"
    ) is not None:
        raise NotEnsembleable("early stopping thresholds are not reproduced")
    clip = _get(trainer, "gradient_clip_val")
    max_epochs = _get(trainer, "max_epochs")
    if max_epochs is None or max_epochs < 0:
        raise NotEnsembleable("trainer.max_epochs must be set (>= 0)")
    return TrainSettings(
        max_epochs=int(max_epochs),
        gradient_clip_val=None if clip in (None, 0) else float(clip),
        patience=int(_get(config, "early_stopping.patience", 3)),
        min_delta=float(_get(config, "early_stopping.min_delta", 0.0)),
    )


def ensemble_key(model: Any, settings: TrainSettings) -> tuple:
    """Members with equal keys can share an ensemble (architecture, hyperparameters, settings)."""
    hparams = tuple(
        sorted((k, repr(v)) for k, v in model.hparams.items() if not str(k).startswith("_"))
    )
    shapes = tuple((n, tuple(p.shape)) for n, p in model.named_parameters())
    return (type(model).__qualname__, hparams, shapes, settings)

