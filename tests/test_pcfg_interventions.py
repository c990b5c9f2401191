"""PCFG count interventions: the count law and exact conditioned corpora (issue 50 item 3).

Every law is compared with an independent reference that enumerates leftmost derivations
(``tests/pcfg_count_reference.py``: no power series, no fixed point), on an ambiguous grammar
and on a left-recursive one with a unit rule and a unit cycle; closed forms far above the
natural count; sampled strings by chi-square (fixed seeds) against the conditional law of
strings from enumeration, with a negative control.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from cfl_lightning.automata.pcfg import check_grammar, parse_grammar
from cfl_lightning.errors import EventError, InterventionError
from cfl_lightning.sampling.pcfg.conditioned import (
    AT_LEAST,
    EXACT,
    generate_conditioned,
    sample_at_least,
    sample_at_least_once,
    sample_exact,
    split_budget,
)
from cfl_lightning.sampling.pcfg.count_law import (
    count_series,
    event_degrees,
    expected_count,
    log_count_law,
)
from tests.pcfg_count_reference import (
    count_law,
    event_count,
    rule_degrees,
    string_count_law,
    string_law,
)

#: ambiguous (S S splits a string many ways); '(' optional (strings of x have none)
AMBIGUOUS = "S -> S S [0.15] | '(' S ')' [0.15] | '(' ')' [0.3] | 'x' [0.4]\n"
#: left recursion, a unit rule (E -> T) and a unit cycle (T -> F -> T)
LEFT = """E -> E '+' T [0.3] | T [0.7]
T -> 'a' [0.5] | '(' E ')' [0.2] | F [0.3]
F -> T [0.4] | 'b' [0.6]
"""
#: two occurrences of 'a' in one rule: the count of 'a' is always even
EVEN = "S -> 'a' S 'a' [0.3] | 'b' S [0.2] | 'b' [0.5]\n"


def _grammar(text):
    grammar = parse_grammar(text)
    check_grammar(grammar)
    return grammar


@pytest.mark.parametrize("text,event,ref_event", [
    (AMBIGUOUS, "symbol:(", "symbol:("),
    (AMBIGUOUS, "rule:S -> S S", "rule:0"),
    (LEFT, "symbol:a", "symbol:a"),
    (LEFT, "symbol:+", "symbol:+"),
    (LEFT, "rule:T -> F", "rule:4"),
    (EVEN, "symbol:a", "symbol:a"),
])
def test_count_law_matches_enumeration(text, event, ref_event):
    grammar = _grammar(text)
    ref, dropped = count_law(grammar, rule_degrees(grammar, ref_event), 6)
    assert dropped < 1e-11  # the enumeration is complete to this mass
    ours = np.exp(log_count_law(grammar, event, 6))
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-10 + dropped)


def test_tails_are_one_minus_the_law():
    grammar = _grammar(LEFT)
    series = count_series(grammar, event_degrees(grammar, "symbol:a"), 30, tails=True)
    law = np.exp(series.log_f)
    tails = np.exp(series.log_t)
    expected = 1.0 - np.concatenate([np.zeros((law.shape[0], 1)), np.cumsum(law, 1)[:, :-1]], 1)
    np.testing.assert_allclose(tails, expected, atol=1e-12)


@pytest.mark.parametrize("text,event", [(AMBIGUOUS, "symbol:("), (LEFT, "symbol:a"),
                                        (LEFT, "rule:T -> F")])
def test_expected_count_is_the_mean_of_the_law(text, event):
    grammar = _grammar(text)
    law = np.exp(log_count_law(grammar, event, 400))
    assert law.sum() == pytest.approx(1.0, abs=1e-12)
    mean = float(np.arange(401) @ law)
    assert expected_count(grammar, event_degrees(grammar, event)) == pytest.approx(mean, rel=1e-10)


def test_far_above_natural_closed_forms():
    """Catalan (S -> S S | 'a') and geometric laws at counts whose probabilities underflow."""
    p = 0.1
    catalan = _grammar(f"S -> S S [{p}] | 'a' [{1 - p}]\n")
    n = np.arange(1, 1501)
    log_c = (np.array([math.lgamma(2 * k - 1) - math.lgamma(k) - math.lgamma(k + 1) for k in n])
             + (n - 1) * math.log(p) + n * math.log(1 - p))
    ours = log_count_law(catalan, "symbol:a", 1500)
    assert ours[0] == -math.inf
    np.testing.assert_allclose(ours[1:], log_c, rtol=1e-9)
    assert ours[-1] < -700  # exp underflows: kept in log space
    geometric = _grammar("S -> 'a' S [0.5] | 'b' [0.5]\n")
    ours = log_count_law(geometric, "symbol:a", 3000)
    np.testing.assert_allclose(ours, (np.arange(3001) + 1) * math.log(0.5), rtol=1e-12)


def _conditional_pairs(grammar, num_strings, total, max_length=9, symbol="("):
    """The exact law of ``K``-tuples of strings (K = 1, 2) given the total count of ``symbol``."""
    x = grammar.alphabet.index(symbol)
    law, dropped = string_law(grammar, max_length, symbol=x, max_count=total)
    assert dropped < 1e-12
    counts, _ = count_law(grammar, rule_degrees(grammar, f"symbol:{symbol}"), total)
    denom = counts[total] if num_strings == 1 else sum(
        counts[i] * counts[total - i] for i in range(total + 1))
    by_count: dict[int, list] = {}
    for s, prob in law.items():
        by_count.setdefault(event_count(s, x), []).append((s, prob))
    if num_strings == 1:
        return {(s,): prob / denom for s, prob in by_count.get(total, [])}
    return {(s, t): ps * pt / denom for i in range(total + 1)
            for s, ps in by_count.get(i, []) for t, pt in by_count.get(total - i, [])}


def _chi_square(samples: list, law: dict, min_expected: float = 5.0) -> float:
    """p-value of the samples against ``law`` (rare and unlisted outcomes in one bin)."""
    m = len(samples)
    seen = Counter(samples)
    keep = [k for k, v in law.items() if v * m >= min_expected]
    observed = [seen[k] for k in keep]
    expected = [law[k] * m for k in keep]
    rest_expected = m - sum(expected)
    if rest_expected > 1e-9 * m:
        observed.append(m - sum(observed))
        expected.append(rest_expected)
    assert len(observed) >= 2
    return float(stats.chisquare(observed, expected).pvalue)


def _draw(grammar, num_strings, total, draws, seed, mode=EXACT, event="symbol:("):
    """``draws`` corpora of ``num_strings`` strings through the sampler's own two stages."""
    series = count_series(grammar, event_degrees(grammar, event), total,
                          tails=mode == AT_LEAST)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(draws):
        strings = []
        for budget in split_budget(series, num_strings, mode, total, rng):
            tokens: list[int] = []
            generate_conditioned(series, budget, rng, tokens)
            strings.append(tuple(tokens))
        out.append(tuple(strings))
    return out


