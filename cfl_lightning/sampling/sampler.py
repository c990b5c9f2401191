"""``sample_corpus``: one entry point for every sampler.

Interventions on an event (a set of transitions, :class:`~cfl_lightning.automata.Event`):

* ``none`` -- i.i.d. strings (ancestral sampling); with an event, its realized counts recorded;
* ``exact`` -- the corpus total of occurrences is exactly ``count``;
* ``at_least`` -- the corpus total is at least ``count``;
* ``at_least_once`` -- exactly ``count`` of the ``K`` strings contain an occurrence.

Each draws from the exact conditional law of ``K`` i.i.d. strings given the constraint. With
``method="binning"`` (default): the initial state's count law as far as the target needs
(:mod:`~cfl_lightning.sampling.law`), per-string counts by recursive halving on the sampling
device (:mod:`~cfl_lightning.sampling.counts`), then each string by the conditioned walk with
backward bins up to its budget (:func:`~cfl_lightning.semiring.backward_fast`,
:mod:`~cfl_lightning.sampling.paths`). ``method="rejection"`` draws whole corpora until one
satisfies the constraint (a baseline; bounded tries).
"""

from __future__ import annotations

import torch

from cfl_lightning.automata.events import Event
from cfl_lightning.automata.pfsa import PFSA
from cfl_lightning.errors import InterventionError, RejectionExhaustedError
from cfl_lightning.progress import Progress
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.counts import split_at_least, split_exact
from cfl_lightning.sampling.intervention import INTERVENTIONS, Intervention
from cfl_lightning.sampling.law import CountSource, law_for_total, law_upto
from cfl_lightning.sampling.paths import sample_paths
from cfl_lightning.sampling.request import METHODS, SamplingRequest, check_request, resolve_device
from cfl_lightning.semiring.backward import ScaledBins, backward_fast

__all__ = ["sample_corpus", "draw", "resolve_device", "INTERVENTIONS", "METHODS"]

_REJECTION_TOKENS = 2_000_000  # strings drawn per rejection batch ~ this many tokens


def sample_corpus(
    pfsa: PFSA,
    num_strings: int,
    *,
    seed: int,
    intervention: str = "none",
    event: str | Event | None = None,
    count: int | None = None,
    method: str = "binning",
    device: str | torch.device = "cpu",
    max_tries: int | None = None,
    progress: bool = False,
) -> Corpus:
    """Sample ``num_strings`` strings from ``pfsa``, optionally under an intervention.

    The keyword form for users: the arguments are checked once (:func:`check_request`, which
    builds the :class:`~cfl_lightning.sampling.Intervention`) and :func:`draw` samples.

    Args:
        pfsa: the automaton.
        num_strings: ``K``.
        seed: seed of every random draw (same seed and device, same corpus).
        intervention: ``none``, ``exact``, ``at_least`` or ``at_least_once``.
        event: ``state:NAME``, ``symbol:SYM``, ``transition:SOURCE:SYM`` or an :class:`Event`.
        count: ``N`` (total occurrences) or ``M`` (strings containing one, ``at_least_once``).
        method: ``binning`` (exact sampler) or ``rejection`` (baseline).
        device: ``cpu``, ``cuda`` or ``auto``.
        max_tries: rejection only: corpora to draw before giving up (default 10,000).
        progress: draw a progress bar on stderr (only when it is a terminal).

    Returns:
        A :class:`Corpus` on the CPU, with per-string ``counts`` when an event is given.

    Raises:
        EventError: malformed event or unknown name.
        InterventionError: bad arguments or an impossible target.
        RejectionExhaustedError: rejection found no corpus within ``max_tries``.
        SizeError: the request would not fit in memory (see :mod:`~cfl_lightning.sampling.budget`).
    """
    request = check_request(
        pfsa, num_strings, seed=seed, intervention=intervention, event=event, count=count,
        method=method, device=device, max_tries=max_tries,
    )
    return draw(pfsa, request, progress=progress)


