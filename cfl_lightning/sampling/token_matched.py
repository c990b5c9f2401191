r"""Token-matched interventions: exactly ``N`` occurrences in a corpus of about ``T`` symbols.

An exact-count corpus of ``K`` strings grows with ``N`` (the strings stretch to hold the
occurrences). A *token-matched* corpus fixes its total instead: it holds ``N`` occurrences
(``exact``; at least ``N`` under ``at_least``) and ``T`` symbols within 1% (EOS excluded,
:func:`token_window`), and the number of strings ``K`` is chosen to make that likely.

The law is exact, by rejection on top of the exact sampler: for a chosen ``K``, corpora are
drawn from the automaton conditioned on ``(K, N)`` (the per-string split
:func:`~cfl_lightning.sampling.counts.split_exact`, then generation conditioned on each string's
count, both from the automaton's sampler backend, so every kind behind the seam works the same
way) and the first whose total ``L`` lies in the window is kept. Given the kept ``K`` and ``L``,
the corpus is distributed as ``K`` i.i.d. strings of the automaton conditioned on ``N`` and on
``L``, whatever the choice of ``K`` was, because ``K`` is chosen only from draws that are never
kept (:func:`draw_in_window` draws at a fixed ``K``).

Choosing ``K`` (:class:`_Model`): a string's length is about affine in its count,
``l ~ a + b n``, so a corpus of ``K`` strings holding ``N`` has ``L ~ a K + b N``. A pilot of
:data:`PILOT_STRINGS` exact-count strings at the target's ratio ``N / K`` fits ``a`` and ``b``
by least squares; each rejected batch then corrects ``a`` by its mean residual per string, and
``K`` is solved again. Everything is drawn from one generator seeded by ``seed``: the same
arguments give the same ``K`` and the same corpus.

Bounds: at most ``max_tries`` corpora (default :data:`DEFAULT_TRIES`) and about
``20 T + 2,000,000`` symbols drawn in all; then :class:`~cfl_lightning.errors.
RejectionExhaustedError` says what was drawn. A window the automaton cannot reach with any
``K`` (``T`` below what ``N`` occurrences need) is refused before the attempts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from cfl_lightning.automata.events import Event
from cfl_lightning.automata.protocol import Automaton, expected_event_count
from cfl_lightning.errors import InterventionError, RejectionExhaustedError
from cfl_lightning.progress import Progress
from cfl_lightning.sampling.backend import EventCounts, backend_for
from cfl_lightning.sampling.budget import check_corpora_memory
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.counts import split_at_least, split_exact
from cfl_lightning.sampling.intervention import Intervention, as_int
from cfl_lightning.sampling.request import SEED_MAX, resolve_device

__all__ = [
    "TokenMatched",
    "sample_token_matched",
    "draw_in_window",
    "check_token_kind",
    "token_window",
    "TOKEN_KINDS",
    "TOLERANCE",
    "PILOT_STRINGS",
    "DEFAULT_TRIES",
    "DENSE",
]

#: the relative tolerance of the corpus total around ``T``
TOLERANCE = 0.01
#: the intervention kinds that take a token target
TOKEN_KINDS = ("exact", "at_least")
#: strings of the pilot that fits the length model (at most ``K``)
PILOT_STRINGS = 5_000
#: a target is refused when it needs strings with more than this many times the natural
#: occurrences per string (a window far in the tail: rejection would be slow, the corpus odd)
DENSE = 20
#: corpora tried before giving up (default of ``max_tries``)
DEFAULT_TRIES = 1_000
_PILOT_COUNT = 10_000  # occurrences in a pilot, at most (or N, if more)
_BATCH_TOKENS = 200_000  # small corpora are tried this many symbols at a time
_DRAWN_PER_TARGET, _DRAWN_FLOOR = 20, 2_000_000  # symbols drawn in all: 20 T + 2e6 at most


def token_window(tokens: int) -> tuple[int, int]:
    """The accepted totals ``lo .. hi`` of a target ``T``: ``|L - T| <= 1% of T`` (integers)."""
    return -((-99 * tokens) // 100), (101 * tokens) // 100


@dataclass(frozen=True)
class TokenMatched:
    """A token-matched corpus and how it was found.

    Attributes:
        corpus: the ``K`` strings (on the CPU), with per-string ``counts``.
        tokens: the target ``T``.
        window: the accepted totals ``(lo, hi)``.
        tries: corpora drawn (the kept one included; the pilot not).
    """

    corpus: Corpus
    tokens: int
    window: tuple[int, int]
    tries: int

    @property
    def num_strings(self) -> int:
        """``K``, the number of strings chosen."""
        return len(self.corpus)

    @property
    def total(self) -> int:
        """The corpus's realized total of symbols (EOS excluded)."""
        return int(self.corpus.offsets[-1])


