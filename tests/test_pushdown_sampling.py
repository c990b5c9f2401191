"""Pushdown count laws and conditioned sampling against the brute-force reference (explicit stack).

Every law test has a negative control: the same check rejects a wrong law.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cfl_lightning.automata.pushdown import PushdownAutomaton
from cfl_lightning.automata.pushdown_events import parse_event
from cfl_lightning.automata.pushdown_generators import anbn_pda
from cfl_lightning.errors import InterventionError
from cfl_lightning.sampling import backend_for, sample_corpus
from cfl_lightning.sampling.counts import CountLaw, split_exact
from cfl_lightning.sampling.pushdown_backend import PushdownBackend, PushdownEventCounts
from cfl_lightning.sampling.pushdown_conditioned import ConditionedWalk, generate_conditioned
from cfl_lightning.sampling.pushdown_law import ExcursionSeries
from cfl_lightning.sampling.pushdown_series import ScaledSeries, combine, convolve
from cfl_lightning.sampling.pushdown_tables import walk_tables
from tests import pushdown_reference as ref
from tests.reference import chi_square_pvalue


def bounded_json() -> dict:
    """``s0`` reads ``x`` once (or ends), then Dyck-1 in ``s1``: ``state:s0`` occurs at most once.
    """
    arcs = [
        {"source": "s0", "top": None, "symbol": "x", "target": "s1", "weight": 0.6},
        {"source": "s1", "top": None, "symbol": "(", "target": "s1", "push": "X", "weight": 0.5},
        {"source": "s1", "top": "X", "symbol": "(", "target": "s1", "push": "X", "weight": 0.3},
        {"source": "s1", "top": "X", "symbol": ")", "target": "s1", "pop": True, "weight": 0.7},
    ]
    return {"kind": "pushdown", "alphabet": ["x", "(", ")"], "states": ["s0", "s1"],
            "stack_alphabet": ["X"], "initial": "s0", "final": {"s0": 0.4, "s1": 0.5},
            "transitions": arcs}  # fmt: skip


AUTOMATA = {
    "dyck1": ref.dyck_json(1),
    "dyck2": ref.dyck_json(2, open_probs=[0.3, 0.7]),
    "anbn": ref.anbn_json(0.4),
    "two": ref.two_state_json(),
    "bounded": bounded_json(),
}
PREDICATES = {
    "symbol": ref.symbol_event, "push": ref.push_event, "state": ref.state_event,
}  # fmt: skip


def predicate(spec: str):
    kind, rest = spec.split(":", 1)
    if kind == "transition":
        cls, sym = rest.rsplit(":", 1)
        return ref.transition_event(cls, sym)
    return PREDICATES[kind](rest)


@lru_cache(maxsize=None)
def automaton(name: str) -> PushdownAutomaton:
    return PushdownAutomaton.from_dict(AUTOMATA[name])


@lru_cache(maxsize=None)
def enumeration(name: str, max_len: int) -> ref.Enumeration:
    return ref.enumerate_pda(AUTOMATA[name], max_len, 1e-13)


def series(name: str, event: str) -> ExcursionSeries:
    pda = automaton(name)
    return ExcursionSeries.of(pda, pda.event_table(parse_event(event)))


def law_within(law: np.ndarray, reference: dict[int, float], missing: float) -> bool:
    """Each coefficient is at least the enumerated mass and at most it plus the missing mass."""
    got = [reference.get(n, 0.0) for n in range(len(law))]
    return all(r - 1e-12 <= p <= r + missing + 1e-12 for p, r in zip(law, got))


# ---------------------------------------------------------------------------- the count law
CASES = [
    ("dyck1", "symbol:("), ("dyck2", "push:["), ("dyck2", "transition:q/-:("), ("anbn", "symbol:a"),
    ("two", "symbol:a"), ("two", "transition:p/-:b"), ("two", "push:Y"), ("two", "state:q"),
    ("bounded", "state:s0"), ("bounded", "symbol:("),
]  # fmt: skip


@pytest.mark.parametrize("name,event", CASES)
def test_count_law_matches_enumeration(name, event):
    enum = enumeration(name, 10 if name == "dyck2" else 14)
    assert enum.missing < 0.15
    law = series(name, event).log_law(8).exp().numpy()
    assert law_within(law, enum.count_law(predicate(event)), enum.missing)


@pytest.mark.parametrize(
    "name,event", [("dyck1", "symbol:("), ("anbn", "symbol:a"), ("bounded", "symbol:(")]
)
def test_count_law_exact_where_enumeration_is_complete(name, event):
    """Strings with ``n <= 6`` occurrences have at most 13 symbols: enumerated completely."""
    exact = ref.enumerate_pda(AUTOMATA[name], 14).count_law(predicate(event))
    law = series(name, event).log_law(6).exp().numpy()
    expected = np.array([exact.get(n, 0.0) for n in range(7)])
    assert np.allclose(law, expected, rtol=0, atol=1e-13)
    assert not np.allclose(law, expected * (1 + 1e-9), rtol=0, atol=1e-13)  # negative control


def test_count_law_negative_control():
    """A slightly different automaton's law is rejected by the same check."""
    other = ref.two_state_json()
    other["transitions"][0]["weight"], other["transitions"][1]["weight"] = 0.28, 0.22
    pda = PushdownAutomaton.from_dict(other)
    law = ExcursionSeries.of(pda, pda.event_table(parse_event("symbol:a"))).log_law(8).exp()
    enum = enumeration("two", 14)
    assert not law_within(law.numpy(), enum.count_law(ref.symbol_event("a")), enum.missing)


