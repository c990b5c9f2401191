r"""The count law of an event over a PCFG's derivations, as truncated power series in log space.

An event gives every rule a degree: the number of times the terminal ``X`` occurs on its right
side (``symbol:X``), or 1 for one named rule and 0 for the others (``rule:A -> 'a' B``; rule
counts are properties of the derivation, not of the string). With ``d_r`` the degree of rule
``r``, the generating function of the count from nonterminal ``A`` is the least fixed point of

.. math:: F_A(z) = \sum_{r = A \to \alpha} p_r\, z^{d_r} \prod_{B \in \alpha} F_B(z).

Coefficient 0 is nonlinear: the least fixed point of the grammar restricted to rules of degree
0, by Newton's method from 0 (float64). Every higher degree ``n`` is linear:
``(I - J_0) f_n = r_n``, with ``J_0`` the Jacobian at degree 0 and ``r_n`` made of lower
degrees; ``(I - J_0)^{-1} = sum_k J_0^k`` is computed once and applied as a nonnegative matrix,
so no coefficient is formed by cancellation and structurally zero ones stay exactly zero (the
support is propagated as booleans alongside). The tails ``T_A[n] = P(count >= n)`` satisfy a
linear system of the same kind (``P(X + Y >= n) = P(X >= n) + sum_{i<n} P(X = i) P(Y >= n - i)``),
formed without subtraction. Coefficients are kept as logarithms (``-inf`` for zero), so ``n``
far above the natural count neither underflows nor overflows.

Every rule keeps its suffix products ``S_{r,j} = F_{c_j} * ... * F_{c_k}`` over its
nonterminal children ``c_1 .. c_k`` (and their tails): the conditioned sampler
(:mod:`.conditioned`) splits a budget among children with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cfl_lightning.automata.pcfg.grammar import Grammar, rule_degrees
from cfl_lightning.errors import EventError

__all__ = ["CountSeries", "event_degrees", "count_series", "log_count_law", "expected_count", "lse",
           "log_convolve", "log_tail_convolve"]

_NEWTON_STEPS = 200
_BLOCK = 256  # outputs of a convolution per numpy call


def lse(values: np.ndarray) -> float:
    """``log sum exp`` of a 1-d array (``-inf`` for an empty or all ``-inf`` one)."""
    if values.size == 0:
        return -math.inf
    peak = float(values.max())
    if peak == -math.inf:
        return -math.inf
    return peak + math.log(float(np.exp(values - peak).sum()))


def _lse_rows(m: np.ndarray) -> np.ndarray:
    """Row-wise ``log sum exp`` of a 2-d array (``-inf`` for an all ``-inf`` row)."""
    peak = m.max(axis=1)
    safe = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide="ignore"):
        return np.where(np.isfinite(peak), np.log(np.exp(m - safe[:, None]).sum(axis=1)) + safe,
                        -math.inf)


def _blocked(a: np.ndarray, b: np.ndarray, lowest: int) -> np.ndarray:
    """``out[n] = lse_{i <= n - lowest} (a[i] + b[n - i])`` for every ``n``, in row blocks
    (``_BLOCK`` outputs per numpy call; ``b[n - i]`` read through a sliding window of ``b``
    reversed and padded with ``-inf``, so no gather)."""
    size = len(b)
    tail = np.full(size + lowest, -math.inf)
    windows = np.lib.stride_tricks.sliding_window_view(
        np.concatenate([b[::-1][: size - lowest] if lowest else b[::-1], tail]), size)
    out = np.full(size, -math.inf)
    for n0 in range(0, size, _BLOCK):
        n1 = min(n0 + _BLOCK, size)
        rows = windows[size - 1 - np.arange(n0, n1), :n1]
        out[n0:n1] = _lse_rows(a[None, :n1] + rows)
    return out


def log_convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Log coefficients of the product of two log series (same length, truncated to it)."""
    return _blocked(a, b, 0)


def log_tail_convolve(fa: np.ndarray, ta: np.ndarray, tb: np.ndarray) -> np.ndarray:
    """Log tails of ``X + Y`` from ``X``'s log law ``fa`` and log tails ``ta`` and ``Y``'s ``tb``.

    ``P(X + Y >= n) = P(X >= n) + sum_{i < n} P(X = i) P(Y >= n - i)`` (no subtraction).
    """
    return np.logaddexp(ta, _blocked(fa, tb, 1))


