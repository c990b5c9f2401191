"""Lightning under SLURM: the cluster environment a single-process run should use, and the
``srun`` hint it should not print.

* In a SLURM job step (``srun``: ``SLURM_NTASKS`` set, as in every task of ``sweep --executor
  slurm``) Lightning picks its ``SLURMEnvironment`` with auto-requeue on: it installs a SIGUSR1
  handler that runs ``scontrol requeue`` itself, which would fight submitit's requeueing.
  :func:`trainer_plugins` gives ``SLURMEnvironment(auto_requeue=False)`` there (process count and
  ranks still read from SLURM), and nothing elsewhere.
* On a login node with ``srun`` on the PATH, Lightning warns that "The `srun` command is available
  on your system but is not used" (at Trainer construction and again in ``fit``). For a
  single-process run the hint is wrong: :func:`quiet_srun_hint` drops it for this process.

Lightning is imported only inside the functions.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["in_slurm_step", "trainer_plugins", "quiet_srun_hint", "single_process"]

SRUN_HINT = r"The `srun` command is available on your system but is not used"


def in_slurm_step(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs in a SLURM job step (Lightning's own test: ``SLURM_NTASKS`` set
    and a job name other than ``bash``/``interactive``)."""
    env = os.environ if environ is None else environ
    return "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME") not in ("bash", "interactive")


def trainer_plugins(environ: Mapping[str, str] | None = None) -> list[Any]:
    """``[SLURMEnvironment(auto_requeue=False)]`` in a SLURM job step, else ``[]``."""
    if not in_slurm_step(environ):
        return []
    from lightning.fabric.plugins.environments import SLURMEnvironment

    return [SLURMEnvironment(auto_requeue=False)]


def single_process(trainer_config: Mapping[str, Any]) -> bool:
    """Whether a Trainer config runs one process (one node; ``devices`` 1, ``"1"``, ``"auto"``
    on a machine without several GPUs, or unset)."""
    if int(trainer_config.get("num_nodes") or 1) > 1:
        return False
    devices = trainer_config.get("devices")
    if devices in (None, 1, "1", [0], "auto"):
        if devices == "auto":
            try:
                import torch

                return torch.cuda.device_count() <= 1
            except ImportError:  # pragma: no cover
                return True
        return True
    return False


def quiet_srun_hint() -> None:
    """Ignore Lightning's ``srun`` hint in this process (for single-process runs)."""
    warnings.filterwarnings("ignore", message=SRUN_HINT)
