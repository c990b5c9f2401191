"""Targets at stake in test strings, and test strings conditioned on reaching them.

References are brute-force enumerations of all strings of a small automaton up to a length
(``tests/reference.py``); nothing here uses the binning semiring except the code under test.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict

import pytest
import torch

from cfl_lightning.automata import Event
from cfl_lightning.errors import InterventionError
from cfl_lightning.sampling.visits import (
    entering_function,
    mixture_weights,
    position_counts,
    reach_probability,
    sample_visiting,
    stake_states,
    target_visits,
    visits_by_event,
)
from tests.helpers import short_pfsa
from tests.reference import chi_square_pvalue

PRUNE = 1e-9  # prefixes less likely than this are dropped: ~1e5 strings, lost mass ~1e-5


@functools.lru_cache(maxsize=None)
def _paths():
    pfsa = short_pfsa()
    table, weights, final = pfsa.next_state.tolist(), pfsa.weights.tolist(), pfsa.final.tolist()
    out, lost = [], 0.0
    frontier = [((), (pfsa.initial,), 1.0)]
    while frontier:
        grown = []
        for string, states, prob in frontier:
            q = states[-1]
            if final[q] > 0:
                out.append((string, prob * final[q], states))
            for s, t in enumerate(table[q]):
                if t >= 0 and weights[q][s] > 0:
                    p = prob * weights[q][s]
                    if p < PRUNE:
                        lost += p
                    else:
                        grown.append((string + (s,), states + (t,), p))
        frontier = grown
    return out, lost


def paths(pfsa):
    """Every string of short_pfsa but the least likely: (symbols, probability, states at
    positions 0..n); the dropped mass is LOST (below 1e-4)."""
    assert pfsa == short_pfsa()
    return _paths()[0]


LOST = _paths()[1]


def per_visit(pfsa, q, condition):
    """The distribution of the prefix at a visit to state ``q``, among strings meeting
    ``condition(string, states)``: ``{prefix: expected visits}`` normalised to sum 1."""
    mass = defaultdict(float)
    for string, prob, states in paths(pfsa):
        if not condition(string, states):
            continue
        for t, state in enumerate(states):
            if state == q:
                mass[string[:t]] += prob
    total = sum(mass.values())
    return {prefix: m / total for prefix, m in mass.items()}


def test_stake_states(small):
    # s -a-> t, s -b-> s, t -a-> u, t -b-> s, u -a-> t; all three states accept
    assert stake_states(small, "state:u").tolist() == [False, False, True]
    assert stake_states(small, "transition:t:b").tolist() == [False, True, False]
    assert stake_states(small, "symbol:b").tolist() == [True, True, False]
    assert stake_states(small, Event("symbol", symbol="a")).tolist() == [True, True, True]


def test_counts_of_positions_at_stake(small):
    states = torch.tensor([[0, 1, 2, 1, 9], [0, 0, 1, 9, 9]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
    counts = position_counts(states, mask, 3)
    assert counts.tolist() == [3, 3, 1]
    assert target_visits(small, "state:u", counts) == 1
    assert target_visits(small, "transition:t:a", counts) == 3
    assert target_visits(small, "symbol:b", counts) == 6  # b possible at s and t
    visits = visits_by_event(small, counts)
    assert visits["state"] == {"s": 3, "t": 3, "u": 1}
    assert visits["symbol"] == {"a": 7, "b": 6, "EOS": 7}
    assert visits["transition"]["u:a"] == 1 and "u:b" not in visits["transition"]
    assert visits["transition"]["t:EOS"] == 3


def test_reach_probability_matches_enumeration(small):
    for event in ("state:u", "state:t", "transition:t:a", "symbol:b"):
        stake = stake_states(small, event)
        at = {q for q, hit in enumerate(stake.tolist()) if hit}
        brute = sum(p for _, p, states in paths(small) if at.intersection(states))
        assert reach_probability(small, stake) == pytest.approx(brute, abs=LOST + 1e-12), event
    assert reach_probability(small, stake_states(small, "state:u")) < 0.5  # a rare-ish target


def test_conditioning_on_reaching_keeps_the_per_visit_prefix_law(small):
    """The unweighted contribution of u is the same under P and under P(. | reach u)."""
    u = 2
    plain = per_visit(small, u, lambda string, states: True)
    reached = per_visit(small, u, lambda string, states: u in states)
    assert LOST < 1e-4
    assert plain.keys() == reached.keys()
    assert max(abs(plain[x] - reached[x]) for x in plain) < 1e-12
    # so is any per-visit average, e.g. of a prefix-dependent "KL" g(x)
    def g(prefix):
        return 0.1 * len(prefix) + 0.5 * prefix.count(1)

    assert sum(p * g(x) for x, p in reached.items()) == pytest.approx(
        sum(p * g(x) for x, p in plain.items()), rel=1e-9
    )
    # negative control: conditioning on the intervention event of state:u (a transition
    # *leaving* u) drops strings that stop at their first visit (final weight 0.4), which tilts
    # the law towards later visits
    leave = Event.parse("state:u").function(small).tolist()
    tilted = per_visit(
        small,
        u,
        lambda string, states: any(leave[q][s] for q, s in zip(states, string)),
    )
    assert max(abs(plain[x] - tilted.get(x, 0.0)) for x in plain) > 1e-3
    assert sum(p * g(x) for x, p in tilted.items()) > sum(p * g(x) for x, p in plain.items()) + 1e-3


def test_sample_visiting_draws_the_conditioned_law(small):
    stake = stake_states(small, "state:u")
    p_reach = reach_probability(small, stake)
    gen = torch.Generator().manual_seed(0)
    corpus = sample_visiting(small, 20_000, gen, stake)
    table = small.next_state.tolist()

    def reaches(string):
        q = small.initial
        for s in string:
            q = table[q][s]
            if q == 2:
                return True
        return False

    drawn = Counter(tuple(s) for s in corpus.to_lists())
    assert all(reaches(s) for s in drawn)  # hard constraint
    law = {s: p / p_reach for s, p, states in paths(small) if 2 in states}
    assert chi_square_pvalue(drawn, law, len(corpus)) > 1e-3
    # negative control: the unconditioned law is rejected
    plain = {s: p for s, p, _ in paths(small)}
    assert chi_square_pvalue(drawn, plain, len(corpus)) < 1e-6
    # same seed, same strings
    again = sample_visiting(small, 20_000, torch.Generator().manual_seed(0), stake)
    assert torch.equal(again.tokens, corpus.tokens) and torch.equal(again.offsets, corpus.offsets)


def test_sample_visiting_edge_cases(small):
    gen = torch.Generator().manual_seed(1)
    # the initial state is at stake: every string reaches it, plain sampling
    stake = stake_states(small, "symbol:b")
    assert reach_probability(small, stake) == 1.0
    assert len(sample_visiting(small, 5, gen, stake)) == 5
    with pytest.raises(InterventionError, match="no string"):
        sample_visiting(small, 5, gen, torch.zeros(3, dtype=torch.bool))
    fn = entering_function(small, stake_states(small, "state:u"))
    assert fn.tolist() == [[0, 0], [1, 0], [0, 0]]  # only t -a-> u enters u


def test_mixture_weights_restore_every_states_visits(small):
    """sum_y mix(y) w(y) visits_q(y) = p_pi(q) for every state, not only the target's."""
    u = 2
    stake = stake_states(small, "state:u")
    p_reach = reach_probability(small, stake)
    n, m = 300, 200
    reached = torch.tensor([u in states for _, _, states in paths(small)])
    weights = mixture_weights(reached, n, m, p_reach)
    assert len(set(weights[reached].tolist())) == 1  # every visit to u weighs the same
    visits, conditioned = [0.0] * small.num_states, [0.0] * small.num_states
    for (_, prob, states), hit, w in zip(paths(small), reached.tolist(), weights.tolist()):
        mix = (n * prob + m * prob * hit / p_reach) / (n + m)
        for q in states:
            visits[q] += mix * w
            conditioned[q] += mix
    visits = torch.tensor(visits, dtype=torch.float64)
    conditioned = torch.tensor(conditioned, dtype=torch.float64)
    exact = small.expected_visits().double()
    assert torch.allclose(visits, exact, atol=1e-3)  # what the enumeration leaves out
    assert (visits - exact).abs().max() < 0.1 * (conditioned - exact).abs().max()
    # negative control: without the weights the mixture over-counts the states on the way to u
    assert not torch.allclose(conditioned, exact, atol=1e-3)
    assert mixture_weights(reached, n, 0, p_reach).unique().tolist() == [1.0]
    with pytest.raises(ValueError):
        mixture_weights(reached, n, m, 0.0)


def test_state_visits_metric_sums_batches_and_merges():
    from cfl_lightning.metrics.state_visits import StateVisits

    states = torch.tensor([[0, 1, 2, 1], [0, 0, 1, 2]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    one, other = StateVisits(3), StateVisits(3)
    one.update(states[:1], mask[:1])
    other.update(states[1:], mask[1:])
    one.merge_state(other)  # what the reduction across processes does
    whole = StateVisits(3)
    whole.update(states, mask)
    assert one.compute().tolist() == whole.compute().tolist() == [3, 2, 2]
    whole.reset()
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert whole.compute().tolist() == [0, 0, 0]
