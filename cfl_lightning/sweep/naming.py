"""Run names of grid points: a readable slug of the varying parameters and a short hash.

The hash (:func:`point_hash`) covers every parameter, so names are unique and stable; the runner
finds a point's directory by it (``OUTPUT/<slug>_<hash>``), even after the slug's rules change.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["point_hash", "run_name"]

# short slug forms of common parameters (the last dotted component is the key)
_SHORT = {
    "weight_seed": "w",
    "topology_seed": "t",
    "count": "n",
    "seed_everything": "s",
    "num_strings": "K",
    "max_epochs": "ep",
}
_VALUE_ONLY = {"event", "model", "intervention", "generator", "class_path"}
_SLUG_MAX = 72


def point_hash(params: Mapping[str, Any]) -> str:
    """First 8 hex digits of the sha256 of the parameters' canonical JSON."""
    text = json.dumps(dict(params), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def _slug_value(value: Any) -> str:
    text = str(value)
    if text.endswith("LanguageModel"):
        text = text.rsplit(".", 1)[-1][: -len("LanguageModel")] or text
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-") or "x"


def run_name(params: Mapping[str, Any], varying: Sequence[str] | None = None) -> str:
    """A stable, readable directory name: a slug of the (varying) parameters + a short hash.

    The hash covers *all* parameters, so names are unique and stable; the slug only helps
    reading (e.g. ``n500_state-odd_w3_LSTM_s0_1a2b3c4d``).

    Args:
        params: the point's parameters.
        varying: the parameters shown in the slug (default: all), e.g. those with more than one
            value in the grid.
    """
    keys = [k for k in params if varying is None or k in varying]
    parts = []
    for key in keys:
        last = key.rsplit(".", 1)[-1]
        value = _slug_value(params[key])
        if last in _VALUE_ONLY or key == "model":
            parts.append(value)
        elif last in _SHORT:
            parts.append(f"{_SHORT[last]}{value}")
        else:
            parts.append(f"{last}-{value}")
    slug = "_".join(parts)[:_SLUG_MAX].rstrip("_-.") or "run"
    return f"{slug}_{point_hash(params)}"

