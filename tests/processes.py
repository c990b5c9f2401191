"""Process checks shared by the sweep-runner tests (Linux ``/proc``)."""

from __future__ import annotations

import time

__all__ = ["alive", "survivors", "wait_for"]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, whose parent died without reaping it, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False


def survivors(pids: list[int], timeout: float = 20.0) -> list[int]:
    """The ``pids`` still running after waiting up to ``timeout`` seconds for them to end."""
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def wait_for(condition, proc, timeout: float = 60.0) -> None:
    """Wait until ``condition()`` holds, failing with ``proc``'s stderr if it ends first."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert condition(), proc.stderr.read() if proc.poll() is not None else "timed out"
