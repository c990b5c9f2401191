"""Memory estimates made before anything large is allocated, and the refusal when they do not fit.

A corpus of ``K`` strings costs about ``K x E[length]`` tokens; the sampler's per-step records,
the flat corpus and writing it as JSON Lines each cost a few int64 (or Python list slots) per
token, and the walk keeps a few small tensors per step (one step per symbol of the longest
string, which dominates for a few very long strings). The exact samplers also hold backward bins ``[N + 1, Q]`` float64 for a count ``N``. Under
an intervention whose count ``N`` exceeds the natural ``K x E[count]``, strings get longer in
proportion. :func:`estimate_sampling` turns this into bytes; :func:`check_memory` compares them
with the memory available (``MemAvailable``, the cgroup limit, or free CUDA memory) and raises
:class:`~cfl_lightning.errors.SizeError` with the estimate in one line.

``CFL_LIGHTNING_MEMORY_LIMIT`` (bytes, or with a ``K``/``M``/``G``/``T`` suffix) overrides the
memory available; ``0`` or ``off`` turns the check off.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import torch

from cfl_lightning.automata.events import Event
from cfl_lightning.automata.protocol import Automaton, expected_event_count
from cfl_lightning.errors import SizeError
from cfl_lightning.memory import MEMORY_LIMIT_ENV, format_bytes, host_available, limit_from_env
from cfl_lightning.kinds.interventions import intervention_kind
from cfl_lightning.sampling.estimates import CorpusRequest, Estimate, check_estimate, estimate_request

if TYPE_CHECKING:
    from cfl_lightning.sampling.intervention import Intervention

__all__ = [
    "MemoryEstimate",
    "estimate_sampling",
    "available_memory",
    "check_memory",
    "check_sampling_memory",
    "check_corpora_memory",
    "check_bytes",
    "automaton_bytes",
    "format_bytes",
    "LongStringWarning",
    "MEMORY_LIMIT_ENV",
    "LONG_STRING_WARNING",
]

LONG_STRING_WARNING = 1_000.0  # expected symbols per string above which a warning is given
# Bytes per token / per string, measured on the CPU sampler (peak RSS over the corpus size):
SAMPLE_PER_TOKEN = 40  # per-step records, the flat corpus and the assembly temporaries
SAMPLE_PER_STRING = 96  # ids, states, budgets, counts, offsets, uniforms
WRITE_PER_TOKEN = 16  # Python lists of the corpus while writing JSON Lines
WRITE_PER_STRING = 120
STEP_BYTES = 3072  # per step of the walk (one per symbol of the longest string): its records


class LongStringWarning(UserWarning):
    """The automaton's expected string length is extreme (sampling and training will be slow)."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a request is expected to need at its peak.

    Attributes:
        num_strings: ``K``.
        expected_length: expected symbols per string (unconstrained).
        expected_tokens: expected symbols in the whole corpus (under the intervention).
        bins_bytes: backward bins and count laws (exact samplers; 0 without an intervention).
        corpus_bytes: sampling the corpus and holding it.
        extra_bytes: what the caller added (e.g. batch tensors of a data module).
        seconds: estimated CPU seconds (:mod:`~cfl_lightning.sampling.estimates`; None when
            not estimated).
    """

    num_strings: int
    expected_length: float
    expected_tokens: float
    bins_bytes: int
    corpus_bytes: int
    extra_bytes: int = 0
    seconds: float | None = field(default=None, compare=False)

    @property
    def total(self) -> int:
        return self.bins_bytes + self.corpus_bytes + self.extra_bytes

    def describe(self) -> str:
        """``"~3.1 GB (1,000,000 strings x 41.2 expected symbols; bins 12 MB)"``."""
        parts = [f"{self.num_strings:,} strings x {self.expected_length:,.1f} expected symbols"]
        if self.expected_tokens > 1.5 * self.num_strings * max(self.expected_length, 1e-300):
            parts.append(f"{self.expected_tokens:,.0f} symbols under the intervention")
        if self.bins_bytes:
            parts.append(f"bins {format_bytes(self.bins_bytes)}")
        if self.extra_bytes:
            parts.append(f"other {format_bytes(self.extra_bytes)}")
        return f"~{format_bytes(self.total)} ({'; '.join(parts)})"

    @classmethod
    def combine(cls, parts: Sequence[MemoryEstimate]) -> MemoryEstimate:
        """Several corpora held together: sizes add up; the bins are transient, so the largest.

        The expected length is the first part's (every part samples the same automaton).
        """
        return cls(
            num_strings=sum(p.num_strings for p in parts),
            expected_length=parts[0].expected_length,
            expected_tokens=sum(p.expected_tokens for p in parts),
            bins_bytes=max(p.bins_bytes for p in parts),
            corpus_bytes=sum(p.corpus_bytes for p in parts),
            extra_bytes=sum(p.extra_bytes for p in parts),
            seconds=None if any(p.seconds is None for p in parts)
            else sum(p.seconds or 0.0 for p in parts),
        )


def estimate_sampling(
    pfsa: Automaton,
    num_strings: int,
    *,
    intervention: str = "none",
    event: str | Event | None = None,
    count: int | None = None,
    write: bool = False,
    extra_bytes_per_token: float = 0.0,
) -> MemoryEstimate:
    """Estimate the peak memory of :func:`~cfl_lightning.sampling.sample_corpus` (and more).

    Args:
        pfsa: the automaton.
        num_strings: ``K``.
        intervention: a registered intervention kind (``none``, ``exact``, ...); its
            ``memory`` hook estimates its corpus and bins.
        event: the intervened (or recorded) event, as text or :class:`Event`.
        count: ``N`` (or ``M`` for ``at_least_once``).
        write: include writing the corpus as JSON Lines (the ``sample`` command).
        extra_bytes_per_token: bytes per position the caller keeps besides the corpus, e.g. a
            data module's tokenized tensors (``n + 1`` positions per string of ``n`` symbols).

    Returns:
        A :class:`MemoryEstimate`; nothing is allocated.
    """
    k = int(num_strings)
    classes = len(pfsa.class_names)  # a PFSA's states; the bins hold one column per class
    check_bytes(
        automaton_bytes(classes, pfsa.num_symbols),
        what=f"solving an automaton with {classes:,} "
        + ("states" if pfsa.class_label == "state" else "position classes"),
    )
    length = pfsa.expected_length()
    tokens, bins = k * length, 0
    hook = intervention_kind(intervention).memory
    if hook is not None and event is not None:  # the kind's own estimate (registry entry)
        def per_string() -> float:  # parsed and solved only when the hook needs it
            ev = Event.parse(event) if isinstance(event, str) else event
            return expected_event_count(pfsa, ev)

        tokens, bins = hook(k, count, classes, per_string, length)
    per_token = SAMPLE_PER_TOKEN + (WRITE_PER_TOKEN if write else 0) + extra_bytes_per_token
    per_string = SAMPLE_PER_STRING + (WRITE_PER_STRING if write else 0) + extra_bytes_per_token
    steps = tokens / k * (1 + math.log(k) / 4)  # ~ the longest string: few, long strings cost
    corpus = tokens * per_token + k * per_string + steps * STEP_BYTES
    return MemoryEstimate(k, length, tokens, bins, int(min(corpus, 2**62)))


def available_memory(device: str | torch.device = "cpu") -> int | None:
    """Bytes available on ``device`` (``-1`` when the check is turned off; None if unknown).

    The host: the smaller of ``MemAvailable`` and the cgroup's limit minus its usage. CUDA: the
    free memory reported by the driver. ``CFL_LIGHTNING_MEMORY_LIMIT`` overrides both.
    """
    override = limit_from_env()
    if override is not None:
        return override
    dev = torch.device(device)
    if dev.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(dev)[0])
        except (RuntimeError, AssertionError):
            return None
    return host_available()


def automaton_bytes(num_states: int, num_symbols: int) -> int:
    """Peak bytes of building, validating and solving an automaton of this size.

    The dense ``[Q, Q]`` float64 linear solves (expected visits, lengths) and the per-arc Python
    lists of validation and JSON dominate.
    """
    q, s = int(num_states), int(num_symbols)
    return 3 * 8 * q * q + 200 * q * s


def check_bytes(need: int, *, what: str, device: str | torch.device = "cpu") -> None:
    """Raise :class:`SizeError` when ``need`` bytes exceed the memory available on ``device``."""
    have = available_memory(device)
    if have is not None and have >= 0 and need > have:
        raise SizeError(
            f"{what} needs ~{format_bytes(need)}, more than the {format_bytes(have)} of memory "
            f"available ({MEMORY_LIMIT_ENV} overrides the limit)"
        )


def check_memory(
    estimate: MemoryEstimate, device: str | torch.device = "cpu", *, what: str = "sampling"
) -> None:
    """Raise :class:`SizeError` when ``estimate`` exceeds the memory available.

    On a CUDA device the bins and the sampling run there, and the corpus comes back to the host:
    both are checked.
    """
    dev = torch.device(device)
    checks = [(estimate.total, "cpu")]
    if dev.type == "cuda":
        device_bytes = estimate.bins_bytes + estimate.corpus_bytes
        checks = [(device_bytes, dev), (estimate.corpus_bytes, "cpu")]
    for need, where in checks:
        have = available_memory(where)
        if have is not None and have >= 0 and need > have:
            place = "GPU memory" if torch.device(where).type == "cuda" else "memory"
            raise SizeError(
                f"{what} needs {estimate.describe()}, more than the {format_bytes(have)} of "
                f"{place} available; use fewer strings or a smaller count "
                f"({MEMORY_LIMIT_ENV} overrides the limit)"
            )


def check_sampling_memory(
    pfsa: Automaton,
    num_strings: int,
    *,
    intervention: str = "none",
    event: str | Event | None = None,
    count: int | None = None,
    device: str | torch.device = "cpu",
    write: bool = False,
    extra_bytes_per_token: float = 0.0,
    what: str = "sampling",
) -> MemoryEstimate:
    """:func:`estimate_sampling`, warn on extreme lengths, then :func:`check_memory`.

    The keyword form of :func:`check_corpora_memory` (one corpus, the intervention as text).

    Raises:
        SizeError: the estimate exceeds the memory available.

    Warns:
        LongStringWarning: the expected string length exceeds ``LONG_STRING_WARNING`` symbols.
    """
    estimate = estimate_sampling(
        pfsa, num_strings, intervention=intervention, event=event, count=count, write=write,
        extra_bytes_per_token=extra_bytes_per_token,
    )
    return _refuse_or_warn(estimate, device, what)


def check_corpora_memory(
    pfsa: Automaton,
    corpora: Sequence[tuple[int, Intervention]],
    *,
    device: str | torch.device = "cpu",
    write: bool = False,
    extra_bytes_per_token: float = 0.0,
    what: str = "sampling",
    method: str = "binning",
    force: bool = False,
    insist: str = "force=True",
) -> MemoryEstimate:
    """The one memory (and time) check before sampling: every entry point calls it once.

    :func:`~cfl_lightning.sampling.sample_corpus` and the ``sample`` command check their one
    corpus; a data module checks all its splits together (they are all kept, with
    ``extra_bytes_per_token`` for its tensors). The estimates of the corpora are combined
    (:meth:`MemoryEstimate.combine`), a :class:`LongStringWarning` is given for extreme lengths,
    and :func:`check_memory` refuses what does not fit.

    Args:
        pfsa: the automaton.
        corpora: ``(num_strings, intervention)`` of each corpus; empty ones (``0``) are skipped.
        device: where the sampling runs.
        write: include writing the corpus as JSON Lines (the ``sample`` command).
        extra_bytes_per_token: bytes per position the caller keeps besides the corpus.
        what: the subject of the refusal's message.
        method: ``binning`` or ``rejection`` (the time law is the exact sampler's).
        force: run a request whose estimated time or memory is far beyond its size
            (:func:`~cfl_lightning.sampling.estimates.check_estimate`); memory that does not
            fit at all is refused all the same.
        insist: how the caller sets ``force``, for the message (``--force``).

    Returns:
        the combined :class:`MemoryEstimate`, with the estimated CPU seconds.

    Raises:
        SizeError: the estimate exceeds the memory available, or the request's estimated time
            or memory is far beyond its size (without ``force``).

    Warns:
        LongStringWarning: the expected string length exceeds ``LONG_STRING_WARNING`` symbols.
    """
    parts, costs = [], []
    for k, spec in corpora:
        if not k:
            continue
        memory = estimate_sampling(
            pfsa, k, intervention=spec.kind, event=spec.event, count=spec.count, write=write,
            extra_bytes_per_token=extra_bytes_per_token,
        )
        cost = estimate_request(pfsa, CorpusRequest(k, spec, method))
        bins = int(min(memory.bins_bytes + cost.extra_bytes, 2**62))
        parts.append(replace(memory, bins_bytes=bins, seconds=cost.seconds))
        costs.append((cost, k, spec))
    estimate = _refuse_or_warn(MemoryEstimate.combine(parts), device, what)
    if costs:
        _, k, spec = max(costs, key=lambda part: part[0].seconds)  # the message's subject
        natural = sum(
            p.corpus_bytes * min(1.0, p.num_strings * p.expected_length / max(p.expected_tokens, 1))
            for p in parts
        )
        check_estimate(
            Estimate.combine([c for c, _, _ in costs]), CorpusRequest(k, spec),
            memory_bytes=estimate.total, natural_bytes=natural, force=force, what=what,
            insist=insist,
        )
    return estimate


def _refuse_or_warn(
    estimate: MemoryEstimate, device: str | torch.device, what: str
) -> MemoryEstimate:
    if estimate.expected_length > LONG_STRING_WARNING:
        warnings.warn(
            f"the automaton's expected string length is {estimate.expected_length:,.0f} symbols; "
            "sampling and training will be slow",
            LongStringWarning,
            stacklevel=4,
        )
    check_memory(estimate, device, what=what)
    return estimate
