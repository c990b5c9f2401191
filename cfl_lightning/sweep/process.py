"""Starting and stopping a sweep's runs: each behind a guard that takes it down with the runner.

Every run is started as ``python -I guard.py RUNNER_PID GRACE -- COMMAND`` in a session of its
own (:mod:`cfl_lightning.sweep.guard`): the guard starts the command in its own process group,
stops it (and everything it started, W&B's service included) when asked or when the runner dies,
even by SIGKILL, and exits with the run's status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

__all__ = ["THREAD_ENV", "GRACE", "child_env", "start_guarded", "stop_all"]

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CFL_LIGHTNING_THREADS")
#: seconds a run gets between SIGTERM and SIGKILL when the sweep stops
GRACE = 10.0
GUARD = Path(__file__).with_name("guard.py")
_MARGIN = 5.0  # seconds the runner waits for a guard beyond its grace


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


def start_guarded(
    command: Sequence[str],
    *,
    cwd: str | os.PathLike,
    env: Mapping[str, str],
    stdout: IO,
    stderr: IO,
    lock_fd: int | None = None,
    grace: float = GRACE,
) -> subprocess.Popen:
    """Start ``command`` behind a guard (the returned process is the guard).

    Args:
        cwd: the run's working directory.
        env: its environment.
        stdout, stderr: open files for its output (the guard's own lines go to ``stderr``).
        lock_fd: the sweep lock's descriptor, inherited by the guard only
            (:mod:`cfl_lightning.sweep.lock`).
        grace: seconds between SIGTERM and SIGKILL when the run is stopped.

    Raises:
        OSError: the guard cannot be started.
    """
    guard = [sys.executable, "-I", str(GUARD), str(os.getpid()), f"{grace:g}", "--", *command]
    return subprocess.Popen(
        guard,
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,  # the terminal's Ctrl-C goes to the runner, which stops the runs
        pass_fds=() if lock_fd is None else (lock_fd,),
    )


def _send(process: subprocess.Popen, signum: int) -> None:
    if process.poll() is None:
        try:
            os.kill(process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def stop_all(processes: Sequence[subprocess.Popen], grace: float = GRACE) -> None:
    """Stop guarded runs: SIGTERM to each guard, which stops its run within ``grace`` seconds.

    A guard still there ``grace`` + 5 seconds later, or every guard after a second Ctrl-C, is
    told to SIGKILL its run at once (SIGUSR1), then killed itself.
    """
    for process in processes:
        _send(process, signal.SIGTERM)
    deadline = time.monotonic() + grace + _MARGIN
    try:
        for process in processes:
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                _hurry(process)
    except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
        for process in processes:
            _hurry(process)


def _hurry(process: subprocess.Popen) -> None:
    _send(process, signal.SIGUSR1)
    try:
        process.wait(timeout=_MARGIN)
    except subprocess.TimeoutExpired:
        _send(process, signal.SIGKILL)
        process.wait()
