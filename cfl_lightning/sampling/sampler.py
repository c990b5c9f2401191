"""``sample_corpus``: one entry point for every sampler.

Interventions on an event (a set of transitions, :class:`~cfl_lightning.automata.Event`):

* ``none`` -- i.i.d. strings (ancestral sampling); with an event, its realized counts recorded;
* ``exact`` -- the corpus total of occurrences is exactly ``count``;
* ``at_least`` -- the corpus total is at least ``count``;
* ``at_least_once`` -- exactly ``count`` of the ``K`` strings contain an occurrence.

Each draws from the exact conditional law of ``K`` i.i.d. strings given the constraint. With
``method="binning"`` (default) :func:`draw` calls the intervention kind's own sampler, named
by its registry entry (``InterventionKind.sampler``; the built-in ones are in
:mod:`~cfl_lightning.sampling.samplers`), on a
:class:`~cfl_lightning.sampling.samplers.SamplingJob`. For ``exact``: the initial state's count
law as far as the target needs (:mod:`~cfl_lightning.sampling.law`), per-string counts by
recursive halving on the sampling device (:mod:`~cfl_lightning.sampling.counts`), then each
string by the conditioned walk with backward bins up to its budget (:func:`~cfl_lightning.semiring.backward_fast`,
:mod:`~cfl_lightning.sampling.paths`). ``method="rejection"`` draws whole corpora until one
satisfies the constraint (a baseline; bounded tries).

Every sampler is written once, against the automaton's sampler backend
(:func:`~cfl_lightning.sampling.backend.backend_for`): its per-string count law and its
generation conditioned on a per-string count (``EventCounts``). The PFSA's backend is
:mod:`~cfl_lightning.sampling.pfsa_backend`.
"""

from __future__ import annotations

import torch

from cfl_lightning.automata.events import Event
from cfl_lightning.automata.protocol import Automaton
from cfl_lightning.errors import InterventionError, RejectionExhaustedError
from cfl_lightning.kinds.registry import call
from cfl_lightning.progress import Progress
from cfl_lightning.sampling.backend import SamplerBackend, backend_for
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.intervention import INTERVENTIONS, Intervention
from cfl_lightning.sampling.request import METHODS, SamplingRequest, check_request, resolve_device
from cfl_lightning.sampling.samplers import SamplingJob

__all__ = ["sample_corpus", "draw", "resolve_device", "INTERVENTIONS", "METHODS"]

_REJECTION_TOKENS = 2_000_000  # strings drawn per rejection batch ~ this many tokens


def sample_corpus(
    pfsa: Automaton,
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
    """Sample ``num_strings`` strings from an automaton, optionally under an intervention.

    The keyword form for users: the arguments are checked once (:func:`check_request`, which
    builds the :class:`~cfl_lightning.sampling.Intervention`) and :func:`draw` samples.

    Args:
        pfsa: the automaton (any kind with a sampler backend: a PFSA, a pushdown automaton).
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


def draw(pfsa: Automaton, request: SamplingRequest, *, progress: bool = False) -> Corpus:
    """Sample the corpus of a checked request (the internal entry: nothing is parsed again).

    Args:
        pfsa: the automaton (moved to ``request.device``), of any kind with a sampler backend.
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
    backend = backend_for(pfsa.to(dev))
    bar = Progress(k, "sampling", enabled=None if progress else False)
    paths_gen = torch.Generator(device=dev).manual_seed(request.seed)
    if spec.constrained and request.method == "rejection":
        length = pfsa.expected_length()
        corpus = _rejection(backend, length, k, spec, paths_gen, request.max_tries)
    else:
        sampler = spec.spec.sampler
        if sampler is None:
            raise InterventionError(f"intervention {spec.kind!r} has no sampler; use rejection")
        counts_gen = torch.Generator(device=dev).manual_seed((request.seed + 0x9E3779B9) % 2**64)
        corpus = call(sampler, SamplingJob(backend, k, spec, paths_gen, counts_gen, bar))
    bar.close()
    return corpus.to("cpu")


def _rejection(
    backend: SamplerBackend,
    expected_length: float,
    k: int,
    spec: Intervention,
    gen: torch.Generator,
    max_tries: int | None,
) -> Corpus:
    """Draw whole corpora until one meets the constraint (several corpora per batch)."""
    tries = 10_000 if max_tries is None else int(max_tries)
    if tries < 1:
        raise InterventionError("max_tries must be positive")
    per_string = max(expected_length, 1.0)
    batch = max(1, min(tries, int(_REJECTION_TOKENS / (k * per_string))))
    drawn = 0
    while drawn < tries:
        b = min(batch, tries - drawn)
        corpus = backend.unconstrained(b * k, gen, event=spec.event)
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
