"""Exact next-symbol laws of a PCFG at every position of a batch of strings.

On the grammar's normal form (:mod:`~cfl_lightning.automata.pcfg.normal_form`), with ``w`` a
string, ``beta[i, j, A] = P(A =>* w_i .. w_j)`` the inside probabilities (CKY, spans by width,
vectorized over the batch and the span starts) and ``G = left_corner @ lexical``:

* ``nu_k[C]``: the probability of the leftmost sentential forms ``w_1 .. w_k C gamma`` in
  which ``C`` is a right child whose left sibling ends at ``k`` (``nu_0`` is the start). In a
  derivation of ``w_1 .. w_k a ...`` the path from the root to ``a``'s preterminal has a lowest
  right child ``C``; above it, its parent ``X -> B C`` with ``B`` spanning ``i .. k``, and ``X``
  left-derived from the right child that starts at ``i``. So
  ``mu_i = nu_(i-1) @ left_corner`` and ``nu_k[C] = sum_(i <= k) sum_(X -> B C) mu_i[X]
  P(X -> B C) beta[i, k, B]``, each derivation counted once; everything right of ``a`` sums
  to 1 (a consistent grammar).
* the law after ``k`` symbols: ``P(a | w_1..w_k) ∝ nu_k @ G[:, a]`` and ``P(EOS | w_1..w_k)
  ∝ beta[1, k, start]``; the normaliser is the prefix probability of ``w_1 .. w_k``.

Chart layout and cost. A *narrow* nonterminal (the parent of no binary rule) spans one symbol
only; a rule with a narrow left (right) child is summed at its one split, left width 1 (right
width 1), in ``O(n^2)``. Only the ``R_w`` rules whose two children are both wide cost
``O(n^3)``: per string of length ``n`` about ``n^3 / 6`` (start, split) pairs. The inside
probabilities are kept as ``[width, start, string, A]`` (each width written in one contiguous
block; the one-split rules and the ``nu`` pass read it), and those of the children ``B``, ``C``
of the ``R_w`` rules twice more, as ``[start, string, A in B, width]`` and ``[end, string, A in
C, n - width]``: at each width the left children of every split (start ``i``, widths ``1 ..
w-1``) and the right children (end ``i + w - 1``, widths ``w-1 .. 1``) are then strided views
whose last axis runs over the splits, so no per-split gather is built (the strided writes, one
element a cache line, cost ``|B| + |C|`` per span). Each pair costs

* dense, when ``|B| |C| <= DENSE_FACTOR * R_w`` (``B``, ``C``: the distinct left and right
  children of those rules, contiguous after an internal reordering of the nonterminals): the
  batched matrix product ``left^T @ right`` (``[|B|, m] @ [m, |C|]`` per start, summed over the
  ``m`` splits in BLAS) then one ``[|B| |C|, M]`` contraction with the rule weights per start;
* sparse otherwise: ``R_w`` products per pair (gathered rows, one multiply, one sum).

Everything else (the narrow rules, the ``nu`` pass below, the laws) is ``O(n^2 R)``, plus a
fixed Python cost per width and per prefix length. Rescaling: every quantity of a span or prefix
is divided by ``prod_t s_t`` over its positions, ``s_t = max_A P(A -> w_t)`` (the ratios of one
position share the scale, so the laws are unchanged); a string whose scaled probability still
underflows float64 is refused with its length named, never returned as NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from cfl_lightning.automata.pcfg.normal_form import NormalForm
from cfl_lightning.errors import CflError

__all__ = ["inside", "next_symbol_laws", "DENSE_FACTOR"]

#: the dense ``O(n^3)`` path is taken when ``|B| |C| <= DENSE_FACTOR * R_w`` (module
#: docstring): on one CPU core a multiply-add of the dense path cost a seventh (one 562-symbol
#: string) to a quarter (64 strings of 40) of one gathered product of the sparse path
DENSE_FACTOR = 6


@dataclass(frozen=True)
class _Rules:
    """Binary rules ``parent -> left right`` (``[R']`` int64 each, plan order) and weights."""

    parent: Tensor
    left: Tensor
    right: Tensor
    weight: Tensor


@dataclass(frozen=True)
class _Plan:
    """A normal form with its nonterminals reordered for the chart (module docstring).

    Attributes:
        order: ``[M]`` int64, the normal-form index of each plan index.
        lexical: ``[M, S]``; left_corner: ``[M, M]``; first_symbol: ``[M, S]`` (plan order).
        start: the start's plan index.
        rules: every binary rule (the ``nu`` pass).
        first: the rules with a narrow left child (one split: left width 1).
        last: the rules with a wide left and a narrow right child (one split: right width 1).
        wide: the rules with two wide children (every split); their ``left`` and ``right``
            count from the start of ``B`` and of ``C``.
        table: ``[|B| |C|, M]`` weights of ``wide`` by (left, right) pair on the dense path,
            else ``None``.
        lefts, rights: the plan indices of ``B`` and ``C`` (contiguous).
    """

    order: Tensor
    lexical: Tensor
    left_corner: Tensor
    first_symbol: Tensor
    start: int
    rules: _Rules
    first: _Rules
    last: _Rules
    wide: _Rules
    table: Tensor | None
    lefts: slice
    rights: slice


def _plan(nf: NormalForm, dense: bool | None) -> _Plan:
    """Reorder ``nf`` so that ``B`` then ``C`` are contiguous, and sort its rules by split.

    Args:
        nf: the normal form.
        dense: force the dense (``True``) or sparse (``False``) ``O(n^3)`` path; ``None``: by
            the cost rule ``|B| |C| <= DENSE_FACTOR * R_w``.

    Returns:
        The plan: ``B`` (left children of the two-wide-children rules) first, then ``C`` (their
        right children), overlapping where a nonterminal is both; the other nonterminals after.
    """
    m, dev = nf.num_nonterminals, nf.weight.device
    wide = torch.zeros(m, dtype=torch.bool, device=dev)
    wide[nf.parent] = True
    both = wide[nf.left] & wide[nf.right]
    lefts, rights = set(nf.left[both].tolist()), set(nf.right[both].tolist())
    order = sorted(lefts - rights) + sorted(lefts & rights) + sorted(rights - lefts)
    order_t = torch.tensor(order + sorted(set(range(m)) - set(order)), device=dev)
    pos = torch.empty_like(order_t)
    pos[order_t] = torch.arange(m, device=dev)
    b, c0 = slice(0, len(lefts)), len(lefts - rights)
    c = slice(c0, c0 + len(rights))

    def rules(mask: Tensor, left: int = 0, right: int = 0) -> _Rules:
        return _Rules(pos[nf.parent[mask]], pos[nf.left[mask]] - left,
                      pos[nf.right[mask]] - right, nf.weight[mask])

    narrow_left = ~wide[nf.left]
    if dense is None:
        dense = len(lefts) * len(rights) <= DENSE_FACTOR * int(both.sum())
    table, w = None, rules(both, b.start, c.start)
    if dense:
        table = torch.zeros(len(lefts) * len(rights), m, dtype=torch.float64, device=dev)
        table.index_put_((w.left * len(rights) + w.right, w.parent), w.weight, accumulate=True)
    return _Plan(order_t, nf.lexical[order_t], nf.left_corner[order_t][:, order_t],
                 nf.first_symbol[order_t], int(pos[0]), rules(torch.ones_like(both)),
                 rules(narrow_left), rules(~narrow_left & ~wide[nf.right]), w, table, b, c)


def _every_split(plan: _Plan, left: Tensor, right: Tensor) -> Tensor:
    """The wide rules summed over every split of every span of one width.

    Args:
        left: ``[i, B, |B|, m]`` (start, string, child, split): the left child's inside weight.
        right: ``[i, B, |C|, m]``: the right child's, same splits.

    Returns:
        ``[i, B, M]`` per parent.
    """
    i, b, m = left.shape[0], left.shape[1], plan.lexical.shape[0]
    w = plan.wide
    if plan.table is not None:
        pairs = left @ right.transpose(-1, -2)  # [i, B, |B|, |C|]
        return pairs.reshape(i, b, -1) @ plan.table
    out = torch.zeros(i, b, m, dtype=torch.float64, device=left.device)
    if w.parent.numel():
        prod = left.index_select(2, w.left) * right.index_select(2, w.right)  # [i, B, R_w, m]
        out.index_add_(-1, w.parent, prod.sum(dim=-1) * w.weight)
    return out


def _one_split(parent: Tensor, fixed: Tensor, child: Tensor, varying: Tensor, out: Tensor) -> None:
    """Add one split's products to ``out[..., parent[r]]`` (``[..., M]``).

    Args:
        parent: ``[R']`` int64.
        fixed: ``[..., R']``: the weight times the width-1 child's scaled lexical weight,
            computed once per batch.
        child: ``[R']`` int64, the other child; varying: ``[..., M]`` its inside weights.
    """
    if parent.numel():
        out.index_add_(-1, parent, fixed * varying.index_select(-1, child))


def _chart(plan: _Plan, tokens: Tensor) -> Tensor:
    """Scaled inside weights of every span (module docstring: layout).

    Args:
        plan: the reordered normal form.
        tokens: ``[B, n]`` int64.

    Returns:
        ``[n, n, B, M]`` float64 indexed ``[width - 1, start, b, A]`` (plan order): ``beta /
        prod s_t`` over the span; the cells of no span (``start + width > n``) are left unset.
    """
    b, n = tokens.shape
    m, lefts, rights = plan.lexical.shape[0], plan.lefts, plan.rights
    lex = plan.lexical.T[tokens].transpose(0, 1)  # [n, B, M]
    lex = lex / lex.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    chart = torch.empty(n, n, b, m, dtype=torch.float64, device=tokens.device)
    by_start = torch.empty(n, b, lefts.stop - lefts.start, n, dtype=torch.float64,
                           device=tokens.device)
    by_end = torch.empty(n, b, rights.stop - rights.start, n, dtype=torch.float64,
                         device=tokens.device)  # the cells of no span are never read
    if n:
        chart[0] = lex
        by_start[..., 0] = lex[..., lefts]
        by_end[..., n - 1] = lex[..., rights]
    first = lex[..., plan.first.left] * plan.first.weight  # [n, B, R_first]: left width 1
    last = lex[..., plan.last.right] * plan.last.weight  # [n, B, R_last]: right width 1
    for width in range(2, n + 1):
        i = n - width + 1  # starts
        out = _every_split(plan, by_start[:i, :, :, : width - 1], by_end[width - 1:, :, :, i:])
        _one_split(plan.first.parent, first[:i], plan.first.right, chart[width - 2, 1: i + 1],
                   out)
        _one_split(plan.last.parent, last[width - 1:], plan.last.left, chart[width - 2, :i], out)
        chart[width - 1, :i] = out
        by_start[:i, :, :, width - 1] = out[..., lefts]
        by_end[width - 1:, :, :, n - width] = out[..., rights]
    return chart


def inside(nf: NormalForm, tokens: Tensor, dense: bool | None = None) -> Tensor:
    """Scaled inside probabilities of every span of a batch of equal-length strings.

    Args:
        nf: the normal form.
        tokens: ``[B, n]`` int64 symbol ids (padding right of a string's end is harmless: no
            span ending left of it reads it).
        dense: the ``O(n^3)`` path (module docstring); ``None``: by the cost rule.

    Returns:
        ``[B, n, n, M]`` float64, indexed ``[b, start, width - 1, A]``: ``beta / prod s_t``
        over the span (0 where ``start + width > n``).
    """
    plan = _plan(nf, dense)
    chart = _chart(plan, tokens)
    back = torch.empty_like(plan.order)
    back[plan.order] = torch.arange(plan.order.numel(), device=back.device)
    n = tokens.shape[1]
    span = torch.arange(n, device=tokens.device)
    real = (span[:, None] + span[None, :] < n)[None, :, :, None]  # start + width - 1 < n
    return torch.where(real, chart.permute(2, 1, 0, 3)[..., back], 0.0)


def _prefix_weights(plan: _Plan, chart: Tensor) -> Tensor:
    """``nu_k`` for ``k = 0 .. n`` (module docstring), scaled as the chart.

    Args:
        plan: the reordered normal form.
        chart: ``[n, n, B, M]`` the chart (:func:`_chart`).

    Returns:
        ``[n + 1, B, M]`` float64.
    """
    n, _, b, m = chart.shape
    r = plan.rules
    cells = chart.reshape(n * n, b, m)  # a view: cell (width - 1) * n + start
    starts = torch.arange(n, device=chart.device)
    to_rules = plan.left_corner[:, r.parent] * r.weight  # [M, R]: mu[X] P(X -> B C)
    nu = torch.zeros(n + 1, b, m, dtype=torch.float64, device=chart.device)
    nu[0, :, plan.start] = 1.0
    mu = torch.zeros(n, b, r.weight.numel(), dtype=torch.float64, device=chart.device)
    for k in range(1, n + 1):
        mu[k - 1] = nu[k - 1] @ to_rules  # mu_(k-1)[parent of r] P(r), per rule
        spans = cells.index_select(0, (k - 1 - starts[:k]) * n + starts[:k])  # [k, B, M]
        prod = (mu[:k] * spans.index_select(-1, r.left)).sum(dim=0)  # [B, R], start k - 1 on
        nu[k].index_add_(-1, r.right, prod)
    return nu


def next_symbol_laws(
    nf: NormalForm, tokens: Tensor, lengths: Tensor, dense: bool | None = None
) -> Tensor:
    """``P(next symbol | w_1 .. w_k)`` for ``k = 0 .. n`` of every string (EOS last).

    Args:
        nf: the normal form of a consistent grammar.
        tokens: ``[B, n]`` int64, strings padded on the right.
        lengths: ``[B]`` int64 true lengths.
        dense: the ``O(n^3)`` path (module docstring); ``None``: by the cost rule.

    Returns:
        ``[B, n + 1, S + 1]`` float64; row ``k`` of string ``b`` is the law after its first
        ``k`` symbols (rows past ``lengths[b]`` are meaningless).

    Raises:
        CflError: a string outside the grammar's support, or one whose probability underflows.
    """
    b, n = tokens.shape
    plan = _plan(nf, dense)
    chart = _chart(plan, tokens)
    numer = (_prefix_weights(plan, chart) @ plan.first_symbol).transpose(0, 1)  # [B, n + 1, S]
    ends = torch.zeros(b, n + 1, dtype=torch.float64, device=tokens.device)
    if n:
        ends[:, 1:] = chart[:, 0, :, plan.start].T
    laws = torch.cat([numer, ends[..., None]], dim=-1)
    total = laws.sum(dim=-1, keepdim=True)
    rows = torch.arange(n + 1, device=tokens.device)[None, :] <= lengths[:, None]
    final = ends.gather(1, lengths[:, None]).squeeze(1)
    if not bool((total[..., 0][rows] > 0).all()) or not bool((final > 0).all()):
        bad = int(torch.nonzero((final <= 0)).flatten()[0]) if bool((final <= 0).any()) else 0
        raise CflError(f"string {bad} (length {int(lengths[bad])}) is outside the grammar's "
                       "support, or its probability underflows float64 even rescaled")
    return laws / total.clamp_min(torch.finfo(torch.float64).tiny)
