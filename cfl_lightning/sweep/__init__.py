"""W&B grid sweeps run offline: grid planning, ensemble grouping and the process runner.

* :mod:`~cfl_lightning.sweep.grid`: load and validate a sweep YAML, expand its grid lazily in the
  order of W&B's own engine (``sweeps==0.2.0``), count it, refuse it above ``--max-points``;
* :mod:`~cfl_lightning.sweep.naming`, :mod:`~cfl_lightning.sweep.command`: a point's run name and
  its command line (as ``wandb agent`` builds it);
* :mod:`~cfl_lightning.sweep.plan`: each point's directory and whether it is done (a valid
  ``results.json``, by the rule of :mod:`cfl_lightning.results`);
* :mod:`~cfl_lightning.sweep.jobs`: points grouped into ensemble jobs (``--ensemble M``), stable
  across reruns so a job resumes from its checkpoint;
* :mod:`~cfl_lightning.sweep.runner`, :mod:`~cfl_lightning.sweep.process`,
  :mod:`~cfl_lightning.sweep.guard`, :mod:`~cfl_lightning.sweep.lock`: running the points, a
  few at a time, behind guards that stop them when the runner stops or dies, one runner per
  output directory.

Nothing here imports Lightning, wandb, torch or the training code: runs are separate processes
(``python -m cfl_lightning fit ...``, or an ensemble job's module). The ``sweep`` command
(:mod:`cfl_lightning.cli.sweep`) is a thin layer on :func:`run_sweep`.
"""

from cfl_lightning.sweep.command import build_command, format_args
from cfl_lightning.sweep.grid import (
    MAX_POINTS,
    SweepError,
    check_grid_size,
    expand_grid,
    grid_contains,
    grid_size,
    iter_grid,
    load_sweep,
    validate_sweep,
)
from cfl_lightning.sweep.jobs import EnsembleJob, plan_jobs
from cfl_lightning.sweep.lock import SweepLocked
from cfl_lightning.sweep.naming import point_hash, run_name
from cfl_lightning.sweep.plan import SweepPoint, done_points, iter_plan, plan_sweep
from cfl_lightning.sweep.process import THREAD_ENV, child_env
from cfl_lightning.sweep.runner import SweepSummary, run_sweep

__all__ = [
    "SweepError",
    "SweepLocked",
    "SweepPoint",
    "SweepSummary",
    "EnsembleJob",
    "MAX_POINTS",
    "THREAD_ENV",
    "load_sweep",
    "validate_sweep",
    "grid_size",
    "check_grid_size",
    "iter_grid",
    "expand_grid",
    "grid_contains",
    "run_name",
    "point_hash",
    "format_args",
    "build_command",
    "iter_plan",
    "plan_sweep",
    "done_points",
    "plan_jobs",
    "child_env",
    "run_sweep",
]
