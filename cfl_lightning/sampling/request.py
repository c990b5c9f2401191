"""Checks of a sampling request made before any work: types, ranges, device, memory.

:func:`check_request` is called first by :func:`~cfl_lightning.sampling.sample_corpus`. It
accepts numpy integers (and any ``__index__`` type) for counts and seeds, turns wrong types and
unknown devices into :class:`~cfl_lightning.errors.CflError` subclasses (never
``AttributeError`` or torch's ``RuntimeError``), and refuses requests too large for memory
(:mod:`~cfl_lightning.sampling.budget`).
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from cfl_lightning.automata.events import Event
from cfl_lightning.automata.pfsa import PFSA
from cfl_lightning.errors import EventError, InterventionError
from cfl_lightning.sampling.budget import check_sampling_memory

__all__ = ["check_request", "as_int", "check_device", "SEED_MAX"]

SEED_MAX = 2**64 - 1


def as_int(value: Any, name: str) -> int:
    """``value`` as a Python int (numpy integers accepted; bools, floats and text refused).

    Raises:
        InterventionError: naming ``name`` and the value.
    """
    if isinstance(value, bool):
        raise InterventionError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise InterventionError(f"{name} must be an integer, got {value!r}") from None


def check_device(device: Any) -> torch.device:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N``, resolved (``auto`` -> CUDA when available).

    Raises:
        InterventionError: an unknown device string, or CUDA requested but unavailable.
    """
    text = str(device)
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise InterventionError(
            f"unknown device {text!r}; expected auto, cpu, cuda or cuda:N"
        ) from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise InterventionError(f"unsupported device {text!r}; expected auto, cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise InterventionError(f"device {text!r} requested but CUDA is not available")
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise InterventionError(
            f"device {text!r}: only {torch.cuda.device_count()} CUDA device(s) are visible"
        )
    return dev


def check_request(
    pfsa: Any,
    num_strings: Any,
    *,
    seed: Any,
    intervention: str = "none",
    event: Any = None,
    count: Any = None,
    device: Any = "cpu",
    max_tries: Any = None,
) -> tuple[int, int, int | None]:
    """Validate a :func:`~cfl_lightning.sampling.sample_corpus` request before any work.

    Returns:
        ``(num_strings, seed, count)`` as Python ints (``count`` may be None).

    Raises:
        InterventionError: a wrong type, a seed outside ``0 .. 2**64 - 1``, a non-positive
            ``num_strings``, an unknown device.
        EventError: an event that is neither text nor an :class:`Event`.
        SizeError: the request would not fit in memory (the message gives the estimate).
    """
    if not isinstance(pfsa, PFSA):
        raise InterventionError(
            f"expected a PFSA (e.g. PFSA.from_json(path)), got {type(pfsa).__name__}"
        )
    k = as_int(num_strings, "num_strings")
    if k < 1:
        raise InterventionError(f"num_strings must be a positive integer, got {k}")
    seed = as_int(seed, "seed")
    if not 0 <= seed <= SEED_MAX:
        raise InterventionError(f"seed must be in 0..2**64-1, got {seed}")
    count = None if count is None else as_int(count, "count")
    if max_tries is not None:
        as_int(max_tries, "max_tries")
    if event is not None and not isinstance(event, (str, Event)):
        raise EventError(f"event must be text such as 'state:NAME' or an Event, got {event!r}")
    dev = check_device(device)
    if isinstance(intervention, str) and (count is None or count >= 0):
        known = intervention in ("none", "exact", "at_least", "at_least_once")
        ev = Event.parse(event) if isinstance(event, str) else event
        check_sampling_memory(
            pfsa, k, intervention=intervention if known else "none", event=ev,
            count=count if known else None, device=dev,
        )
    return k, seed, count
