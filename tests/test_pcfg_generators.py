"""The grammar generators (``cfl_lightning.automata.pcfg.generators``), against independent
references: plain-Python closures and fixed-point iterations for the random grammar's redraw
conditions, leftmost-derivation enumeration (``tests/pcfg_count_reference.py``) against closed
forms and brute-force recognizers for Dyck-k, arithmetic expressions and centre embedding, and
the ``automaton`` command end to end (a file that loads and samples, one-line refusals)."""

from __future__ import annotations

import itertools
import json
import math
import string

import pytest

from cfl_lightning.automata import load_automaton
from cfl_lightning.automata.pcfg.generators import (
    arithmetic_pcfg,
    centre_embedding_pcfg,
    dyck_pcfg,
    random_pcfg,
)
from cfl_lightning.errors import GrammarError, PFSAError
from tests.helpers import run_cli
from tests.pcfg_count_reference import string_law
from tests.pcfg_reference import prefix_and_string_probability

# ----------------------------------------------------------------- independent references


def _closure_reachable(grammar) -> set[int]:
    """Nonterminals reachable from the start through rules of positive weight (plain sets)."""
    seen, todo = {0}, [0]
    while todo:
        a = todo.pop()
        for rule in grammar.rules:
            if rule.lhs == a and rule.prob > 0:
                for s in rule.rhs:
                    if not s.terminal and s.index not in seen:
                        seen.add(s.index)
                        todo.append(s.index)
    return seen


def _closure_productive(grammar) -> set[int]:
    done: set[int] = set()
    while True:
        new = {r.lhs for r in grammar.rules
               if r.prob > 0 and all(s.terminal or s.index in done for s in r.rhs)}
        if new <= done:
            return done
        done |= new


def _termination(grammar, rounds: int = 100_000) -> list[float]:
    """``Z_A = sum p prod Z_B`` iterated from 0 in Python floats (Kleene: the least fixed
    point, from below)."""
    z = [0.0] * grammar.num_nonterminals
    for _ in range(rounds):
        new = [0.0] * len(z)
        for rule in grammar.rules:
            new[rule.lhs] += rule.prob * math.prod(z[s.index] for s in rule.rhs
                                                    if not s.terminal)
        if max(abs(a - b) for a, b in zip(new, z)) < 1e-16:
            return new
        z = new
    return z


def _expected_length(grammar, rounds: int = 100_000) -> float:
    """``L_A = sum p (terminals + sum L_B)`` iterated from 0; ``inf`` when it keeps growing."""
    length = [0.0] * grammar.num_nonterminals
    for _ in range(rounds):
        new = [0.0] * len(length)
        for rule in grammar.rules:
            new[rule.lhs] += rule.prob * sum(1.0 if s.terminal else length[s.index]
                                             for s in rule.rhs)
        if max(abs(a - b) for a, b in zip(new, length)) < 1e-13 * max(1.0, max(new)):
            return new[0]
        length = new
    return math.inf


def _strings(grammar, max_length: int) -> dict[tuple[str, ...], float]:
    """``P(w)`` for every string of at most ``max_length`` symbols, summed over leftmost
    derivations (the brute-force enumerator), keyed by symbol names."""
    law, dropped = string_law(grammar, max_length)
    assert dropped < 1e-12
    return {tuple(grammar.alphabet[t] for t in w): p for w, p in law.items() if p > 0}


def _all_strings(alphabet, max_length: int):
    for n in range(1, max_length + 1):
        yield from itertools.product(alphabet, repeat=n)


# ----------------------------------------------------------------------------- random_pcfg

RANDOM_CASES = [  # (nonterminals, terminals, rules, options), several seeds each
    (5, 4, 3, {}),
    (8, 3, 3, {"max_rhs": 2, "max_expected_length": 8.0}),
    (3, 2, 2, {"terminal_prob": 0.5, "concentration": 0.3}),
    (4, 3, 3, {"terminal_prob": 0.4, "max_expected_length": None}),  # any finite length
]


