"""Where results files lie: a run's version folder, a point's files, earlier attempts set aside.

* a point is done when a valid ``results.json`` (:func:`~cfl_lightning.results.reader.has_results`)
  lies below its directory, outside its earlier attempts (:func:`find_results`);
* a run's versioned logger folders (``version_N``): :func:`version_dir` picks the folder a run
  writes into so that a run keeps one ``results.json``, and :func:`done_in_any_version` says
  whether any of them holds a valid one.

Before an unfinished point runs again, everything in its directory but ``params.json`` moves to
``POINT/.attempts/N/`` (:func:`set_aside`), where any ``results.json`` is renamed
``results.json.invalid``: the logs of the earlier attempt are kept, ``analyze`` (which reads every
``results.json`` below a directory, :func:`results_files`) never sees the invalid file, and the
new attempt starts in an empty directory (its loggers' ``version_0``), so a point never ends
with two ``results.json``.
"""

from __future__ import annotations

import os
from pathlib import Path

from cfl_lightning.results.reader import has_results, results_problem
from cfl_lightning.results.schema import RESULTS

__all__ = [
    "ATTEMPTS",
    "INVALID_SUFFIX",
    "version_dir",
    "done_in_any_version",
    "results_files",
    "find_results",
    "set_aside",
]

#: earlier attempts of a point, under its directory
ATTEMPTS = ".attempts"
#: suffix given to a results.json that did not count, when its attempt is set aside
INVALID_SUFFIX = ".invalid"
_KEEP = ("params.json", ATTEMPTS)


def _version(path: Path) -> int | None:
    """``N`` of a ``version_N`` folder, else None."""
    name = path.name
    if name.startswith("version_") and name[len("version_"):].isdigit():
        return int(name[len("version_"):])
    return None


def version_dir(log_dir: str | os.PathLike) -> Path:
    """The folder a run whose logger chose ``log_dir`` writes its ``results.json`` into.

    A versioned logger (CSV, TensorBoard) picks a new ``version_N`` when older ones exist; when
    they hold no valid ``results.json`` (a run that did not finish, or a corrupt file), the
    lowest of them is reused instead, so that a run keeps one ``results.json``.
    """
    log_dir = Path(log_dir)
    version = _version(log_dir)
    if version is not None and not log_dir.exists() and log_dir.parent.is_dir():
        older = sorted(
            (v, d) for d in log_dir.parent.iterdir()
            if d.is_dir() and (v := _version(d)) is not None and v < version
        )
        if older and not done_in_any_version(older[0][1] / RESULTS):
            log_dir = older[0][1]
    return log_dir


def done_in_any_version(path: str | os.PathLike) -> bool:
    """A valid ``results.json`` at ``path``, or in another version folder of its logger."""
    path = Path(path)
    if has_results(path):
        return True
    if path.parent.name.startswith("version_"):
        return any(has_results(p) for p in path.parent.parent.glob(f"version_*/{RESULTS}"))
    return False


def results_files(directory: str | os.PathLike) -> list[Path]:
    """Every ``results.json`` below ``directory`` (sorted), outside its earlier attempts."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return [
        path
        for path in sorted(directory.rglob(RESULTS))
        if ATTEMPTS not in path.relative_to(directory).parts and path.is_file()
    ]


def find_results(directory: str | os.PathLike) -> Path | None:
    """The first valid ``results.json`` below ``directory`` (:func:`results_problem`), or None."""
    return next((p for p in results_files(directory) if results_problem(p) is None), None)


def set_aside(directory: str | os.PathLike) -> Path | None:
    """Move an unfinished point's files (all but ``params.json``) to ``.attempts/N/``.

    Any ``results.json`` among them is renamed ``results.json.invalid``. Nothing is deleted.

    Returns:
        The new ``.attempts/N`` directory, or None when there was nothing to move.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return None
    entries = sorted(e for e in directory.iterdir() if e.name not in _KEEP)
    if not entries:
        return None
    attempts = directory / ATTEMPTS
    attempts.mkdir(exist_ok=True)
    numbers = [int(p.name) for p in attempts.iterdir() if p.name.isdigit()]
    target = attempts / str(max(numbers, default=0) + 1)
    target.mkdir()
    for entry in entries:
        os.replace(entry, target / entry.name)
    for path in list(target.rglob(RESULTS)):
        path.rename(path.with_name(RESULTS + INVALID_SUFFIX))
    return target