def test_law_mass_is_one():
    """sum_{n < L} P(n) + P(count >= L) = 1 to 1e-12; a bounded law sums to 1 on its support."""
    s = series("two", "symbol:a")
    law, tails = s.log_law(40).exp(), s.log_tails(41).exp()
    assert abs(float(law.sum() + tails[41]) - 1.0) < 1e-12
    assert abs(float(law.sum()) - 1.0) > 1e-9  # negative control: without the tail it fails
    bounded = series("bounded", "state:s0").log_law(6)
    assert abs(float(bounded.exp().sum()) - 1.0) < 1e-12
    assert bool(torch.isneginf(bounded[2:]).all()) and not bool(torch.isnan(bounded).any())
    assert abs(float(bounded[1:].exp().sum()) - 1.0) > 1e-3  # negative control


def test_large_counts_neither_underflow_nor_nan():
    """a^n b^n: P(n) = (1 - p) p^n in closed form, far below float64's range at n = 2000."""
    law = series("anbn", "symbol:a").log_law(2000)
    n = torch.arange(2001, dtype=torch.float64)
    closed = math.log(0.6) + n * math.log(0.4)
    assert float((law - closed).abs().max()) < 1e-9
    assert float((law - (closed + 1e-6)).abs().max()) > 1e-7  # negative control
    even = series("dyck1", "state:q").log_law(601)  # counts every symbol: lengths are even
    assert not bool(torch.isnan(even).any())
    assert bool(torch.isneginf(even[1::2]).all()) and bool(torch.isfinite(even[0::2]).all())
    tails = series("dyck1", "state:q").log_tails(602).exp()
    assert abs(float(even.exp().sum() + tails[602]) - 1.0) < 1e-12


def test_tails_match_enumeration():
    """Dyck-1, ``(`` count: P(>= n) = 1 - P(< n), the latter enumerated completely."""
    tails = series("dyck1", "symbol:(").log_tails(5).exp().numpy()
    exact = ref.enumerate_pda(AUTOMATA["dyck1"], 10).count_law(ref.symbol_event("("))
    expected = [1.0 - sum(exact.get(k, 0.0) for k in range(n)) for n in range(6)]
    assert np.allclose(tails, expected, rtol=0, atol=1e-12)
    assert not np.allclose(tails[1:], expected[:-1], rtol=0, atol=1e-6)  # negative control


