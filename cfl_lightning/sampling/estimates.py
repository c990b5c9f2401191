r"""Time and memory of a sampling request, estimated per automaton kind before any work.

One function per automaton kind, ``estimate(automaton, request) -> Estimate``, named by the
kind's registry entry (:class:`~cfl_lightning.kinds.automata.AutomatonKind` ``estimate``; a kind
without one gets the PFSA's law). ``request`` is anything with ``num_strings``, ``intervention`` (an
:class:`~cfl_lightning.sampling.Intervention`) and optionally ``method``: a
:class:`~cfl_lightning.sampling.request.SamplingRequest` or a :class:`CorpusRequest`.

The cost law (CPU seconds on one thread; constants measured by ``benchmarks/bench_estimates.py``,
log in docs/benchmarks/cpu_bench_estimates.log). With ``K`` strings, expected length ``l``, the
event's expected count per string ``mu`` and a total target ``N`` (``exact`` / ``at_least``),
strings stretch by ``s = max(1, N / (K mu))``; the corpus holds ``T = K l s`` symbols and the
walk, which advances every string one symbol per step, runs about ``S = l s (1 + ln K)`` steps
(the longest string). Its per-string budgets reach ``B = (N / K)(1 + ln K)``.

* PFSA: ``t = a_step S + a_tok T + a_bin (N + 1) Q``.
* Pushdown automaton: ``t = a_step S + a_tok T`` unconstrained; with a count target the count
  law to ``W = N + 1`` coefficients costs ``a_law W + b_law W^2 u`` (``u = max(1, G^2 Q^3 / 8)``,
  the work of one product of coefficients), and the walk ``S (a_walk + b_walk K B Q)`` when its
  excursion rows are formed per step (more than :data:`TABLE_MAX` entries), ``a_walk S`` when
  tabulated.

:func:`check_estimate` refuses a request whose estimate is *far beyond its size*: more than
:data:`FAR` times the same strings drawn without the intervention, and above
``CFL_LIGHTNING_TIME_LIMIT`` seconds (default 60) or :data:`FAR_BYTES` of memory. ``force``
(the ``sample`` command's ``--force``) or ``CFL_LIGHTNING_TIME_LIMIT=off`` runs it anyway.
Memory that does not fit at all is refused by :func:`~cfl_lightning.sampling.budget.check_memory`
whatever ``force`` says (``CFL_LIGHTNING_MEMORY_LIMIT`` overrides that limit).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from cfl_lightning.automata.protocol import Automaton, expected_event_count
from cfl_lightning.errors import SizeError
from cfl_lightning.memory import format_bytes
from cfl_lightning.sampling.intervention import Intervention

__all__ = [
    "CorpusRequest",
    "Estimate",
    "estimate_request",
    "check_estimate",
    "format_seconds",
    "time_limit",
    "TIME_LIMIT_ENV",
    "DEFAULT_TIME_LIMIT",
    "FAR",
    "FAR_BYTES",
    "TABLE_MAX",
]

TIME_LIMIT_ENV = "CFL_LIGHTNING_TIME_LIMIT"
DEFAULT_TIME_LIMIT = 60.0  # seconds: below this nothing is refused for its time
FAR = 100.0  # times the same strings without the intervention: "far beyond its size"
FAR_BYTES = 1 << 30  # memory below this is never "far beyond" (it fits or check_memory says)
TABLE_MAX = 1 << 22  # the pushdown walk's tabulated excursion rows (pushdown_conditioned)

# Cost constants (CPU seconds), from benchmarks/bench_estimates.py on the project's CPU machine.
PFSA_STEP, PFSA_TOKEN, PFSA_BIN = 1.2e-4, 2.0e-7, 2.0e-8
PDA_STEP, PDA_TOKEN = 2.5e-4, 1.0e-6
PDA_LAW_LINEAR, PDA_LAW_QUADRATIC = 7e-5, 1.8e-8
PDA_WALK_STEP, PDA_WALK_ROW = 2.5e-4, 1.4e-8


@dataclass(frozen=True)
class CorpusRequest:
    """The parts of a request an estimate reads (``K`` and the intervention)."""

    num_strings: int
    intervention: Intervention = Intervention()
    method: str = "binning"


@dataclass(frozen=True)
class Estimate:
    """A request's estimated cost beside the same strings' cost without the intervention.

    The corpus's memory is :func:`~cfl_lightning.sampling.budget.estimate_sampling`'s (the one
    memory estimate, common to every kind); a kind adds what only it holds (``extra_bytes``).

    Attributes:
        seconds: CPU seconds (one thread).
        natural_seconds: the same ``K`` strings drawn without the intervention.
        natural_count: ``K x E[count]`` of the intervention's event (None without one).
        extra_bytes: the kind's own peak memory besides the corpus and the bins (a pushdown
            automaton's count series and walk tables).
    """

    seconds: float
    natural_seconds: float
    natural_count: float | None = None
    extra_bytes: float = 0.0

    @classmethod
    def combine(cls, parts: list[Estimate]) -> Estimate:
        """Corpora drawn one after the other (a data module's splits): times add up; the
        kind's own memory is transient, so the largest; the first natural count."""
        counts = [p.natural_count for p in parts if p.natural_count is not None]
        return cls(
            sum(p.seconds for p in parts),
            sum(p.natural_seconds for p in parts),
            counts[0] if counts else None,
            max((p.extra_bytes for p in parts), default=0.0),
        )


def format_seconds(seconds: float) -> str:
    """``0.4 s``, ``42 s``, ``16 min``, ``3.1 h``, ``2.5 days``."""
    if not math.isfinite(seconds):
        return "forever"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.1f} days"


