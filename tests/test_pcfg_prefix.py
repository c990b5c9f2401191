"""The chart paths of the PCFG laws (``cfl_lightning.automata.pcfg.prefix``), each against an
independent reference.

Both ``O(n^3)`` paths (dense BLAS and sparse gathered products, forced with ``dense=``) and the
one-split rules (a narrow left or right child) are compared at every position with the
enumerated leftmost derivations of ``tests/pcfg_reference.py`` (the grammar as written, no normal
form, no inside pass) on ambiguous, left-recursive and unit-rule grammars, strings of several
lengths padded into one batch; on a 120-symbol string of ``S -> S S | 'a'`` (Catalan many
parses) with exact rational laws; and the chart itself against a plain CKY loop.
"""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest
import torch

from cfl_lightning.automata.pcfg import (
    check_grammar,
    inside,
    next_symbol_laws,
    normal_form,
    parse_grammar,
)
from cfl_lightning.automata.pcfg import prefix
from cfl_lightning.errors import CflError
from cfl_lightning.sampling.pcfg import generate_strings
from tests.pcfg_reference import GRAMMARS, reference_laws

#: every wide nonterminal is both a left and a right child of two-wide-children rules (the
#: reordered chart's overlap of ``B`` and ``C``), left recursion (S -> S B), a unit rule (B -> A)
MIXED = """S -> A S [0.2] | S B [0.1] | 'a' [0.4] | A B [0.3]
A -> A A [0.2] | 'b' [0.5] | 'c' A 'c' [0.3]
B -> 'c' [0.6] | B S [0.2] | A [0.2]
"""
ALL = dict(GRAMMARS, mixed=MIXED)
PATHS = [True, False]


def _grammar(text: str):
    g = parse_grammar(text)
    check_grammar(g)
    return g