def _budgets(counts: EventCounts, kind: str, k: int, n: int, gen: torch.Generator,
             draws: int) -> Tensor:
    """``[draws, K]`` per-string counts of ``draws`` independent corpora (``exact``/``at_least``)."""
    if kind == "exact":
        return split_exact(counts.law_for_total(k, n), k, n, gen, draws=draws)
    return split_at_least(counts.law, k, n, gen, draws=draws)


def _draw_batch(counts: EventCounts, kind: str, k: int, n: int, draws: int,
                gen: torch.Generator, progress: bool) -> tuple[Corpus, Tensor, Tensor]:
    """``draws`` corpora of ``k`` strings in one flat corpus; their totals and occurrences."""
    budgets = _budgets(counts, kind, k, n, gen, draws).reshape(-1)
    bar = Progress(budgets.numel(), "sampling", enabled=None if progress else False)
    corpus = counts.generate(budgets, gen, progress=bar)
    bar.close()
    assert corpus.counts is not None
    totals = corpus.lengths.view(draws, k).sum(1)
    return corpus, totals, corpus.counts.view(draws, k).sum(1)


def _pick(
    corpus: Corpus, k: int, totals: Tensor, window: tuple[int, int]
) -> tuple[Corpus, int] | None:
    """The first of the batch's corpora whose total lies in ``window`` and its index (or None)."""
    ok = torch.nonzero((totals >= window[0]) & (totals <= window[1])).flatten()
    if not ok.numel():
        return None
    i = int(ok[0])
    lo, hi = int(corpus.offsets[i * k]), int(corpus.offsets[(i + 1) * k])
    assert corpus.counts is not None
    kept = Corpus(corpus.tokens[lo:hi].clone(), corpus.offsets[i * k : (i + 1) * k + 1] - lo,
                  corpus.counts[i * k : (i + 1) * k].clone())
    return kept, i


