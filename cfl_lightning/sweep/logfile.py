"""Reading and appending the plain-text logs of sweep points (``run.log``, ``job.log``).

Both executors (the local runner and a SLURM task) read the line of a log that states its error
(:func:`error_line`) for a failed point's reason and append ``# ...`` comment lines to it; the
local runner and the SLURM submitter read an ensemble job's ``members.out`` as it grows. The
rules live here once.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["last_line", "error_line", "append_line", "read_new_lines"]

#: a hint printed after a command's one-line error (``  (see 'PROG --help' for the options)``)
_HINT = re.compile(r"^\(see .*--help.*\)$")
#: a line that states an error: a command's ``PROG: error: WHAT`` (group 1: WHAT), or the last
#: line of a Python traceback (``ModuleNotFoundError: No module named 'x'``)
_ERROR = re.compile(r"^\S.*?: error: (.+)$|^[A-Za-z_][\w.]*(?:Error|Exception|Exit)(?::.*)?$")


def _tail_lines(path: Path, size: int = 16384) -> list[str] | None:
    """The stripped, non-empty lines at the end of ``path`` that are not ``#`` comments."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(handle.seek(0, os.SEEK_END) - size, 0))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def last_line(path: Path) -> str:
    """The last non-empty line of a log that is not a runner/guard comment, shortened."""
    lines = _tail_lines(path, 8192)
    return lines[-1][:240] if lines else ""


def error_line(path: Path) -> str:
    """The cause of a failure as its log states it, shortened (for ``FAILED ...`` lines).

    The last line that states an error (a command's ``PROG: error: WHAT``, given as WHAT, or
    a traceback's last line), else the last line that is no ``--help`` hint (as
    :func:`last_line`). So ``fit``'s two-line refusal reads as its first line, not the hint.
    """
    lines = [line for line in _tail_lines(path) or [] if not _HINT.match(line)]
    for line in reversed(lines):
        match = _ERROR.match(line)
        if match is not None:
            return (match.group(1) or line)[:240]
    return lines[-1][:240] if lines else ""


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
