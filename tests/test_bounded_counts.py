"""Events whose per-string count is bounded: the count law has finite support.

An event on transitions that no string can take more than a few times (here: leaving an initial
state that the automaton never returns to) makes the count operator ``A`` nilpotent, so the
per-string law is ``p_0 .. p_b`` and zero beyond. The streamed law once multiplied ``-inf * 0``
there and refused feasible requests ("empty count law"). Each law test compares the sampler with
the brute-force references of tests/reference.py (string enumeration, forward DP) and has a
negative control.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cfl_lightning.automata import PFSA, Event, parity_starfree_pfsa, random_pfsa
from cfl_lightning.errors import InterventionError
from cfl_lightning.sampling import sample_corpus
from cfl_lightning.sampling.law import CountSource, law_for_total, law_upto
from cfl_lightning.semiring.powers import first_row_law
from tests.reference import chi_square_pvalue, convolution_power, count_pmf, enumerate_strings

ALPHA = 1e-3


def bounded_pfsa() -> PFSA:
    """4 states; the initial state ``i`` is never re-entered, ``t``/``u`` loop (mean length ~2.6).

    ``transition:i:a`` and ``state:i`` occur at most once per string; ``symbol:b`` any number of
    times (the s -> t -> s loop), as a contrast.
    """
    return PFSA.from_dict(
        {
            "alphabet": ["a", "b"],
            "states": ["i", "s", "t", "u"],
            "initial": "i",
            "final": {"i": 0.2, "s": 0.5, "t": 0.5, "u": 0.4},
            "transitions": [
                {"source": "i", "symbol": "a", "target": "t", "weight": 0.5},
                {"source": "i", "symbol": "b", "target": "s", "weight": 0.3},
                {"source": "s", "symbol": "a", "target": "t", "weight": 0.5},
                {"source": "t", "symbol": "a", "target": "u", "weight": 0.2},
                {"source": "t", "symbol": "b", "target": "s", "weight": 0.3},
                {"source": "u", "symbol": "a", "target": "t", "weight": 0.6},
            ],
        }
    )


@pytest.fixture
def bounded() -> PFSA:
    return bounded_pfsa()


def corpus_marginal(strings, pmf, k, n, *, at_least=False):
    """Law of the string at a fixed position given the corpus total (``= n`` or ``>= n``)."""
    rest = convolution_power(pmf, k - 1)
    whole = convolution_power(pmf, k)
    if at_least:
        tail_rest = np.array([rest[max(n - c, 0) :].sum() for c in range(len(pmf))])
        z = whole[n:].sum()
        return {s: p * tail_rest[c] / z for s, (p, c) in strings.items()}
    return {s: p * rest[n - c] / whole[n] for s, (p, c) in strings.items() if c <= n}


@pytest.mark.parametrize("spec,support", [("transition:i:a", 1), ("state:i", 1), ("symbol:b", None)])
def test_streamed_law_has_the_reference_support(bounded, spec, support):
    """The law from the baby/giant-step route equals the forward DP, zeros included."""
    fn = Event.parse(spec).function(bounded)
    reference = count_pmf(bounded, fn, 40, tol=1e-300)
    source = CountSource(bounded, fn)
    log_pmf, _ = first_row_law(bounded.initial, source.step, source.start, 41)
    assert not torch.isnan(log_pmf).any()
    np.testing.assert_allclose(log_pmf[:41].exp().numpy(), reference, rtol=1e-9, atol=1e-300)
    if support is not None:
        assert np.all(reference[support + 1 :] == 0) and reference[support] > 0
        assert torch.isneginf(log_pmf[support + 1 :]).all()
    # Negative control: the reference tells the bounded events from the unbounded one.
    assert (support is None) == bool(reference[5] > 0)


def test_nilpotent_operator_gives_no_nan():
    """``A`` with ``A^2 = 0``: p_0, p_1 from ``e^T end`` and ``e^T A end``, zero after."""
    step = torch.tensor([[0.0, 0.3], [0.0, 0.0]], dtype=torch.float64)
    end = torch.tensor([0.7, 1.0], dtype=torch.float64)
    for length in (1, 2, 3, 17, 300):
        log_pmf, last = first_row_law(0, step, end, length)
        assert not torch.isnan(log_pmf).any() and log_pmf.numel() >= length
        np.testing.assert_allclose(log_pmf[:2].exp().numpy(), [0.7, 0.3][: log_pmf.numel()])
        assert torch.isneginf(log_pmf[2:]).all()
        assert not torch.isnan(last.log_scale).any()


@pytest.mark.parametrize(
    "spec,k,n",
    [("transition:i:a", 60, 18), ("transition:i:a", 60, 60), ("transition:i:a", 60, 0),
     ("state:i", 60, 60), ("state:i", 60, 49)],
)
def test_issue_requests_are_sampled_with_their_totals(spec, k, n, device):
    """The requests the streamed law refused, on the paper's parity + star-free automaton too."""
    for pfsa in (parity_starfree_pfsa(0.3), bounded_pfsa()):
        event = Event.parse(spec.replace(":i", ":init") if "init" in pfsa.states else spec)
        if str(event) == "state:init" and n < k:
            continue  # init is not accepting there: every string holds exactly one occurrence
        c = sample_corpus(pfsa, k, seed=0, intervention="exact", event=event, count=n, device=device)
        assert c.total_count == n and len(c) == k
        assert int(c.counts.max()) <= 1
    c = sample_corpus(parity_starfree_pfsa(0.3), 60, seed=0, intervention="at_least",
                      event="transition:init:b", count=10, device=device)
    assert c.total_count >= 10


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec,k,n", [("transition:i:a", 4, 2), ("transition:i:a", 4, 4), ("state:i", 3, 1)]
)
def test_exact_corpus_law_with_bounded_counts(bounded, device, spec, k, n):
    """End to end: the string at the first and last position follows p(x | corpus total = n)."""
    fn = Event.parse(spec).function(bounded)
    pmf = count_pmf(bounded, fn, 12)
    strings = enumerate_strings(bounded, fn, 12)
    expected = corpus_marginal(strings, pmf, k, n)
    first, last = Counter(), Counter()
    runs = 800
    for seed in range(runs):
        c = sample_corpus(bounded, k, seed=seed, intervention="exact", event=spec, count=n,
                          device=device)
        assert c.total_count == n
        first[tuple(c.string(0))] += 1
        last[tuple(c.string(k - 1))] += 1
    assert chi_square_pvalue(first, expected, runs) > ALPHA
    assert chi_square_pvalue(last, expected, runs) > ALPHA
    # Negative control: the law given a total one occurrence away is rejected.
    wrong = corpus_marginal(strings, pmf, k, n + 1 if n < k else n - 1)
    assert chi_square_pvalue(first, wrong, runs) < ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("spec,k,n", [("transition:i:a", 3, 2), ("state:i", 4, 3)])
