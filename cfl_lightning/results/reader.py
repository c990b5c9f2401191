"""Reading ``results.json``: the file, the validity rule, and typed access to its values.

* :func:`read_results`: a results file's JSON object, or a one-line :class:`ResultsFileError`
  saying what is wrong (unreadable, too large, not UTF-8, empty, not JSON, not an object);
* the validity rule, written once: a ``results.json`` counts only when it reads and holds a
  finite ``kl_total`` (:func:`problem_in` for an object, :func:`results_problem` and
  :func:`has_results` for a file); the sweep runner, the ensemble job and ``analyze``'s
  callers decide with it whether a run is done;
* :class:`FieldReader`: a key's value checked against its type in the schema
  (:data:`~cfl_lightning.results.schema.FIELDS`); a wrong type is a one-line
  :class:`~cfl_lightning.errors.CflError` naming the source and the key, never read as
  missing. ``null``, ``"null"``, ``"None"``, ``""`` and non-finite numbers (``NaN`` as W&B
  writes it) are missing values.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

from cfl_lightning.errors import CflError, OutputError
from cfl_lightning.io import read_text
from cfl_lightning.results.schema import LONG_SPLIT_KEYS, field

__all__ = [
    "ResultsFileError",
    "MAX_BYTES",
    "read_results",
    "problem_in",
    "results_problem",
    "has_results",
    "FieldReader",
    "SPLITS",
    "split_view",
]

#: the largest results file read (a run's is a few hundred kB at most)
MAX_BYTES = 64 * 1024**2
_MISSING_TEXT = ("", "null", "none", "nan")  # lower-cased strings read as a missing value


class ResultsFileError(CflError):
    """A results file that cannot be read as a JSON object (the message says why, no path)."""


def read_results(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON object of the results file ``path``.

    Raises:
        ResultsFileError: a few words saying what is wrong (the caller names the file).
    """
    try:
        text = read_text(path, limit=MAX_BYTES)
    except OutputError:
        raise ResultsFileError(f"larger than {MAX_BYTES:,} bytes") from None
    except OSError as err:
        raise ResultsFileError(f"unreadable ({err.strerror or err})") from None
    except UnicodeDecodeError:
        raise ResultsFileError("not UTF-8 text") from None
    if not text.strip():
        raise ResultsFileError("empty")
    try:
        data = json.loads(text)
    except ValueError as err:
        raise ResultsFileError(f"not JSON (truncated? {err})") from None
    if not isinstance(data, dict):
        raise ResultsFileError("not a JSON object")
    return data


def problem_in(data: Mapping[str, Any]) -> str | None:
    """None when the results object ``data`` counts (a finite number ``kl_total``), else why."""
    if "kl_total" not in data:
        return "no kl_total"
    value = data["kl_total"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"kl_total is {json.dumps(value)[:40]}, not a number"
    if not math.isfinite(value):
        return f"kl_total is {value}"
    return None


def results_problem(path: str | os.PathLike) -> str | None:
    """None when ``path`` is a valid ``results.json``, else a few words saying what is wrong.

    Valid: :func:`read_results` reads it and :func:`problem_in` finds nothing.
    """
    try:
        return problem_in(read_results(path))
    except ResultsFileError as err:
        return str(err)


def has_results(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a valid ``results.json`` (:func:`results_problem` finds nothing)."""
    return results_problem(path) is None


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


class FieldReader:
    """Typed access to one results object (from a file, a JSON Lines line or a W&B run).

    Args:
        source: names the object in messages (a path, ``FILE:LINE``, a W&B run).
    """

    def __init__(self, source: str) -> None:
        self.source = source

    def get(self, data: Mapping[str, Any], key: str) -> Any:
        """``data[key]`` read as its schema type (missing key: None)."""
        reading = {
            "integer": self.integer, "number": self.number, "string": self.text,
            "object": self.mapping, "boolean": self.boolean,
        }[field(key).type]
        return reading(data.get(key), key)

    def wrong(self, key: str, expected: str, value: Any) -> CflError:
        """The error of ``key`` holding ``value`` where ``expected`` was due."""
        return CflError(f"{self.source}: {key}: expected {expected}, got {_shown(value)}")

    def number(self, value: Any, key: str, expected: str = "a number or null") -> float | None:
        """A float, None for a missing value (also non-finite ones)."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise self.wrong(key, expected, value)
        if isinstance(value, str):
            if value.strip().lower() in _MISSING_TEXT:
                return None
            try:
                value = float(value)
            except ValueError:
                raise self.wrong(key, expected, value) from None
        value = float(value)
        return value if math.isfinite(value) else None

    def integer(self, value: Any, key: str) -> int | None:
        """An int (an integral float is accepted), None for a missing value."""
        number = self.number(value, key, "an integer or null")
        if number is None:
            return None
        if not number.is_integer():
            raise self.wrong(key, "an integer or null", value)
        return int(number)

    def text(self, value: Any, key: str) -> str | None:
        """A string, None for a missing value."""
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.wrong(key, "a string or null", value)
        # "None" is how ``wandb agent`` writes a Python None; lower-case "none" is an intervention
        return None if value.strip() in ("", "null", "None") else value

    def boolean(self, value: Any, key: str) -> bool | None:
        """A bool (``"true"``/``"false"`` as text too), None for a missing value."""
        if isinstance(value, str) and value.strip().lower() in _MISSING_TEXT:
            return None
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise self.wrong(key, "a boolean or null", value)

    def mapping(self, value: Any, key: str) -> Mapping[str, Any] | None:
        """A JSON object, None for a missing value."""
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise self.wrong(key, "an object or null", value)
        return value


#: the evaluation splits a results object may hold: ``test`` (the top-level KL entries) and
#: ``long`` (the ``long_test`` object, ``data.long_min_length``)
SPLITS = ("test", "long")


def split_view(data: Mapping[str, Any], split: str) -> dict[str, Any] | None:
    """The results object ``data`` with the KL entries of ``split`` at the top level.

    ``"test"``: ``data`` itself. ``"long"``: ``data`` with every entry of its ``long_test``
    object (``kl_total``, ``kl_target``, ``kl``, ``test_visits``, ...) in place of the test's,
    so that every reader of the test values reads the long split's unchanged; None when the
    run has no long split (``long_test`` missing or null).

    Raises:
        CflError: an unknown split, or a ``long_test`` that is not an object.
    """
    if split not in SPLITS:
        raise CflError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    if split == "test":
        return dict(data)
    long = data.get("long_test")
    if long is None:
        return None
    if not isinstance(long, Mapping):
        raise CflError(f"long_test: expected an object or null, got {_shown(long)}")
    entries = {k: v for k, v in long.items() if k not in LONG_SPLIT_KEYS}
    return {**data, **entries}