def test_max_per_string():
    pda = automaton("bounded")
    assert PushdownEventCounts(pda, parse_event("state:s0")).max_per_string() == 1
    assert PushdownEventCounts(pda, parse_event("symbol:(")).max_per_string() is None
    two = automaton("two")
    assert PushdownEventCounts(two, parse_event("transition:p/-:b")).max_per_string() is None


# ---------------------------------------------------------------------------- semiring laws
def _random_series(rng, size: int, shape, spread: float) -> ScaledSeries:
    out = ScaledSeries(shape, capacity=2)
    for _ in range(size):
        out.append((rng.random(shape) * (rng.random(shape) < 0.8), float(rng.normal(0, spread))))
    return out


def _dense(s: ScaledSeries) -> np.ndarray:
    return s.values[: s.size] * np.exp(s.log_scale[: s.size]).reshape(-1, 1, 1, 1)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(0, 6), spread=st.floats(0.0, 5.0))
def test_convolution_matches_plain_sum_and_is_associative(seed, m, spread):
    rng = np.random.default_rng(seed)
    a, b, c = (_random_series(rng, m + 1, (2, 3, 3), spread) for _ in range(3))
    term = convolve(a, b, m, 0, m)
    dense_a, dense_b = _dense(a), _dense(b)
    plain = sum(np.matmul(dense_a[i], dense_b[m - i]) for i in range(m + 1))
    got = np.zeros_like(plain) if term is None else term[0] * math.exp(term[1])
    assert np.allclose(got, plain, rtol=1e-12, atol=1e-300)
    assert term is None or not np.allclose(got * 1.001, plain, rtol=1e-6, atol=0)  # control
    # (a b) c == a (b c) at degree m
    ab, bc = ScaledSeries((2, 3, 3)), ScaledSeries((2, 3, 3))
    for n in range(m + 1):
        ab.append(convolve(a, b, n, 0, n))
        bc.append(convolve(b, c, n, 0, n))
    left, right = convolve(ab, c, m, 0, m), convolve(a, bc, m, 0, m)
    if left is None or right is None:
        assert left is None and right is None
        return
    assert np.allclose(left[0] * math.exp(left[1] - right[1]), right[0], rtol=1e-10, atol=1e-14)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), shift=st.floats(-50, 50))
def test_combine_is_scale_invariant(seed, shift):
    rng = np.random.default_rng(seed)
    terms = [(rng.random(4), float(rng.normal(0, 3))) for _ in range(3)]
    moved = [(v * math.exp(-shift), s + shift) for v, s in terms]
    a, b = combine(terms), combine(moved)
    assert a is not None and b is not None
    assert np.allclose(a[0] * math.exp(a[1] - b[1]), b[0], rtol=1e-12)
    assert combine([None, (np.zeros(2), -math.inf)]) is None


def _random_pda_tensors(rng, q: int, g: int, s: int):
    """Sub-stochastic random tensors (row sums 0.8): the series converge at |z| <= 1."""
    target = torch.from_numpy(rng.integers(0, q, (q, g + 1, s)))
    action = torch.from_numpy(rng.integers(-2, g, (q, g + 1, s)))
    action[:, g] = torch.where(action[:, g] == -2, -1, action[:, g])
    weights = torch.from_numpy(rng.dirichlet(np.ones(s + 1), (q, g + 1)))
    final = weights[:, g, s] * 0.8
    weights = weights[..., :s] * 0.8 * torch.from_numpy(rng.random((q, g + 1, s)) < 0.9)
    degrees = torch.from_numpy(rng.integers(0, 3, (q, g + 1, s)))
    return target, action, weights, final, degrees