class _Budget:
    """Bounded attempts: corpora tried and symbols drawn, with what was seen (for the message)."""

    def __init__(self, tokens: int, max_tries: int | None) -> None:
        self.max_tries = DEFAULT_TRIES if max_tries is None else as_int(max_tries, "max_tries")
        if self.max_tries < 1:
            raise InterventionError(f"max_tries must be positive, got {self.max_tries}")
        self.max_drawn = _DRAWN_PER_TARGET * tokens + _DRAWN_FLOOR
        self.tries = self.drawn = 0
        self.low, self.high, self.sum = math.inf, -math.inf, 0

    def batch(self, expected_total: float) -> int:
        """Corpora to draw next, doubling from 1 up to :data:`_BATCH_TOKENS` symbols (0: spent)."""
        if self.tries >= self.max_tries or self.drawn >= self.max_drawn:
            return 0
        size = max(1, min(max(self.tries, 1), int(_BATCH_TOKENS // max(expected_total, 1.0))))
        return min(size, self.max_tries - self.tries)

    def add(self, totals: Tensor) -> None:
        self.tries += totals.numel()
        self.drawn += int(totals.sum())
        self.sum += int(totals.sum())
        self.low, self.high = min(self.low, int(totals.min())), max(self.high, int(totals.max()))

    def exhausted(self, what: str, window: tuple[int, int]) -> RejectionExhaustedError:
        mean = self.sum / max(self.tries, 1)
        return RejectionExhaustedError(
            f"token-matched sampling found no corpus of {what} with {window[0]}..{window[1]} "
            f"symbols in {self.tries} tries ({self.drawn:,} symbols drawn; totals "
            f"{self.low}..{self.high}, mean {mean:.1f}): choose another --tokens, or raise "
            "--max-tries"
        )


def draw_in_window(
    automaton: Automaton,
    num_strings: int,
    intervention: Intervention,
    window: tuple[int, int],
    *,
    generator: torch.Generator,
    max_tries: int | None = None,
) -> tuple[Corpus, int]:
    """``K`` strings conditioned on the intervention and on their total lying in ``window``.

    Rejection over exact-intervention corpora at a fixed ``K``: the kept corpus is distributed
    as the automaton's ``K`` i.i.d. strings conditioned on the intervention and on the total.

    Args:
        automaton: the automaton (on the generator's device), any kind with a sampler backend.
        num_strings: ``K``.
        intervention: an ``exact`` or ``at_least`` intervention, validated for ``K``.
        window: the accepted totals ``(lo, hi)``, symbols without EOS.
        generator: the random stream (on the automaton's device).
        max_tries: corpora to try (default :data:`DEFAULT_TRIES`).

    Returns:
        the corpus (on the automaton's device) and the corpora drawn.

    Raises:
        RejectionExhaustedError: no corpus within the bounds (the message gives the totals).
    """
    assert intervention.event is not None and intervention.count is not None
    counts = backend_for(automaton).event_counts(intervention.event)
    budget = _Budget(window[1], max_tries)
    expected = (window[0] + window[1]) / 2
    while draws := budget.batch(expected):
        corpus, totals, _ = _draw_batch(counts, intervention.kind, num_strings,
                                        intervention.count, draws, generator, False)
        kept = _pick(corpus, num_strings, totals, window)
        if kept is not None:
            return kept[0], budget.tries + kept[1] + 1
        budget.add(totals)
    raise budget.exhausted(f"{num_strings} strings", window)


class _Model:
    """``L(K) ~ (a + c) K + b n(K)``: a corpus's expected total, the rule that chooses ``K``.

    ``a``, ``b``: a string's length ``~ a + b x`` its count, fitted on a pilot; ``c``: the mean
    residual per string over the pilot and the corpora drawn since (so that a small corpus
    barely moves ``K`` and a large one corrects the pilot's error); ``n(K)``: ``N``
    (``exact``), or ``max(N, K E[count])`` (``at_least``).
    """

    def __init__(self, kind: str, count: int, natural: float, k_range: tuple[int, int]) -> None:
        self.kind, self.count, self.natural = kind, count, natural
        self.k_min, self.k_max = k_range
        self.a, self.b = 1.0, 0.0
        self._pilots: list[tuple[Tensor, Tensor]] = []
        self.residual, self.strings = 0.0, 0

    def fit(self, corpus: Corpus) -> None:
        """Least squares of length on count over every pilot's strings so far (a refit adds
        its strings to the earlier pilots': a string's length may not be affine in its count,
        and a line fitted at one ratio ``N / K`` alone sends ``K`` to and fro)."""
        assert corpus.counts is not None
        self._pilots.append((corpus.lengths.double().cpu(), corpus.counts.double().cpu()))
        lengths = torch.cat([p[0] for p in self._pilots])
        counts = torch.cat([p[1] for p in self._pilots])
        spread = float(counts.var(unbiased=False))
        self.b = 0.0 if spread < 1e-12 else float(
            ((lengths - lengths.mean()) * (counts - counts.mean())).mean()
        ) / spread
        self.a = float(lengths.mean()) - self.b * float(counts.mean())
        self.residual, self.strings = 0.0, lengths.numel()  # their residuals sum to 0

    def occurrences(self, k: int) -> float:
        return self.count if self.kind == "exact" else max(self.count, k * self.natural)

    def predict(self, k: int) -> float:
        return (self.a + self.residual / max(self.strings, 1)) * k + self.b * self.occurrences(k)

    def observe(self, k: int, totals: Tensor, occurrences: Tensor) -> None:
        """Correct ``a`` by the residuals of drawn corpora (``[B]`` totals and occurrences)."""
        fitted = self.a * k + self.b * occurrences.double()
        self.residual += float((totals.double() - fitted).sum())
        self.strings += k * totals.numel()

    def solve(self, tokens: int, window: tuple[int, int] | None = None) -> int:
        """The ``K`` in ``k_min .. k_max`` whose prediction is nearest ``tokens``; with a
        ``window``, of the ``K`` whose prediction lies in its central half, the one nearest the
        natural number of strings ``N / E[count]``.

        The prediction is monotone in ``K`` but may fall: where a string's length grows faster
        than linearly in its count (a negative intercept), spreading ``N`` over more strings
        shortens the corpus. It may also be nearly flat: where a string's length is about
        proportional to its count (a Dyck language's brackets), the total hardly depends on how
        ``N`` is spread, and a ``K`` of 1 holding every occurrence predicts the target as well as
        the natural ``K`` does; the natural one is taken (the corpus least unlike the
        automaton's, where rejection is fast), not the first the bisection meets.
        """
        nearest = self._nearest(tokens)
        inside = None
        if window is not None and self.natural > 0:  # the window's central half: a corpus at
            # its edge would miss the window about half the time
            inside = self._inside(((tokens + window[0]) / 2, (tokens + window[1]) / 2))
        if inside is None:
            return nearest
        natural = round(self.occurrences(nearest) / self.natural)
        return min(max(natural, inside[0]), inside[1])

    def _nearest(self, tokens: int) -> int:
        """The ``K`` whose prediction is nearest ``tokens``: of the two around where the
        prediction crosses it (:meth:`_first`)."""
        crossing = self._first(tokens, strict=not self._rising())
        high = min(max(crossing, self.k_min + 1), self.k_max)
        return min((high - 1, high), key=lambda k: abs(self.predict(k) - tokens))

    def _inside(self, window: tuple[float, float]) -> tuple[int, int] | None:
        """The first and last ``K`` whose prediction lies in ``window`` (an interval, since the
        prediction is monotone), or None."""
        near, far = window if self._rising() else window[::-1]  # in the order K meets them
        begin, end = self._first(near), self._first(far, strict=True) - 1
        return (begin, end) if begin <= end else None

    def _rising(self) -> bool:
        return self.predict(self.k_max) >= self.predict(self.k_min)

    def _first(self, bound: float, strict: bool = False) -> int:
        """The smallest ``K`` in ``k_min .. k_max`` whose prediction has reached ``bound`` along
        the slope (rising: ``>= bound``, falling: ``<= bound``; past it with ``strict``), or
        ``k_max + 1``: one bisection, the prediction being monotone."""
        sign = 1 if self._rising() else -1
        low, high = self.k_min, self.k_max + 1
        while low < high:
            mid = (low + high) // 2
            ahead = sign * (self.predict(mid) - bound)
            if ahead > 0 or (ahead == 0 and not strict):
                high = mid
            else:
                low = mid + 1
        return low


def _lattice(counts: EventCounts, kind: str, k: int, n: int, k_min: int) -> tuple[int, int]:
    """``(K, N)`` moved to the nearest pair the per-string counts can make (``exact``).

    ``N`` fixed: ``K`` moves down (then up) until ``N - K low`` is a multiple of the count's
    period and ``K low <= N``. For the pilot, which may change ``N``, the caller scales.
    """
    if kind != "exact":
        return k, n
    law = counts.law_for_total(k, n)
    for step in range(law.period + 1):
        for cand in (k - step, k + step):
            if cand >= k_min and cand * law.low <= n and (n - cand * law.low) % law.period == 0:
                return cand, n
    return k, n  # nothing nearby: the split names the problem


def _pilot(counts: EventCounts, model: _Model, k: int, tokens: int, gen: torch.Generator) -> None:
    """Fit the model on a pilot of at most :data:`PILOT_STRINGS` strings at ``N / K``."""
    per_string = max(tokens / k, 1e-3)
    by_count = k * max(1, _PILOT_COUNT // max(model.count, 1))  # at most max(N, 10,000) in all
    by_tokens = int(max(100_000, tokens / 10) / per_string)
    p = max(1, min(PILOT_STRINGS, max(1_000, 10 * k), by_tokens, by_count))
    n = round(model.count * p / k)
    if model.kind == "exact":
        law = counts.law_for_total(p, n)
        n = min(max(n, p * law.low), p * law.high)
        n = p * law.low + law.period * ((n - p * law.low) // law.period)
    corpus, _, _ = _draw_batch(counts, model.kind, p, n, 1, gen, False)
    model.fit(corpus)


def check_token_kind(kind: Any, tokens: int) -> None:
    """Refuse a token target under a kind other than :data:`TOKEN_KINDS` (one line)."""
    if kind not in TOKEN_KINDS:
        raise InterventionError(
            f"a token target (tokens {tokens}) needs intervention exact or at_least, not "
            f"{kind!r}; for a fixed number of strings give num_strings (--num-strings) instead"
        )


def _check(
    pfsa: Any, tokens: Any, seed: Any, kind: Any, event: Any, count: Any
) -> tuple[int, int, Intervention]:
    """The checked target ``T``, seed and intervention (before any work)."""
    if not isinstance(pfsa, Automaton):
        raise InterventionError(
            f"expected an automaton (e.g. load_automaton(path)), got {type(pfsa).__name__}"
        )
    t = as_int(tokens, "tokens")
    if t < 1:
        raise InterventionError(f"tokens must be a positive integer, got {t}")
    seed = as_int(seed, "seed")
    if not 0 <= seed <= SEED_MAX:
        raise InterventionError(f"seed must be in 0..2**64-1, got {seed}")
    check_token_kind(kind, t)
    return t, seed, Intervention.create(kind, event, count)


def sample_token_matched(
    automaton: Automaton,
    tokens: int,
    *,
    seed: int,
    intervention: str = "exact",
    event: str | Event | None = None,
    count: int | None = None,
    device: str | torch.device = "cpu",
    max_tries: int | None = None,
    progress: bool = False,
    write: bool = False,
    what: str = "sampling",
) -> TokenMatched:
    """A corpus with ``count`` occurrences of ``event`` and ``tokens`` symbols within 1%.

    The number of strings ``K`` is chosen (see the module's docstring); given ``K``, the count
    and the total, the corpus is the automaton's ``K`` i.i.d. strings conditioned on them.

    Args:
        automaton: the automaton (any kind with a sampler backend).
        tokens: ``T``, the target total of symbols (EOS excluded).
        seed: seed of every random draw (same seed and device, same ``K`` and corpus).
        intervention: ``exact`` or ``at_least``.
        event: ``state:NAME``, ``symbol:SYM``, ``transition:SOURCE:SYM`` or an :class:`Event`.
        count: ``N``.
        device: ``cpu``, ``cuda`` or ``auto``.
        max_tries: corpora to try before giving up (default :data:`DEFAULT_TRIES`).
        progress: draw a progress bar on stderr for large corpora (only on a terminal).
        write, what: passed to the memory check (writing JSON Lines; the message's subject).

    Returns:
        the :class:`TokenMatched` (corpus on the CPU, ``K``, the window, the tries).

    Raises:
        InterventionError: bad arguments, another kind, an impossible count, or a target below
            what ``count`` occurrences need.
        EventError: a malformed event or unknown name.
        RejectionExhaustedError: no corpus within the bounds (the message gives the numbers).
        SizeError: the corpus would not fit in memory.
    """
    t, seed, spec = _check(automaton, tokens, seed, intervention, event, count)
    dev = resolve_device(device)
    automaton = automaton.to(dev)
    assert spec.event is not None and spec.count is not None
    counts = backend_for(automaton).event_counts(spec.event)
    bound = counts.max_per_string()
    k_min = max(1, -(-spec.count // bound)) if bound else 1
    spec.validate(automaton, k_min)
    window = token_window(t)
    gen = torch.Generator(device=dev).manual_seed(seed)
    natural_length = max(automaton.expected_length(), 1e-2)
    k_range = (k_min, k_min + math.ceil(10 * t / natural_length))
    model = _Model(spec.kind, spec.count, expected_event_count(automaton, spec.event), k_range)
    k = max(k_min, round(t / natural_length))
    for _ in range(3):  # refit where the first guess was far off
        _pilot(counts, model, k, t, gen)
        k, previous = model.solve(t, window), k
        _refuse_unreachable(model, k, window, spec)  # before a pilot at an extreme K
        if abs(k - previous) <= max(0.2 * previous, 5):
            break
    check_corpora_memory(automaton, [(k, spec)], device=dev, write=write, what=what)
    return _attempts(counts, model, spec, (k, t), window, gen, max_tries, progress)


def _refuse_unreachable(
    model: _Model, k: int, window: tuple[int, int], spec: Intervention
) -> None:
    """Refuse a target well outside what the corpora holding the count have, for any ``K``,
    or one that only corpora of :data:`DENSE` x the natural occurrences per string reach."""
    ends = model.predict(model.k_min), model.predict(model.k_max)
    fewest, most = min(ends), max(ends)  # the prediction may fall with K (Model.solve)
    what = f"{spec.kind} {spec.count} ({spec.event})"
    if fewest > 2 * window[1] + 10:  # the pilot's fit is noisy: refuse only far off
        raise InterventionError(
            f"tokens {window[0]}..{window[1]} is too few for {what}: corpora that hold them "
            f"have at least about {fewest:,.0f} symbols"
        )
    if most < (window[0] - 10) / 2:
        raise InterventionError(
            f"tokens {window[0]}..{window[1]} is more than corpora with {what} reach: "
            f"at most about {most:,.0f} symbols (up to {model.k_max:,} strings)"
        )
    if spec.kind == "exact" and spec.count > DENSE * model.natural * k:
        raise InterventionError(
            f"tokens {window[0]}..{window[1]} is a large deviation for {what}: only about {k:,} "
            f"strings reach it, {spec.count / k:,.1f} occurrences each, over {DENSE} times the "
            f"natural {model.natural:.3g}; raise --tokens or lower --count"
        )


def _attempts(
    counts: EventCounts, model: _Model, spec: Intervention, sizes: tuple[int, int],
    window: tuple[int, int], gen: torch.Generator, max_tries: int | None, progress: bool,
) -> TokenMatched:
    """Draw corpora, correcting ``K`` after each rejected batch, until one lies in ``window``.

    ``sizes``: the first ``K`` and the target ``T``.
    """
    assert spec.count is not None
    k, t = sizes
    budget = _Budget(window[1], max_tries)
    while draws := budget.batch(model.predict(k)):
        k, n = _lattice(counts, spec.kind, k, spec.count, model.k_min)
        corpus, totals, occurrences = _draw_batch(
            counts, spec.kind, k, n, draws, gen, progress and draws == 1
        )
        kept = _pick(corpus, k, totals, window)
        if kept is not None:
            return TokenMatched(kept[0].to("cpu"), t, window, budget.tries + kept[1] + 1)
        budget.add(totals)
        model.observe(k, totals, occurrences)
        k = model.solve(t, window)
    raise budget.exhausted(f"{spec.kind} {spec.count} ({spec.event}), K = {k}", window)
