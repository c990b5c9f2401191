"""Reading and appending the plain-text logs of sweep points (``run.log``, ``job.log``).

Both executors (the local runner and a SLURM task) read a log's last line for the status line and
append ``# ...`` comment lines to it; the local runner and the SLURM submitter read an ensemble
job's ``members.out`` as it grows. The rules live here once.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["last_line", "append_line", "read_new_lines"]


def last_line(path: Path) -> str:
    """The last non-empty line of a log that is not a runner/guard comment, shortened."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(handle.seek(0, os.SEEK_END) - 8192, 0))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        line = line.strip()
        if line and not line.startswith("#"):
            return line[:240]
    return ""


def append_line(path: Path, text: str) -> None:
    """Append ``text`` as one line to ``path``; a log that cannot be written is left as it is."""
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text.rstrip("\n") + "\n")
    except OSError:
        pass


def read_new_lines(
    path: Path, offset: int, *, restarts: bool = False
) -> tuple[list[str], int] | None:
    """The complete lines written to ``path`` since byte ``offset``, and the offset after them.

    A line still being written (no newline yet) is left for the next read.

    Args:
        path: a file that a running process appends lines to (an ensemble job's ``members.out``).
        offset: the bytes already read.
        restarts: a file now shorter than ``offset`` was started again (a requeued SLURM task):
            read it from the start.

    Returns:
        ``(lines, offset)``, or ``None`` where the file cannot be read (yet).
    """
    try:
        with open(path, "rb") as handle:
            if restarts and handle.seek(0, os.SEEK_END) < offset:
                offset = 0
            handle.seek(offset)
            data = handle.read()
    except OSError:
        return None
    complete = data[: data.rfind(b"\n") + 1]
    return complete.decode("utf-8", "replace").splitlines(), offset + len(complete)
