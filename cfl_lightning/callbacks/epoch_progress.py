"""``EpochProgress``: one compact line per training epoch, for logs and pipes."""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

import lightning.pytorch as pl

from cfl_lightning.callbacks.decomposed_kl import MONITOR

__all__ = ["EpochProgress"]


class EpochProgress(pl.Callback):
    """Writes ``epoch 3/40  train/loss 0.5212  val/kl_per_string 0.4310  lr 0.01  2.3s`` after
    every training epoch (global-zero process only). The CLI uses it instead of Lightning's bar
    when stdout or stderr is not a terminal (or the bar is disabled).

    Args:
        stream: where to write (default: ``sys.stderr`` at write time).
        names: the logged metrics to show, when present.
    """

    def __init__(
        self, stream: TextIO | None = None, names: tuple[str, ...] = ("train/loss", MONITOR)
    ) -> None:
        super().__init__()
        self.stream, self.names = stream, names
        self._start = 0.0
        self._pending: tuple[int, float] | None = None

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._flush(trainer)
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The module logs its epoch's training metrics after the callbacks' hooks: write the
        # line when the next epoch starts or fitting ends.
        self._pending = (trainer.current_epoch, time.perf_counter() - self._start)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._flush(trainer)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._flush(trainer)

    def _flush(self, trainer: pl.Trainer) -> None:
        pending, self._pending = self._pending, None
        if pending is None or not trainer.is_global_zero:
            return
        epoch, seconds = pending
        total = trainer.max_epochs if trainer.max_epochs not in (None, -1) else "?"
        parts = [f"epoch {epoch + 1}/{total}"]
        for name in self.names:
            value = trainer.callback_metrics.get(name)
            if value is not None and value.numel() == 1:
                parts.append(f"{name} {float(value):.4g}")
        if trainer.optimizers:
            lr = trainer.optimizers[0].param_groups[0].get("lr")
            if isinstance(lr, float) and math.isfinite(lr):
                parts.append(f"lr {lr:.3g}")
        parts.append(f"{seconds:.1f}s")
        stream = self.stream if self.stream is not None else sys.stderr
        stream.write("  ".join(parts) + "\n")
        stream.flush()