@pytest.mark.parametrize("num_strings,total", [(1, 0), (1, 1), (1, 3), (2, 0), (2, 2), (2, 6)])
def test_exact_strings_follow_the_conditional_law(num_strings, total):
    """N = 0, natural (E[count] is 0.85 per string) and 3x natural."""
    grammar = _grammar(AMBIGUOUS)
    law = _conditional_pairs(grammar, num_strings, total)
    samples = _draw(grammar, num_strings, total, 3000, seed=100 + 10 * num_strings + total)
    assert _chi_square(samples, law) > 1e-3


@pytest.mark.parametrize("num_strings,total", [(1, 0), (1, 1), (1, 3), (2, 4)])
def test_exact_strings_of_a_unit_cycle_grammar(num_strings, total):
    """Left recursion, a unit rule and a unit cycle: the budget passes through unit rules."""
    grammar = _grammar(LEFT)
    law = _conditional_pairs(grammar, num_strings, total, max_length=9, symbol="a")
    samples = _draw(grammar, num_strings, total, 3000, seed=200 + total, event="symbol:a")
    assert _chi_square(samples, law) > 1e-3


def test_rule_event_strings_follow_the_law_of_yields():
    """An ambiguous grammar: strings given the number of uses of S -> S S, summed over the
    derivations of each string that use it that often."""
    grammar = _grammar(AMBIGUOUS)
    total = 2
    law, dropped = string_count_law(grammar, rule_degrees(grammar, "rule:0"), 9, total)
    assert dropped < 1e-12
    counts, _ = count_law(grammar, rule_degrees(grammar, "rule:0"), total)
    target = {(s,): p / counts[total] for (s, c), p in law.items() if c == total}
    samples = _draw(grammar, 1, total, 3000, seed=13, event="rule:S -> S S")
    assert _chi_square(samples, target) > 1e-3


def test_chi_square_rejects_a_wrong_law():
    """Negative control: the conditional law of a slightly different grammar is rejected."""
    grammar = _grammar(AMBIGUOUS)
    wrong = _grammar("S -> S S [0.2] | '(' S ')' [0.1] | '(' ')' [0.3] | 'x' [0.4]\n")
    samples = _draw(grammar, 1, 3, 3000, seed=7)
    assert _chi_square(samples, _conditional_pairs(wrong, 1, 3)) < 1e-6


def test_at_least_strings_follow_the_conditional_law():
    grammar = _grammar(AMBIGUOUS)
    x = grammar.alphabet.index("(")
    law, _ = string_law(grammar, 11)
    counts, _ = count_law(grammar, rule_degrees(grammar, "symbol:("), 2)
    denom = 1.0 - sum(counts)
    target = {(s,): p / denom for s, p in law.items() if event_count(s, x) >= 3}
    samples = _draw(grammar, 1, 3, 3000, seed=11, mode=AT_LEAST)
    assert all(event_count(s[0], x) >= 3 for s in samples)
    assert _chi_square(samples, target) > 1e-3


