"""``LastCheckpoint``: the ensemble's whole training state, written atomically after every epoch.

The checkpoint goes through :class:`~cfl_lightning.checkpoint_io.AtomicCheckpointIO` (installed
on the trainer unless it has a checkpoint plugin of its own): a temporary file beside the
target, renamed onto ``DIR/last.ckpt`` only when complete, so a process killed at any moment (or
a full disk) leaves either the previous epoch's checkpoint or this one, never a truncated file.
It is written at the end of every training epoch (after validation: the members' schedules,
best weights and stops of the epoch are in it), so ``trainer.fit(model,
ckpt_path=DIR/last.ckpt, weights_only=True)`` continues with the next epoch.
"""

from __future__ import annotations

import os
from pathlib import Path

import lightning.pytorch as pl

from cfl_lightning.checkpoint_io import use_atomic_checkpoints

__all__ = ["LastCheckpoint", "LAST"]

#: the checkpoint's file name
LAST = "last.ckpt"


class LastCheckpoint(pl.Callback):
    """Writes ``dirpath/filename`` atomically at the end of every training epoch.

    Args:
        dirpath: the directory (created when needed).
        filename: the checkpoint's name.
    """

    def __init__(self, dirpath: str | os.PathLike, filename: str = LAST) -> None:
        super().__init__()
        self.path = Path(dirpath) / filename

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        use_atomic_checkpoints(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.save(trainer)

    def save(self, trainer: pl.Trainer) -> Path:
        """Write the checkpoint now; returns its path."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        trainer.save_checkpoint(self.path)
        return self.path