def _batch(words: list[tuple[int, ...]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``[B, n]`` tokens padded with symbol 0, and ``[B]`` lengths."""
    n = max(map(len, words))
    tokens = torch.tensor([w + (0,) * (n - len(w)) for w in words], dtype=torch.long)
    return tokens, torch.tensor([len(w) for w in words])


@pytest.mark.parametrize("dense", PATHS, ids=["dense", "sparse"])
@pytest.mark.parametrize("name", [  # the mixed grammar's enumeration takes ~5 s: slow lane
    pytest.param(n, marks=pytest.mark.slow) if n == "mixed" else n for n in sorted(ALL)
])
def test_every_position_equals_the_enumerated_reference(name, dense):
    g = _grammar(ALL[name])
    corpus = generate_strings(g, 300, seed=3)
    words = sorted({tuple(corpus.string(k)) for k in range(len(corpus))
                    if len(corpus.string(k)) <= 10}, key=len)
    words = words[:3] + words[-6:]  # short and long in one padded batch
    assert len({len(w) for w in words}) >= 3 and max(map(len, words)) >= 7
    tokens, lengths = _batch(words)
    laws = next_symbol_laws(normal_form(g), tokens, lengths, dense=dense)
    for b, w in enumerate(words):
        expected = np.array(reference_laws(g, w))
        np.testing.assert_allclose(laws[b, : len(w) + 1].numpy(), expected, rtol=1e-9,
                                   atol=1e-12)


def _catalan_laws(q: Fraction, n: int) -> list[Fraction]:
    """``P(EOS | a^k)`` for ``k = 1 .. n`` under ``S -> S S [q] | 'a' [1 - q]``, exactly:
    ``P(length = k) = C_(k-1) q^(k-1) (1-q)^k`` (Catalan many binary trees), divided by
    ``P(length >= k)`` (every string is ``a^k``; the grammar ends with probability 1)."""
    point = [comb(2 * k - 2, k - 1) // k * q ** (k - 1) * (1 - q) ** k for k in range(1, n + 1)]
    tail, out = Fraction(1), []
    for p in point:
        out.append(p / tail)
        tail -= p
    return out


@pytest.mark.parametrize("dense", PATHS, ids=["dense", "sparse"])
def test_a_long_string_with_catalan_many_parses_has_the_exact_laws(dense):
    n, q = 120, Fraction(3, 10)
    g = _grammar(f"S -> S S [{float(q)}] | 'a' [{float(1 - q)}]\n")
    laws = next_symbol_laws(normal_form(g), torch.zeros(1, n, dtype=torch.long),
                            torch.tensor([n]), dense=dense)[0]
    eos = np.array([float(x) for x in _catalan_laws(q, n)])
    np.testing.assert_allclose(laws[1:, 1].numpy(), eos, rtol=1e-11)
    np.testing.assert_allclose(laws[:, 0].numpy(), 1 - laws[:, 1].numpy(), rtol=1e-12)
    assert float(laws[0, 1]) == 0.0


def _plain_cky(nf, word: list[int]) -> np.ndarray:
    """``[n, n, M]`` inside weights ``[start, width - 1, A]``, one span and one rule at a time,
    each span divided by the product of its positions' largest lexical weights."""
    lex, n = nf.lexical.numpy(), len(word)
    scale = [lex[:, a].max() for a in word]
    chart = np.zeros((n, n, nf.num_nonterminals))
    for i, a in enumerate(word):
        chart[i, 0] = lex[:, a] / scale[i]
    rules = list(zip(nf.parent.tolist(), nf.left.tolist(), nf.right.tolist(),
                     nf.weight.tolist()))
    for width in range(2, n + 1):
        for i in range(n - width + 1):
            for m in range(1, width):
                for parent, left, right, weight in rules:
                    chart[i, width - 1, parent] += (weight * chart[i, m - 1, left]
                                                    * chart[i + m, width - m - 1, right])
    return chart


@pytest.mark.parametrize("dense", PATHS, ids=["dense", "sparse"])
@pytest.mark.parametrize("name", ["expr", "mixed"])
def test_the_chart_equals_a_plain_cky_loop(name, dense):
    g = _grammar(ALL[name])
    nf = normal_form(g)
    corpus = generate_strings(g, 200, seed=4)
    words = sorted((corpus.string(k) for k in range(len(corpus))
                    if 14 <= len(corpus.string(k)) <= 22), key=len)[-3:]
    assert len(words) == 3
    tokens, _ = _batch([tuple(w) for w in words])
    chart = inside(nf, tokens, dense=dense).numpy()
    for b, w in enumerate(words):
        expected = np.zeros(chart.shape[1:])
        expected[: len(w), : len(w)] = _plain_cky(nf, list(w))
        n = len(w)
        np.testing.assert_allclose(chart[b, :n, :n], expected[:n, :n], rtol=1e-12, atol=1e-300)
        # the cells of no span are zero
        assert not chart[b][np.add.outer(np.arange(chart.shape[1]),
                                         np.arange(chart.shape[1])) >= chart.shape[1]].any()


@pytest.mark.parametrize("dense", PATHS, ids=["dense", "sparse"])
def test_a_string_whose_scaled_probability_underflows_is_refused_with_its_length(dense):
    # S -> A S [0.01] | 'e': every position's scale is 1 (A -> 'a' [1], S -> 'e'), so the
    # scaled probability of a^k e is 0.01^k: 1e-200 at k = 100, 0 (underflow) at k = 199
    g = _grammar("S -> A S [0.01] | 'e' [0.99]\nA -> 'a' [1.0]\n")
    nf, a, e = normal_form(g), g.alphabet.index("a"), g.alphabet.index("e")
    short = torch.tensor([[a] * 100 + [e]])
    laws = next_symbol_laws(nf, short, torch.tensor([101]), dense=dense)[0]
    np.testing.assert_allclose(laws[:101, a].numpy(), 0.01, rtol=1e-12)
    np.testing.assert_allclose(laws[:101, e].numpy(), 0.99, rtol=1e-12)
    assert float(laws[101, -1]) == pytest.approx(1.0, rel=1e-12)
    long = torch.tensor([[a] * 199 + [e]])
    with pytest.raises(CflError, match=r"^string 0 \(length 200\) is outside") as info:
        next_symbol_laws(nf, long, torch.tensor([200]), dense=dense)
    assert "\n" not in str(info.value)


def test_the_cost_rule_picks_dense_for_few_children_and_sparse_for_many():
    # S -> S S: |B| |C| = 1 <= DENSE_FACTOR * 1
    assert prefix._plan(normal_form(_grammar(GRAMMARS["dyck"])), None).table is not None
    # 12 nonterminals, one rule X_i -> X_(i+1) X_(i+2) each: |B| |C| = 144 > DENSE_FACTOR * 12
    k = 12
    text = "".join(f"X{i} -> X{(i + 1) % k} X{(i + 2) % k} [0.2] | 'a' [0.8]\n"
                   for i in range(k))
    nf = normal_form(_grammar(text))
    assert prefix._plan(nf, None).table is None
    assert prefix._plan(nf, True).table is not None
