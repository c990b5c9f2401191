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

Choosing ``K`` (:class:`CorpusTotalModel`): a corpus of ``K`` strings holding ``N`` has the expected
total ``K E[g(n)]``, where ``g(n)`` is a string's mean length given its count and ``n`` one
string's count in such a corpus (about the count law tilted to the mean ``N / K``). ``g`` is
measured, not assumed affine: a pilot of at most :data:`PILOT_STRINGS` exact-count strings at
the target's ratio ``N / K`` gives the mean length at the counts it holds often, and strings
conditioned on the rarer counts (up to three times the densest ratio allowed) fill the rest.
The predicted total need not be monotone in ``K`` (few long strings and many nearly empty ones
can both be long corpora), so ``K`` is searched on a grid; of the ``K`` predicted inside the
window's central half, the one nearest the natural number of strings is taken. Each rejected
batch corrects the prediction by its mean residual per string, and ``K`` is solved again.
Everything is drawn from one generator seeded by ``seed``: the same arguments give the same
``K`` and the same corpus. (Commits up to ``004592c`` chose ``K`` with an affine ``g``: their
``K`` differ, their law given ``K`` is the same.)

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
from cfl_lightning.sampling.counts import CountLaw, split_at_least, split_exact
from cfl_lightning.sampling.intervention import Intervention, as_int
from cfl_lightning.sampling.request import SEED_MAX, resolve_device
from cfl_lightning.sampling.total_model import KNOT, CorpusTotalModel

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
_STRINGS = 10  # K is at most this many times the natural number of strings of T symbols
_REACH = 1.25  # a target is refused as unreachable when the prediction misses it by this factor
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
    """``[draws, K]`` per-string counts of ``draws`` corpora (``exact`` or ``at_least``)."""
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


def _pilot(counts: EventCounts, model: CorpusTotalModel, k: int, tokens: int,
           gen: torch.Generator) -> None:
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


def _ladder(counts: EventCounts, model: CorpusTotalModel, k: int, tokens: int,
            gen: torch.Generator) -> None:
    """Strings conditioned on the counts the pilot saw too rarely near ``K`` (and denser), so
    that the length model does not extrapolate there: :data:`KNOT` strings at each count of
    :meth:`CorpusTotalModel.ladder`, within about ``max(200,000, 2 T)`` symbols."""
    ladder = model.ladder(k, max(200_000, 2 * tokens))
    if ladder:
        budgets = torch.tensor(ladder, dtype=torch.int64, device=gen.device)
        budgets = budgets.repeat_interleave(KNOT)
        model.fit(counts.generate(budgets, gen))


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
    natural = expected_event_count(automaton, spec.event)
    law, complete = _law(counts, spec, natural, bound)
    k_max = k_min + math.ceil(_STRINGS * t / natural_length)
    if spec.kind == "exact" and law.low > 0:  # every string holds at least low occurrences
        k_max = max(k_min, min(k_max, spec.count // law.low))
    model = CorpusTotalModel(spec.kind, spec.count, natural, (k_min, k_max), law, complete,
                             DENSE)
    k = max(k_min, round(t / natural_length))
    for _ in range(3):  # refit where the first guess was far off
        _pilot(counts, model, k, t, gen)
        _ladder(counts, model, model.solve(t, window), t, gen)
        k, previous = model.solve(t, window), k
        _refuse_unreachable(model, k, window, spec)  # before a pilot at an extreme K
        if abs(k - previous) <= max(0.2 * previous, 5):
            break
    check_corpora_memory(automaton, [(k, spec)], device=dev, write=write, what=what)
    return _attempts(counts, model, spec, (k, t), window, gen, max_tries, progress)


def _law(counts: EventCounts, spec: Intervention, natural: float,
         bound: int | None) -> tuple[CountLaw, bool]:
    """The per-string count law the length model tilts, and whether it is complete for every
    ``K`` (held up to the most one string can hold, or, ``exact``, up to ``N``); else it is held
    far enough for :data:`DENSE` x the natural occurrences per string."""
    assert spec.count is not None
    upto = max(64, math.ceil(4 * DENSE * natural) + 64)
    limits = [x for x in (bound, spec.count if spec.kind == "exact" else None) if x is not None]
    limit = min(limits) if limits else math.inf
    return counts.law(int(min(upto, limit))), upto >= limit


def _refuse_unreachable(
    model: CorpusTotalModel, k: int, window: tuple[int, int], spec: Intervention
) -> None:
    """Refuse a target well outside what the corpora holding the count have, for any ``K``,
    or one that only corpora of :data:`DENSE` x the natural occurrences per string reach."""
    _, preds = model.grid()
    fewest, most = float(preds.min()), float(preds.max())  # not monotone in K (Model)
    what = f"{spec.kind} {spec.count} ({spec.event})"
    if fewest > _REACH * window[1] + 10:  # the model is a prediction: refuse only well off
        raise InterventionError(
            f"tokens {window[0]}..{window[1]} is too few for {what}: corpora that hold them "
            f"have at least about {fewest:,.0f} symbols"
        )
    if most < (window[0] - 10) / _REACH:
        raise InterventionError(
            f"tokens {window[0]}..{window[1]} is more than corpora with {what} reach: "
            f"at most about {most:,.0f} symbols (up to {model.k_max:,} strings, {_STRINGS} "
            "times the natural number of strings of that total)"
        )
    if spec.kind == "exact" and spec.count > DENSE * model.natural * k:
        raise InterventionError(
            f"tokens {window[0]}..{window[1]} is a large deviation for {what}: only about {k:,} "
            f"strings reach it, {spec.count / k:,.1f} occurrences each, over {DENSE} times the "
            f"natural {model.natural:.3g}; raise --tokens or lower --count"
        )


def _attempts(
    counts: EventCounts, model: CorpusTotalModel, spec: Intervention, sizes: tuple[int, int],
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