class _Shape:
    """The quantities of the cost law for one automaton and request."""

    def __init__(self, automaton: Automaton, request: Any) -> None:
        spec: Intervention = request.intervention
        self.k = int(request.num_strings)
        self.length = max(float(automaton.expected_length()), 1e-9)
        self.mu = None if spec.event is None else expected_event_count(automaton, spec.event)
        self.n = 0
        stretch = 1.0
        binning = getattr(request, "method", "binning") == "binning"
        if spec.constrained and spec.count is not None and binning and spec.unit == "occurrences":
            self.n = int(spec.count)
            if self.mu is not None and self.mu > 0:
                stretch = max(1.0, self.n / (self.k * self.mu))
        spread = 1.0 + math.log(max(self.k, 1))
        self.tokens = self.k * self.length * stretch
        self.steps = self.length * stretch * spread
        self.natural_steps = self.length * spread
        self.budget = self.n / self.k * spread + 1

    @property
    def natural_count(self) -> float | None:
        return None if self.mu is None else self.k * self.mu


def pfsa_estimate(automaton: Automaton, request: Any) -> Estimate:
    """A PFSA: the walk's steps and symbols, and the backward bins ``[N + 1, Q]``."""
    shape = _Shape(automaton, request)
    q = len(automaton.class_names)
    seconds = PFSA_STEP * shape.steps + PFSA_TOKEN * shape.tokens + PFSA_BIN * (shape.n + 1) * q
    natural = PFSA_STEP * shape.natural_steps + PFSA_TOKEN * shape.k * shape.length
    return Estimate(seconds, natural, shape.natural_count)