def _kleene_truncated(target, action, weights, final, degrees, order: int) -> np.ndarray:
    """The excursion system iterated on polynomials truncated at ``order`` (plain numpy)."""
    q, g1, s = target.shape
    g = g1 - 1
    e = np.zeros((g, q, q, order + 1))
    t = np.zeros((q, order + 1))

    def shift(poly, d):
        return np.concatenate([np.zeros(poly.shape[:-1] + (d,)), poly[..., : order + 1 - d]], -1)

    def mul(a, b):
        return np.convolve(a, b)[: order + 1]

    for _ in range(400):
        new_e, new_t = np.zeros_like(e), np.zeros_like(t)
        new_t[:, 0] = final.numpy()
        for p in range(q):
            for top in range(g1):
                for a in range(s):
                    w = float(weights[p, top, a])
                    if w == 0:
                        continue
                    dst, act = int(target[p, top, a]), int(action[p, top, a])
                    d = int(degrees[p, top, a])
                    for r in range(q if top < g else 1):
                        after = e[top, :, r] if top < g else t  # continuation from a state
                        if act == -2:
                            if dst == r:
                                new_e[top, p, r] += shift(w * np.eye(1, order + 1)[0], d)
                            continue
                        if act == -1:
                            cont = after[dst]
                        else:
                            cont = sum(mul(e[act, dst, u], after[u]) for u in range(q))
                        (new_e[top, p, r] if top < g else new_t[p])[:] += shift(w * cont, d)
        if np.allclose(new_e, e, atol=1e-15, rtol=0) and np.allclose(new_t, t, atol=1e-15, rtol=0):
            break
        e, t = new_e, new_t
    return t


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), q=st.integers(1, 2), g=st.integers(1, 2))
def test_coefficient_recursion_equals_fixed_point_on_truncated_series(seed, q, g):
    rng = np.random.default_rng(seed)
    target, action, weights, final, degrees = _random_pda_tensors(rng, q, g, 3)
    order = 5
    s = ExcursionSeries(target, action, weights, final, 0, degrees)
    s.ensure(order)
    got = s.v.log(order + 1).exp()[:, g, :, 0].T.numpy()  # [Q, order + 1]
    expected = _kleene_truncated(target, action, weights, final, degrees, order)
    assert np.allclose(got, expected, rtol=1e-9, atol=1e-13)
    assert not np.allclose(np.roll(got, 1, axis=1), expected, rtol=1e-3, atol=1e-6) or not (
        expected[:, 1:].any()
    )  # negative control: a degree shift is rejected (unless the series is constant)


# ---------------------------------------------------------------------------- conditioned strings
def _walk(pda: PushdownAutomaton, table: torch.Tensor, budget: int, tails: bool = False):
    s = ExcursionSeries.of(pda, table)
    return ConditionedWalk(pda, table.reshape(pda.target.shape), walk_tables(s, budget, tails))


def _strings(pda: PushdownAutomaton, corpus) -> Counter:
    return Counter(tuple(pda.alphabet[i] for i in s) for s in corpus.to_lists())


def _conditional(name: str, event, n: int, max_len: int) -> dict:
    """Exact law of the strings with exactly ``n`` occurrences (finite support within max_len)."""
    enum = ref.enumerate_pda(AUTOMATA[name], max_len)
    return enum.conditional_law(event, n)


EXACT_CASES = [  # finite conditional supports: complete enumeration
    ("dyck1", "symbol:(", 3, 6), ("dyck2", "state:q", 6, 6), ("bounded", "symbol:(", 2, 5),
]


@pytest.mark.parametrize("name,event,n,max_len", EXACT_CASES[:1])
def test_exact_conditioned_strings_quick(name, event, n, max_len):
    _check_exact(name, event, n, max_len, 3000)


@pytest.mark.slow
@pytest.mark.parametrize("name,event,n,max_len", EXACT_CASES)
def test_exact_conditioned_strings(name, event, n, max_len):
    _check_exact(name, event, n, max_len, 40_000)


def _check_exact(name, event, n, max_len, draws):
    pda = automaton(name)
    table = pda.event_table(parse_event(event))
    pred = predicate(event)
    exact = _conditional(name, pred, n, max_len)
    corpus = generate_conditioned(
        _walk(pda, table, n), pda.initial, torch.full((draws,), n), torch.Generator().manual_seed(7)
    )
    assert bool((_recount(pda, corpus, event) == n).all())  # counted from the strings
    observed = _strings(pda, corpus)
    assert chi_square_pvalue(observed, exact, draws) > 1e-4
    uniform = {k: 1.0 / len(exact) for k in exact}  # negative control: a wrong law is rejected
    assert len(exact) < 2 or chi_square_pvalue(observed, uniform, draws) < 1e-6