def test_at_least_corpus_law_with_bounded_counts(bounded, device, spec, k, n):
    """At least ``n``: the corpus total's law and the first string's law, against the DP."""
    fn = Event.parse(spec).function(bounded)
    pmf = count_pmf(bounded, fn, 12)
    strings = enumerate_strings(bounded, fn, 12)
    power = convolution_power(pmf, k)
    total_law = {s: power[s] / power[n:].sum() for s in range(n, len(power)) if power[s] > 0}
    expected = corpus_marginal(strings, pmf, k, n, at_least=True)
    totals, first = Counter(), Counter()
    runs = 800
    for seed in range(runs):
        c = sample_corpus(bounded, k, seed=seed, intervention="at_least", event=spec, count=n,
                          device=device)
        assert n <= c.total_count <= k
        totals[c.total_count] += 1
        first[tuple(c.string(0))] += 1
    assert chi_square_pvalue(totals, total_law, runs) > ALPHA
    assert chi_square_pvalue(first, expected, runs) > ALPHA
    # Negative control: the exact-n law of the total is rejected.
    assert chi_square_pvalue(totals, {n: 1.0}, runs) < ALPHA


@pytest.mark.slow
def test_at_least_once_on_a_bounded_event(bounded, device):
    spec, k, m = "transition:i:a", 5, 2
    fn = Event.parse(spec).function(bounded)
    p0 = count_pmf(bounded, fn, 12)[0]
    strings = enumerate_strings(bounded, fn, 12)
    expected = {
        s: (m / k) * (p / (1 - p0) if c > 0 else 0.0) + (1 - m / k) * (p / p0 if c == 0 else 0.0)
        for s, (p, c) in strings.items()
    }
    first = Counter()
    runs = 800
    for seed in range(runs):
        c = sample_corpus(bounded, k, seed=seed, intervention="at_least_once", event=spec, count=m,
                          device=device)
        assert int((c.counts > 0).sum()) == m
        first[tuple(c.string(0))] += 1
    assert chi_square_pvalue(first, expected, runs) > ALPHA
    wrong = {s: p / (1 - p0) for s, (p, c) in strings.items() if c > 0}
    assert chi_square_pvalue(first, wrong, runs) < ALPHA


def test_counts_above_the_bound_are_refused_in_one_line(bounded):
    with pytest.raises(InterventionError, match="at most 1 time,"):
        sample_corpus(bounded, 10, seed=0, intervention="exact", event="transition:i:a", count=11)
    with pytest.raises(InterventionError, match="impossible"):
        sample_corpus(bounded, 10, seed=0, intervention="at_least", event="state:i", count=11)


def test_law_helpers_on_bounded_events(bounded):
    """law_for_total / law_upto return the finite support, never an empty law."""
    fn = Event.parse("transition:i:a").function(bounded)
    law = law_for_total(bounded, fn, 60, 18)
    assert (law.low, law.high) == (0, 1)
    assert law_upto(bounded, fn)(50).high == 1


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    topology=st.integers(0, 10_000), weights=st.integers(0, 10_000), states=st.integers(2, 6),
    kind=st.sampled_from(["state", "transition", "symbol"]), pick=st.integers(0, 100),
)
def test_streamed_law_equals_the_dp_on_random_automata(topology, weights, states, kind, pick):
    """Any automaton and event, bounded or not: the streamed law is the DP's, with no NaN."""
    pfsa = random_pfsa(states, 2, topology, weights)
    if kind == "state":
        spec = f"state:{pfsa.states[pick % states]}"
    elif kind == "symbol":
        spec = f"symbol:{pfsa.alphabet[pick % 2]}"
    else:
        edges = [(q, s) for q in range(states) for s in range(2) if int(pfsa.next_state[q, s]) >= 0]
        assume(edges)  # e.g. random_pfsa(2, 2, 5812, 0) has no transition at all
        q, s = edges[pick % len(edges)]
        spec = f"transition:{pfsa.states[q]}:{pfsa.alphabet[s]}"
    fn = Event.parse(spec).function(pfsa)
    source = CountSource(pfsa, fn)
    log_pmf, _ = first_row_law(pfsa.initial, source.step, source.start, 24)
    assert not torch.isnan(log_pmf).any()
    reference = count_pmf(pfsa, fn, 23, tol=1e-14)
    got = log_pmf[:24].exp().numpy()
    np.testing.assert_allclose(got, reference, rtol=1e-6, atol=1e-12)