def test_hard_constraints_far_above_natural():
    """Counts recounted from the tokens: exact, at least, at least once."""
    grammar = _grammar(LEFT)
    a = grammar.alphabet.index("a")
    for corpus, check in (
        (sample_exact(grammar, "symbol:a", 20, 400, seed=1), lambda c: c.sum() == 400),
        (sample_at_least(grammar, "symbol:a", 20, 400, seed=2), lambda c: c.sum() >= 400),
        (sample_at_least_once(grammar, "symbol:a", 20, 13, seed=3),
         lambda c: (c > 0).sum() == 13),
    ):
        recount = np.array([event_count(s, a) for s in corpus.to_lists()])
        np.testing.assert_array_equal(recount, corpus.counts.numpy())
        assert check(recount)
    zero = sample_exact(grammar, "symbol:a", 50, 0, seed=4)
    assert a not in zero.tokens.tolist()


def test_rule_event_counts_rule_uses():
    grammar = _grammar(LEFT)
    corpus = sample_exact(grammar, "rule:E -> E '+' T", 5, 40, seed=5)
    # E -> E '+' T is the only rule writing '+': its uses are the '+' in the string
    plus = grammar.alphabet.index("+")
    assert [event_count(s, plus) for s in corpus.to_lists()] == corpus.counts.tolist()
    assert corpus.total_count == 40


def test_same_seed_same_corpus():
    grammar = _grammar(AMBIGUOUS)
    one = sample_exact(grammar, "symbol:(", 30, 60, seed=9)
    two = sample_exact(grammar, "symbol:(", 30, 60, seed=9)
    assert one.tokens.tolist() == two.tokens.tolist()
    assert one.offsets.tolist() == two.offsets.tolist()


@pytest.mark.parametrize("call,error", [
    (lambda g: sample_exact(g, "symbol:b", 1, 2, seed=0), InterventionError),  # always 1
    (lambda g: sample_exact(g, "symbol:a", 1, -1, seed=0), InterventionError),
    (lambda g: sample_at_least_once(g, "symbol:a", 2, 3, seed=0), InterventionError),
    (lambda g: sample_at_least_once(g, "symbol:b", 2, 1, seed=0), InterventionError),  # all have b
    (lambda g: sample_exact(g, "symbol:z", 1, 0, seed=0), EventError),
    (lambda g: sample_exact(g, "rule:S -> 'z'", 1, 0, seed=0), EventError),
])
def test_impossible_requests_are_refused_in_one_line(call, error):
    grammar = _grammar("S -> 'a' S [0.5] | 'b' [0.5]\n")
    with pytest.raises(error) as caught:
        call(grammar)
    assert "\n" not in str(caught.value)


def test_a_count_off_the_lattice_is_refused():
    grammar = _grammar(EVEN)
    with pytest.raises(InterventionError, match="exactly 3 times"):
        sample_exact(grammar, "symbol:a", 1, 3, seed=0)
    assert sample_exact(grammar, "symbol:a", 2, 3 * 2, seed=0).total_count == 6
    assert np.all(np.isinf(log_count_law(grammar, "symbol:a", 41)[1::2]))


def test_an_event_that_never_occurs_is_refused():
    grammar = _grammar("S -> 'a' S [0.5] | 'b' [0.5] | 'c' [0.0]\n")
    with pytest.raises(InterventionError, match="cannot occur"):
        sample_exact(grammar, "symbol:c", 3, 1, seed=0)
    assert sample_exact(grammar, "symbol:c", 3, 0, seed=0).total_count == 0


def _pair_law(grammar, keep, max_length=8):
    """``P(s) P(t)`` over pairs of strings (of at most ``max_length`` symbols) that ``keep``
    accepts (by their counts of '('), unnormalized."""
    x = grammar.alphabet.index("(")
    law, dropped = string_law(grammar, max_length)
    assert dropped < 1e-12
    return {(s, t): ps * pt for s, ps in law.items() for t, pt in law.items()
            if keep(event_count(s, x), event_count(t, x))}


def test_at_least_pairs_follow_the_conditional_law():
    """K = 2, total at least 3 (the halves' split with tails)."""
    grammar = _grammar(AMBIGUOUS)
    counts, _ = count_law(grammar, rule_degrees(grammar, "symbol:("), 3)
    denom = 1.0 - sum(counts[i] * counts[j] for i in range(3) for j in range(3 - i))
    target = {k: v / denom for k, v in _pair_law(grammar, lambda i, j: i + j >= 3).items()}
    samples = _draw(grammar, 2, 3, 3000, seed=12, mode=AT_LEAST)
    assert _chi_square(samples, target) > 1e-3


def test_at_least_once_pairs_follow_the_conditional_law():
    """K = 2, exactly one string contains '(' (which one is uniform)."""
    grammar = _grammar(AMBIGUOUS)
    counts, _ = count_law(grammar, rule_degrees(grammar, "symbol:("), 0)
    q = 1.0 - counts[0]
    raw = _pair_law(grammar, lambda i, j: (i > 0) != (j > 0))
    target = {k: v / (2 * q * (1 - q)) for k, v in raw.items()}
    samples = [tuple(map(tuple, sample_at_least_once(grammar, "symbol:(", 2, 1, seed=s).to_lists()))
               for s in range(2000)]
    assert _chi_square(samples, target) > 1e-3