def pushdown_estimate(automaton: Automaton, request: Any) -> Estimate:
    """A pushdown automaton: the count law's series to ``N``, the walk tables, the walk."""
    shape = _Shape(automaton, request)
    q, g = int(getattr(automaton, "num_states")), int(getattr(automaton, "num_stack"))
    natural = PDA_STEP * shape.natural_steps + PDA_TOKEN * shape.k * shape.length
    seconds, extra = PDA_STEP * shape.steps + PDA_TOKEN * shape.tokens, 0.0
    if shape.n:
        w, b = shape.n + 1, shape.budget
        unit = max(1.0, g * g * q**3 / 8)
        law = PDA_LAW_LINEAR * w + PDA_LAW_QUADRATIC * w * w * unit
        tabulated = 2 * (g + 1) * max(g, 1) * q**3 * (b + 1) ** 2 <= TABLE_MAX
        per_step = PDA_WALK_STEP + (0 if tabulated else PDA_WALK_ROW * shape.k * b * q)
        seconds = law + shape.steps * per_step + PDA_TOKEN * shape.tokens
        coefficient = (g + 1) * q * q * 8  # one coefficient of the series, float64
        tables = 2 * (b + 1) * (g + 1) * (g + 1) * q * q * 8  # the walk's log tables
        extra = 3 * w * coefficient + tables + (0 if not tabulated else TABLE_MAX * 8)
    return Estimate(seconds, natural, shape.natural_count, extra)


def estimate_request(automaton: Automaton, request: Any) -> Estimate:
    """The automaton kind's estimate of ``request`` (a kind without one: the PFSA's law).

    Args:
        automaton: any kind.
        request: ``num_strings``, ``intervention`` and optionally ``method`` and ``write``.
    """
    from cfl_lightning.kinds.automata import automaton_kind
    from cfl_lightning.kinds.registry import call

    entry = automaton_kind(automaton.kind)
    return call(entry.estimate or pfsa_estimate, automaton, request)


def time_limit() -> float | None:
    """Seconds below which no request is refused for its time (None: never refused)."""
    text = os.environ.get(TIME_LIMIT_ENV, "").strip().lower()
    if not text:
        return DEFAULT_TIME_LIMIT
    if text in ("0", "off", "none", "inf"):
        return None
    try:
        return float(text)
    except ValueError:
        raise SizeError(f"{TIME_LIMIT_ENV}={text!r}: expected seconds such as 600, or off")


def _subject(request: Any, estimate: Estimate) -> str:
    spec: Intervention = request.intervention
    parts = [f"{request.num_strings:,} strings"]
    if spec.constrained and spec.event is not None and spec.count is not None:
        parts.append(f"{spec.kind} count {spec.count:,} of {spec.event}")
    if estimate.natural_count is not None:
        parts.append(
            f"natural count ~{estimate.natural_count:,.1f} in {request.num_strings:,} strings"
        )
    return "; ".join(parts)


def check_estimate(
    estimate: Estimate,
    request: Any,
    *,
    memory_bytes: float,
    natural_bytes: float,
    force: bool = False,
    what: str = "sampling",
    insist: str = "force=True",
) -> None:
    """Refuse a request whose estimated time or memory is far beyond its size.

    Far beyond: more than :data:`FAR` times the same strings without the intervention, and
    above the time limit (:func:`time_limit`) or :data:`FAR_BYTES`.

    Args:
        estimate: the request's :class:`Estimate`.
        request: what it estimates (``num_strings``, ``intervention``; for the message).
        memory_bytes: the request's peak memory (corpus, bins and the kind's own).
        natural_bytes: the same strings' without the intervention.
        force: run it anyway.
        what: the message's subject.
        insist: how the caller insists, for the message (``--force`` on the command line).

    Raises:
        SizeError: one line with the estimate, the natural count and how to insist.
    """
    limit = time_limit()
    if force:
        return
    slow = limit is not None and estimate.seconds > max(limit, FAR * estimate.natural_seconds)
    big = memory_bytes > max(FAR_BYTES, FAR * natural_bytes)
    if not (slow or big):
        return
    raise SizeError(
        f"{what} would take ~{format_seconds(estimate.seconds)} and "
        f"~{format_bytes(memory_bytes)} ({_subject(request, estimate)}; the same strings "
        f"without the intervention: ~{format_seconds(estimate.natural_seconds)}); refused "
        f"before starting: lower the count, or use {insist} to run it anyway"
    )