def event_degrees(grammar: Grammar, event: str) -> np.ndarray:
    """``[num_rules]`` int64: the event's count added by each rule (in ``grammar.rules`` order).

    Args:
        grammar: the grammar.
        event: ``symbol:X`` (a terminal) or ``rule:A -> 'a' B`` (a rule as
            :meth:`Grammar.rule_text` writes it; spaces are not significant).

    Raises:
        EventError: a malformed event, an unknown terminal or rule.
    """
    kind, _, name = event.partition(":")
    if kind == "symbol":
        if name not in grammar.alphabet:
            raise EventError(f"event {event}: {name!r} is not a terminal of the grammar "
                             f"(terminals: {', '.join(grammar.alphabet)})")
        x = grammar.alphabet.index(name)
        return np.array([sum(s.terminal and s.index == x for s in r.rhs) for r in grammar.rules],
                        dtype=np.int64)
    if kind == "rule":
        return rule_degrees(grammar, name)
    raise EventError(f"event {event!r}: a PCFG event is symbol:X or rule:A -> 'a' B")


@dataclass
class CountSeries:
    """The count law of every nonterminal and rule suffix, degrees ``0 .. max_count``.

    Attributes:
        grammar: the grammar.
        degrees: ``[num_rules]`` the event's count per rule.
        children: per rule, its nonterminal children in order.
        log_f: ``[N_nt, max_count + 1]`` log ``P(count = n)`` from each nonterminal.
        log_t: ``[N_nt, max_count + 1]`` log ``P(count >= n)``, or ``None`` (not asked for).
        suffix: per rule, ``[k + 1, max_count + 1]`` log coefficients of ``S_{r,j}``
            (row ``k``: the empty product, 1).
        suffix_tail: per rule, the same for tails (or ``None``).
    """

    grammar: Grammar
    degrees: np.ndarray
    children: list[tuple[int, ...]]
    log_f: np.ndarray
    log_t: np.ndarray | None
    suffix: list[np.ndarray]
    suffix_tail: list[np.ndarray] | None

    @property
    def max_count(self) -> int:
        """The largest degree held."""
        return self.log_f.shape[1] - 1

    def log_rule(self, r: int, n: int) -> float:
        """log ``[z^n] z^{d_r} prod_j F_{c_j}`` (without the rule's probability)."""
        m = n - int(self.degrees[r])
        return -math.inf if m < 0 else float(self.suffix[r][0, m])

    def log_rule_tail(self, r: int, n: int) -> float:
        """log ``P(d_r + sum_j count(c_j) >= n)``."""
        m = n - int(self.degrees[r])
        return 0.0 if m <= 0 else float(self.suffix_tail[r][0, m])


def _support_zero(grammar: Grammar, degrees: np.ndarray) -> np.ndarray:
    """``[N_nt]`` bool: nonterminals deriving a string of count 0 (rules of degree 0 only)."""
    done = np.zeros(grammar.num_nonterminals, dtype=bool)
    changed = True
    while changed:
        changed = False
        for r, rule in enumerate(grammar.rules):
            if (not done[rule.lhs] and rule.prob > 0 and degrees[r] == 0
                    and all(s.terminal or done[s.index] for s in rule.rhs)):
                done[rule.lhs] = changed = True
    return done


def _jacobian(grammar, degrees, children, f0: np.ndarray, tails: bool) -> np.ndarray:
    """``[N_nt, N_nt]``: ``J_0`` (``tails`` False) or the tail system's matrix (earlier
    children at degree 0, later ones at 1), over rules of degree 0."""
    n = grammar.num_nonterminals
    jac = np.zeros((n, n))
    for r, rule in enumerate(grammar.rules):
        if degrees[r] != 0:
            continue
        kids = children[r]
        for j, b in enumerate(kids):
            others = kids[:j] if tails else kids[:j] + kids[j + 1:]
            jac[rule.lhs, b] += rule.prob * float(np.prod([f0[c] for c in others]))
    return jac


def _degree_zero(grammar: Grammar, degrees: np.ndarray, children) -> np.ndarray:
    """``[N_nt]`` float64 ``F_A(0)``: Newton's method from 0 on the degree-0 rules."""
    support = _support_zero(grammar, degrees)
    n = grammar.num_nonterminals
    x = np.zeros(n)
    for _ in range(_NEWTON_STEPS):
        f = np.zeros(n)
        for r, rule in enumerate(grammar.rules):
            if degrees[r] == 0:
                f[rule.lhs] += rule.prob * float(np.prod([x[c] for c in children[r]]))
        jac = _jacobian(grammar, degrees, children, x, tails=False)
        try:
            step = np.linalg.solve(np.eye(n) - jac, f - x)
        except np.linalg.LinAlgError:
            step = f - x
        x = np.where(support, np.clip(x + step, 0.0, 1.0), 0.0)
        if np.max(np.abs(step), initial=0.0) <= 1e-15:
            break
    return x


