"""``sweep --executor slurm``: the runner's tasks submitted as one SLURM job array (submitit).

:func:`run_slurm_sweep` plans exactly as the local runner (:func:`~cfl_lightning.sweep.runner.
plan_tasks`: single points, or ensemble jobs with ``--ensemble M``, earlier jobs resumed from
their checkpoints), then

* refuses (nothing submitted) when a SLURM command (``sbatch``, ``squeue``, ``sinfo``,
  ``srun``) is missing or the partition is unknown (both checked before anything is written),
  another runner holds the output directory, or an earlier array of this directory still has
  tasks queued or running;
* clears each pending point as the local runner does (earlier attempt set aside,
  ``params.json``), submits one task per point or job with ``map_array``
  (:class:`~cfl_lightning.sweep.task.SlurmTask`; submitit's checkpointing requeues a task at its
  time limit or a preemption), and records the array (:mod:`~cfl_lightning.sweep.queue`);
* unless ``wait`` is False, follows the array with one ``squeue`` call every ``poll`` seconds and
  prints a line per point as the local runner does (``start``, ``done``, ``FAILED ... log:
  PATH``). Stopping the wait (Ctrl-C) leaves the array running.

Requires ``submitit`` (imported here only).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from cfl_lightning.sweep.grid import SweepError, check_grid_size
from cfl_lightning.sweep.jobs import AloneNotes, parse_member_line
from cfl_lightning.sweep.lock import SweepLocked, lock_output
from cfl_lightning.sweep.logfile import read_new_lines
from cfl_lightning.sweep.process import child_env
from cfl_lightning.sweep.queue import ENDED, SLURM_DIR, queue_states, task_log, write_record
from cfl_lightning.sweep.queue import active_tasks
from cfl_lightning.results import find_results
from cfl_lightning.sweep.runner import SweepSummary, plan_tasks, prepare_points, write_sweep_record
from cfl_lightning.sweep.scheduler import (
    SchedulerSettings,
    check_cluster,
    partition_minutes,
    sbatch_extra,
)
from cfl_lightning.sweep.task import SlurmTask, failure_line, task_spec

__all__ = ["run_slurm_sweep", "follow"]


@dataclass
class _Watched:
    """One submitted task: its id, its points, what has been reported of them."""

    id: str
    points: list[Any]
    log: Path
    out: Path | None  # an ensemble job's members.out
    started: float = 0.0
    read: int = 0
    reported: set[str] = field(default_factory=set)
    ended: bool = False


def _env_overrides(threads: int) -> dict[str, str]:
    """The variables a task's run needs beyond the node's environment."""
    env = child_env(threads, launch_dir=Path.cwd())
    return {k: v for k, v in env.items() if os.environ.get(k) != v}


def _executor(output: Path, settings: SchedulerSettings, partition: str) -> Any:
    """submitit's executor for the array (it writes nothing until it submits).

    Raises:
        SweepError: submitit refuses to start (it finds no SLURM here).
    """
    import submitit

    try:
        executor = submitit.SlurmExecutor(folder=output / SLURM_DIR / "%j",
                                          max_num_timeout=settings.max_requeues)
    except RuntimeError as err:  # e.g. 'Could not detect "srun"'
        raise SweepError(f"--executor slurm: {' '.join(str(err).split())}") from None
    params: dict[str, Any] = dict(
        partition=partition, cpus_per_task=settings.cpus_per_task, job_name="cfl_sweep",
        array_parallelism=settings.array_parallelism, signal_delay_s=90,
        additional_parameters=sbatch_extra(settings),
    )
    # submitit writes --time=5 unless told otherwise: the partition's default, else a year
    # (also what submitit counts a task's time-outs against)
    minutes = settings.minutes if settings.time is not None else partition_minutes(partition)
    params["time"] = minutes if minutes is not None else 365 * 24 * 60
    if settings.gpus_per_task is not None:
        params["gpus_per_task"] = settings.gpus_per_task
    if settings.mem is not None:
        params["mem"] = settings.mem
    executor.update_parameters(**params)
    return executor


def run_slurm_sweep(
    config: Mapping[str, Any],
    output: str | os.PathLike,
    settings: SchedulerSettings,
    *,
    ensemble: int | None = None,
    limit: int | None = None,
    threads: int = 1,
    wait: bool = True,
    stream: TextIO | None = None,
    source: str = "sweep",
    max_points: int | None = None,
    poll: float = 2.0,
    lock_wait: float = 60.0,
) -> SweepSummary:
    """Submit the pending points of a grid sweep as one SLURM array (see the module).

    Raises:
        SweepError: bad settings, no SLURM here, an unknown partition, or the directory held
            by another runner or by an array still running (nothing is submitted).
    """
    stream = sys.stderr if stream is None else stream

    def say(text: str) -> None:
        stream.write(text + "\n")
        stream.flush()

    partition = check_cluster(settings)
    output = Path(output).absolute()
    total = check_grid_size(config, max_points, source=source)
    # built before anything is written: submitit's own refusals leave nothing behind
    executor = _executor(output, settings, partition)
    with lock_output(output, wait=lock_wait, say=say):
        active = active_tasks(output)
        if active:
            array, tasks_left = next(iter(active.items()))
            raise SweepLocked(
                f"{output} has SLURM array {array} with {len(tasks_left)} task(s) still queued or "
                f"running; wait for it (sweep {output} --status) or cancel it (scancel {array})"
            )
        summary, tasks = plan_tasks(config, output, total, say, parallel=1, limit=limit,
                                    ensemble=ensemble, max_points=max_points, source=source,
                                    write=True)
        write_sweep_record(output, config, source)
        if not tasks:
            return summary
        specs = []
        for task in tasks:
            prepare_points(task.points)
            if task.job is not None:
                task.job.out.unlink(missing_ok=True)  # (an earlier run's lines)
            specs.append(task_spec(task.points, task.command, task.workdir, task.log,
                                   _env_overrides(threads), task.job))
        jobs = executor.map_array(SlurmTask(), specs)
        array = jobs[0].job_id.split("_", 1)[0]
        watched = [
            _Watched(job.job_id, list(task.points), task.log,
                     task.job.out if task.job is not None else None)
            for job, task in zip(jobs, tasks)
        ]
        write_record(output, {
            "array": array, "partition": partition,
            "submitted": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "tasks": [{"id": w.id, "points": [p.name for p in w.points],
                       "log": str(task_log(output, w.id)),
                       "job": None if t.job is None else str(t.job.directory)}
                      for w, t in zip(watched, tasks)],
        })
        say(f"submitted SLURM array {array}: {len(jobs)} task(s) on partition {partition} "
            f"(logs: {output / SLURM_DIR}); progress: sweep {output} --status")
    if wait:
        _Watch(summary, watched, say, output, poll).run()
    else:
        summary.not_run = sum(len(w.points) for w in watched)
    return summary


def follow(
    output: str | os.PathLike, summary: SweepSummary | None = None, *,
    stream: TextIO | None = None, poll: float = 2.0,
) -> SweepSummary:
    """Follow the latest array of ``output`` until it has ended, as the waiting command does
    (for an array submitted with ``wait=False``)."""
    from cfl_lightning.sweep.plan import SweepPoint
    from cfl_lightning.sweep.queue import array_records

    stream = sys.stderr if stream is None else stream
    output = Path(output).absolute()
    records = array_records(output)
    if not records:
        raise SweepError(f"{output}: no SLURM array was submitted from here")
    summary = summary or SweepSummary()
    summary.not_run = 0
    watched = []
    for task in records[-1]["tasks"]:
        points = [SweepPoint({}, name, output / name) for name in task["points"]]
        out = None if task.get("job") is None else Path(task["job"]) / "members.out"
        watched.append(_Watched(task["id"], points, Path(task["log"]), out))

    def say(text: str) -> None:
        stream.write(text + "\n")
        stream.flush()

    _Watch(summary, watched, say, output, poll).run()
    return summary


class _Watch:
    """Follows one array until every task has ended, one line per point."""

    def __init__(self, summary: SweepSummary, tasks: list[_Watched], say: Any, output: Path,
                 poll: float) -> None:
        self.summary, self.tasks, self.say, self.output, self.poll = (
            summary, tasks, say, output, poll)
        self.count = sum(len(t.points) for t in tasks)
        self.started = self.finished = 0
        self.array = tasks[0].id.split("_", 1)[0]
        self.alone = AloneNotes(say)  # members a job fits on its own: said once per reason

    def run(self) -> None:
        try:
            while not all(t.ended for t in self.tasks):
                states = queue_states([self.array])
                if states is None:  # squeue failed this time: nothing is known, ask again
                    time.sleep(self.poll)
                    continue
                for task in self.tasks:
                    if not task.ended:
                        self.update(task, states.get(task.id))
                if not all(t.ended for t in self.tasks):
                    time.sleep(self.poll)
        except KeyboardInterrupt:
            self.summary.interrupted = True
            left = sum(len(t.points) - len(t.reported) for t in self.tasks)
            self.summary.not_run += left
            self.say(f"stopped waiting: SLURM array {self.array} goes on ({left} point(s) not "
                     f"finished); follow it with: sweep {self.output} --status, or scancel "
                     f"{self.array}")

    def update(self, task: _Watched, state: str | None) -> None:
        if state == "RUNNING" and not task.started:
            task.started = time.monotonic()
            for point in task.points:
                self.started += 1
                self.say(f"[{self.started}/{self.count}] start {point.name} (SLURM task {task.id})")
        self.read_members(task)
        if state is not None and state not in ENDED:
            return
        task.ended = True
        self.read_members(task)
        for point in task.points:
            if point.name not in task.reported:
                self.finish(task, point, state or "no longer in squeue")

    def read_members(self, task: _Watched) -> None:
        if task.out is None:
            return
        got = read_new_lines(task.out, task.read, restarts=True)  # a requeued task restarts it
        if got is None:
            return
        lines, task.read = got
        for line in lines:
            if self.alone(line):
                continue
            parsed = parse_member_line(line)
            point = next((p for p in task.points if parsed and p.name == parsed[1]), None)
            if point is not None and point.name not in task.reported:
                self.finish(task, point, None, parsed[2] if parsed[0] == "FAILED" else None)

    def finish(self, task: _Watched, point: Any, state: str | None, why: str | None = None) -> None:
        task.reported.add(point.name)
        self.finished += 1
        seconds = time.monotonic() - task.started if task.started else 0.0
        if why is None and find_results(point.directory) is not None:
            self.summary.done += 1
            self.say(f"[{self.finished}/{self.count}] done {point.name} ({seconds:.1f} s)")
            return
        log = point.directory / "run.log"
        why = why or failure_line(log)
        if why is None:
            why = (f"SLURM task {task.id} ended ({state}) without a results.json; "
                   f"task log: {task_log(self.output, task.id)}")
        self.summary.failed.append(point.name)
        self.say(f"[{self.finished}/{self.count}] FAILED {point.name} ({why}); log: {log}")
