"""Grammar generators: random PCFGs, Dyck-k, arithmetic expressions and centre embedding.

Each builds the grammar's text in NLTK's notation (:mod:`.text`), reads it with
:func:`~cfl_lightning.automata.pcfg.parse_grammar` (so the alphabet's order, terminals in order
of first use, is the one a reloaded file has) and returns a checked
:class:`~cfl_lightning.automata.pcfg.automaton.PCFG`. The generator registry
(:mod:`cfl_lightning.kinds.generators`) lists each with its parameters; ``python -m
cfl_lightning automaton NAME ... --output g.pcfg`` writes the notation (``.json``: the JSON form).

No grammar here has an empty right side (the model has none): Dyck words and centre-embedded
strings are non-empty.
"""

from __future__ import annotations

import math

import numpy as np

from cfl_lightning.automata.generators import _integer, _real, _seed, default_alphabet
from cfl_lightning.automata.pcfg.automaton import PCFG
from cfl_lightning.automata.pcfg.checks import check_grammar, expected_length, reachable
from cfl_lightning.automata.pcfg.grammar import Grammar
from cfl_lightning.automata.pcfg.text import parse_grammar
from cfl_lightning.automata.pushdown.generators import bracket_names
from cfl_lightning.errors import GrammarError

__all__ = ["random_pcfg", "dyck_pcfg", "arithmetic_pcfg", "centre_embedding_pcfg",
           "nonterminal_names"]

#: attempts at a right side not yet drawn for the same nonterminal, per rule, before the whole
#: draw is given up (and the next one taken)
_RHS_ATTEMPTS = 100


def _line(lhs: str, alternatives: list[tuple[str, float]]) -> str:
    """``lhs -> rhs [p] | ...`` with exact (``repr``) probabilities; zero-weight ones left out."""
    return f"{lhs} -> " + " | ".join(f"{rhs} [{p!r}]" for rhs, p in alternatives if p > 0)


def _pcfg(lines: list[str]) -> PCFG:
    return PCFG(parse_grammar("\n".join(lines) + "\n"))


def nonterminal_names(n: int) -> list[str]:
    """``S`` (the start), then ``N1 .. N{n-1}``."""
    return ["S"] + [f"N{i}" for i in range(1, n)]


_Side = tuple[tuple[bool, int], ...]


def _draw_rhs(rng: np.random.Generator, shape: tuple[int, int], max_rhs: int,
              terminal_prob: float) -> _Side:
    """One right side as ``(terminal, index)`` pairs: length uniform in ``1..max_rhs``, each
    symbol a terminal with ``terminal_prob`` (uniform among the ``shape[0]`` terminals), else a
    uniform nonterminal (among ``shape[1]``)."""
    length = int(rng.integers(1, max_rhs + 1))
    out = []
    for _ in range(length):
        terminal = bool(rng.random() < terminal_prob)
        out.append((terminal, int(rng.integers(shape[0] if terminal else shape[1]))))
    return tuple(out)


def _draw_rules(rng: np.random.Generator, shape: tuple[int, int], rules: int,
                opts: dict[str, float]) -> list[tuple[list[_Side], np.ndarray]] | None:
    """One draw: per nonterminal ``rules`` distinct right sides, none the nonterminal alone
    (``A -> A``), and their ``Dirichlet`` weights; None when some nonterminal got no new right
    side in :data:`_RHS_ATTEMPTS` attempts."""
    out = []
    for lhs in range(shape[1]):
        sides: list[_Side] = []
        for _ in range(rules):
            for _ in range(_RHS_ATTEMPTS):
                rhs = _draw_rhs(rng, shape, int(opts["max_rhs"]), opts["terminal_prob"])
                if rhs not in sides and rhs != ((False, lhs),):
                    sides.append(rhs)
                    break
            else:
                return None
        out.append((sides, rng.dirichlet(np.full(rules, opts["concentration"]))))
    return out


def _text(draw: list[tuple[list[_Side], np.ndarray]], terminals: int) -> str:
    """The notation of a draw. Terminals are named ``a, b, ...`` in order of first use (a
    relabelling of exchangeable draws: the alphabet's order is then the names' order)."""
    names = default_alphabet(terminals)
    renamed: dict[int, str] = {}
    nonterminals = nonterminal_names(len(draw))
    lines = []
    for lhs, (sides, weights) in enumerate(draw):
        alternatives = []
        for side, weight in zip(sides, weights):
            words = [f"'{names[renamed.setdefault(i, len(renamed))]}'" if terminal
                     else nonterminals[i] for terminal, i in side]
            alternatives.append((" ".join(words), float(weight)))
        lines.append(_line(nonterminals[lhs], alternatives))
    return "\n".join(lines) + "\n"


