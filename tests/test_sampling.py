"""Sampler laws against brute-force enumeration (chi-square, fixed seeds) and hard constraints.

References come from tests/reference.py (string enumeration and a forward DP over
(state, count)), never from the binning machinery under test. Each law test has a negative
control showing the same test rejects a wrong law, so none of them can pass vacuously.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
import torch

from cfl_lightning.automata import Event, parity_starfree_pfsa, random_pfsa
from cfl_lightning.errors import InterventionError, RejectionExhaustedError
from cfl_lightning.sampling import sample_corpus
from cfl_lightning.sampling.counts import CountLaw, split_at_least, split_exact
from cfl_lightning.sampling import paths
from cfl_lightning.sampling.paths import sample_paths
from cfl_lightning.semiring import backward_fast
from tests.helpers import check_split_law_by_position, short_pfsa
from tests.reference import chi_square_pvalue, convolution_power, count_pmf, enumerate_strings

ALPHA = 1e-3  # fixed seeds: deterministic outcomes; rejects only at p < 0.001


def law_of(pfsa, spec, max_count=60):
    fn = Event.parse(spec).function(pfsa)
    return fn, count_pmf(pfsa, fn, max_count)


def test_unconstrained_string_law(small, device):
    fn, _ = law_of(small, "state:t")
    strings = enumerate_strings(small, fn, 8)
    corpus = sample_corpus(small, 20_000, seed=0, event="state:t", device=device)
    observed = Counter(map(tuple, corpus.to_lists()))
    expected = {s: p for s, (p, _) in strings.items()}
    assert chi_square_pvalue(observed, expected, len(corpus)) > ALPHA
    # Negative control: the law of strings without the event is rejected.
    p0 = sum(p for p, c in strings.values() if c == 0)
    wrong = {s: p / p0 for s, (p, c) in strings.items() if c == 0}
    assert chi_square_pvalue(observed, wrong, len(corpus)) < ALPHA
    # Counts are recorded exactly.
    for k in range(50):
        s = tuple(corpus.string(k))
        assert int(corpus.counts[k]) == strings[s][1] if s in strings else True


def recount(pfsa, fn, strings):
    """Event occurrences of each string by a plain walk (independent of the sampler)."""
    fn, step = fn.tolist(), pfsa.next_state.tolist()  # lists: a tensor index per symbol is slow
    out = []
    for string in strings:
        q, c = pfsa.initial, 0
        for s in string:
            c += int(fn[q][s])
            q = int(step[q][s])
        out.append(c)
    return out


@pytest.fixture(params=["table", "per-step"])
def chain_mode(request, monkeypatch):
    """Run a test with the tabulated lifted chain and with rows computed per step."""
    if request.param == "per-step":
        monkeypatch.setattr(paths, "TABLE_MAX", 0)
    return request.param


@pytest.mark.parametrize("spec,n", [("state:t", 0), ("state:t", 2), ("symbol:a", 5), ("transition:s:b", 1)])
def test_conditioned_path_law(small, spec, n, device, chain_mode):
    """Theorem 'Constrained Sampling': strings with budget n follow p(x | count = n)."""
    fn, pmf = law_of(small, spec)
    strings = enumerate_strings(small, fn, 12)
    pfsa = small.to(device)
    bins = backward_fast(pfsa, fn.to(device), n + 1)
    gen = torch.Generator(device=device).manual_seed(1)
    budgets = torch.full((20_000,), n, dtype=torch.long, device=device)
    corpus = sample_paths(pfsa, 20_000, gen, event_fn=fn.to(device), budgets=budgets, bins=bins)
    assert torch.all(corpus.counts == n)
    observed = Counter(map(tuple, corpus.to("cpu").to_lists()))
    assert set(recount(small, fn, list(observed))) == {n}
    expected = {s: p / pmf[n] for s, (p, c) in strings.items() if c == n}
    assert chi_square_pvalue(observed, expected, len(corpus)) > ALPHA
    # Negative control: the unconditioned law is rejected.
    wrong = {s: p for s, (p, _) in strings.items()}
    assert chi_square_pvalue(observed, wrong, len(corpus)) < ALPHA


def test_at_least_path_law(small, chain_mode):
    """Theorem 'Constrained String Sampling (2)': budgets are lower bounds (tails, clamped)."""
    fn, pmf = law_of(small, "symbol:a")
    strings = enumerate_strings(small, fn, 14)
    n = 2
    bins = backward_fast(small, fn, n + 1, tail=True)
    budgets = torch.full((20_000,), n, dtype=torch.long)
    corpus = sample_paths(
        small, 20_000, torch.Generator().manual_seed(2), event_fn=fn, budgets=budgets, bins=bins,
        at_least=True,
    )
    assert torch.all(corpus.counts >= n)
    assert corpus.counts[:200].tolist() == recount(small, fn, corpus.to_lists()[:200])
    tail = 1.0 - pmf[:n].sum()
    expected = {s: p / tail for s, (p, c) in strings.items() if c >= n}
    observed = Counter(map(tuple, corpus.to_lists()))
    assert chi_square_pvalue(observed, expected, len(corpus)) > ALPHA
    # Negative control: the exact-count law (count == n) is rejected.
    wrong = {s: p / pmf[n] for s, (p, c) in strings.items() if c == n}
    assert chi_square_pvalue(observed, wrong, len(corpus)) < ALPHA


def compositions(total, k):
    for cut in itertools.combinations(range(total + k - 1), k - 1):
        bounds = (-1,) + cut + (total + k - 1,)
        yield tuple(bounds[i + 1] - bounds[i] - 1 for i in range(k))


def test_split_exact_joint_law_and_exchangeability(small):
    """Phase 1: (n_1..n_K) ~ prod p(n_i) / p^{*K}(N), over all compositions of N."""
    fn, pmf = law_of(small, "symbol:a")  # far from geometric: not uniform given the sum
    law = CountLaw(backward_fast(small, fn, 8).log_column(small.initial))
    k, n, runs = 3, 5, 3000
    gen = torch.Generator().manual_seed(3)
    draws = Counter(map(tuple, split_exact(law, k, n, gen, draws=runs).tolist()))
    single = split_exact(law, k, n, gen)
    assert single.shape == (k,) and int(single.sum()) == n
    weights = {c: math.prod(pmf[i] for i in c) for c in compositions(n, k)}
    z = sum(weights.values())
    expected = {c: w / z for c, w in weights.items()}
    assert chi_square_pvalue(draws, expected, runs) > ALPHA
    assert all(sum(c) == n for c in draws)
    # Negative control: uniform over compositions is rejected.
    uniform = {c: 1 / len(weights) for c in weights}
    assert chi_square_pvalue(draws, uniform, runs) < ALPHA


@pytest.mark.slow
def test_split_uniform_compositions_far_tail():
    """Geometric counts given their sum are uniform over compositions, at N = 100,000.

    All K = 3 counts come from p(n) = 0.1 * 0.9^n, so P(n_1 = j | N) ∝ N - j + 1: probabilities
    of order 0.9^100000 underflow in plain float64 yet the split must stay exact.
    """
    pfsa = parity_starfree_pfsa(1.0)
    fn = Event.parse("state:rep").function(pfsa)
    n, k = 100_000, 3
    law = CountLaw(backward_fast(pfsa, fn, n + 1).log_column(pfsa.initial))
    gen = torch.Generator().manual_seed(4)
    first = split_exact(law, k, n, gen, draws=600)[:, 0].tolist()
    bins = np.linspace(0, n + 1, 11)
    observed = np.histogram(first, bins=bins)[0]
    j = np.arange(n + 1)
    prob = (n - j + 1) / ((n + 1) * (n + 2) / 2)
    expected = np.histogram(j, bins=bins, weights=prob)[0]
    obs = Counter({i: int(v) for i, v in enumerate(observed)})
    assert chi_square_pvalue(obs, dict(enumerate(expected)), 600) > ALPHA
    # Negative control: a uniform first count is rejected.
    assert chi_square_pvalue(obs, {i: 0.1 for i in range(10)}, 600) < ALPHA


def test_split_at_least_joint_law(small):
    fn, pmf = law_of(small, "symbol:a")
    cache = {}

    def law_upto(m):
        cache[m] = CountLaw(backward_fast(small, fn, m + 1).log_column(small.initial))
        return cache[m]

    k, n = 2, 6
    gen = torch.Generator().manual_seed(5)
    draws = Counter(map(tuple, split_at_least(law_upto, k, n, gen, draws=6000).tolist()))
    expected = {}
    for a, b in itertools.product(range(40), repeat=2):
        if a + b >= n:
            expected[(a, b)] = pmf[a] * pmf[b]
    z = sum(expected.values())
    expected = {c: w / z for c, w in expected.items()}
    assert all(sum(c) >= n for c in draws)
    assert chi_square_pvalue(draws, expected, 6000) > ALPHA
    # Negative control: the law conditioned on the sum being exactly n is rejected.
    exact = {c: w for c, w in expected.items() if sum(c) == n}
    z = sum(exact.values())
    assert chi_square_pvalue(draws, {c: w / z for c, w in exact.items()}, 6000) < ALPHA


def corpus_marginal_exact(strings, pmf, k, n):
    """P(string at a fixed position | corpus total = n) = p(x) p^{*(K-1)}(n - c(x)) / p^{*K}(n)."""
    rest = convolution_power(pmf, k - 1)
    whole = convolution_power(pmf, k)[n]
    return {s: p * rest[n - c] / whole for s, (p, c) in strings.items() if c <= n}


@pytest.mark.slow
@pytest.mark.parametrize("method,runs", [("binning", 1000), ("rejection", 400)])
def test_exact_corpus_law_by_position(small, method, runs):
    """End to end: hard constraint, string law at the first and the last position."""
    spec, k, n = "symbol:a", 4, 7
    fn, pmf = law_of(small, spec)
    strings = enumerate_strings(small, fn, 12)
    expected = corpus_marginal_exact(strings, pmf, k, n)
    first, last, per_string = Counter(), Counter(), Counter()
    for seed in range(runs):
        c = sample_corpus(small, k, seed=seed, intervention="exact", event=spec, count=n, method=method)
        assert c.total_count == n and len(c) == k
        first[tuple(c.string(0))] += 1
        last[tuple(c.string(k - 1))] += 1
        per_string.update(c.counts.tolist())
    assert chi_square_pvalue(first, expected, runs) > ALPHA
    assert chi_square_pvalue(last, expected, runs) > ALPHA
    rest = convolution_power(pmf, k - 1)
    count_law = {j: pmf[j] * rest[n - j] / convolution_power(pmf, k)[n] for j in range(n + 1)}
    assert chi_square_pvalue(per_string, count_law, runs * k) > ALPHA
    # Negative control: the unconditioned string law is rejected at this sample size.
    assert chi_square_pvalue(first, {s: p for s, (p, _) in strings.items()}, runs) < ALPHA


@pytest.mark.slow
def test_at_least_once_corpus_law(small):
    spec, k, m = "state:t", 5, 2
    fn, pmf = law_of(small, spec)
    strings = enumerate_strings(small, fn, 12)
    p0 = pmf[0]
    expected = {
        s: (m / k) * (p / (1 - p0) if c > 0 else 0.0) + (1 - m / k) * (p / p0 if c == 0 else 0.0)
        for s, (p, c) in strings.items()
    }
    first, last = Counter(), Counter()
    runs = 1000
    for seed in range(runs):
        c = sample_corpus(small, k, seed=seed, intervention="at_least_once", event=spec, count=m)
        assert int((c.counts > 0).sum()) == m
        first[tuple(c.string(0))] += 1
        last[tuple(c.string(k - 1))] += 1
    assert chi_square_pvalue(first, expected, runs) > ALPHA
    assert chi_square_pvalue(last, expected, runs) > ALPHA
    # Negative control: every string conditioned on containing the event is rejected.
    wrong = {s: p / (1 - p0) for s, (p, c) in strings.items() if c > 0}
    assert chi_square_pvalue(first, wrong, runs) < ALPHA


@pytest.mark.slow
def test_at_least_total_law(small):
    spec, k, n = "symbol:a", 3, 6
    fn, pmf = law_of(small, spec)
    power = convolution_power(pmf, k)
    expected = {s: power[s] / power[n:].sum() for s in range(n, len(power))}
    totals = Counter()
    for seed in range(400):
        c = sample_corpus(small, k, seed=seed, intervention="at_least", event=spec, count=n)
        assert c.total_count >= n
        totals[c.total_count] += 1
    assert chi_square_pvalue(totals, expected, 400) > ALPHA
    # Negative control: the same law shifted up by one occurrence is rejected.
    shifted = {s + 1: p for s, p in expected.items()}
    assert chi_square_pvalue(totals, shifted, 400) < ALPHA


@pytest.mark.parametrize("factor", [0, 20])
def test_extreme_interventions_stay_exact(random50, factor):
    event = Event.parse("state:q9")
    k = 2000
    n = int(factor * event.expected_count(random50) * k)
    c = sample_corpus(random50, k, seed=0, intervention="exact", event=event, count=n)
    assert c.total_count == n and len(c) == k
    assert int(c.counts.sum()) == int(c.counts.clamp(min=0).sum())
    fn = event.function(random50)
    # Recount occurrences by walking the automaton over the emitted symbols.
    table = random50.next_state
    recount = 0
    for string in c.to_lists()[:300]:
        q = random50.initial
        for s in string:
            recount += int(fn[q, s])
            q = int(table[q, s])
        assert float(random50.final[q]) > 0
    assert recount == int(c.counts[:300].sum())


def test_determinism_and_seed_sensitivity(random50):
    kw = dict(intervention="exact", event="state:q9", count=1500)
    a = sample_corpus(random50, 1000, seed=7, **kw)
    b = sample_corpus(random50, 1000, seed=7, **kw)
    c = sample_corpus(random50, 1000, seed=8, **kw)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.offsets, b.offsets)
    assert not torch.equal(a.offsets, c.offsets)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(intervention="exact", event="state:init", count=5), "at most 1"),
        (dict(intervention="exact", event="state:rep", count=1), "cannot occur"),
        (dict(intervention="at_least_once", event="state:odd", count=4), "exceeds"),
        (dict(intervention="exact", event="state:odd", count=-1), "non-negative"),
        (dict(intervention="exact", event="state:nope", count=1), "unknown state"),
        (dict(intervention="exact", count=1), "needs an event"),
        (dict(intervention="none", count=1), "intervention is 'none'"),
        (dict(intervention="bogus", event="state:odd", count=1), "unknown intervention"),
    ],
)
def test_impossible_targets(kwargs, match):
    pfsa = parity_starfree_pfsa(0.0)  # 'rep' unreachable
    with pytest.raises((InterventionError, ValueError), match=match):
        sample_corpus(pfsa, 3, seed=0, **kwargs)


def test_rejection_exhausts_with_clear_error(parity):
    with pytest.raises(RejectionExhaustedError, match="no corpus"):
        sample_corpus(
            parity, 50, seed=0, intervention="exact", event="state:odd", count=2000,
            method="rejection", max_tries=20,
        )


def test_at_least_once_all_and_none(parity):
    for m in (0, 30):
        c = sample_corpus(parity, 30, seed=1, intervention="at_least_once", event="state:odd", count=m)
        assert int((c.counts > 0).sum()) == m


def test_large_corpus_hits_total(random50):
    event = Event.parse("state:q9")
    k = 20_000
    n = int(3 * event.expected_count(random50) * k)
    c = sample_corpus(random50, k, seed=0, intervention="exact", event=event, count=n)
    assert c.total_count == n
    assert int(c.lengths.sum()) == c.tokens.numel()


def test_random_generator_is_valid_for_many_seeds():
    for seed in range(30):
        pfsa = random_pfsa(12, 4, seed, seed)
        assert all(pfsa.coaccessible())
        assert float(pfsa.allsum()) == pytest.approx(1.0, abs=1e-9)


def test_inverse_cdf_never_picks_zero_weights():
    from cfl_lightning.sampling.draw import inverse_cdf

    weights = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    u = torch.tensor([0.0, 0.0], dtype=torch.float64)
    assert inverse_cdf(weights, u).tolist() == [1, 2]
    # u * total rounding up to the total (u = 1 here) falls back to the last positive entry
    assert inverse_cdf(weights, torch.ones(2, dtype=torch.float64)).tolist() == [3, 2]
    draws = inverse_cdf(weights[:1].expand(20_000, -1), torch.rand(20_000, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(0)))
    counts = torch.bincount(draws, minlength=5)
    assert counts[0] == counts[2] == counts[4] == 0 and abs(int(counts[1]) - 10_000) < 400


@pytest.mark.parametrize("k,factor", [(1_000, 175), (2, 0)])
def test_far_above_natural_corpus_is_exact(random50, device, k, factor):
    """N ~ 10^5 over 1,000 strings (175x natural) and N = 0: exact totals, valid strings."""
    event = Event.parse("state:q9")
    n = int(factor * event.expected_count(random50) * k)
    c = sample_corpus(
        random50, k, seed=3, intervention="exact", event=event, count=n, device=device
    )
    assert c.total_count == n and len(c) == k
    fn = event.function(random50)
    assert c.counts[:100].tolist() == recount(random50, fn, c.to_lists()[:100])


@pytest.mark.parametrize("clamp", [False, True])
def test_lifted_table_equals_rows_per_step(random50, clamp):
    fn = Event.parse("state:q9").function(random50)
    bins = backward_fast(random50, fn, 40, tail=clamp)
    lazy = paths.LiftedChain(random50, fn, bins, clamp)
    table = lazy.tabulate()
    z = torch.arange(40 * random50.num_states)
    assert torch.equal(table.cdf(z), lazy.cdf(z))
    assert not torch.isnan(table.cdf(z)).any() and torch.all(table.cdf(z)[:, -1] == 1.0)
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(0, random50.num_symbols, (z.numel(),), generator=gen)
    assert torch.equal(table.move(z, a), lazy.move(z, a))


def test_guided_pick_equals_the_full_count():
    from cfl_lightning.sampling.draw import guided_pick

    gen = torch.Generator().manual_seed(0)
    weights = torch.rand(30, 40, dtype=torch.float64, generator=gen) ** 8  # crowded buckets
    weights[:, ::3] = 0.0  # zero weights are never picked
    weights[5] = 0.0
    weights[5, 7] = 1.0
    cum = weights.cumsum(1)
    cdf = cum / cum[:, -1:]
    rows = torch.randint(0, 30, (20_000,), generator=gen)
    u = torch.rand(20_000, dtype=torch.float64, generator=gen)
    u[:3] = torch.tensor([0.0, 1.0 - 2.0**-53, 0.5], dtype=torch.float64)
    full = (cdf[rows] <= u[:, None]).sum(1)
    got = guided_pick(cdf, rows, u)
    assert torch.equal(got, full)
    assert not bool((weights[rows, got] == 0).any())


def test_both_walk_assemblies_agree(random50):
    """The per-step scatter (CPU) and the concatenated scatter (GPU) build the same corpus."""
    records: dict = {}
    real = paths._assemble

    def keep(*args):
        records["args"] = args
        return real(*args)

    paths._assemble = keep
    try:
        paths.sample_paths(random50, 3000, torch.Generator().manual_seed(0))
    finally:
        paths._assemble = real
    num, ids, syms, _, dev = records["args"]
    a = paths._scatter_steps(num, ids, syms, dev)
    b = paths._scatter_once(num, ids, syms, dev)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert paths._scatter_once(4, [], [], dev)[1].tolist() == [0, 0, 0, 0, 0]


def test_split_law_with_the_gpu_choices_on_a_cpu(monkeypatch):
    """The launch-saving choices (no guide tables, bigger chunks) draw the same law."""
    from cfl_lightning.sampling import counts

    monkeypatch.setattr(counts, "few_launches", lambda device: True)
    test_split_exact_joint_law_and_exchangeability(short_pfsa())
    check_split_law_by_position("cpu", 64, ALPHA)


@pytest.mark.parametrize(
    "intervention,count", [("exact", 300), ("at_least", 300), ("at_least_once", 150)]
)
def test_every_intervention_meets_its_constraint_on_device(random50, device, intervention, count):
    """Hard constraints and independent recounts for each intervention on each device."""
    event = Event.parse("state:q9")
    c = sample_corpus(
        random50, 200, seed=5, intervention=intervention, event=event, count=count, device=device
    )
    counts = c.counts.tolist()
    assert counts == recount(random50, event.function(random50), c.to_lists())
    if intervention == "exact":
        assert sum(counts) == count
    elif intervention == "at_least":
        assert sum(counts) >= count
    else:
        assert sum(x > 0 for x in counts) == count
