"""Run the points of a grid sweep as supervised subprocesses, a few at a time, resumably.

Process supervision only: the grid itself (loading, lazy expansion, names, commands, plans)
is :mod:`cfl_lightning.analysis.sweeps`. Each point runs in its own directory
``OUTPUT/<run_name>`` and process group, with ``params.json`` written first and its output in
``run.log``; points already holding a ``results.json`` are skipped. SIGINT and SIGTERM stop the
running children (SIGTERM to their groups, SIGKILL after a grace period) and return with
``interrupted`` set. The ``sweep`` command (:mod:`cfl_lightning.cli.sweep`) is a thin layer on
:func:`run_sweep`.
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
from typing import Any, TextIO

from cfl_lightning.analysis.sweeps import (
    SweepPoint,
    build_command,
    check_grid_size,
    done_points,
    find_results,
    iter_plan,
    point_hash,
)
from cfl_lightning.io import atomic_write_text

__all__ = ["run_sweep", "SweepSummary", "child_env", "THREAD_ENV"]

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CFL_LIGHTNING_THREADS")


@dataclass
class _Running:
    points: list[SweepPoint]  # one, or an ensemble's members
    process: subprocess.Popen
    log: TextIO
    started: float


@dataclass
class SweepSummary:
    """Counts of one :func:`run_sweep` call."""

    total: int = 0
    done: int = 0
    skipped: int = 0
    failed: list[str] = field(default_factory=list)
    not_run: int = 0
    interrupted: bool = False


def child_env(
    threads: int = 1,
    environ: Mapping[str, str] | None = None,
    launch_dir: str | os.PathLike | None = None,
) -> dict[str, str]:
    """The environment of a run: ``threads`` CPU threads, ``WANDB_MODE=offline`` unless set.

    With ``launch_dir``, it is put first on ``PYTHONPATH`` (a run's working directory is its run
    directory, yet ``python -m pkg`` should import as if started from ``launch_dir``).
    """
    env = dict(os.environ if environ is None else environ)
    if launch_dir is not None:
        parts = [os.fspath(launch_dir)] + [
            p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p
        ]
        env["PYTHONPATH"] = os.pathsep.join(parts)
    for name in THREAD_ENV:
        env[name] = str(threads)
    if not env.get("WANDB_MODE"):
        env["WANDB_MODE"] = "offline"
    return env


def _terminate(running: list[_Running], grace: float = 10.0) -> None:
    """SIGTERM each child's process group, wait up to ``grace`` s, then SIGKILL what is left."""
    for item in running:
        _signal_group(item.process, signal.SIGTERM)
    deadline = time.monotonic() + grace
    try:
        for item in running:
            try:
                item.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                _signal_group(item.process, signal.SIGKILL)
                item.process.wait()
    except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
        for item in running:
            _signal_group(item.process, signal.SIGKILL)
    finally:
        for item in running:
            item.log.close()


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, sig)  # the child leads its own process group (start_new_session)
    except (ProcessLookupError, PermissionError):
        pass


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
) -> SweepSummary:
    """Run the pending points of a grid sweep, ``parallel`` at a time.

    Each point runs in its own directory ``OUTPUT/<run_name>`` (also its working directory, so
    relative outputs of a config such as ``runs/...`` and ``wandb/`` land there), with
    ``params.json`` written first and stdout/stderr in ``run.log``. Done points are skipped; a
    failing point is reported in one line and the others go on. Ctrl-C (or SIGTERM) terminates
    the running children and returns with ``interrupted`` set.

    Args:
        limit: run at most this many of the pending points (in grid order).
        dry_run: only print the commands.
        threads: CPU threads per run (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``,
            ``CFL_LIGHTNING_THREADS``).
        max_points: refuse grids larger than this (default
            :data:`~cfl_lightning.analysis.sweeps.MAX_POINTS`).
        ensemble: train points that differ only in ``data.*`` and ``seed_everything`` together,
            up to this many per process (:mod:`cfl_lightning.ensemble.sweep`); each member is
            still reported, and fails, like a point of its own.

    The grid is walked lazily and only up to the ``limit``-th pending point; done points beyond
    it are counted from their directories (:func:`~cfl_lightning.analysis.sweeps.done_points`).

    Raises:
        SweepError: the grid is larger than ``max_points``.
    """
    stream = sys.stderr if stream is None else stream
    output = Path(output).absolute()
    cwd = Path.cwd()
    summary = SweepSummary(total=check_grid_size(config, max_points, source=source))
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
    summary.not_run = summary.total - summary.skipped - len(pending)

    def command_of(point: SweepPoint) -> list[str]:
        return build_command(config, point.params, run_dir=point.directory, absolute_from=cwd)

    def say(text: str) -> None:
        stream.write(text + "\n")
        stream.flush()

    say(
        f"{source}: {summary.total} points, {summary.skipped} already done, "
        f"{len(pending)} to run"
        + (f" ({summary.not_run} left for later: --limit)" if summary.not_run else "")
    )
    # jobs: (points, command, working directory, log)
    jobs: list[tuple[list[SweepPoint], list[str], Path, Path]] = []
    plain = pending
    if ensemble is not None:
        from cfl_lightning.ensemble.sweep import plan_jobs

        grouped, plain = plan_jobs(
            config, pending, output, ensemble=ensemble, parallel=parallel, cwd=cwd,
            write=not dry_run,
        )
        jobs += [(list(j.points), list(j.command), j.spec.parent, j.log) for j in grouped]
    jobs += [([p], command_of(p), p.directory, p.directory / "run.log") for p in plain]
    if dry_run:
        for points, command, _, _ in jobs:
            where = ", ".join(str(p.directory) for p in points)
            say(f"{where}: {shlex.join(command)}")
        return summary

    env = child_env(threads, launch_dir=cwd)
    queue = list(jobs)
    running: list[_Running] = []
    finished = 0

    def report(point: SweepPoint, ok: bool, detail: str) -> None:
        nonlocal finished
        finished += 1
        if ok:
            summary.done += 1
            say(f"[{finished}/{len(pending)}] done {point.name} ({detail})")
        else:
            summary.failed.append(point.name)
            log = point.directory / "run.log"
            say(f"[{finished}/{len(pending)}] FAILED {point.name} ({detail}); log: {log}")

    previous = _install_sigterm()
    try:
        while queue or running:
            while queue and len(running) < max(parallel, 1):
                points, command, workdir, log_path = queue.pop(0)
                try:
                    running.append(_start(points, command, workdir, log_path, env))
                except OSError as err:
                    for point in points:
                        report(point, False, f"cannot start: {err}")
            time.sleep(0.05)
            for item in [r for r in running if r.process.poll() is not None]:
                running.remove(item)
                item.log.close()
                code = item.process.returncode
                for point in item.points:  # an ensemble's member may fail alone
                    found = find_results(point.directory) is not None
                    if found and (code == 0 or len(item.points) > 1):
                        report(point, True, f"{time.monotonic() - item.started:.1f} s")
                    else:
                        why = f"exit {code}" if code != 0 else "exit 0 but no results.json"
                        report(point, False, why)
    except KeyboardInterrupt:
        summary.interrupted = True
        say(f"interrupted: stopping {len(running)} running point(s)")
        _terminate(running)
        summary.not_run += len(queue) + len(running)
    finally:
        _restore_sigterm(previous)
    return summary


def _start(
    points: list[SweepPoint], command: list[str], workdir: Path, log_path: Path,
    env: Mapping[str, str],
) -> _Running:
    """Write each point's ``params.json``, open the log and start ``command`` in ``workdir``.

    A point trained in an ensemble gets a ``run.log`` naming the ensemble's shared log.
    """
    for point in points:
        point.directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(point.directory / "params.json", json.dumps(point.params, indent=1) + "\n")
        if point.directory / "run.log" != log_path:
            atomic_write_text(point.directory / "run.log", f"# trained in an ensemble; log: {log_path}\n")
    workdir.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "w", encoding="utf-8")  # noqa: SIM115
    try:
        log.write(f"# {shlex.join(command)}\n")
        log.flush()
        process = subprocess.Popen(
            command,
            cwd=workdir,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: terminated as a whole
        )
    except OSError as err:
        log.write(f"cannot start: {err}\n")
        log.close()
        raise
    return _Running(points, process, log, time.monotonic())


def _install_sigterm() -> Any:
    """Turn SIGTERM and SIGINT into KeyboardInterrupt (so children are terminated).

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
