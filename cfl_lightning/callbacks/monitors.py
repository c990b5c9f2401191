"""Monitored metrics that exist: checked before training, and one line when they do not.

Lightning finds out that ``EarlyStopping(monitor=...)`` names a metric nobody logs only after the
first validation, and then raises a ``RuntimeError`` (a traceback after an epoch of training).
:func:`check_monitors` compares the monitors of early stopping and checkpointing with the
metrics a run is known to log, before anything is trained; :class:`CheckedEarlyStopping` turns
Lightning's late error into a :class:`~cfl_lightning.errors.CflError` (one line) for models whose
metrics cannot be known in advance.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from torch import Tensor

from cfl_lightning.errors import CflError

__all__ = ["CheckedEarlyStopping", "check_monitors"]

_OPTION = {EarlyStopping: "--early_stopping.monitor", ModelCheckpoint: "--checkpoint.monitor"}


class CheckedEarlyStopping(EarlyStopping):
    """:class:`EarlyStopping` (same arguments) whose missing monitored metric is a
    :class:`CflError` naming the metrics that were logged, instead of a ``RuntimeError``."""

    def _validate_condition_metric(self, logs: dict[str, Tensor]) -> bool:
        try:
            return super()._validate_condition_metric(logs)
        except RuntimeError:
            logged = ", ".join(sorted(logs)) or "none"
            raise CflError(
                f"--early_stopping.monitor {self.monitor!r} was not logged (logged: {logged})"
            ) from None


def check_monitors(callbacks: Iterable[Any], logged: Iterable[str]) -> None:
    """Every early-stopping and checkpoint monitor must be one of the ``logged`` metrics.

    Args:
        callbacks: the trainer's callbacks (others than ``EarlyStopping`` and
            ``ModelCheckpoint``, and checkpoints without a monitor, are ignored).
        logged: every metric the run logs (only call this when that set is known).

    Raises:
        CflError: naming the option, the monitor and the metrics that are logged.
    """
    names = sorted(set(logged))
    for callback in callbacks:
        kind = next((k for k in _OPTION if isinstance(callback, k)), None)
        monitor = getattr(callback, "monitor", None)
        if kind is None or monitor is None or monitor in names:
            continue
        raise CflError(
            f"{_OPTION[kind]} {monitor!r} is not a metric this run logs; choose one of "
            f"{', '.join(names)}"
        )
