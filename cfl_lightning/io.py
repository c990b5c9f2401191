"""Safe file output: atomic writes to regular files, streams to pipes, and clean interrupts.

Every file the package writes goes through :func:`atomic_open`, which decides by what is at the
output path:

* nothing, or a regular file: the content goes to a hidden temporary file beside it, renamed onto
  the path only when complete (an existing file keeps its permission bits). A crash, an error or
  a signal midway never leaves a half-written file, and the old content stays until then;
* a symbolic link: it is followed, and its final target is written atomically as above (the link
  itself stays a link);
* a named pipe (FIFO) or a character device: written to directly, as a stream (opening a pipe
  waits for a reader, like a shell redirection);
* a directory, a block device or a socket: refused (:class:`~cfl_lightning.errors.OutputError`).

An output that is the same file as one of the command's inputs is refused
(:func:`check_output`). Missing parent directories are created (``mkdir -p``) and removed again
if the write does not complete. :func:`signals_interrupt` turns SIGTERM (and SIGHUP) into an
:class:`Interrupted` exception, so the ``with`` blocks unwind and temporary files are removed;
the command-line interface runs every command inside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from cfl_lightning.errors import OutputError

__all__ = [
    "atomic_open",
    "atomic_write_text",
    "check_output",
    "output_kind",
    "same_file",
    "signals_interrupt",
    "Interrupted",
    "read_text",
    "read_json",
    "MAX_INPUT_BYTES",
]

MAX_INPUT_BYTES = 256 * 1024**2  # input files (automata, sweeps) larger than this are refused

PathLike = str | os.PathLike


class Interrupted(KeyboardInterrupt):
    """Raised by :func:`signals_interrupt` when SIGTERM or SIGHUP arrives.

    Attributes:
        signum: the signal number (the process should exit with ``128 + signum``).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Interrupted` (SIGINT already raises
    ``KeyboardInterrupt``), so ``finally`` clauses and :func:`atomic_open` clean up.

    A signal the process ignores (SIGHUP under ``nohup``) stays ignored. Outside the main thread
    it does nothing (Python only handles signals there).
    """

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    previous = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is not signal.SIG_IGN:  # keep `nohup` working
                previous[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def output_kind(path: PathLike) -> str:
    """What writing to ``path`` would do: ``"file"`` (atomic replace or create), ``"stream"``
    (a named pipe or a character device, written directly) or ``"refuse:<why>"``."""
    try:
        st = os.stat(path)  # follows symlinks
    except FileNotFoundError:
        return "file"
    except NotADirectoryError:
        return "refuse:a parent of the path is not a directory"
    except OSError as err:
        return f"refuse:{err.strerror or err}"
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return "stream"
    if stat.S_ISDIR(mode):
        return "refuse:is a directory"
    kind = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else None
    return f"refuse:is {kind or 'not a regular file'}, not a file that can be written"


def same_file(a: PathLike, b: PathLike) -> bool:
    """Whether two paths name the same file (same inode, or the same resolved path)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_output(path: PathLike, inputs: Iterable[PathLike | None] = (), *, what: str = "") -> str:
    """Refuse an output path that cannot be written safely; returns :func:`output_kind`.

    Args:
        path: the output.
        inputs: the command's input files; the output may be none of them.
        what: how to name the output in messages (e.g. ``"--output"``).

    Raises:
        OutputError: the output is one of the inputs, a directory, a block device or a socket.
    """
    label = f"{what} {os.fspath(path)}" if what else os.fspath(path)
    for source in inputs:
        if source is not None and same_file(path, source):
            raise OutputError(
                f"{label} is the input file {os.fspath(source)}; refusing to overwrite it"
            )
    kind = output_kind(path)
    if kind.startswith("refuse:"):
        raise OutputError(f"{label}: {kind[len('refuse:'):]}")
    return kind


@contextlib.contextmanager
def atomic_open(
    path: PathLike, mode: str = "w", *, inputs: Iterable[PathLike | None] = ()
) -> Iterator[IO]:
    """Open ``path`` for writing, safely (see the module docstring).

    Args:
        path: final destination.
        mode: ``"w"`` (text, UTF-8) or ``"wb"``.
        inputs: input files that ``path`` must not be (see :func:`check_output`).

    Yields:
        The open file: a temporary file beside the (resolved) target, renamed onto it when the
        ``with`` block completes; or the pipe or device itself. If the block raises (including
        ``KeyboardInterrupt`` and :class:`Interrupted`), the temporary file and any directories
        created for it are removed and the target is left as it was.

    Raises:
        OutputError: ``path`` cannot be written safely (:func:`check_output`).
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open supports modes 'w' and 'wb', got {mode!r}")
    kwargs: dict[str, Any] = {"encoding": "utf-8", "newline": "\n"} if mode == "w" else {}
    if check_output(path, inputs) == "stream":
        with open(path, mode, **kwargs) as handle:
            yield handle
        return
    target = Path(os.path.realpath(path))  # a symlink is written through to its final target
    created = _make_parents(target.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except BaseException:
        _remove_dirs(created)
        raise
    try:
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, _file_mode(target))  # mkstemp creates 0600
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        _remove_dirs(created)
        raise


def _make_parents(directory: Path) -> list[Path]:
    """``mkdir -p directory``; returns the directories it created, deepest last."""
    missing = []
    probe = directory
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    if missing and not probe.is_dir():
        raise OutputError(f"cannot create {directory}: {probe} is not a directory")
    created = []
    for d in reversed(missing):
        d.mkdir(exist_ok=True)
        created.append(d)
    return created


def _remove_dirs(created: list[Path]) -> None:
    for d in reversed(created):
        with contextlib.suppress(OSError):
            d.rmdir()  # only if still empty


def _file_mode(target: Path) -> int:
    """An existing file's permission bits, else the usual ``0666 & ~umask``."""
    with contextlib.suppress(OSError):
        return stat.S_IMODE(os.stat(target).st_mode)
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def read_text(
    path: PathLike, *, limit: int | None = None, error: type[Exception] = OutputError
) -> str:
    """Read a UTF-8 text input, at most ``limit`` bytes (default :data:`MAX_INPUT_BYTES`), so a
    pipe or ``/dev/zero`` cannot make it read forever.

    Raises:
        error: the input is larger than ``limit`` bytes.
        OSError, UnicodeDecodeError: as :func:`open` and decoding raise them.
    """
    limit = MAX_INPUT_BYTES if limit is None else int(limit)
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise error(f"{os.fspath(path)}: input larger than {limit:,} bytes; refusing to read it")
    return data.decode("utf-8")


def read_json(
    path: PathLike, *, error: type[Exception] = OutputError, what: str = "automaton"
) -> Any:
    """Parse a JSON input file; every way it can fail is one line naming the file.

    Args:
        path: the file.
        error: the exception class raised (e.g. ``PFSAError``).
        what: what the file should hold, for the messages (``"automaton"``: "expected
            automaton JSON").

    Raises:
        error: the file is missing, a directory, unreadable, larger than
            :data:`MAX_INPUT_BYTES`, not UTF-8 or not valid JSON.
    """
    name = os.fspath(path)
    try:
        return json.loads(read_text(name, error=error))
    except FileNotFoundError:
        raise error(f"{name}: no such file") from None
    except IsADirectoryError:
        raise error(f"{name}: is a directory, not an {what} file") from None
    except json.JSONDecodeError as err:
        raise error(f"{name}: not valid JSON ({err.msg} at line {err.lineno})") from None
    except UnicodeDecodeError:
        raise error(f"{name}: not a text file (not UTF-8); expected {what} JSON") from None
    except OSError as err:
        raise error(f"{name}: cannot read ({err.strerror or err})") from None


def atomic_write_text(path: PathLike, text: str, *, inputs: Iterable[PathLike | None] = ()) -> None:
    """Write ``text`` to ``path`` with :func:`atomic_open` (UTF-8)."""
    with atomic_open(path, "w", inputs=inputs) as handle:
        handle.write(text)