@pytest.mark.parametrize("n,t,r,opts", RANDOM_CASES)
def test_random_pcfg_keeps_only_consistent_grammars(n, t, r, opts):
    """Every kept draw, checked without the package's checks: each nonterminal reachable and
    productive (closures), every nonterminal ending with probability 1 (Kleene iteration), a
    finite expected length (iterated) within the bound and equal to the package's; the shape
    asked for (rules per nonterminal, distinct, no ``A -> A``, weights summing to 1)."""
    cap = opts.get("max_expected_length", 20.0) or math.inf
    for seed in range(8):
        g = random_pcfg(n, t, r, seed, **opts)
        grammar = g.grammar
        assert grammar.alphabet == tuple(string.ascii_lowercase[:t])
        assert grammar.nonterminals == ("S",) + tuple(f"N{i}" for i in range(1, n))
        everything = set(range(n))
        assert _closure_reachable(grammar) == everything
        assert _closure_productive(grammar) == everything
        assert min(_termination(grammar)) == pytest.approx(1.0, abs=1e-9)
        length = _expected_length(grammar)
        assert length <= cap and length == pytest.approx(g.expected_length(), rel=1e-9)
        for a in range(n):
            rules = grammar.rules_of(a)
            sides = [tuple((s.terminal, s.index) for s in rule.rhs) for rule in rules]
            assert len(rules) == r and len(set(sides)) == r and ((False, a),) not in sides
            assert sum(rule.prob for rule in rules) == pytest.approx(1.0, abs=1e-12)


def test_random_pcfg_redraws_and_gives_up_in_one_line():
    """A seed whose first draw is refused (``max_tries=1`` gives up) still gives a grammar with
    the default budget: the redraw is what made it consistent."""
    refused = []
    for seed in range(40):
        try:
            random_pcfg(5, 4, 3, seed, max_tries=1)
        except GrammarError as err:
            refused.append((seed, str(err)))
    assert refused, "no first draw was refused: the redraw is never exercised"
    seed, message = refused[0]
    assert "\n" not in message and "in 1 tries" in message and f"seed {seed}" in message
    assert _closure_reachable(random_pcfg(5, 4, 3, seed).grammar) == set(range(5))
    assert len(refused) < 40  # some first draws are kept


def test_random_pcfg_is_a_function_of_its_seed():
    a, b, c = random_pcfg(6, 4, 3, 7), random_pcfg(6, 4, 3, 7), random_pcfg(6, 4, 3, 8)
    assert a.to_text() == b.to_text() and a == b
    assert a.to_text() != c.to_text()


def test_a_generated_grammar_reloads_with_the_same_ids(tmp_path):
    """The alphabet's order survives the file (terminals in order of first use): the same
    symbol ids in and out."""
    g = random_pcfg(6, 5, 3, 2)
    path = tmp_path / "g.pcfg"
    path.write_text(g.to_text(), encoding="utf-8")
    again = load_automaton(path)
    assert again.alphabet == g.alphabet and again.to_text() == g.to_text()
    assert again.grammar.nonterminals == g.grammar.nonterminals


@pytest.mark.parametrize("call,needle", [
    (lambda: random_pcfg(0, 4, 3, 0), "nonterminals must be >= 1, got 0"),
    (lambda: random_pcfg(5, 0, 3, 0), "terminals must be >= 1"),
    (lambda: random_pcfg(5, 4, 3, -1), "seed must be an integer in 0..2**64-1"),
    (lambda: random_pcfg(5, 4, 3, 0, terminal_prob=0.0), "terminal_prob must be in (0, 1]"),
    (lambda: random_pcfg(1, 1, 3, 0, max_rhs=1), "rules must be at most 1"),
    (lambda: dyck_pcfg(2, 0.6, 0.4), "nest_prob + concat_prob must be below 1"),
    (lambda: dyck_pcfg(0), "k must be >= 1"),
    (lambda: arithmetic_pcfg(0.3, 0.2, 0.0), "2 (plus_prob + times_prob) + paren_prob"),
    (lambda: arithmetic_pcfg(1.5), "plus_prob must be in [0, 1]"),
    (lambda: centre_embedding_pcfg(2, 1.0), "embed_prob must be below 1"),
    (lambda: centre_embedding_pcfg(0), "pairs must be >= 1"),
])
def test_bad_parameters_are_one_line(call, needle):
    with pytest.raises(PFSAError) as err:
        call()
    assert needle in str(err.value) and "\n" not in str(err.value)


# -------------------------------------------------------------------------------- dyck_pcfg


def _is_dyck(word, pairs) -> bool:
    closing = {c: o for o, c in pairs}
    stack: list[str] = []
    for symbol in word:
        if symbol in closing:
            if not stack or stack.pop() != closing[symbol]:
                return False
        else:
            stack.append(symbol)
    return not stack


