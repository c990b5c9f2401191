"""PCFG core: reading, checks, normal form, exact next-symbol laws, unconstrained sampling.

Every law is compared with an independent reference that enumerates leftmost derivations of
the grammar as written (``tests/pcfg_reference.py``: no normal form, no inside pass), on
ambiguous, left-recursive and unit-rule grammars; closed forms for termination and length.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch
from scipy import stats

from cfl_lightning.automata.pcfg import (
    check_grammar,
    expected_length,
    grammar_from_dict,
    grammar_to_dict,
    next_symbol_laws,
    normal_form,
    parse_grammar,
    termination_probabilities,
)
from cfl_lightning.errors import GrammarError
from cfl_lightning.sampling.pcfg import generate_strings
from tests.pcfg_reference import (
    BAD,
    DYCK,
    EXPR,
    GRAMMARS,
    UNITS,
    prefix_and_string_probability,
    reference_laws,
)



def _grammar(name: str):
    g = parse_grammar(GRAMMARS[name], f"{name}.pcfg")
    check_grammar(g)
    return g


def _ids(g, text: str) -> tuple[int, ...]:
    return tuple(g.alphabet.index(c) for c in text)


STRINGS = {
    "dyck": ["()", "(())", "()()", "()(())()", "((()))"],
    "expr": ["x", "x+y", "x+y*x", "(x+y)*y+x", "x*y*x+y"],
    "units": ["c", "acb", "dc", "addcb", "aadcbb"],
}


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_next_symbol_laws_equal_the_enumerated_reference(name):
    g = _grammar(name)
    nf = normal_form(g)
    words = [_ids(g, s) for s in STRINGS[name]]
    n = max(map(len, words))
    tokens = torch.tensor([w + (0,) * (n - len(w)) for w in words])
    laws = next_symbol_laws(nf, tokens, torch.tensor([len(w) for w in words]))
    for b, w in enumerate(words):
        expected = reference_laws(g, w)
        np.testing.assert_allclose(laws[b, : len(w) + 1].numpy(), expected, atol=1e-9)


def test_the_reference_is_not_vacuous():
    """A grammar with one weight changed gives other laws (the comparison can fail)."""
    g = _grammar("expr")
    other = parse_grammar(EXPR.replace("[0.25] | F [0.75]", "[0.3] | F [0.7]"))
    w = _ids(g, "x*y+x")
    nf = normal_form(other)
    laws = next_symbol_laws(nf, torch.tensor([w]), torch.tensor([len(w)]))
    expected = reference_laws(g, w)
    assert np.abs(laws[0].numpy() - np.array(expected)).max() > 1e-3


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_laws_sum_to_one_and_chain_to_the_string_probability(name):
    g = _grammar(name)
    nf = normal_form(g)
    corpus = generate_strings(g, 30, seed=1)
    checked = 0
    for k in range(len(corpus)):
        w = corpus.tokens[corpus.offsets[k]: corpus.offsets[k + 1]]
        if len(w) > 14:  # the reference's derivation states grow fast with the length
            continue
        checked += 1
        laws = next_symbol_laws(nf, w[None], torch.tensor([len(w)]))[0]
        np.testing.assert_allclose(laws.sum(-1).numpy(), 1.0, atol=1e-12)
        chain = laws[torch.arange(len(w)), w].prod() * laws[len(w), -1]
        _, string = prefix_and_string_probability(g, tuple(w.tolist()))
        assert math.isclose(float(chain), string, rel_tol=1e-6)
    assert checked >= 10


def test_termination_and_length_closed_forms():
    # S -> S S [p] | a [1 - p]: Z = min(1, (1 - p) / p); E[length] = (1 - p) / (1 - 2p)
    for p in (0.1, 0.3, 0.45):
        g = parse_grammar(f"S -> S S [{p}] | 'a' [{1 - p}]\n")
        assert termination_probabilities(g)[0] == pytest.approx(1.0, abs=1e-12)
        assert expected_length(g) == pytest.approx((1 - p) / (1 - 2 * p), rel=1e-10)
    g = parse_grammar("S -> S S [0.6] | 'a' [0.4]\n")
    assert termination_probabilities(g)[0] == pytest.approx(0.4 / 0.6, abs=1e-12)




@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_grammars_get_one_line_naming_the_place(case):
    text, message = BAD[case]
    with pytest.raises(GrammarError) as info:
        check_grammar(parse_grammar(text, "x.pcfg"))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_json_form_round_trips_and_names_bad_entries():
    g = _grammar("expr")
    again = grammar_from_dict(grammar_to_dict(g), "e.json")
    assert again.rules == tuple(r.__class__(r.lhs, r.rhs, r.prob, 0) for r in g.rules) or \
        [(r.lhs, r.rhs, r.prob) for r in again.rules] == [(r.lhs, r.rhs, r.prob) for r in g.rules]
    with pytest.raises(GrammarError, match=r"e.json: rules\[1\]: cannot read"):
        grammar_from_dict({"kind": "pcfg", "rules": ["S -> 'a' [1.0]", "oops"]}, "e.json")
    with pytest.raises(GrammarError, match="unknown key 'rule'"):
        grammar_from_dict({"kind": "pcfg", "rule": []}, "e.json")


@pytest.mark.parametrize("name", ["dyck", "units"])
def test_sampled_strings_follow_the_grammar(name):
    """Chi-square of string frequencies against enumerated string probabilities (fixed seed)."""
    g = _grammar(name)
    corpus = generate_strings(g, 4000, seed=0)
    seen = Counter(tuple(corpus.tokens[corpus.offsets[k]: corpus.offsets[k + 1]].tolist())
                   for k in range(len(corpus)))
    common = [w for w, c in seen.most_common() if c >= 20]
    probs = np.array([prefix_and_string_probability(g, w)[1] for w in common])
    observed = np.array([seen[w] for w in common] + [len(corpus) - sum(seen[w] for w in common)])
    expected = np.append(probs, 1 - probs.sum()) * len(corpus)
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    # negative control: the same counts against another grammar's law fail
    other = parse_grammar(GRAMMARS[name].replace("0.3", "0.2").replace("0.7", "0.8")
                          .replace("0.5] | '(' S", "0.6] | '(' S").replace("[0.2]\n", "[0.2]\n"))
    probs2 = np.array([prefix_and_string_probability(other, w)[1] for w in common])
    expected2 = np.append(probs2, max(1 - probs2.sum(), 1e-9)) * len(corpus)
    assert stats.chisquare(observed, expected2 / expected2.sum() * len(corpus)).pvalue < 1e-6
