"""One sweep runner per output directory: an advisory lock on ``OUTPUT/.sweep.lock``.

The lock is ``flock`` on the file, so the kernel releases it when its holders are gone, however
they ended (a SIGKILL included): a lock file left behind never blocks anyone. The file records
the holder (pid, host, start time) for the refusal message, and is removed when its runner ends. Its descriptor is inherited by each
run's guard (:mod:`cfl_lightning.sweep.guard`), so after a runner dies the directory stays locked
until its runs have been stopped too.

A second runner refuses at once with one line naming the holder, except when the holder's
runner is dead (same host) and only its runs are still being stopped: then it waits for them, up
to ``wait`` seconds. Locks on network file systems are only as good as the file system's
``flock`` (NFS: emulated with POSIX locks by Linux).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cfl_lightning.sweep.grid import SweepError

__all__ = ["LOCK_NAME", "SweepLocked", "lock_output", "holder_text"]

LOCK_NAME = ".sweep.lock"
_POLL = 0.1


class SweepLocked(SweepError):
    """Another sweep runner holds the output directory."""


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace") or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def holder_text(holder: dict[str, Any]) -> str:
    """``pid 123 on host, since 2026-11-26 11:25:08 UTC`` (what is known of it)."""
    if not holder:
        return "a runner that recorded nothing"
    return (
        f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, "
        f"since {holder.get('started', '?')}"
    )


def _dead_here(holder: dict[str, Any]) -> bool:
    pid = holder.get("pid")
    return (
        isinstance(pid, int)
        and holder.get("host") == socket.gethostname()
        and not _pid_alive(pid)
    )


def _try_lock(path: Path) -> tuple[int | None, dict[str, Any]]:
    """``(fd, {})`` when ``path`` is locked by us now, else ``(None, the recorded holder)``.

    The file is opened afresh each time: its last holder removes it on release, so the one
    locked must still be the one at ``path`` (else it is tried again).
    """
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            holder = _read_holder(fd)
            os.close(fd)
            if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            return None, holder
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd, {}
        os.close(fd)  # removed (and maybe recreated) by its holder meanwhile: try again


@contextlib.contextmanager
def lock_output(
    output: str | os.PathLike, *, wait: float = 60.0, say: Any = None
) -> Iterator[int]:
    """Hold the output directory's lock within the block (creating the directory).

    The lock file is removed on release (by the runner; after a runner died it stays, harmless,
    until the next runner is done).

    Args:
        output: the sweep's output directory.
        wait: seconds to wait for the runs of a dead runner to be stopped (see the module).
        say: called with one line when waiting.

    Yields:
        The lock's file descriptor (to pass to the runs' guards).

    Raises:
        SweepLocked: another runner holds it (the message names it), or the runs of a dead one
            were still stopping after ``wait`` seconds.
    """
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    path = output / LOCK_NAME
    deadline, waited = None, False
    while True:
        fd, holder = _try_lock(path)
        if fd is not None:
            break
        if not holder or _dead_here(holder):  # starting, or a dead runner's runs stopping
            deadline = deadline or time.monotonic() + (wait if holder else 2.0)
            if time.monotonic() < deadline:
                if holder and not waited and say is not None:
                    say(
                        f"{output}: waiting for the runs of a stopped sweep runner "
                        f"({holder_text(holder)}) to end"
                    )
                waited = waited or bool(holder)
                time.sleep(_POLL)
                continue
            if holder:
                raise SweepLocked(
                    f"{output} is still locked by the runs of a stopped sweep runner "
                    f"({holder_text(holder)}) after {wait:g} s; stop them or try again"
                )
        raise SweepLocked(
            f"{output} is in use by another sweep runner ({holder_text(holder)}); "
            "wait for it to finish or stop it"
        )
    try:
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode("utf-8"), 0)
        yield fd
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)  # while still holding it (see _try_lock)
        os.close(fd)  # releases the lock, unless a guard still holds the descriptor
