"""Run the points of a grid sweep as supervised subprocesses, a few at a time, resumably.

The grid (loading, lazy expansion, names, commands, plans) is the rest of
:mod:`cfl_lightning.sweep`; this module supervises processes. :func:`run_sweep`

* holds the output directory's lock (:mod:`~cfl_lightning.sweep.lock`): a second runner refuses;
* skips points that hold a valid ``results.json`` (:mod:`~cfl_lightning.results`) and
  sets aside the files of an unfinished point's earlier attempt before running it again, so
  every point ends with one ``results.json``;
* runs each point (or ensemble job, :mod:`~cfl_lightning.sweep.jobs`) in its own directory
  behind a guard (:mod:`~cfl_lightning.sweep.process`) that stops it, and everything it
  started, when the runner stops or dies;
* reports each point on one line as it starts (``[3/10] start NAME (elapsed 0:04:10, ETA
  0:09:45)``: the sweep's elapsed time, and once a point has finished an estimate of the time
  left from the mean duration of the finished points and ``parallel``) and as it ends
  (``[3/10] done NAME (95.2 s)`` or ``FAILED``), and writes each failed point's reason into its
  ``run.log``.

SIGINT, SIGTERM and SIGHUP stop the running points (SIGTERM, SIGKILL after a grace period) and
return with ``interrupted`` set. The ``sweep`` command (:mod:`cfl_lightning.cli.sweep`) is a thin
layer on :func:`run_sweep`.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TextIO

from cfl_lightning.io import atomic_write_text
from cfl_lightning.results import find_results, results_files, results_problem, set_aside
from cfl_lightning.sweep.command import build_command
from cfl_lightning.sweep.grid import check_grid_size
from cfl_lightning.sweep.check import check_points
from cfl_lightning.sweep.jobs import AloneNotes, EnsembleJob, fit_args, parse_member_line, plan_jobs
from cfl_lightning.sweep.lock import lock_output
from cfl_lightning.sweep.logfile import append_line, error_line, read_new_lines
from cfl_lightning.sweep.naming import point_hash
from cfl_lightning.sweep.plan import SweepPoint, done_points, iter_plan
from cfl_lightning.sweep.process import child_env, start_guarded, stop_all

__all__ = ["run_sweep", "SweepSummary", "plan_tasks", "prepare_points", "write_sweep_record",
           "SWEEP_RECORD"]

#: the sweep a directory holds (its config and source), read by ``sweep DIR --status``
SWEEP_RECORD = ".sweep.json"


@dataclass
class SweepSummary:
    """Counts of one :func:`run_sweep` call."""

    total: int = 0
    done: int = 0
    skipped: int = 0
    failed: list[str] = field(default_factory=list)
    not_run: int = 0
    interrupted: bool = False


@dataclass
class _Task:
    """One process to run: a plain point, or an ensemble job and its pending members."""

    points: list[SweepPoint]  # the points it reports (an ensemble's pending members)
    command: list[str]
    workdir: Path
    log: Path  # stdout and stderr of a plain point (its run.log); an ensemble job's stderr
    job: EnsembleJob | None = None
    process: subprocess.Popen | None = None
    files: list[IO] = field(default_factory=list)
    started: float = 0.0
    read: int = 0  # bytes of the job's members.out already parsed
    reported: set[str] = field(default_factory=set)


def run_sweep(
    config: Mapping[str, Any],
    output: str | os.PathLike,
    *,
    parallel: int = 1,
    limit: int | None = None,
    dry_run: bool = False,
    threads: int = 1,
    stream: TextIO | None = None,
    source: str = "sweep",
    max_points: int | None = None,
    ensemble: int | None = None,
    lock_wait: float = 60.0,
    check: bool = True,
) -> SweepSummary:
    """Run the pending points of a grid sweep, ``parallel`` at a time.

    Each point runs in its own directory ``OUTPUT/<run_name>`` (also its working directory, so
    relative outputs of a config such as ``runs/...`` and ``wandb/`` land there), with
    ``params.json`` written first and stdout/stderr in ``run.log``. Points with a valid
    ``results.json`` are skipped; an unfinished point's earlier files are moved to
    ``POINT/.attempts/N/`` first. A failing point is reported in one line (its reason also ends
    its ``run.log``) and the others go on. Ctrl-C (or SIGTERM) stops the running points and
    returns with ``interrupted`` set.

    Args:
        limit: run at most this many of the pending points (in grid order).
        dry_run: only print the commands (takes no lock, writes nothing), and with ``check``
            check each printed point's ``fit`` arguments (:mod:`~cfl_lightning.sweep.check`):
            one ``bad point NAME: problem`` line per point that would stop before training,
            its name in ``failed``.
        threads: CPU threads per run (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``,
            ``CFL_LIGHTNING_THREADS``).
        max_points: refuse grids larger than this (default
            :data:`~cfl_lightning.sweep.grid.MAX_POINTS`).
        ensemble: train points that differ only in ``data.*`` and ``seed_everything`` together,
            up to this many per process (:mod:`cfl_lightning.sweep.jobs`); each member is still
            reported, and fails, like a point of its own.
        lock_wait: seconds to wait for the runs of a dead runner on the same directory to end
            (:func:`~cfl_lightning.sweep.lock.lock_output`).

    The grid is walked lazily and only up to the ``limit``-th pending point; done points beyond
    it are counted from their directories (:func:`~cfl_lightning.sweep.plan.done_points`).

    Raises:
        SweepError: the grid is larger than ``max_points``, or another runner holds ``output``
            (:class:`~cfl_lightning.sweep.lock.SweepLocked`).
    """
    stream = sys.stderr if stream is None else stream

    def say(text: str) -> None:
        stream.write(text + "\n")
        stream.flush()

    output = Path(output).absolute()
    total = check_grid_size(config, max_points, source=source)
    options = dict(
        parallel=parallel, limit=limit, ensemble=ensemble, max_points=max_points, source=source
    )
    if dry_run:
        summary, tasks = plan_tasks(config, output, total, say, write=False, **options)
        for task in tasks:
            where = ", ".join(str(p.directory) for p in task.points)
            note = f" (resumes {task.job.directory})" if task.job and task.job.resumed else ""
            say(f"{where}: {shlex.join(task.command)}{note}")
        if check:
            _check_points(tasks, summary, say, child_env(threads, launch_dir=Path.cwd()))
        return summary
    with lock_output(output, wait=lock_wait, say=say) as lock_fd:
        summary, tasks = plan_tasks(config, output, total, say, write=True, **options)
        write_sweep_record(output, config, source)
        _Execution(summary, tasks, say, child_env(threads, launch_dir=Path.cwd()), lock_fd).run(
            parallel
        )
    return summary


def _check_points(tasks: list[_Task], summary: SweepSummary, say: Any,
                  env: Mapping[str, str]) -> None:
    """The dry run's check of the points' ``fit`` arguments (each bad point: one line)."""
    points: list[tuple[str, list[str]]] = []
    for task in tasks:
        if task.job is None:
            args = fit_args(task.command)
            if args is not None:  # another program's arguments are its own
                points.append((task.points[0].name, args))
            continue
        todo = {p.name for p in task.points}
        points += [(m["name"], list(m["args"])) for m in task.job.members if m["name"] in todo]
    if not points:
        return
    say(f"checking {len(points)} point(s) as fit reads them (imports each model class) ...")
    problems = check_points(points, env, Path.cwd())
    for name, _ in points:
        if name in problems:
            summary.failed.append(name)
            say(f"bad point {name}: {problems[name]}")
    say(f"{len(problems)} of {len(points)} point(s) would stop before training"
        if problems else f"all {len(points)} point(s) pass fit's checks")


def plan_tasks(
    config: Mapping[str, Any],
    output: Path,
    total: int,
    say: Any,
    *,
    parallel: int,
    limit: int | None,
    ensemble: int | None,
    max_points: int | None,
    source: str,
    write: bool,
) -> tuple[SweepSummary, list[_Task]]:
    """Walk the grid (up to ``limit`` pending points) and turn the pending points into tasks."""
    summary = SweepSummary(total=total)
    cwd = Path.cwd()
    pending: list[SweepPoint] = []
    seen_done: set[str] = set()
    stopped = False
    for point in iter_plan(config, output, max_points=max_points):
        if point.done:
            seen_done.add(point_hash(point.params))
        elif limit is not None and len(pending) >= limit:
            stopped = True  # the rest of the grid is not walked: --limit on a huge grid is cheap
            break
        else:
            pending.append(point)
    summary.skipped = len(seen_done)
    if stopped:  # done points further on, found from their directories
        summary.skipped += len(set(done_points(config, output)) - seen_done)
    tasks: list[_Task] = []
    plain = pending
    if ensemble is not None:
        jobs, plain = plan_jobs(
            config, pending, output, ensemble=ensemble, parallel=parallel, cwd=cwd, write=write
        )
        for job in jobs:  # a resumed job brings all its members, also those beyond --limit
            todo = [p for p in job.points if not p.done]
            tasks.append(_Task(todo, list(job.command), job.directory, job.log, job))
    for point in plain:
        command = build_command(config, point.params, run_dir=point.directory, absolute_from=cwd)
        tasks.append(_Task([point], command, point.directory, point.directory / "run.log"))
    to_run = sum(len(task.points) for task in tasks)
    summary.not_run = summary.total - summary.skipped - to_run
    resumed = sum(1 for task in tasks if task.job is not None and task.job.resumed)
    say(
        f"{source}: {summary.total} points, {summary.skipped} already done, {to_run} to run"
        + (f" ({summary.not_run} left for later: --limit)" if summary.not_run else "")
        + (f"; {resumed} ensemble job(s) resume from their checkpoints" if resumed else "")
    )
    return summary, tasks


def prepare_points(points: list[SweepPoint]) -> None:
    """Before points run: set aside their earlier attempts, write their ``params.json``."""
    for point in points:
        set_aside(point.directory)
        point.directory.mkdir(parents=True, exist_ok=True)
        text = json.dumps(point.params, indent=1) + "\n"
        atomic_write_text(point.directory / "params.json", text)


def write_sweep_record(output: Path, config: Mapping[str, Any], source: str) -> None:
    """``OUTPUT/.sweep.json``: the sweep's config and source (for ``sweep DIR --status``)."""
    record = {"source": str(source), "config": config}
    atomic_write_text(Path(output) / SWEEP_RECORD, json.dumps(record, indent=1, default=str) + "\n")