def draw(pfsa: PFSA, request: SamplingRequest, *, progress: bool = False) -> Corpus:
    """Sample the corpus of a checked request (the internal entry: nothing is parsed again).

    Args:
        pfsa: the automaton (moved to ``request.device``).
        request: a :class:`~cfl_lightning.sampling.request.SamplingRequest` whose intervention
            was validated against ``pfsa`` and ``request.num_strings``.
        progress: draw a progress bar on stderr (only when it is a terminal).

    Returns:
        A :class:`Corpus` on the CPU, with per-string ``counts`` when the request has an event.

    Raises:
        RejectionExhaustedError: rejection found no corpus within ``max_tries``.
        InterventionError: an at-least-once target that no corpus meets.
    """
    spec, k, dev = request.intervention, request.num_strings, request.device
    automaton = pfsa.to(dev)
    event_fn = None if spec.event is None else spec.event.function(automaton)
    bar = Progress(k, "sampling", enabled=None if progress else False)
    paths_gen = torch.Generator(device=dev).manual_seed(request.seed)
    if not spec.constrained:
        corpus = sample_paths(automaton, k, paths_gen, event_fn=event_fn, progress=bar)
    elif request.method == "rejection":
        corpus = _rejection(automaton, k, spec, event_fn, paths_gen, request.max_tries)
    else:
        counts_gen = torch.Generator(device=dev).manual_seed((request.seed + 0x9E3779B9) % 2**64)
        if spec.kind == "at_least_once":
            corpus = _at_least_once(automaton, event_fn, k, spec.count, counts_gen, paths_gen, bar)
        else:
            budgets, bins = _plan(automaton, event_fn, k, spec.kind, spec.count, counts_gen)
            corpus = sample_paths(
                automaton, k, paths_gen, event_fn=event_fn, budgets=budgets, bins=bins,
                progress=bar,
            )
    bar.close()
    return corpus.to("cpu")


def _at_least_once(
    pfsa: PFSA,
    event_fn: torch.Tensor,
    k: int,
    m: int,
    counts_gen: torch.Generator,
    paths_gen: torch.Generator,
    bar: Progress,
) -> Corpus:
    """``m`` uniformly chosen positions get strings with >= 1 occurrence, the rest none.

    By exchangeability, which strings contain the event is a uniform ``m``-subset (the paper's
    Theorem "Sampling Path Event Counts (3)"); each string is then drawn from the automaton
    conditioned on its own constraint (exact-zero bins, or tails with the counter clamped).
    """
    exact_bins = backward_fast(pfsa, event_fn, 1)
    tail_bins = backward_fast(pfsa, event_fn, 2, tail=True)
    if m < k and float(exact_bins.dense()[0, pfsa.initial]) <= 0:
        raise InterventionError(
            f"at_least_once count {m} is impossible: every string contains the event"
        )
    order = torch.randperm(k, generator=counts_gen, device=counts_gen.device).to(pfsa.device)
    hit, miss = order[:m].sort().values, order[m:].sort().values
    parts = []
    for positions, bins, budget, at_least in ((hit, tail_bins, 1, True), (miss, exact_bins, 0, False)):
        if positions.numel():
            budgets = torch.full((positions.numel(),), budget, dtype=torch.long, device=pfsa.device)
            part = sample_paths(
                pfsa, positions.numel(), paths_gen, event_fn=event_fn, budgets=budgets,
                bins=bins, at_least=at_least, progress=bar,
            )
            parts.append((positions, part))
    return Corpus.interleave(parts, k)


def _plan(
    pfsa: PFSA,
    event_fn: torch.Tensor,
    k: int,
    intervention: str,
    n: int,
    gen: torch.Generator,
) -> tuple[torch.Tensor, ScaledBins]:
    """Per-string exact budgets (``exact`` or ``at_least``) and the backward bins they index.

    The count law comes only as far as the target needs (:mod:`~cfl_lightning.sampling.law`),
    the split runs on ``gen``'s device, and the walk's bins stop at the largest budget.
    """
    source = CountSource(pfsa, event_fn)
    if intervention == "exact":
        budgets = split_exact(law_for_total(pfsa, event_fn, k, n, source), k, n, gen)
    else:
        budgets = split_at_least(law_upto(pfsa, event_fn, source), k, n, gen)
    return budgets.to(pfsa.device), source.bins(int(budgets.max()) + 1)


def _rejection(
    pfsa: PFSA,
    k: int,
    spec: Intervention,
    event_fn: torch.Tensor,
    gen: torch.Generator,
    max_tries: int | None,
) -> Corpus:
    """Draw whole corpora until one meets the constraint (several corpora per batch)."""
    tries = 10_000 if max_tries is None else int(max_tries)
    if tries < 1:
        raise InterventionError("max_tries must be positive")
    per_string = max(pfsa.expected_length(), 1.0)
    batch = max(1, min(tries, int(_REJECTION_TOKENS / (k * per_string))))
    drawn = 0
    while drawn < tries:
        b = min(batch, tries - drawn)
        corpus = sample_paths(pfsa, b * k, gen, event_fn=event_fn)
        assert corpus.counts is not None
        per_corpus = corpus.counts.view(b, k)
        ok = spec.satisfied_batched(per_corpus)
        hits = torch.nonzero(ok).flatten()
        if hits.numel():
            i = int(hits[0])
            lo, hi = int(corpus.offsets[i * k]), int(corpus.offsets[(i + 1) * k])
            return Corpus(
                corpus.tokens[lo:hi].clone(),
                corpus.offsets[i * k : (i + 1) * k + 1] - lo,
                per_corpus[i].clone(),
            )
        drawn += b
    raise RejectionExhaustedError(
        f"rejection sampling found no corpus meeting the {spec.kind} target {spec.count} "
        f"in {tries} tries; use --method binning"
    )
