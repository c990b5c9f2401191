"""Writing ``results.json``: the keys in schema order, strict JSON, atomically.

:func:`ordered` puts a run's values in the order of
:data:`~cfl_lightning.results.schema.RESULT_KEYS` (and refuses a missing or unknown key),
:func:`write_results` writes them (non-finite floats as ``null``, indented, via a temporary file
and a rename). Gathering the values of a finished run (model, data module, the KL that the
callback computed) is :func:`cfl_lightning.callbacks.build_results`; this module stays pure
Python so that every reader and writer of the format shares one floor with the sweep runner.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from cfl_lightning.io import atomic_write_text
from cfl_lightning.results.schema import RESULT_KEYS

__all__ = ["json_safe", "ordered", "write_results", "count_parameters"]


def json_safe(value: Any) -> Any:
    """Recursively convert to JSON-ready values: tensors/numpy scalars to Python numbers,
    non-finite floats to None, paths to strings, tuples to lists."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return json_safe(value.tolist())
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def ordered(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` as a JSON-ready ``results.json`` dict, keys in schema order.

    Raises:
        ValueError: a schema key is missing, or a key is not in the schema.
    """
    missing = [k for k in RESULT_KEYS if k not in values]
    unknown = [k for k in values if k not in RESULT_KEYS]
    if missing or unknown:
        raise ValueError(f"results.json keys: missing {missing}, not in the schema {unknown}")
    return json_safe({key: values[key] for key in RESULT_KEYS})


def write_results(path: str | os.PathLike, results: Mapping[str, Any]) -> Path:
    """Write ``results`` as indented strict JSON to ``path`` atomically; returns the path."""
    text = json.dumps(json_safe(results), indent=1, allow_nan=False) + "\n"
    atomic_write_text(path, text)
    return Path(path)


class _HasParameters(Protocol):
    """Anything with ``parameters()`` (an ``nn.Module``; torch is not imported here)."""

    def parameters(self) -> Iterable[Any]: ...


def count_parameters(module: _HasParameters) -> int:
    """Number of trainable parameters of ``module`` (``results.json``'s ``num_parameters``, and
    what models are sized by; works on ``meta``-device modules too)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
