"""``LastCheckpoint``: the ensemble's whole training state, written atomically after every epoch.

``trainer.save_checkpoint`` writes into a temporary file beside the target, which is renamed
onto ``DIR/last.ckpt`` only when complete: a process killed at any moment leaves either the
previous epoch's checkpoint or this one, never a truncated file. It is written at the end of
every training epoch (after validation: the members' schedules, best weights and stops of the
epoch are in it), so ``trainer.fit(model, ckpt_path=DIR/last.ckpt, weights_only=True)``
continues with the next epoch.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import lightning.pytorch as pl

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

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.save(trainer)

    def save(self, trainer: pl.Trainer) -> Path:
        """Write the checkpoint now; returns its path."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        os.close(fd)
        try:
            trainer.save_checkpoint(tmp)
            with open(tmp, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return self.path
