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

Cost: ``O(n^3 R)`` for the inside pass and ``O(n^2 R)`` for ``nu`` per string of length ``n``
(``R`` binary rules of the normal form). Rescaling: every quantity of a span or prefix is
divided by ``prod_t s_t`` over its positions, ``s_t = max_A P(A -> w_t)`` (the ratios of one
position share the scale, so the laws are unchanged); a string whose scaled probability still
underflows float64 is refused with its length named, never returned as NaN.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cfl_lightning.automata.pcfg.normal_form import NormalForm
from cfl_lightning.errors import CflError

__all__ = ["inside", "next_symbol_laws"]


def _rule_products(nf: NormalForm, left: Tensor, right: Tensor) -> Tensor:
    """``sum over the split axis (-2) of P(A -> B C) left[..., B] right[..., C]`` per parent.

    Args:
        left, right: ``[..., m, M]``.

    Returns:
        ``[..., M]``.
    """
    prod = left[..., nf.left] * right[..., nf.right] * nf.weight  # [..., m, R]
    out = torch.zeros(*prod.shape[:-2], nf.num_nonterminals, dtype=prod.dtype, device=prod.device)
    return out.index_add_(-1, nf.parent, prod.sum(dim=-2))


def _right_children(nf: NormalForm, parents: Tensor, spans: Tensor) -> Tensor:
    """``sum over starts (-2) of mu[X] P(X -> B C) beta[B]``, per right child ``C``.

    Args:
        parents: ``[..., k, M]`` (``mu`` at each start), spans: ``[..., k, M]`` (``beta`` of the
            span from that start to the current end).

    Returns:
        ``[..., M]``.
    """
    prod = parents[..., nf.parent] * spans[..., nf.left] * nf.weight  # [..., k, R]
    out = torch.zeros(*prod.shape[:-2], nf.num_nonterminals, dtype=prod.dtype, device=prod.device)
    return out.index_add_(-1, nf.right, prod.sum(dim=-2))


def inside(nf: NormalForm, tokens: Tensor) -> Tensor:
    """Scaled inside probabilities of every span of a batch of equal-length strings.

    Args:
        nf: the normal form.
        tokens: ``[B, n]`` int64 symbol ids (padding right of a string's end is harmless: no
            span ending left of it reads it).

    Returns:
        ``[B, n, n, M]`` float64, indexed ``[b, start, width - 1, A]``: ``beta / prod s_t``
        over the span.
    """
    b, n = tokens.shape
    m = nf.num_nonterminals
    lex = nf.lexical.T[tokens]  # [B, n, M]
    scale = lex.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    chart = torch.zeros(b, n, n, m, dtype=torch.float64, device=tokens.device)
    chart[:, :, 0] = lex / scale
    for width in range(2, n + 1):
        starts = torch.arange(n - width + 1, device=tokens.device)
        splits = torch.arange(1, width, device=tokens.device)
        left = chart[:, : n - width + 1, : width - 1]  # [B, i, m, M]: start i, width m
        right = chart[:, starts[:, None] + splits[None, :], (width - splits - 1)[None, :]]
        chart[:, : n - width + 1, width - 1] = _rule_products(nf, left, right)
    return chart


def next_symbol_laws(nf: NormalForm, tokens: Tensor, lengths: Tensor) -> Tensor:
    """``P(next symbol | w_1 .. w_k)`` for ``k = 0 .. n`` of every string (EOS last).

    Args:
        nf: the normal form of a consistent grammar.
        tokens: ``[B, n]`` int64, strings padded on the right.
        lengths: ``[B]`` int64 true lengths.

    Returns:
        ``[B, n + 1, S + 1]`` float64; row ``k`` of string ``b`` is the law after its first
        ``k`` symbols (rows past ``lengths[b]`` are meaningless).

    Raises:
        CflError: a string outside the grammar's support, or one whose probability underflows.
    """
    b, n = tokens.shape
    chart = inside(nf, tokens)
    g = nf.first_symbol  # [M, S]
    nu = torch.zeros(b, n + 1, nf.num_nonterminals, dtype=torch.float64, device=tokens.device)
    nu[:, 0, 0] = 1.0
    mu = torch.zeros_like(nu)
    for k in range(1, n + 1):
        mu[:, k - 1] = nu[:, k - 1] @ nf.left_corner
        starts = torch.arange(k, device=tokens.device)
        spans = chart[:, starts, k - 1 - starts]  # [B, k, M]: span start .. k-1 (0-based)
        nu[:, k] = _right_children(nf, mu[:, :k], spans)
    numer = nu @ g  # [B, n + 1, S]
    ends = torch.zeros(b, n + 1, dtype=torch.float64, device=tokens.device)
    ends[:, 1:] = chart[:, 0, :, 0]
    laws = torch.cat([numer, ends[..., None]], dim=-1)
    total = laws.sum(dim=-1, keepdim=True)
    rows = torch.arange(n + 1, device=tokens.device)[None, :] <= lengths[:, None]
    final = ends.gather(1, lengths[:, None]).squeeze(1)
    if not bool((total[..., 0][rows] > 0).all()) or not bool((final > 0).all()):
        bad = int(torch.nonzero((final <= 0)).flatten()[0]) if bool((final <= 0).any()) else 0
        raise CflError(f"string {bad} (length {int(lengths[bad])}) is outside the grammar's "
                       "support, or its probability underflows float64 even rescaled")
    return laws / total.clamp_min(torch.finfo(torch.float64).tiny)