def test_conditioned_on_length_two_state():
    """Every symbol counted (a custom [C, S] table): strings of exactly 4 symbols, every action."""
    pda = automaton("two")
    table = torch.ones(pda.num_classes, pda.num_symbols, dtype=torch.long)
    exact = {k: v for k, v in ref.enumerate_pda(AUTOMATA["two"], 4).law().items() if len(k) == 4}
    total = sum(exact.values())
    exact = {k: v / total for k, v in exact.items()}
    corpus = generate_conditioned(
        _walk(pda, table, 4), pda.initial, torch.full((6000,), 4), torch.Generator().manual_seed(3)
    )
    observed = _strings(pda, corpus)
    assert chi_square_pvalue(observed, exact, 6000) > 1e-4
    skewed = {k: v * (1.5 if k[0] == "a" else 1.0) for k, v in exact.items()}
    norm = sum(skewed.values())
    assert chi_square_pvalue(observed, {k: v / norm for k, v in skewed.items()}, 6000) < 1e-6


@pytest.mark.parametrize("draws", [pytest.param(40_000, marks=pytest.mark.slow), 4000])
def test_at_least_conditioned_strings(draws):
    """Dyck-1 given at least 2 ``(``: P(s) / P(>= 2), with P(< 2) enumerated completely."""
    pda = automaton("dyck1")
    table = pda.event_table(parse_event("symbol:("))
    below = ref.enumerate_pda(AUTOMATA["dyck1"], 2).count_law(ref.symbol_event("("))
    at_least = 1.0 - below.get(0, 0.0) - below.get(1, 0.0)
    strings = ref.enumerate_pda(AUTOMATA["dyck1"], 10).strings
    opens = ref.symbol_event("(")
    expected = {s.symbols: s.prob / at_least for s in strings if s.count(opens) >= 2}
    corpus = generate_conditioned(
        _walk(pda, table, 2, tails=True), pda.initial, torch.full((draws,), 2),
        torch.Generator().manual_seed(11), at_least=True,
    )  # fmt: skip
    assert bool((corpus.counts >= 2).all())
    observed = _strings(pda, corpus)
    assert chi_square_pvalue(observed, expected, draws) > 1e-4
    exact2 = {k: v for k, v in expected.items() if len(k) == 4}  # negative control: exactly 2
    norm = sum(exact2.values())
    assert chi_square_pvalue(observed, {k: v / norm for k, v in exact2.items()}, draws) < 1e-6


@pytest.mark.parametrize("draws", [pytest.param(20_000, marks=pytest.mark.slow), 2000])
def test_corpus_positions_and_counts_given_total(draws):
    """K = 3 strings, total 4 ``(`` (Dyck-1): first and last string and their counts vs exact."""
    pda, k, total = automaton("dyck1"), 3, 4
    event = parse_event("symbol:(")
    counts = PushdownEventCounts(pda, event)
    pmf = counts.law(total).log_pmf.exp().numpy()
    gen = torch.Generator().manual_seed(5)
    budgets = split_exact(counts.law_for_total(k, total), k, total, gen, draws=draws)
    assert bool((budgets.sum(1) == total).all())
    corpus = counts.generate(budgets.reshape(-1), torch.Generator().manual_seed(6))
    lists = corpus.to_lists()
    two = np.convolve(pmf, pmf)[: total + 1]
    three = np.convolve(two, pmf)[total]
    strings = ref.enumerate_pda(AUTOMATA["dyck1"], 2 * total).strings
    for pos in (0, k - 1):
        seen = Counter(tuple(pda.alphabet[i] for i in lists[d * k + pos]) for d in range(draws))
        exact = {}
        for s in strings:
            c = s.count(ref.symbol_event("("))
            exact[s.symbols] = s.prob * two[total - c] / three
        assert chi_square_pvalue(seen, exact, draws) > 1e-4
        per_count = Counter(int(b) for b in budgets[:, pos])
        law = {j: pmf[j] * two[total - j] / three for j in range(total + 1)}
        assert chi_square_pvalue(per_count, law, draws) > 1e-4
        wrong = {j: pmf[j] / pmf[: total + 1].sum() for j in range(total + 1)}  # negative control
        assert chi_square_pvalue(per_count, wrong, draws) < 1e-6


