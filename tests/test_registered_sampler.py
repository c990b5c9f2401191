"""A registered intervention kind's own sampler is what runs (issue 49).

``at_most`` is registered with its sampler (written here, against the public
:class:`~cfl_lightning.sampling.SamplingJob`): ``sample_corpus`` and ``draw`` call it, every corpus
holds at most ``N`` occurrences, and the law is the exact conditional law of ``K`` i.i.d. strings
given ``total <= N``, checked against a brute-force reference (enumerated strings, a forward
dynamic program for the count law) with a negative control.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections import Counter

import numpy as np
import pytest
import torch

from cfl_lightning.automata import PFSA
from cfl_lightning.errors import InterventionError
from cfl_lightning.kinds import (
    INTERVENTION_KINDS,
    InterventionKind,
    intervention_kind,
    register_intervention,
)
from cfl_lightning.sampling import Corpus, SamplingJob, check_request, draw, sample_corpus
from cfl_lightning.sampling.counts import split_exact
from tests.reference import chi_square_pvalue, count_pmf, enumerate_strings


def at_most(job: SamplingJob) -> Corpus:
    """The corpus total is at most ``N``: the total ``S`` from ``P(S = s | S <= N)`` (the ``K``-fold
    convolution of the per-string law on ``0 .. N``), then ``S`` split exactly, then the strings."""
    k, n = job.num_strings, job.count
    law = job.counts.law(n)
    pmf = law.log_pmf.exp()
    total = torch.zeros(n + 1, dtype=torch.float64)
    total[0] = 1.0
    for _ in range(k):
        total = torch.stack([(total[: s + 1] * pmf[: s + 1].flip(0)).sum() for s in range(n + 1)])
    s = int(torch.multinomial(total, 1, generator=job.counts_gen))
    return job.generate(split_exact(law, k, s, job.counts_gen))


AT_MOST = InterventionKind(
    "at_most",
    "the corpus traverses the event at most count times in total",
    takes_count=True,
    count_help="N: most total occurrences",
    accepts=operator.le,
    label="causal (at most N)",
    sampler=at_most,
)


def tiny() -> PFSA:
    """``s0`` loops on ``a`` (0.4) or moves to ``s1`` on ``b`` (0.4), ends w.p. 0.2; ``s1`` loops
    on ``b`` or ends (0.5 each). ``state:s0`` counts the steps taken from ``s0``."""
    next_state = torch.tensor([[0, 1], [-1, 1]])
    weights = torch.tensor([[0.4, 0.4], [0.0, 0.5]], dtype=torch.float64)
    final = torch.tensor([0.2, 0.5], dtype=torch.float64)
    return PFSA(["s0", "s1"], ["a", "b"], next_state, weights, final, 0)


@pytest.fixture
def registered():
    with INTERVENTION_KINDS.registered(AT_MOST):
        yield


def test_the_registered_sampler_runs(registered):
    pfsa = tiny()
    totals = []
    for seed in range(12):
        corpus = sample_corpus(pfsa, 3, seed=seed, intervention="at_most", event="state:s0",
                               count=4)
        assert len(corpus) == 3 and int(corpus.counts.sum()) <= 4
        totals.append(int(corpus.counts.sum()))
    assert len(set(totals)) > 1  # the total varies: not an exact-count sampler either


def test_a_kind_is_registered_once(registered):
    """A second ``at_most`` (even with another sampler) is refused and the first one stays; so is
    a second ``exact``: the built-in kinds are entries like any other."""
    other = dataclasses.replace(AT_MOST, sampler="cfl_lightning.sampling.samplers:at_least")
    with pytest.raises(InterventionError, match="intervention 'at_most' is already registered"):
        register_intervention(other)
    with pytest.raises(InterventionError, match="'exact' is already registered"):
        register_intervention(dataclasses.replace(AT_MOST, name="exact"))
    assert intervention_kind("at_most").sampler is at_most
    corpus = sample_corpus(tiny(), 3, seed=0, intervention="at_most", event="state:s0", count=1)
    assert int(corpus.counts.sum()) <= 1


def _reference(pfsa: PFSA, k: int, n: int, max_len: int):
    """The exact laws given ``total <= n``: of the count vector, and of the first string."""
    fn = torch.tensor([[1, 1], [0, 0]])
    pmf = count_pmf(pfsa, fn, n)
    vectors = {
        c: float(np.prod(pmf[list(c)]))
        for c in itertools.product(range(n + 1), repeat=k) if sum(c) <= n
    }
    mass = sum(vectors.values())
    vectors = {c: p / mass for c, p in vectors.items()}
    rest = {}  # P(the other k - 1 strings hold at most r)
    for r in range(n + 1):
        rest[r] = sum(
            float(np.prod(pmf[list(c)]))
            for c in itertools.product(range(r + 1), repeat=k - 1) if sum(c) <= r
        )
    strings = {
        s: p * rest[n - c] / mass
        for s, (p, c) in enumerate_strings(pfsa, fn, max_len).items() if c <= n
    }
    return vectors, strings


@pytest.mark.slow  # 600 corpora
def test_the_registered_sampler_draws_the_exact_conditional_law(registered):
    pfsa, k, n, draws = tiny(), 3, 2, 600
    request = check_request(pfsa, k, seed=0, intervention="at_most", event="state:s0", count=n)
    vectors, strings = Counter(), Counter()
    for seed in range(draws):
        corpus = draw(pfsa, dataclasses.replace(request, seed=seed))
        vectors[tuple(corpus.counts.tolist())] += 1
        strings[tuple(corpus.to_lists()[0])] += 1
    law, first = _reference(pfsa, k, n, max_len=12)
    assert chi_square_pvalue(vectors, law, draws) > 1e-4
    assert chi_square_pvalue(strings, first, draws) > 1e-4
    # negative controls: the same checks reject the exact-count law and the unconditioned one
    exact = {c: p for c, p in law.items() if sum(c) == n}
    exact = {c: p / sum(exact.values()) for c, p in exact.items()}
    assert chi_square_pvalue(vectors, exact, draws) < 1e-6
    fn = torch.tensor([[1, 1], [0, 0]])
    free = {s: p for s, (p, _) in enumerate_strings(pfsa, fn, 12).items()}
    assert chi_square_pvalue(strings, free, draws) < 1e-6