class _Execution:
    """The supervision loop of one :func:`run_sweep` call."""

    def __init__(
        self, summary: SweepSummary, tasks: list[_Task], say: Any, env: Mapping[str, str],
        lock_fd: int,
    ) -> None:
        self.summary = summary
        self.queue = list(tasks)
        self.running: list[_Task] = []
        self.say = say
        self.env = env
        self.lock_fd = lock_fd
        self.count = sum(len(task.points) for task in tasks)
        self.finished = 0
        self.started = 0  # points started so far
        self.parallel = 1
        self.began = time.monotonic()
        self.durations: list[float] = []  # seconds per finished point (a job's: per member)
        self.alone = AloneNotes(say)  # members a job fits on its own: said once per reason

    def run(self, parallel: int) -> None:
        self.parallel = max(parallel, 1)
        self.began = time.monotonic()
        previous = _install_sigterm()
        try:
            while self.queue or self.running:
                while self.queue and len(self.running) < max(parallel, 1):
                    self.start(self.queue.pop(0))
                time.sleep(0.05)
                for task in list(self.running):
                    self.read_members(task)
                    if task.process is not None and task.process.poll() is not None:
                        self.running.remove(task)
                        self.finish(task)
        except KeyboardInterrupt:
            self.summary.interrupted = True
            self.say(f"interrupted: stopping {len(self.running)} running process(es)")
            stop_all([t.process for t in self.running if t.process is not None])
            for task in self.running:
                self.finish(task, interrupted=True)
            self.summary.not_run += sum(len(t.points) for t in self.queue)
        finally:
            _restore_sigterm(previous)

    # ------------------------------------------------------------------- reporting

    def progress(self) -> str:
        """``elapsed H:MM:SS`` since the sweep started, plus ``ETA H:MM:SS`` once a point has
        finished: the mean duration of the finished points times the points not finished,
        divided by the processes that run at a time."""
        now = time.monotonic()
        text = f"elapsed {_clock(now - self.began)}"
        if self.durations:
            left = self.count - self.finished
            mean = sum(self.durations) / len(self.durations)
            at_once = max(1, min(self.parallel, left))
            text += f", ETA {_clock(mean * left / at_once)}"
        return text

    def report_start(self, task: _Task) -> None:
        """One line per point of a task that starts (so a long point is never silent)."""
        for point in task.points:
            self.started += 1
            self.say(f"[{self.started}/{self.count}] start {point.name} ({self.progress()})")

    def report(
        self, point: SweepPoint, ok: bool, detail: str, seconds: float | None = None
    ) -> None:
        self.finished += 1
        if seconds is not None:
            self.durations.append(seconds)
        when = f"; {self.progress()}" if seconds is not None else ""
        if ok:
            self.summary.done += 1
            self.say(f"[{self.finished}/{self.count}] done {point.name} ({detail}{when})")
            return
        self.summary.failed.append(point.name)
        log = point.directory / "run.log"
        append_line(log, f"# FAILED: {detail}")
        # (no progress here: the line ends with the log's path; the next start line has it)
        self.say(f"[{self.finished}/{self.count}] FAILED {point.name} ({detail}); log: {log}")

    def report_done(self, task: _Task, point: SweepPoint) -> None:
        """Report ``point`` done if it now holds a valid results.json, else failed."""
        task.reported.add(point.name)
        seconds = time.monotonic() - task.started
        # an ensemble job trains its members together: the ETA counts each member's share
        share = seconds / max(len(task.points), 1)
        if find_results(point.directory) is not None:
            self.report(point, True, f"{seconds:.1f} s", share)
            return
        found = results_files(point.directory)
        why = (
            f"results.json {results_problem(found[0])}: {found[0]}" if found
            else "no results.json"
        )
        self.report(point, False, f"finished, but {why}", share)

    # ------------------------------------------------------------------- processes

    def start(self, task: _Task) -> None:
        """Clear the points' earlier attempts, write ``params.json`` and start the process."""
        try:
            prepare_points(task.points)
            task.workdir.mkdir(parents=True, exist_ok=True)
            header = f"# {shlex.join(task.command)}\n"
            if task.job is None:
                log = open(task.log, "w", encoding="utf-8")  # noqa: SIM115
                task.files = [log]
                out = log
            else:
                job = task.job
                job.checkpoint_dir.mkdir(parents=True, exist_ok=True)
                note = "resumed from its checkpoint" if job.resumed else "new"
                for point in task.points:
                    atomic_write_text(
                        point.directory / "run.log",
                        f"# trained in ensemble job {job.directory} ({note}, "
                        f"{len(job.points)} members); its log: {job.log}\n",
                    )
                log = open(task.log, "a", encoding="utf-8")  # noqa: SIM115
                out = open(job.out, "w", encoding="utf-8")  # noqa: SIM115
                task.files = [log, out]
            log.write(header)
            log.flush()
            task.started = time.monotonic()
            self.report_start(task)
            task.process = start_guarded(
                task.command, cwd=task.workdir, env=self.env, stdout=out, stderr=log,
                lock_fd=self.lock_fd,
            )
        except OSError as err:
            self.close(task)
            for point in task.points:
                self.report(point, False, f"cannot start: {err.strerror or err}")
            return
        self.running.append(task)

    def close(self, task: _Task) -> None:
        for handle in task.files:
            handle.close()
        task.files = []

    def read_members(self, task: _Task) -> None:
        """Report the members of an ensemble job that its stdout says are done or failed."""
        if task.job is None:
            return
        got = read_new_lines(task.job.out, task.read)
        if got is None:
            return
        lines, task.read = got
        pending = {p.name: p for p in task.points if p.name not in task.reported}
        for line in lines:
            parsed = parse_member_line(line)
            if self.alone(line) or parsed is None or parsed[1] not in pending:
                continue
            status, name, reason = parsed
            point = pending.pop(name)
            if status == "done":
                self.report_done(task, point)
            else:
                task.reported.add(name)
                self.report(point, False, reason or "the ensemble job reported it failed")

    def finish(self, task: _Task, interrupted: bool = False) -> None:
        """Report what a process that has ended leaves behind."""
        self.close(task)
        code = task.process.returncode if task.process is not None else None
        if task.job is None:
            point = task.points[0]
            if interrupted and find_results(point.directory) is None:
                self.summary.not_run += 1
            elif code == 0:
                self.report_done(task, point)
            else:
                last = error_line(task.log)
                self.report(
                    point, False, f"exit {code}" + (f": {last}" if last else ""),
                    time.monotonic() - task.started,
                )
            return
        self.read_members(task)
        last = error_line(task.log)
        for point in task.points:
            if point.name in task.reported:
                continue
            if interrupted:
                self.summary.not_run += 1
            else:
                why = f"the ensemble job ended (exit {code}) without a line for this member"
                self.report(point, False, why + (f"; its last error: {last}" if last else ""))
        job = task.job
        if code == 0 and all(find_results(p.directory) is not None for p in job.points):
            job.clear_checkpoints()


def _clock(seconds: float) -> str:
    """``H:MM:SS`` (``0:01:40``)."""
    whole = int(round(max(seconds, 0.0)))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def _install_sigterm() -> Any:
    """Turn SIGTERM and SIGINT into KeyboardInterrupt (so the runs are stopped).

    SIGINT is set explicitly because a process started in the background (``nohup``, CI
    runners) inherits it ignored, and then Ctrl-C or ``kill -INT`` would leave orphans running.

    Returns:
        the previous handlers, to restore.
    """

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        return (
            signal.signal(signal.SIGTERM, handler),
            signal.signal(signal.SIGINT, signal.default_int_handler),
        )
    except ValueError:  # not the main thread: leave signals alone
        return None


def _restore_sigterm(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
