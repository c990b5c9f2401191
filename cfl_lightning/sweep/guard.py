"""A run's guard: the one process between the sweep runner and a run, taking the run down with it.

``python -I guard.py PARENT_PID GRACE -- COMMAND ...`` (started by
:func:`cfl_lightning.sweep.process.start_guarded`; standard library only, so it starts in a few
tens of milliseconds and never imports torch) runs ``COMMAND`` in a process group of its own and
waits for it. The guard

* asks Linux to send it SIGHUP when its parent, the runner, dies (``prctl(PR_SET_PDEATHSIG)``,
  and it also notices a changed parent pid, for systems without ``prctl``), even when the
  runner is killed with SIGKILL;
* makes itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): a process the run starts
  in a session of its own (W&B's ``wandb-core`` service does) is reparented to the guard, not to
  init, when its parent dies, so the guard still finds it among its descendants;
* on SIGTERM or SIGINT (from the runner) or SIGHUP (the runner's death) sends SIGTERM to the
  run's process group and waits for the run to exit; what the run leaves behind gets a second to
  exit by itself, then SIGTERM; whatever is left ``GRACE`` seconds after the first SIGTERM is
  SIGKILLed; the guard exits with ``128 + signal``. On SIGUSR1 it SIGKILLs at once;
* when the run exits by itself, stops the run's leftover descendants the same way and exits
  with the run's status (``128 + N`` when the run died of signal N).

The run itself gets SIGKILL if the guard dies (its own ``PR_SET_PDEATHSIG``). The sweep's lock
descriptor (:mod:`cfl_lightning.sweep.lock`), inherited by the guard and not passed on to the run,
keeps the output directory locked until the guard and its run are gone.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

__all__ = ["main", "descendants", "set_parent_death_signal"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_POLL = 0.05
_LINGER = 1.0  # seconds a finished run's leftover processes get to exit on their own
_GIVE_UP = 30.0  # seconds of SIGKILLs before the guard stops waiting
# The signal the kernel sends when the runner dies. Not SIGTERM, which the runner sends to stop a
# run: the parent pid alone cannot tell the two apart, since a dying multithreaded runner may
# first hand its children to one of its own threads (same pid) before they go to init.
_RUNNER_GONE = signal.SIGHUP


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def set_parent_death_signal(signum: int) -> bool:
    """Ask the kernel to send ``signum`` to this process when its parent dies (Linux only).

    Returns:
        whether the request was accepted.
    """
    return _prctl(_PR_SET_PDEATHSIG, int(signum))


def _proc_table() -> dict[int, tuple[int, str]]:
    """``{pid: (ppid, state)}`` of every process in ``/proc`` (empty where there is none)."""
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()  # the command name may hold spaces or ')'
        if len(fields) >= 2:
            table[int(name)] = (int(fields[1]), fields[0])
    return table


def descendants(pid: int) -> list[int]:
    """The living (not zombie) descendants of ``pid``, from ``/proc``."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, stack = [], list(children.get(pid, ()))
    while stack:
        child = stack.pop()
        if table[child][1] not in ("Z", "X"):
            found.append(child)
        stack.extend(children.get(child, ()))
    return found


class _Guard:
    def __init__(self, parent: int, grace: float) -> None:
        self.parent = parent
        self.grace = grace
        self.stop_signal: int | None = None
        self.urgent = False
        self.child: subprocess.Popen | None = None
        self.status: int | None = None

    def on_signal(self, signum: int, frame: object) -> None:
        if self.stop_signal is None:
            self.stop_signal = signum
        self.urgent = self.urgent or signum == signal.SIGUSR1

    def reap(self) -> None:
        """Collect every exited child (the run, and orphans reparented to this subreaper)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.child is not None and pid == self.child.pid:
                code = os.waitstatus_to_exitcode(status)
                self.status = code if code >= 0 else 128 - code
                self.child.returncode = code

    def alive(self) -> list[int]:
        """The run and its descendants still living (reaping what has exited)."""
        self.reap()
        found = descendants(os.getpid())
        if self.status is None and self.child is not None and self.child.pid not in found:
            found.append(self.child.pid)  # no /proc: the run at least
        return found

    def signal_all(self, signum: int, pids: list[int]) -> None:
        if self.child is not None:
            try:
                os.killpg(self.child.pid, signum)  # the run's group (it may outlive the run)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in pids:
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def waiting(self, deadline: float) -> bool:
        return time.monotonic() < deadline and not self.urgent

    def take_down(self, wait: float) -> None:
        """Stop the run within ``wait`` seconds, then everything it left below the guard.

        The run's process group gets SIGTERM first, alone, so that the run can stop what it
        started (W&B's service gets its teardown); what is left when the run has gone, or when
        ``wait`` is over, goes the way of :meth:`clear_leftovers`.
        """
        deadline = time.monotonic() + wait
        if self.status is None and wait > 0:
            self.signal_all(signal.SIGTERM, [])
            while self.status is None and self.waiting(deadline):
                time.sleep(_POLL)
                self.reap()
        self.clear_leftovers(deadline)

    def clear_leftovers(self, deadline: float) -> None:
        """Give what is left below the guard a moment to exit by itself, then SIGTERM it until
        ``deadline``, then SIGKILL it."""
        linger = min(time.monotonic() + _LINGER, deadline)
        while self.alive() and self.waiting(linger):
            time.sleep(_POLL)
        pids = self.alive()
        if pids and self.waiting(deadline):
            self.signal_all(signal.SIGTERM, pids)
            while (pids := self.alive()) and self.waiting(deadline):
                time.sleep(_POLL)
        give_up = time.monotonic() + _GIVE_UP
        while pids and time.monotonic() < give_up:  # SIGKILL may wait for a blocked syscall
            self.signal_all(signal.SIGKILL, pids)
            time.sleep(_POLL)
            pids = self.alive()

    def run(self, command: list[str]) -> int:
        guard = os.getpid()

        def in_child() -> None:  # between fork and exec: die with the guard
            set_parent_death_signal(signal.SIGKILL)
            if os.getppid() != guard:
                os._exit(1)

        self.child = subprocess.Popen(command, start_new_session=True, preexec_fn=in_child)
        while self.status is None and self.stop_signal is None:
            time.sleep(_POLL)
            self.reap()
            if os.getppid() != self.parent and self.stop_signal is None:
                self.stop_signal = _RUNNER_GONE  # (where there is no prctl)
        if self.stop_signal is not None:
            why = (
                "the sweep runner is gone" if self.stop_signal == _RUNNER_GONE
                else f"stopped by {signal.Signals(self.stop_signal).name}"
            )
            sys.stderr.write(f"# guard: {why}; stopping the run\n")
            sys.stderr.flush()
            self.take_down(0.0 if self.urgent else self.grace)
            return 128 + self.stop_signal
        self.clear_leftovers(time.monotonic() + self.grace)
        return self.status


def main(argv: list[str]) -> int:
    """``PARENT_PID GRACE -- COMMAND ...``; returns the run's exit status (see the module)."""
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: python -I guard.py PARENT_PID GRACE -- COMMAND ...\n")
        return 2
    guard = _Guard(int(argv[0]), float(argv[1]))
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR1):
        signal.signal(signum, guard.on_signal)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    set_parent_death_signal(_RUNNER_GONE)
    if os.getppid() != guard.parent:  # the runner died before the request above
        return 128 + _RUNNER_GONE
    try:
        return guard.run(argv[3:])
    except OSError as err:
        sys.stderr.write(f"cannot start {argv[3]}: {err.strerror or err}\n")
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
