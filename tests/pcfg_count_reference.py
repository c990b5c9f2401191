"""Brute-force reference laws of a PCFG: leftmost derivations enumerated (tests only).

Independent of :mod:`cfl_lightning.sampling.pcfg.count_law`: no power series, no fixed point.
A leftmost derivation state is what has been written so far (a string, or only the event's
count) and the stack of symbols still to expand (leftmost first). States are expanded round by
round, merging equal states (their probabilities add: the same futures). A state is dropped
exactly when it can only lead outside what is asked (too long, too many events: every pending
symbol writes at least one terminal, counts never decrease), and dropped *inexactly* when its
probability falls below ``eps``; that inexact mass is returned, so a test can bound its effect.
"""

from __future__ import annotations

from collections import Counter, defaultdict

__all__ = ["rule_degrees", "count_law", "string_law", "string_count_law", "event_count"]


def rule_degrees(grammar, event: str) -> list[int]:
    """Per rule, the event's count it adds (``symbol:X`` occurrences, or ``rule:INDEX``)."""
    kind, _, name = event.partition(":")
    if kind == "symbol":
        x = grammar.alphabet.index(name)
        return [sum(1 for s in r.rhs if s.terminal and s.index == x) for r in grammar.rules]
    return [int(i == int(name)) for i in range(len(grammar.rules))]


def _expand(grammar, states: dict, step) -> tuple[dict, float]:
    """One round: every state's leftmost nonterminal rewritten by each of its rules."""
    out: dict = defaultdict(float)
    for (written, stack), p in states.items():
        head, rest = stack[0], stack[1:]
        for r, rule in enumerate(grammar.rules):
            if rule.lhs == head[1] and rule.prob > 0:
                out[step(written, r, tuple((s.terminal, s.index) for s in rule.rhs) + rest)] += (
                    p * rule.prob)
    return out


def _run(grammar, start, step, keep, eps: float, max_rounds: int):
    """Enumerate from ``start``; ``step`` pops terminals, ``keep`` drops exactly (see module)."""
    done: dict = defaultdict(float)
    states = {start: 1.0}
    dropped = 0.0
    for _ in range(max_rounds):
        if not states:
            break
        nxt = {}
        for state, p in _expand(grammar, states, step).items():
            if not keep(state):
                continue
            if not state[1]:
                done[state[0]] += p
            elif p < eps:
                dropped += p
            else:
                nxt[state] = p
        states = nxt
    dropped += sum(states.values())
    return dict(done), dropped


def count_law(grammar, degrees: list[int], max_count: int, *, eps: float = 1e-17,
              max_rounds: int = 10_000) -> tuple[list[float], float]:
    """``P(count = n)`` for ``n <= max_count`` and the mass dropped below ``eps``."""
    def step(count, r, stack):
        # only the pending nonterminals matter to the count: terminals are dropped at once
        return count + degrees[r], tuple(s for s in stack if not s[0])

    law, dropped = _run(grammar, (0, ((False, 0),)), step, lambda s: s[0] <= max_count, eps,
                        max_rounds)
    return [law.get(n, 0.0) for n in range(max_count + 1)], dropped


def string_law(grammar, max_length: int, *, symbol: int | None = None,
               max_count: int | None = None, eps: float = 1e-17,
               max_rounds: int = 10_000) -> tuple[dict, float]:
    """``P(string)`` for strings of at most ``max_length`` symbols (and, given ``symbol``, at
    most ``max_count`` occurrences of it), and the dropped mass."""
    def step(written, r, stack):
        while stack and stack[0][0]:
            written, stack = written + (stack[0][1],), stack[1:]
        return written, stack

    def keep(state):
        if len(state[0]) + len(state[1]) > max_length:
            return False
        return symbol is None or event_count(state[0], symbol) <= max_count

    return _run(grammar, ((), ((False, 0),)), step, keep, eps, max_rounds)


def string_count_law(grammar, degrees: list[int], max_length: int, max_count: int, *,
                     eps: float = 1e-17, max_rounds: int = 10_000) -> tuple[dict, float]:
    """``P(string, count)`` (summed over derivations) for strings of at most ``max_length``
    symbols whose derivations count at most ``max_count``; and the dropped mass. For rule
    events, where derivations of one string may count differently."""
    def step(written, r, stack):
        string, count = written
        while stack and stack[0][0]:
            string, stack = string + (stack[0][1],), stack[1:]
        return (string, count + degrees[r]), stack

    def keep(state):
        return len(state[0][0]) + len(state[1]) <= max_length and state[0][1] <= max_count

    return _run(grammar, (((), 0), ((False, 0),)), step, keep, eps, max_rounds)


def event_count(string, symbol: int) -> int:
    """Occurrences of terminal ``symbol`` in a string (a tuple or list of ids)."""
    return sum(1 for t in string if t == symbol)


def chi_pvalue(samples, law, min_expected=5.0) -> float:
    """Chi-square p-value of ``samples`` (hashable outcomes) against the exact ``law``
    (``{outcome: p}``); outcomes expected fewer than ``min_expected`` times pooled with the
    law's missing mass into one cell."""
    from scipy import stats

    m, seen = len(samples), Counter(samples)
    keep = [k for k, v in law.items() if v * m >= min_expected]
    observed, expected = [seen[k] for k in keep], [law[k] * m for k in keep]
    if m - sum(expected) > 1e-9 * m:
        observed.append(m - sum(observed))
        expected.append(m - sum(expected))
    return float(stats.chisquare(observed, expected).pvalue)