def _dyck_probability(word, k: int, nest: float, concat: float) -> float:
    """The closed form: a word is a sequence of ``m`` blocks (``concat^(m-1) (1 - concat)``),
    a block one bracket type (``1 / k``) around nothing (``1 - nest``) or a word (``nest``)."""
    blocks, depth, start = [], 0, 0
    for i, symbol in enumerate(word):
        depth += 1 if symbol in "([" else -1
        if depth == 0:
            blocks.append(word[start + 1: i])
            start = i + 1
    p = concat ** (len(blocks) - 1) * (1 - concat)
    for inside in blocks:
        p *= (1 - nest) / k if not inside else nest / k * _dyck_probability(inside, k, nest,
                                                                            concat)
    return p


def _length_law(nest: float, concat: float, degree: int) -> list[float]:
    """``P(|w| = n)`` for ``n <= degree``: the generating functions ``S = (1 - c) B + c B S``,
    ``B = x^2 ((1 - n) + n S)`` iterated as truncated polynomials."""
    s = [0.0] * (degree + 1)
    for _ in range(degree):
        b = [0.0] * (degree + 1)
        b[2] = 1 - nest
        for i in range(degree - 1):
            b[i + 2] += nest * s[i]
        bs = [sum(b[i] * s[j - i] for i in range(j + 1)) for j in range(degree + 1)]
        s = [(1 - concat) * b[j] + concat * bs[j] for j in range(degree + 1)]
    return s


def test_dyck_pcfg_writes_exactly_the_dyck_words_with_their_closed_form_probabilities():
    nest, concat = 0.4, 0.3
    g = dyck_pcfg(2, nest, concat)
    pairs = [("(", ")"), ("[", "]")]
    law = _strings(g.grammar, 8)
    words = {w for w in _all_strings("()[]", 8) if _is_dyck(w, pairs)}
    assert set(law) == words  # non-empty Dyck words, nothing else, none missing
    for w, p in law.items():
        assert p == pytest.approx(_dyck_probability(w, 2, nest, concat), rel=1e-12), w
    lengths = _length_law(nest, concat, 400)
    assert sum(law.values()) == pytest.approx(sum(lengths[:9]), rel=1e-12)
    assert sum(lengths) == pytest.approx(1.0, abs=1e-9)  # the mass approaches 1
    mean = sum(n * p for n, p in enumerate(lengths))
    assert mean == pytest.approx(2 / (1 - nest - concat), rel=1e-6)
    assert g.expected_length() == pytest.approx(2 / (1 - nest - concat), rel=1e-12)


def test_dyck_pcfg_uses_the_pushdown_dycks_bracket_names():
    assert dyck_pcfg(3).alphabet == tuple("()[]{}")
    assert dyck_pcfg(5).alphabet == ("o0", "c0", "o1", "c1", "o2", "c2", "o3", "c3", "o4", "c4")


# ------------------------------------------------------------------------------- arithmetic


def _is_expression(word) -> bool:
    """A recursive-descent recognizer: ``E := T (op T)*``, ``T := x | ( E )``."""
    def term(i):
        if i < len(word) and word[i] == "x":
            return i + 1
        if i < len(word) and word[i] == "(":
            j = expr(i + 1)
            return j + 1 if j is not None and j < len(word) and word[j] == ")" else None
        return None

    def expr(i):
        i = term(i)
        while i is not None and i < len(word) and word[i] in "+*":
            i = term(i + 1)
        return i

    return expr(0) == len(word)


def test_arithmetic_is_ambiguous_with_catalan_many_derivations():
    """``x + ... + x`` with ``m`` pluses has ``Catalan(m)`` derivations, each of probability
    ``plus^m x^(m+1)``: its probability, summed over the enumerated derivations, is that
    multiple (two derivations for ``x + x + x``, five for four x's)."""
    plus, times, paren = 0.2, 0.15, 0.1
    x = 1 - plus - times - paren
    law = _strings(arithmetic_pcfg(plus, times, paren).grammar, 7)
    for m, catalan in ((1, 1), (2, 2), (3, 5)):
        word = tuple("+".join("x" * (m + 1)))
        assert law[word] == pytest.approx(catalan * plus**m * x ** (m + 1), rel=1e-12)
    assert law[tuple("x+x*x")] == pytest.approx(2 * plus * times * x**3, rel=1e-12)
    assert law[tuple("(x)+x")] == pytest.approx(plus * paren * x**2, rel=1e-12)  # one


def test_arithmetic_writes_exactly_the_expressions():
    g = arithmetic_pcfg()
    law = _strings(g.grammar, 7)
    assert set(law) == {w for w in _all_strings("+*()x", 7) if _is_expression(w)}
    assert g.expected_length() == pytest.approx((1 + 0.1) / (1 - 0.7 - 0.1), rel=1e-12)
    assert "'+'" not in arithmetic_pcfg(0.0, 0.2, 0.1).to_text()  # weight 0: left out


