"""Whether a point's ``results.json`` counts, and clearing an unfinished point for a new attempt.

A point is done only when a ``results.json`` below its directory parses and holds a finite
``kl_total`` (:func:`results_problem`): an empty, ``{}``, truncated or NaN one does not count.
Before an unfinished point runs again, everything in its directory but ``params.json`` moves to
``POINT/.attempts/N/`` (:func:`set_aside`), where any ``results.json`` is renamed
``results.json.invalid``: the logs of the earlier attempt are kept, ``analyze`` (which reads every
``results.json`` below a directory) never sees the invalid file, and the new attempt starts in an
empty directory (its loggers' ``version_0``), so a point never ends with two ``results.json``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from cfl_lightning.errors import OutputError
from cfl_lightning.io import read_text

__all__ = [
    "RESULTS",
    "ATTEMPTS",
    "INVALID_SUFFIX",
    "results_problem",
    "results_files",
    "find_results",
    "set_aside",
]

RESULTS = "results.json"
#: earlier attempts of a point, under its directory
ATTEMPTS = ".attempts"
#: suffix given to a results.json that did not count, when its attempt is set aside
INVALID_SUFFIX = ".invalid"
_MAX_BYTES = 64 * 1024**2
_KEEP = ("params.json", ATTEMPTS)


def results_problem(path: str | os.PathLike) -> str | None:
    """None when ``path`` is a valid ``results.json``, else a few words saying what is wrong.

    Valid: UTF-8 JSON holding an object whose ``kl_total`` is a finite number.
    """
    try:
        text = read_text(path, limit=_MAX_BYTES)
    except OutputError:
        return f"larger than {_MAX_BYTES:,} bytes"
    except OSError as err:
        return f"unreadable ({err.strerror or err})"
    except UnicodeDecodeError:
        return "not UTF-8 text"
    if not text.strip():
        return "empty"
    try:
        data = json.loads(text)
    except ValueError:
        return "not valid JSON (truncated?)"
    if not isinstance(data, dict):
        return "not a JSON object"
    if "kl_total" not in data:
        return "no kl_total"
    value = data["kl_total"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"kl_total is {json.dumps(value)[:40]}, not a number"
    if not math.isfinite(value):
        return f"kl_total is {value}"
    return None


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
