"""A sampling request checked once, at the edge: types, ranges, device, intervention, memory.

:func:`check_request` is the keyword edge of :func:`~cfl_lightning.sampling.sample_corpus` and
of the ``sample`` command: it accepts numpy integers (and any ``__index__`` type) for counts and
seeds, turns wrong types and unknown devices into :class:`~cfl_lightning.errors.CflError`
subclasses (never ``AttributeError`` or torch's ``RuntimeError``), parses and validates the
:class:`~cfl_lightning.sampling.Intervention` once, and refuses requests too large for memory
(:func:`~cfl_lightning.sampling.budget.check_corpora_memory`). It returns a
:class:`SamplingRequest`, the value that :func:`~cfl_lightning.sampling.sampler.draw` takes.

:func:`resolve_device` is the package's one device resolver (the sampler, the ``sample``
command and :class:`~cfl_lightning.data.PFADataModule` call it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from cfl_lightning.automata.protocol import Automaton
from cfl_lightning.errors import InterventionError
from cfl_lightning.sampling.budget import MemoryEstimate, check_corpora_memory
from cfl_lightning.sampling.intervention import Intervention, as_int

__all__ = ["SamplingRequest", "check_request", "check_arguments", "resolve_device", "METHODS", "SEED_MAX"]

SEED_MAX = 2**64 - 1
METHODS = ("binning", "rejection")


def resolve_device(device: Any) -> torch.device:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N``, resolved (``auto`` -> CUDA when available).

    Args:
        device: text or a :class:`torch.device`.

    Raises:
        InterventionError: an unknown or unsupported device, CUDA requested but unavailable, or
            a CUDA index beyond the visible devices.
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


@dataclass(frozen=True)
class SamplingRequest:
    """What to sample, checked: the value :func:`~cfl_lightning.sampling.sampler.draw` takes.

    Built by :func:`check_request` (from user input), or directly by a caller that has checked
    its parts itself (the data module validates its interventions once, on construction).

    Attributes:
        num_strings: ``K`` (positive).
        seed: seed of every random draw, in ``0 .. 2**64 - 1``.
        intervention: the condition, validated against the automaton and ``K``.
        method: ``binning`` (exact sampler) or ``rejection`` (baseline).
        device: the resolved sampling device.
        max_tries: rejection only: corpora to draw before giving up (None: 10,000).
        estimate: the memory estimate the request was checked against (None if not checked).
    """

    num_strings: int
    seed: int
    intervention: Intervention = Intervention()
    method: str = "binning"
    device: torch.device = torch.device("cpu")
    max_tries: int | None = None
    estimate: MemoryEstimate | None = field(default=None, compare=False)


def check_arguments(
    num_strings: Any,
    *,
    seed: Any,
    intervention: Any = "none",
    event: Any = None,
    count: Any = None,
    method: Any = "binning",
    device: Any = "cpu",
    max_tries: Any = None,
    omit_count: str | None = None,
) -> SamplingRequest:
    """The checks of :func:`check_request` that need no automaton (cheap: run them first).

    ``intervention`` may be an :class:`~cfl_lightning.sampling.Intervention` already created
    (then ``event`` and ``count`` are its own and must be None): it is not parsed again.

    Returns:
        a :class:`SamplingRequest` whose intervention is not yet validated on an automaton.

    Raises:
        InterventionError, EventError: as :func:`check_request`.
    """
    k = as_int(num_strings, "num_strings")
    if k < 1:
        raise InterventionError(f"num_strings must be a positive integer, got {k}")
    seed = as_int(seed, "seed")
    if not 0 <= seed <= SEED_MAX:
        raise InterventionError(f"seed must be in 0..2**64-1, got {seed}")
    if max_tries is not None:
        max_tries = as_int(max_tries, "max_tries")
    dev = resolve_device(device)
    if isinstance(intervention, Intervention):
        if event is not None or count is not None:
            raise InterventionError("give the event and count inside the Intervention, not beside")
        spec = intervention
    else:
        spec = (Intervention.create(intervention, event, count) if omit_count is None
                else Intervention.create(intervention, event, count, omit_count=omit_count))
    if method not in METHODS:
        raise InterventionError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    return SamplingRequest(k, seed, spec, method, dev, max_tries)


def check_request(
    pfsa: Any,
    num_strings: Any,
    *,
    seed: Any,
    intervention: Any = "none",
    event: Any = None,
    count: Any = None,
    method: Any = "binning",
    device: Any = "cpu",
    max_tries: Any = None,
    write: bool = False,
    what: str = "sampling",
    omit_count: str | None = None,
    force: bool = False,
    insist: str = "force=True",
) -> SamplingRequest:
    """Check a :func:`~cfl_lightning.sampling.sample_corpus` request before any work.

    The arguments are those of :func:`~cfl_lightning.sampling.sample_corpus`; ``write`` and
    ``what`` go to the memory and time check (writing the corpus as JSON Lines; the message's
    subject), as do ``force`` (run a request whose estimated time or memory is far beyond its
    size) and ``insist`` (how the caller sets ``force``, for the message);
    ``omit_count`` to :meth:`~cfl_lightning.sampling.Intervention.create` (how the caller leaves
    the count out, for its message).

    Returns:
        the :class:`SamplingRequest`, with Python ints, the resolved device and the validated
        :class:`~cfl_lightning.sampling.Intervention`.

    Raises:
        InterventionError: a wrong type, a seed outside ``0 .. 2**64 - 1``, a non-positive
            ``num_strings``, an unknown device or method, an ill-formed or impossible target.
        EventError: a malformed event, or one naming an unknown state or symbol.
        SizeError: the request would not fit in memory, or its estimated time or memory is
            far beyond its size and ``force`` is not set (the message gives the estimate).
    """
    if not isinstance(pfsa, Automaton):
        raise InterventionError(
            f"expected an automaton (e.g. load_automaton(path)), got {type(pfsa).__name__}"
        )
    plain = check_arguments(
        num_strings, seed=seed, intervention=intervention, event=event, count=count,
        method=method, device=device, max_tries=max_tries, omit_count=omit_count,
    )
    k, seed, spec, dev, max_tries = (
        plain.num_strings, plain.seed, plain.intervention, plain.device, plain.max_tries
    )
    spec.validate(pfsa, k)  # names, sizes and feasibility (cheap: before the estimate)
    estimate = check_corpora_memory(
        pfsa, [(k, spec)], device=dev, write=write, what=what, method=method, force=force,
        insist=insist,
    )
    if method == "binning" and spec.constrained and spec.spec.sampler is None:
        raise InterventionError(
            f"intervention {spec.kind!r} has no exact sampler (its registry entry's sampler is "
            "unset); use method rejection"
        )
    return SamplingRequest(k, seed, spec, method, dev, max_tries, estimate)