def _acceptable(grammar: Grammar, terminals: int, cap: float) -> bool:
    """Every terminal written by a rule of positive weight, every nonterminal reachable from the
    start, a finite expected length at most ``cap``, and :func:`check_grammar` passed
    (productive, ends with probability 1, finite expected length: given the length, a second
    guard, as the :class:`PCFG` built from it checks again)."""
    used = {s.index for r in grammar.rules if r.prob > 0 for s in r.rhs if s.terminal}
    if len(used) < terminals or not reachable(grammar).all():
        return False
    length = expected_length(grammar)  # cheap, and inf for what does not end: refused first
    if math.isinf(length) or length > cap:
        return False
    try:
        check_grammar(grammar)
    except GrammarError:
        return False
    return True


def random_pcfg(
    nonterminals: int = 5,
    terminals: int = 4,
    rules: int = 3,
    seed: int = 0,
    *,
    max_rhs: int = 3,
    terminal_prob: float = 0.6,
    concentration: float = 1.0,
    max_expected_length: float | None = 20.0,
    max_tries: int = 1000,
) -> PCFG:
    """A random PCFG: ``rules`` distinct rules per nonterminal, ``Dirichlet`` weights.

    Each right side has a length uniform in ``1..max_rhs``; each of its symbols is a terminal
    with probability ``terminal_prob`` (uniform among ``terminals``) and otherwise a nonterminal
    (uniform among ``nonterminals``, the start included); a right side already drawn for the
    same nonterminal is drawn again, and so is ``A -> A`` (a unit loop only repeats ``A``).
    The weights of each nonterminal's rules are ``Dirichlet(concentration)``. A draw is kept
    only if every terminal appears, every nonterminal is reachable from the start, the grammar
    passes
    :func:`~cfl_lightning.automata.pcfg.check_grammar` (productive, ends with probability 1,
    finite expected length) and its expected length is at most ``max_expected_length`` (None:
    any finite length); otherwise the next draw of the same stream is taken, at most
    ``max_tries`` times, so the result is a deterministic function of the arguments.
    Reachability is what limits size: a nonterminal appears in about
    ``rules * (1 - terminal_prob) * (1 + max_rhs) / 2`` right sides, so a draw misses some of
    ``n`` nonterminals unless that is well above ``log n`` (200 nonterminals: 8 rules, not 4).
    Nonterminals ``S, N1, ...`` (:func:`nonterminal_names`), terminals ``a, b, ...``.

    Raises:
        PFSAError: a parameter out of range (one line naming it).
        GrammarError: no draw kept in ``max_tries`` tries.
    """
    n = _integer(nonterminals, "nonterminals", 1)
    t = _integer(terminals, "terminals", 1)
    r = _integer(rules, "rules", 1)
    opts = {
        "max_rhs": _integer(max_rhs, "max_rhs", 1),
        "terminal_prob": _real(terminal_prob, "terminal_prob", 0.0, 1.0, open_low=True),
        "concentration": _real(concentration, "concentration", 0.0, math.inf, open_low=True),
    }
    _check_rule_room(n, t, r, opts)
    cap = math.inf if max_expected_length is None else _real(
        max_expected_length, "max_expected_length", 0.0, math.inf, open_low=True)
    tries = _integer(max_tries, "max_tries", 1)
    rng = np.random.default_rng(_seed(seed, "seed"))
    for _ in range(tries):
        draw = _draw_rules(rng, (t, n), r, opts)
        if draw is not None:
            grammar = parse_grammar(_text(draw, t))
            if _acceptable(grammar, t, cap):
                return PCFG(grammar)
    bound = "" if cap == math.inf else f" at most {cap:g}"
    raise GrammarError(
        f"no random grammar with {n} nonterminals, {t} terminals and {r} rules each that uses "
        f"every terminal, reaches every nonterminal, ends with probability 1 and has a finite "
        f"expected length{bound} in {tries} tries (seed {seed}): raise terminal_prob, "
        "max_expected_length or max_tries"
    )


def _check_rule_room(n: int, t: int, r: int, opts: dict[str, float]) -> None:
    """Refuse ``rules`` above the number of distinct right sides there are to draw."""
    symbols = t + (n if opts["terminal_prob"] < 1.0 else 0)
    loop = 1 if opts["terminal_prob"] < 1.0 else 0  # A -> A is never drawn
    room = sum(symbols ** k for k in range(1, int(opts["max_rhs"]) + 1)) - loop
    if r > room:
        raise GrammarError(f"rules must be at most {room} (the distinct right sides of at most "
                           f"{int(opts['max_rhs'])} symbols over {symbols}), got {r}")


