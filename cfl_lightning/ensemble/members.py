"""Ensemble members built exactly as ``python -m cfl_lightning fit ARGS`` builds its run.

Each member is the training CLI itself, instantiated without running
(``build_cli(ARGS, run=False)``): it seeds with the run's ``seed_everything`` and then builds the
data module, the model and the Trainer (loggers, callbacks, directories) from the same config
resolution, so a member's initial weights, corpus and output paths are its sequential run's.
The ensemble then takes over the training; :func:`train_settings` reads the Trainer and
callback settings that it reproduces, and refuses (:class:`NotEnsembleable`) any that it does
not, so that such a run is trained the ordinary way instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cfl_lightning.callbacks import MONITOR
from cfl_lightning.ensemble.trainer import TrainSettings
from cfl_lightning.errors import CflError

__all__ = ["Member", "NotEnsembleable", "build_member", "train_settings", "ensemble_key"]

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
    """A run uses a setting the ensemble trainer does not reproduce (train it on its own)."""


@dataclass
class Member:
    """One ensemble member: its CLI (model, data module, Trainer, config) and settings.

    Attributes:
        name: the grid point's name (its run directory's name).
        cli: the instantiated (not run) training CLI.
        settings: the Trainer / early-stopping settings it is trained with.
    """

    name: str
    cli: Any
    settings: TrainSettings

    @property
    def model(self) -> Any:
        return self.cli.model

    @property
    def datamodule(self) -> Any:
        return self.cli.datamodule


def build_member(name: str, args: list[str]) -> Member:
    """Instantiate the run ``python -m cfl_lightning fit ARGS`` without training it.

    Raises:
        CflError: the arguments are bad (as the CLI reports them).
        NotEnsembleable: the run needs a setting the ensemble does not reproduce.
    """
    from cfl_lightning.cli.train import build_cli

    cli = build_cli(list(args), run=False)
    return Member(name, cli, train_settings(cli.config, cli.model))


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


def ensemble_key(member: Member) -> tuple:
    """Members with equal keys can share an ensemble (architecture, hyperparameters, settings)."""
    model = member.model
    hparams = tuple(
        sorted((k, repr(v)) for k, v in model.hparams.items() if not str(k).startswith("_"))
    )
    shapes = tuple((n, tuple(p.shape)) for n, p in model.named_parameters())
    return (type(model).__qualname__, hparams, shapes, member.settings)

