"""Each ensemble member logs to its own loggers, as its own ``fit`` would (CSV and W&B).

A member is built by the training CLI (``build_cli(ARGS, run=False)``), so its Trainer already
holds the loggers of its run (the shipped configs: a ``CSVLogger`` in ``POINT/csv/version_0``
and a ``WandbLogger``, one W&B run per member). :class:`MemberLogs` feeds them:

* after every epoch a member trains, the per-epoch metrics its own ``fit`` logs, at its own step
  count: ``epoch``; ``train/loss``, ``train/kl_per_string``, ``train/ce_per_string`` and
  ``train/kl_per_token`` (the sums of its training steps' log-probabilities, read off the
  engine's forward: :func:`~cfl_lightning.ensemble.step.epoch_sums`); ``val/kl_per_string``
  (the value its early stopping and learning-rate schedule saw), ``val/ce_per_string``,
  ``val/kl_per_token``, ``val/kl_total`` and, where its validation strings visit its event's
  target, ``val/kl_target`` (its validation predictions, reduced per member);
* once its ``results.json`` is written, the test's ``kl_total``, ``kl_target``,
  ``kl_target_unweighted`` and every ``kl/<kind>/<name>`` and ``kl_unweighted/...`` entry, under
  the keys its own ``fit`` logs; then its loggers are saved and its W&B run finished.

None of these values feeds back into training. Several W&B runs are open at once in the job's
process (``reinit="create_new"``, :func:`prepare_wandb`).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["MemberLogs", "prepare_wandb", "test_metrics"]


def prepare_wandb(loggers: Sequence[Any]) -> None:
    """Let each ``WandbLogger`` open a run of its own beside the others (``create_new``)."""
    from lightning.pytorch.loggers import WandbLogger

    for logger in loggers:
        init = getattr(logger, "_wandb_init", None) if isinstance(logger, WandbLogger) else None
        if isinstance(init, dict):
            init["reinit"] = "create_new"


def test_metrics(results: Mapping[str, Any]) -> dict[str, float]:
    """The test entries of a ``results.json`` under the keys a plain ``fit`` logs them."""
    metrics: dict[str, float] = {}
    for key in ("kl_total", "kl_target", "kl_target_unweighted"):
        if isinstance(results.get(key), (int, float)):
            metrics[key] = float(results[key])
    for group in ("kl", "kl_unweighted"):
        for kind, values in (results.get(group) or {}).items():
            for name, value in (values or {}).items():
                if isinstance(value, (int, float)):
                    metrics[f"{group}/{kind}/{name}"] = float(value)
    return metrics


class MemberLogs:
    """The loggers of an ensemble's members (see the module).

    Args:
        loggers: per member, its run's loggers (empty: it logs nothing).
    """

    def __init__(self, loggers: Sequence[Sequence[Any]]):
        self.loggers = [list(group) for group in loggers]
        self.steps = [0] * len(self.loggers)

    def __call__(self, epoch: int, live: Sequence[int], values: Sequence[Mapping[str, float]],
                 steps: Sequence[float]) -> None:
        """One epoch's metrics (``values[m]``: its plain fit's keys) for every member that
        trained in it."""
        for m in live:
            self.steps[m] += int(steps[m])
            metrics = {"epoch": float(epoch), **{k: float(v) for k, v in values[m].items()}}
            self._each(m, lambda logger, m=m, metrics=metrics: logger.log_metrics(
                metrics, step=self.steps[m] - 1))

    def finish(self, m: int, results_path: Path | None, status: str = "success") -> None:
        """Log member ``m``'s test results (when written), save its loggers, finish its run."""
        if results_path is not None:
            try:
                results = json.loads(Path(results_path).read_text(encoding="utf-8"))
                metrics = test_metrics(results)
                self._each(m, lambda logger: logger.log_metrics(metrics, step=self.steps[m]))
            except (OSError, ValueError):
                traceback.print_exc()
        self._each(m, lambda logger: logger.finalize(status))
        for logger in self.loggers[m]:
            run = getattr(logger, "_experiment", None)
            if run is not None and hasattr(run, "finish"):
                buffer = io.StringIO()  # its footer to stderr (the job's log), not stdout
                with contextlib.redirect_stdout(buffer):
                    run.finish()
                sys.stderr.write(buffer.getvalue())
        self.loggers[m] = []

    def close(self, status: str = "failed") -> None:
        """Finish every member's loggers not finished yet (training failed)."""
        for m in range(len(self.loggers)):
            if self.loggers[m]:
                self.finish(m, None, status)

    def _each(self, m: int, call: Any) -> None:
        for logger in self.loggers[m]:
            try:
                call(logger)
            except Exception:  # noqa: BLE001 - a logger's trouble never fails the member
                traceback.print_exc()