def dyck_pcfg(k: int = 2, nest_prob: float = 0.4, concat_prob: float = 0.3) -> PCFG:
    """Non-empty Dyck-``k`` words (well-nested brackets of ``k`` types), an unambiguous grammar::

        S -> B [1 - c] | B S [c]                              # one or more blocks
        B -> '(' ')' [(1 - n) / k] | '(' S ')' [n / k] | ...  # per bracket type

    with ``n = nest_prob`` (a block holds a non-empty word) and ``c = concat_prob`` (another
    block follows at the same level); bracket types are uniform. Every non-empty Dyck word has
    exactly one derivation. It ends with probability 1 and its expected length is
    ``2 / (1 - n - c)``, finite exactly when ``n + c < 1`` (the expectation matrix
    ``[[c, 1], [n, 0]]`` has spectral radius below 1). Brackets ``()[]{}<>``, then
    ``o{i}``/``c{i}`` (the pushdown ``dyck``'s names); the empty word is not generated (no
    empty right sides).

    Raises:
        PFSAError: ``k < 1``, a probability outside ``[0, 1]``, or ``n + c >= 1``.
    """
    k = _integer(k, "k", 1)
    nest = _real(nest_prob, "nest_prob", 0.0, 1.0)
    concat = _real(concat_prob, "concat_prob", 0.0, 1.0)
    if nest + concat >= 1.0:
        raise GrammarError(f"nest_prob + concat_prob must be below 1 (else the expected length "
                           f"2 / (1 - nest_prob - concat_prob) is infinite), got {nest + concat:g}")
    blocks = []
    for o, c in bracket_names(k):
        blocks += [(f"'{o}' '{c}'", (1.0 - nest) / k), (f"'{o}' S '{c}'", nest / k)]
    return _pcfg([_line("S", [("B", 1.0 - concat), ("B S", concat)]), _line("B", blocks)])


def arithmetic_pcfg(
    plus_prob: float = 0.2, times_prob: float = 0.15, paren_prob: float = 0.1
) -> PCFG:
    """Arithmetic expressions over ``x``, ambiguous (no precedence, no associativity)::

        E -> E '+' E [plus] | E '*' E [times] | '(' E ')' [paren] | 'x' [1 - plus - times - paren]

    ``x + x + x`` has two derivations, a sum of ``m + 1`` x's has ``Catalan(m)``. Each rewrite
    adds ``2 (plus + times) + paren`` nonterminals in expectation; below 1 the grammar ends with
    probability 1 and its expected length is
    ``(1 + paren) / (1 - 2 (plus + times) - paren)``. A rule of weight 0 is left
    out (with its terminals).

    Raises:
        PFSAError: a probability outside ``[0, 1]``, or ``2 (plus + times) + paren >= 1``.
    """
    plus = _real(plus_prob, "plus_prob", 0.0, 1.0)
    times = _real(times_prob, "times_prob", 0.0, 1.0)
    paren = _real(paren_prob, "paren_prob", 0.0, 1.0)
    growth = 2.0 * (plus + times) + paren
    if growth >= 1.0:
        raise GrammarError("2 (plus_prob + times_prob) + paren_prob must be below 1 (the "
                           "expected nonterminals per rewrite; else the expected length is "
                           f"infinite), got {growth:g}")
    return _pcfg([_line("E", [("E '+' E", plus), ("E '*' E", times), ("'(' E ')'", paren),
                              ("'x'", 1.0 - plus - times - paren)])])


def centre_embedding_pcfg(pairs: int = 2, embed_prob: float = 0.5) -> PCFG:
    """Centre embedding with agreement: ``n_i1 n_i2 ... n_im v_im ... v_i2 v_i1``, ``m >= 1``::

        S -> 'n0' S 'v0' [p / k] | 'n0' 'v0' [(1 - p) / k] | ...   # per pair

    with ``k = pairs`` noun/verb pairs (uniform) and ``p = embed_prob``: the depth ``m`` is
    geometric, ``P(m) = (1 - p) p^(m - 1)``, the expected length ``2 / (1 - p)``; one pair is
    ``a^m b^m`` with ``a = n0``, ``b = v0``. Unambiguous.

    Raises:
        PFSAError: ``pairs < 1`` or ``embed_prob`` outside ``[0, 1)``.
    """
    k = _integer(pairs, "pairs", 1)
    p = _real(embed_prob, "embed_prob", 0.0, 1.0)
    if p >= 1.0:
        raise GrammarError("embed_prob must be below 1 (else the strings never end)")
    alternatives = []
    for i in range(k):
        alternatives += [(f"'n{i}' S 'v{i}'", p / k), (f"'n{i}' 'v{i}'", (1.0 - p) / k)]
    return _pcfg([_line("S", alternatives)])