# ------------------------------------------------------------------------- centre_embedding


def test_centre_embedding_writes_nested_agreeing_pairs_with_geometric_depth():
    k, p = 2, 0.45
    g = centre_embedding_pcfg(k, p)
    law = _strings(g.grammar, 10)
    expected = {}
    for m in range(1, 6):
        for nouns in itertools.product(range(k), repeat=m):
            word = tuple(f"n{i}" for i in nouns) + tuple(f"v{i}" for i in reversed(nouns))
            expected[word] = (1 - p) * p ** (m - 1) / k**m
    assert set(law) == set(expected)
    for w, q in law.items():
        assert q == pytest.approx(expected[w], rel=1e-12), w
    assert sum(law.values()) == pytest.approx(1 - p**5, rel=1e-12)
    assert g.expected_length() == pytest.approx(2 / (1 - p), rel=1e-12)
    one = _strings(centre_embedding_pcfg(1, p).grammar, 8)  # one pair: a^m b^m
    assert set(one) == {("n0",) * m + ("v0",) * m for m in range(1, 5)}


# ------------------------------------------------------------------------------ the command

COMMANDS = {
    "random_pcfg": (["--nonterminals", "6", "--terminals", "3", "--rules", "3", "--seed", "4"],
                    lambda: random_pcfg(6, 3, 3, 4)),
    "dyck_pcfg": (["--k", "3", "--nest-prob", "0.3"], lambda: dyck_pcfg(3, 0.3)),
    "arithmetic": (["--times-prob", "0.1"], lambda: arithmetic_pcfg(times_prob=0.1)),
    "centre_embedding": (["--pairs", "3"], lambda: centre_embedding_pcfg(3)),
}


@pytest.mark.parametrize("name", [  # arithmetic's support check takes ~3.5 s: slow lane
    pytest.param(n, marks=pytest.mark.slow) if n == "arithmetic" else n for n in sorted(COMMANDS)
])
@pytest.mark.parametrize("suffix", ["pcfg", "json"])
def test_the_automaton_command_writes_a_grammar_that_loads_and_samples(tmp_path, name, suffix):
    flags, build = COMMANDS[name]
    out = tmp_path / f"g.{suffix}"
    done = run_cli("automaton", name, *flags, "--output", out)
    assert done.returncode == 0, done.stderr
    text = out.read_text(encoding="utf-8")
    if suffix == "pcfg":
        assert text == build().to_text()
    else:
        assert json.loads(text) == build().to_dict()
    grammar = load_automaton(out)
    assert grammar == build() and grammar.alphabet == build().alphabet
    strings = tmp_path / "s.jsonl"
    done = run_cli("sample", "--automaton", out, "--num-strings", "20", "--seed", "0",
                   "--output", strings)
    assert done.returncode == 0, done.stderr
    lines = strings.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 20
    for line in lines:
        word = tuple(grammar.alphabet.index(a) for a in json.loads(line)["symbols"])
        assert prefix_and_string_probability(grammar.grammar, word)[1] > 0, word  # in support


@pytest.mark.parametrize("argv,needle", [
    (["random_pcfg", "--nonterminals", "0"], "nonterminals must be >= 1, got 0"),
    (["arithmetic", "--plus-prob", "1.5"], "a probability must be in [0, 1]"),
    (["dyck_pcfg", "--nest-prob", "0.7", "--concat-prob", "0.5"], "must be below 1"),
    (["random_pcfg", "--terminals", "3", "--max-tries", "1", "--seed", "1", "--terminal-prob",
      "0.05"], "no random grammar with"),
    (["anbn"], "a .pcfg file holds a pcfg, but anbn builds a pushdown"),
])
def test_a_bad_parameter_is_one_line_exit_2_and_nothing_written(tmp_path, argv, needle):
    out = tmp_path / "g.pcfg"
    done = run_cli("automaton", *argv, "--output", out)
    assert done.returncode == 2
    assert needle in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_draw_on_a_grammar_says_it_has_no_picture(tmp_path):
    grammar = tmp_path / "g.pcfg"
    grammar.write_text(dyck_pcfg().to_text(), encoding="utf-8")
    done = run_cli("draw", grammar, "--output", tmp_path / "g.dot")
    assert done.returncode == 2 and "not drawn as a state diagram" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "g.dot").exists()
