"""Silence Lightning's messages that say nothing about a run (idempotent, narrowly targeted).

Applied when the Lightning layer (:mod:`cfl_lightning.data`) is imported and by the training CLI:
Lightning's advertising tips (litlogger, litmodels) are dropped from its rank-zero info log, and
the ``LeafSpec`` deprecation that Lightning itself triggers under recent torch is ignored. Nothing
else of Lightning's logging or warnings is changed.
"""

from __future__ import annotations

import logging
import warnings

__all__ = ["quiet_noise"]

_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


class _DropTips(logging.Filter):
    """Drops Lightning's advertising tips (litlogger, litmodels) from its info log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Tip: For seamless cloud" not in record.getMessage()


def quiet_noise() -> None:
    """Drop the litlogger / litmodels tips and Lightning's own ``LeafSpec`` deprecation."""
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropTips) for f in logger.filters):
            logger.addFilter(_DropTips())
