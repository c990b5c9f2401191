"""Train one group of members as an ensemble and write each member's ``results.json``.

:func:`train_group` is what an ensemble job does with members that share an architecture,
hyperparameters and Trainer settings (the CLI layer builds them from ``fit`` command lines:
:mod:`cfl_lightning.cli.ensemble_job`):

1. every member's data is set up on its own: a member whose corpus cannot be sampled (a size
   refused, a bad event) fails alone, reported with its reason;
2. with a checkpoint directory, a checkpoint that holds exactly these members is resumed
   (``trainer.fit(..., ckpt_path=..., weights_only=True)``) and a new one is written atomically
   after every epoch (:class:`~cfl_lightning.ensemble.LastCheckpoint`); members that already
   have a valid ``results.json`` are kept in a resumed ensemble (its shapes are the
   checkpoint's) but otherwise left out, and in any case never written again;
3. :class:`~cfl_lightning.ensemble.EnsembleLanguageModel` is fitted and tested by a plain
   ``lightning.Trainer``, and every member's ``results.json`` is written where its own ``fit``
   would write it; then the checkpoint, no longer needed, is removed;
4. if training the ensemble raises, each of its members is trained again on its own, so that
   only the member that fails is reported.

``say(name, reason)`` reports each member once: ``reason`` None when it is done.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from cfl_lightning.callbacks import MONITOR, EpochProgress
from cfl_lightning.checkpoint_io import read_checkpoint
from cfl_lightning.cluster_env import quiet_srun_hint, trainer_plugins
from cfl_lightning.ensemble.checkpoint import LAST, LastCheckpoint
from cfl_lightning.ensemble.member_logs import MemberLogs
from cfl_lightning.ensemble.module import CHECKPOINT_KEY, EnsembleLanguageModel
from cfl_lightning.ensemble.results import write_member_results
from cfl_lightning.ensemble.settings import TrainSettings
from cfl_lightning.results import has_results

__all__ = ["JobMember", "train_group", "reason", "checkpoint_members", "default_checkpoint"]

Say = Callable[[str, "str | None"], None]


@dataclass
class JobMember:
    """One member of an ensemble job.

    Attributes:
        name: the member's (grid point's) name.
        model: its freshly built ``LanguageModel`` (the initial weights).
        datamodule: its ``PFADataModule``.
        results_path: where its own ``fit`` writes ``results.json``.
        config: its run's full config (stored in ``results.json``).
    """

    name: str
    model: Any
    datamodule: Any
    results_path: Path
    config: Mapping[str, Any] = field(default_factory=dict)
    #: its run's loggers (CSV, W&B), fed by :class:`.member_logs.MemberLogs`
    loggers: list[Any] = field(default_factory=list)

    @property
    def done(self) -> bool:
        """Whether a valid ``results.json`` exists already (never trained or written again)."""
        return has_results(self.results_path)


def reason(err: BaseException) -> str:
    """One line naming the error (for ``FAILED NAME: reason``)."""
    text = " ".join(str(err).split()) or type(err).__name__
    return f"{type(err).__name__}: {text}"[:300]


def checkpoint_members(path: Path) -> tuple[list[str], int] | None:
    """``(member names, completed epochs)`` of an ensemble checkpoint, or None (absent, unreadable)."""
    if not path.is_file():
        return None
    try:
        saved = read_checkpoint(path, mmap=True)
        return [str(n) for n in saved[CHECKPOINT_KEY]["names"]], int(saved.get("epoch", 0)) + 1
    except Exception:  # noqa: BLE001 - an unreadable checkpoint is not resumed
        traceback.print_exc()
        return None


def _quiet_trainer() -> contextlib.AbstractContextManager:
    """Lightning's info lines and warnings about the ensemble's own choices, silenced."""
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    for pattern in (".*does not have many workers.*", ".*Total length of .* across ranks is zero.*",
                    ".*`training_step` returned `None`.*", ".*The number of training batches.*"):
        warnings.filterwarnings("ignore", message=pattern)
    for name in ("lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        level = logger.level
        logger.setLevel(logging.WARNING)
        stack.callback(logger.setLevel, level)
    return stack


def _fit(
    members: list[JobMember], settings: TrainSettings, device: str, checkpoint: Path | None,
    engine: str,
) -> EnsembleLanguageModel:
    """Fit and test ``members`` as one ensemble (resuming ``checkpoint`` when it is theirs)."""
    names = [m.name for m in members]
    module = EnsembleLanguageModel(
        [m.model for m in members], [m.datamodule for m in members], settings, names=names,
        engine=engine,
    )
    module.member_log = MemberLogs([m.loggers for m in members])
    resume = None
    if checkpoint is not None:
        saved = checkpoint_members(checkpoint)
        if saved is not None and saved[0] == names:
            resume = checkpoint
            sys.stderr.write(f"resuming {len(names)} members from {checkpoint} after epoch "
                             f"{saved[1]}\n")
        elif saved is not None:
            sys.stderr.write(f"{checkpoint} holds other members; training from the start\n")
    # one line per epoch on stderr (the job's log): mean val/kl_per_string of the members
    # still training, and how many they are
    callbacks: list[pl.Callback] = [EpochProgress(names=("train/loss", MONITOR, "ensemble/live"))]
    if checkpoint is not None:
        callbacks.append(LastCheckpoint(checkpoint.parent, checkpoint.name))
    quiet_srun_hint()  # one process
    trainer = pl.Trainer(
        max_epochs=settings.max_epochs,
        accelerator="gpu" if device.startswith("cuda") else "cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        reload_dataloaders_every_n_epochs=1,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        plugins=trainer_plugins() or None,  # in a SLURM step: submitit owns requeueing
    )
    try:
        with _quiet_trainer():
            trainer.fit(module, ckpt_path=resume, weights_only=True)
            if trainer.interrupted:
                raise KeyboardInterrupt
            trainer.test(module, verbose=False)
    except BaseException:
        module.member_log.close("failed")
        raise
    return module


def _write(member: JobMember, module: EnsembleLanguageModel, index: int, say: Say) -> bool:
    outcome = module.outcomes()[index]
    kl_result, visits = module.test_results[index]
    try:
        write_member_results(member.results_path, member.config, member.model,
                             member.datamodule, outcome, kl_result, visits)
    except Exception as err:  # noqa: BLE001 - one member's file, reported alone
        traceback.print_exc()
        module.member_log.finish(index, None, "failed")
        say(member.name, reason(err))
        return False
    module.member_log.finish(index, member.results_path)
    say(member.name, None)
    return True


def train_group(
    members: list[JobMember],
    settings: TrainSettings,
    say: Say,
    *,
    checkpoint: str | os.PathLike | None = None,
    device: str | None = None,
    engine: str = "auto",
) -> None:
    """Train, test and write the members of one group (see the module docstring).

    Args:
        members: members that can share an ensemble (same class, hyperparameters, settings).
        settings: their shared settings.
        say: called once per member, ``say(name, None)`` when done, else with the reason.
        checkpoint: the ensemble's checkpoint file (resumed when it holds these members,
            written after every epoch); None: no checkpoints.
        device: ``"cuda"``, ``"cpu"`` or None (CUDA when available).
        engine: :class:`EnsembleLanguageModel`'s engine.
    """
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    ready = []
    for member in members:
        try:
            member.datamodule.setup("fit")
            member.datamodule.setup("test")
        except Exception as err:  # noqa: BLE001 - a member that cannot be set up fails alone
            traceback.print_exc()
            say(member.name, reason(err))
            continue
        ready.append(member)
    path = None if checkpoint is None else Path(checkpoint)
    saved = None if path is None else checkpoint_members(path)
    resumable = saved is not None and saved[0] == [m.name for m in ready]
    train = ready if resumable else [m for m in ready if not m.done]
    for member in ready:
        if member.done and member not in train:
            say(member.name, None)
    if not train:
        return
    try:
        module = _fit(train, settings, device, path, engine)
    except KeyboardInterrupt:
        raise
    except Exception as err:  # noqa: BLE001 - isolate the failing member
        traceback.print_exc()
        if len(train) == 1:
            say(train[0].name, reason(err))
            return
        sys.stderr.write(
            f"the ensemble of {len(train)} failed ({reason(err)}); training its members one by one\n"
        )
        for member in train:
            if not member.done:
                train_group([member], settings, say, device=device, engine=engine)
        return
    written = True
    for i, member in enumerate(train):
        if member.done:  # kept for a resumed ensemble's shapes; its file stays as it was
            say(member.name, None)
            continue
        written = _write(member, module, i, say) and written
    if path is not None and written:
        with contextlib.suppress(OSError):
            path.unlink()


def default_checkpoint(directory: str | os.PathLike, group: int, groups: int) -> Path:
    """The checkpoint file of group ``group`` of ``groups`` in a job's checkpoint directory."""
    return Path(directory) / (LAST if groups == 1 else f"last-{group}.ckpt")
