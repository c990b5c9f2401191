"""``ResultsWriter``: writes ``results.json`` at the end of every test run."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from cfl_lightning.callbacks.decomposed_kl import MONITOR, DecomposedKLCallback
from cfl_lightning.callbacks.finished_run import FinishedRun, build_results
from cfl_lightning.callbacks.requirements import check_results_data
from cfl_lightning.errors import CflError
from cfl_lightning.results import RESULTS, write_results

__all__ = ["ResultsWriter", "run_log_dir"]


def run_log_dir(trainer: pl.Trainer) -> Path:
    """The first logger's versioned directory (its ``save_dir`` for loggers without one), else
    ``trainer.default_root_dir``. Collective-free (safe to call on one process only)."""
    if trainer.loggers:
        logger = trainer.loggers[0]
        if isinstance(logger, (CSVLogger, TensorBoardLogger)):
            return Path(logger.log_dir)
        if logger.save_dir is not None:
            return Path(logger.save_dir)
    return Path(trainer.default_root_dir)


def _kl_callback(trainer: pl.Trainer) -> DecomposedKLCallback | None:
    """The trainer's (first) :class:`DecomposedKLCallback`, or None."""
    return next((c for c in trainer.callbacks if isinstance(c, DecomposedKLCallback)), None)


class ResultsWriter(pl.Callback):
    """At the end of every test run, writes ``results.json`` (the keys of
    :data:`cfl_lightning.results.RESULT_KEYS`, atomically) on the global-zero process.

    The decomposed KL is what the trainer's :class:`DecomposedKLCallback` computed
    (:attr:`~DecomposedKLCallback.test_entries`, written as it is); the data from the
    trainer's data module: a :class:`~cfl_lightning.PFADataModule`, or any data module with the
    attributes of :mod:`cfl_lightning.callbacks.requirements` (without them the writer refuses
    when the run is set up, in one line naming what is missing). The
    ``event`` (and ``kl_target``, the realized and expected counts) is the one the callback
    evaluated: its ``event=`` argument, else the data module's. When the callback's event or
    automaton differ from the data module's own event or automaton, the writer refuses when
    the run is set up (:class:`~cfl_lightning.errors.CflError`), before anything is trained:
    the file would otherwise mix the corpus of one target with the KL of another. Training
    facts (``epochs``, ``steps``, ``stopped_early``: whether an ``EarlyStopping`` callback ended
    training, ``train_time_s``: the wall time of training, also the earlier attempts' of a
    resumed fit (up to the checkpoint it resumed from, which holds their time), and
    ``train_time_resumed_s``: the part of it spent after resuming, null when the fit did not
    resume; ``best_val_loss``: the best score of the trainer's
    ``ModelCheckpoint``, else the last ``val/kl_per_string``) are recorded when ``fit`` ends in
    the same process, so ``trainer.fit(...); trainer.test(ckpt_path="best", ...)`` gives the
    complete file.

    Args:
        path: where to write; default ``<first logger's log_dir>/results.json``, else
            ``<default_root_dir>/results.json``.
        config: the run's configuration, stored under ``"config"`` (the CLI passes its full
            config); default: the model's and the data module's hyperparameters.

    Attributes:
        written: the path of the last ``results.json`` written (None before).
        results: its content.
    """

    def __init__(self, path: str | None = None, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.path = path
        self.config: Mapping[str, Any] | None = config
        self.written: Path | None = None
        self.results: dict[str, Any] | None = None
        self._fit_started: float | None = None
        #: training seconds recorded in the checkpoint a resumed fit started from (else None)
        self._time_before: float | None = None
        self.train_time_s: float | None = None
        self.train_time_resumed_s: float | None = None
        self.epochs: int | None = None
        self.steps: int | None = None
        self.stopped_early: bool | None = None
        self.best_val_loss: float | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Refuse a :class:`DecomposedKLCallback` whose event or automaton is not the data
        module's (see the class docstring)."""
        if stage == "fit":  # before a resumed fit restores the time of its checkpoint
            self._time_before = None
            self._fit_started = None
        datamodule = trainer.datamodule
        check_results_data(datamodule)
        kl = _kl_callback(trainer)
        if kl is None:
            return
        pfsa, event = kl.resolve(datamodule)
        if pfsa is not None and pfsa.to_dict() != datamodule.automaton.to_dict():
            raise CflError(
                "DecomposedKLCallback(pfsa=...) evaluates another automaton than the data "
                "module's; results.json would mix them (give the callback no pfsa, or the same)"
            )
        if datamodule.event is not None and event != datamodule.event:
            raise CflError(
                f"DecomposedKLCallback(event={str(event)!r}) differs from the data module's event "
                f"{str(datamodule.event)!r}; results.json would mix the corpus of one with the KL "
                "of the other (give the callback no event, or the same one)"
            )

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fit_started = time.perf_counter()

    def _trained_s(self) -> float:
        """Training seconds so far: the earlier attempts' (from the checkpoint) and this one's."""
        now = time.perf_counter() - self._fit_started if self._fit_started is not None else 0.0
        return (self._time_before or 0.0) + now

    def state_dict(self) -> dict[str, Any]:
        """Saved in every checkpoint: the training time up to it (a resumed fit adds to it)."""
        return {"train_time_s": self._trained_s()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Lightning restores the state before ``on_fit_start`` when a fit resumes (and when a
        checkpoint is evaluated, where the time is not used)."""
        value = state_dict.get("train_time_s")
        self._time_before = float(value) if isinstance(value, (int, float)) else None

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        started = self._fit_started if self._fit_started is not None else time.perf_counter()
        this_run = time.perf_counter() - started
        resumed = self._time_before is not None
        self.train_time_s = (self._time_before or 0.0) + this_run
        self.train_time_resumed_s = this_run if resumed else None
        self.epochs = trainer.current_epoch
        self.steps = trainer.global_step
        self.stopped_early = any(
            isinstance(c, EarlyStopping) and c.stopped_epoch > 0 for c in trainer.callbacks
        )
        best = None
        checkpoint = trainer.checkpoint_callback
        if isinstance(checkpoint, ModelCheckpoint) and checkpoint.best_model_path:
            best = checkpoint.best_model_score
        if best is None:
            best = trainer.callback_metrics.get(MONITOR)
        self.best_val_loss = None if best is None else float(best)

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        datamodule = trainer.datamodule
        if not trainer.is_global_zero:
            return
        check_results_data(datamodule)
        kl = _kl_callback(trainer)
        path = Path(self.path) if self.path else run_log_dir(trainer) / RESULTS
        seed = os.environ.get("PL_GLOBAL_SEED")
        config = self.config
        results = build_results(FinishedRun(
            config=config,
            model=pl_module,
            datamodule=datamodule,
            kl=None if kl is None else kl.test_entries,
            event=datamodule.event if kl is None else kl.event,
            best_val_loss=self.best_val_loss,
            epochs=self.epochs,
            train_time_s=self.train_time_s,
            train_time_resumed_s=self.train_time_resumed_s,
            log_dir=path.parent,
            seed=(config or {}).get("seed_everything", None if seed is None else int(seed)),
            stopped_early=self.stopped_early,
            steps=self.steps,
            long=None if kl is None else kl.long_entries,
        ))
        self.written, self.results = write_results(path, results), results
        summary = {
            key: results[key]
            for key in (
                "realized_count",
                "realized_strings",
                "expected_count",
                "expected_strings",
                "count_unit",
                "automaton_id",
                "num_parameters",
                "occurrences",
                "stopped_early",
                "steps",
            )
        }
        for logger in trainer.loggers:
            logger.log_hyperparams(summary)
            logger.save()