def _resolvent(matrix: np.ndarray) -> np.ndarray:
    """``(I - M)^{-1}`` for a nonnegative ``M`` of spectral radius below 1, as a nonnegative
    matrix whose zero pattern is exactly "no path" (reflexive-transitive closure of ``M > 0``)."""
    n = len(matrix)
    reach = np.eye(n, dtype=bool) | (matrix > 0)
    for _ in range(max(1, math.ceil(math.log2(max(n, 2))))):
        reach = reach | ((reach.astype(np.int64) @ reach.astype(np.int64)) > 0)
    inv = np.linalg.inv(np.eye(n) - matrix)
    return np.where(reach, np.maximum(inv, 0.0), 0.0)


def _solve_log(resolvent: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """log of ``resolvent @ exp(rhs)`` without underflow (a nonnegative product: no
    cancellation)."""
    peak = float(rhs.max(initial=-math.inf))
    if peak == -math.inf:
        return np.full(len(rhs), -math.inf)
    with np.errstate(divide="ignore"):
        return np.log(resolvent @ np.exp(rhs - peak)) + peak


@dataclass
class _Layout:
    """Every rule's suffix rows stacked in one table (``suffix[r]`` are views of it), and per
    child position ``p``: its nonterminal, its row and the row after it (``S_{j+1}``)."""

    table: np.ndarray
    tail_table: np.ndarray | None
    child: np.ndarray
    row: np.ndarray
    next: np.ndarray
    first: list[int]  # per rule, its first position (positions of a rule are consecutive)


def _layout(children, width: int, tails: bool) -> _Layout:
    """Allocate the stacked suffix tables (row ``k`` of a rule: the empty product)."""
    offsets = np.cumsum([0] + [len(k) + 1 for k in children])
    table = np.full((int(offsets[-1]), width), -math.inf)
    table[offsets[1:] - 1, 0] = 0.0
    tail_table = None
    if tails:
        tail_table = np.full_like(table, -math.inf)
        tail_table[:, 0] = 0.0
    child = [c for kids in children for c in kids]
    row = [int(offsets[r]) + j for r, kids in enumerate(children) for j in range(len(kids))]
    first = list(np.cumsum([0] + [len(k) for k in children])[:-1])
    return _Layout(table, tail_table, np.array(child, dtype=np.int64),
                   np.array(row, dtype=np.int64), np.array(row, dtype=np.int64) + 1,
                   [int(f) for f in first])


def _inner(log_f: np.ndarray, table: np.ndarray, layout: _Layout, n: int) -> np.ndarray:
    """``[P]`` log ``sum_{0 < i < n} F_c[i] S_next[n - i]`` for every child position (the terms
    of degree ``n`` fixed by lower degrees, shared by every use below). One position at a
    time: its two rows stay in cache, where one ``[P, n]`` matrix does not."""
    out = np.full(len(layout.child), -math.inf)
    if n < 2:
        return out
    for p, (c, nxt) in enumerate(zip(layout.child.tolist(), layout.next.tolist())):
        out[p] = lse(log_f[c, 1:n] + table[nxt, n - 1:0:-1])
    return out


def _lae(x: float, y: float) -> float:
    """``log(exp(x) + exp(y))`` of two floats."""
    if x < y:
        x, y = y, x
    return x if y == -math.inf else x + math.log1p(math.exp(y - x))


def _known_first(series: CountSeries, layout: _Layout, inner: np.ndarray) -> list[float]:
    """Per rule, log of the part of ``[z^n] S_1`` (or its tail) fixed by degrees below ``n``:
    the inner terms, and ``F_c[0]`` times the known part of the next row (the empty product has
    none for ``n >= 1``). Exact sums and tails leave the same known part."""
    out = []
    for r, kids in enumerate(series.children):
        known = -math.inf
        for j in range(len(kids) - 1, -1, -1):
            p = layout.first[r] + j
            known = _lae(float(inner[p]), float(series.log_f[kids[j], 0]) + known)
        out.append(known)
    return out


def _complete(series: CountSeries, layout: _Layout, n: int, inner, inner_t) -> None:
    """Fill degree ``n >= 1`` of every suffix row once degree ``n`` of every nonterminal is known:
    ``S_j[n]`` adds the terms ``i = 0`` and ``i = n`` to the inner ones; ``TS_j[n] = T_c[n] +
    F_c[0] TS_{j+1}[n] +`` the inner ones."""
    f, t, table, tail = series.log_f, series.log_t, layout.table, layout.tail_table
    for p in range(len(layout.child) - 1, -1, -1):  # a rule's later positions first
        c, row, nxt = int(layout.child[p]), int(layout.row[p]), int(layout.next[p])
        edge = _lae(f[c, 0] + table[nxt, n], f[c, n] + table[nxt, 0])
        table[row, n] = _lae(float(inner[p]), edge)
        if tail is not None:
            rest = _lae(float(inner_t[p]), f[c, 0] + tail[nxt, n])
            tail[row, n] = _lae(float(t[c, n]), rest)


def _rule_rhs(series: CountSeries, r: int, n: int, tails: bool, known: list[float]) -> float:
    """log of rule ``r``'s contribution to degree ``n`` known beforehand (probability apart)."""
    d = int(series.degrees[r])
    if d == 0:
        return known[r]
    if tails:
        return 0.0 if n <= d else float(series.suffix_tail[r][0, n - d])
    return -math.inf if n < d else float(series.suffix[r][0, n - d])


def _step(series: CountSeries, n: int, resolvents: tuple, layout: _Layout) -> None:
    """Degree ``n >= 1`` of every nonterminal (and tail), then of every rule suffix."""
    grammar = series.grammar
    inner = _inner(series.log_f, layout.table, layout, n)
    inner_t = None if series.log_t is None else _inner(series.log_f, layout.tail_table, layout, n)
    for tails, table, res, part in ((False, series.log_f, resolvents[0], inner),
                                    (True, series.log_t, resolvents[1], inner_t)):
        if table is None:
            continue
        known = _known_first(series, layout, part)
        rhs = np.full(grammar.num_nonterminals, -math.inf)
        for r, rule in enumerate(grammar.rules):
            if rule.prob > 0:
                term = math.log(rule.prob) + _rule_rhs(series, r, n, tails, known)
                rhs[rule.lhs] = _lae(float(rhs[rule.lhs]), term)
        table[:, n] = _solve_log(res, rhs)
    _complete(series, layout, n, inner, inner_t)


def count_series(grammar: Grammar, degrees: np.ndarray, max_count: int, *,
                 tails: bool = False) -> CountSeries:
    """The count law of an event (its per-rule ``degrees``) up to ``max_count``.

    Args:
        grammar: a checked grammar (proper, consistent, finite expected length).
        degrees: ``[num_rules]`` from :func:`event_degrees`.
        max_count: the largest count ``N`` (coefficients ``0 .. N``).
        tails: also the tails ``P(count >= n)`` (for ``at least`` interventions).

    Returns:
        the series of every nonterminal and rule suffix.
    """
    if max_count < 0:
        raise ValueError(f"max_count must be >= 0, got {max_count}")
    degrees = np.asarray(degrees, dtype=np.int64)
    width, num = max_count + 1, grammar.num_nonterminals
    children = [tuple(s.index for s in r.rhs if not s.terminal) for r in grammar.rules]
    f0 = _degree_zero(grammar, degrees, children)
    log_f = np.full((num, width), -math.inf)
    with np.errstate(divide="ignore"):
        log_f[:, 0] = np.log(f0)
    layout = _layout(children, width, tails)
    for p in range(len(layout.child) - 1, -1, -1):
        layout.table[layout.row[p], 0] = log_f[layout.child[p], 0] + layout.table[layout.next[p], 0]
    bounds = np.cumsum([0] + [len(k) + 1 for k in children])
    suffix = [layout.table[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    log_t, suffix_tail, res_t = None, None, None
    if tails:
        log_t = np.full((num, width), -math.inf)
        log_t[:, 0] = 0.0
        suffix_tail = [layout.tail_table[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        res_t = _resolvent(_jacobian(grammar, degrees, children, f0, tails=True))
    series = CountSeries(grammar, degrees, children, log_f, log_t, suffix, suffix_tail)
    resolvents = (_resolvent(_jacobian(grammar, degrees, children, f0, tails=False)), res_t)
    for n in range(1, width):
        _step(series, n, resolvents, layout)
    return series


def log_count_law(grammar: Grammar, event: str, max_count: int) -> np.ndarray:
    """``[max_count + 1]`` float64: ``log P(count = n)`` of one string, ``n = 0 .. max_count``.

    Args:
        grammar: a checked grammar.
        event: ``symbol:X`` or ``rule:A -> ...`` (see :func:`event_degrees`).
        max_count: the largest count.

    Returns:
        log probabilities (``-inf`` where the count is impossible).
    """
    return count_series(grammar, event_degrees(grammar, event), max_count).log_f[0].copy()


def expected_count(grammar: Grammar, degrees: np.ndarray) -> float:
    """``E[count]`` of one string: ``(I - M)^{-1} e`` at the start, with ``M`` the expectation
    matrix and ``e_A = sum_r p_r d_r`` (finite: the grammar's expected length is)."""
    direct = np.zeros(grammar.num_nonterminals)
    for d, rule in zip(np.asarray(degrees), grammar.rules):
        direct[rule.lhs] += rule.prob * float(d)
    return float(np.linalg.solve(np.eye(grammar.num_nonterminals) - grammar.expectation_matrix(),
                                 direct)[0])