# ---------------------------------------------------------------------------- interventions
def _recount(pda: PushdownAutomaton, corpus, event: str) -> torch.Tensor:
    """Per-string counts from the automaton's own annotation (independent of the sampler)."""
    classes = pda.annotate(corpus.tokens, corpus.offsets)  # also checks the support
    table = pda.event_table(parse_event(event))
    owner = torch.repeat_interleave(torch.arange(len(corpus)), corpus.lengths)
    before = classes[torch.arange(corpus.tokens.numel()) + owner]  # class before each symbol
    hits = table[before, corpus.tokens]
    return torch.zeros(len(corpus), dtype=torch.long).index_add_(0, owner, hits)


@pytest.mark.parametrize(
    "name,event,kind,n",
    [("two", "symbol:a", "exact", 37), ("two", "symbol:a", "exact", 0),
     ("two", "push:Y", "exact", 400),
     ("two", "transition:p/-:b", "at_least", 30), ("dyck2", "push:[", "at_least_once", 9),
     ("bounded", "state:s0", "exact", 20), ("bounded", "state:s0", "at_least", 15),
     ("dyck2", "transition:q/-:(", "exact", 25)],
)  # fmt: skip
def test_interventions_meet_their_targets(name, event, kind, n):
    pda, k = automaton(name), 20
    corpus = sample_corpus(pda, k, seed=4, intervention=kind, event=event, count=n)
    assert len(corpus) == k
    recount = _recount(pda, corpus, event)  # also checks every string is in the support
    assert torch.equal(recount, corpus.counts)
    if kind == "exact":
        assert int(recount.sum()) == n
    elif kind == "at_least":
        assert int(recount.sum()) >= n
    else:
        assert int((recount > 0).sum()) == n
    again = sample_corpus(pda, k, seed=4, intervention=kind, event=event, count=n)
    assert torch.equal(again.tokens, corpus.tokens) and torch.equal(again.offsets, corpus.offsets)


def test_impossible_targets_are_refused():
    pda = automaton("bounded")
    with pytest.raises(InterventionError, match="at most 1"):
        sample_corpus(pda, 5, seed=0, intervention="exact", event="state:s0", count=6)
    with pytest.raises(InterventionError, match="exceeds"):
        sample_corpus(
            pda, 5, seed=0, intervention="at_least_once", event="state:s0", count=6
        )
    every = anbn_pda(0.5, min_n=1)
    with pytest.raises(InterventionError, match="at least 1 occurrences"):  # a^n b^n, n >= 1
        sample_corpus(every, 3, seed=0, intervention="exact", event="symbol:a", count=0)
    with pytest.raises(InterventionError, match="every string contains"):
        sample_corpus(
            every, 3, seed=0, intervention="at_least_once", event="symbol:a", count=1
        )
    anbn = automaton("anbn")
    with pytest.raises(InterventionError, match="non-negative"):
        sample_corpus(anbn, 1, seed=0, intervention="exact", event="state:B", count=-1)


def test_backend_registered_and_law_window_certified():
    pda = automaton("dyck2")
    backend = backend_for(pda)
    assert isinstance(backend, PushdownBackend)
    counts = backend.event_counts(parse_event("push:["))
    k = 10_000
    total = round(k * pda.expected_occurrences()["push:["])
    window = counts.law_for_total(k, total)
    assert window.log_pmf.numel() < total + 1  # certified below N
    full = counts.law(window.log_pmf.numel() - 1)
    assert torch.equal(window.log_pmf, full.log_pmf)
    assert isinstance(window, CountLaw)
