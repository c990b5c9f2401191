"""Decomposed KL divergence between an automaton and a language model, as pure functions.

With exact automaton weights ``p_pi(q)`` (expected visits), ``p_pi(q, s) = p_pi(q) p_A(s | q)`` and
``p_pi(s) = sum_q p_pi(q, s)``, the paper's three decompositions of ``KL(p_A || p_theta)`` are

.. math::
    \\sum_q p_\\pi(q)\\,U(q) = \\sum_{q,s} p_\\pi(q,s)\\,U(q,s) = \\sum_s p_\\pi(s)\\,U(s),

where the unweighted parts ``U`` are expectations over the prefixes ``x`` reaching ``q``. They are
estimated from prefixes of strings drawn from the automaton by per-state averages:
``U(q) = mean_{t: q_t = q} KL(p_A(.|q) || p_theta(.|x_<t))`` and
``U(q, s) = mean_{t: q_t = q} log p_A(s|q) / p_theta(s|x_<t)``. The symbol contribution is
``p_pi(s) U(s) = sum_q p_pi(q, s) U(q, s)``, so the three decompositions sum to the same ``total``
(the stratified estimator ``sum_q p_pi(q) U(q)``) up to rounding. ``U(s)`` itself is estimated
over the states the strings visit, ``sum_q p_pi(q, s) U(q, s) / sum_q p_pi(q, s)`` with both
sums over visited states: an unvisited state's ``U(q, s)`` is unknown, not 0.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cfl_lightning.automata.protocol import Automaton, class_tables

__all__ = ["decomposed_kl", "_decomposed_kl_update", "_decomposed_kl_compute"]


def _check_real_positions(log_probs: Tensor, states: Tensor, mask: Tensor, num_states: int) -> None:
    """``validate_args`` of :func:`_decomposed_kl_update`: at the real positions (``mask``
    ``[B, T]`` bool), states in ``[0, num_states)`` and normalized, NaN-free log-probabilities.

    Raises:
        ValueError: naming the first problem.
    """
    real = states[mask]
    if real.numel() and (int(real.min()) < 0 or int(real.max()) >= num_states):
        raise ValueError(f"states must lie in [0, {num_states}) at real positions")
    if torch.isnan(log_probs[mask]).any():
        raise ValueError("log_probs contains NaN at real positions")
    rows = log_probs[mask]
    if rows.numel():
        norm = torch.logsumexp(rows.to(torch.float64), dim=-1).abs()
        eps = torch.finfo(log_probs.dtype).eps if log_probs.is_floating_point() else 0.0
        worst = float(norm.max())
        if not worst <= max(1e-3, 8 * eps):  # also catches inf and all--inf rows
            raise ValueError(
                "log_probs must be log-probabilities, e.g. from log_softmax over the last "
                f"dimension: a row at a real position has |logsumexp| = {worst:.4g}, not 0"
            )


def _decomposed_kl_update(
    log_probs: Tensor,
    states: Tensor,
    mask: Tensor,
    target_probs: Tensor,
    weights: Tensor | None = None,
    *,
    validate_args: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-batch sufficient statistics of the decomposed KL.

    Args:
        log_probs: ``[B, T, |S|+1]`` model next-symbol log-probabilities (EOS last).
        states: ``[B, T]`` integer automaton state after each prefix (any value at padding).
        mask: ``[B, T]`` bool, True on real positions.
        target_probs: ``[Q, |S|+1]`` automaton next-symbol distribution ``p_A(. | q)``.
        weights: optional ``[B]`` per-string weights (default 1; e.g. exact string probabilities
            when feeding an exhaustive enumeration).
        validate_args: check state indices, NaN log-probabilities, and that every row at a real
            position is normalized (``|logsumexp| <= max(1e-3, 8 eps)``, as from ``log_softmax``).

    Returns:
        ``counts`` ``[Q]`` (weighted number of positions at each state), ``kl_sums`` ``[Q]``
        (weighted sums of ``KL(p_A(.|q) || p_theta(.|prefix))``) and ``ratio_sums``
        ``[Q, |S|+1]`` (weighted sums of ``log p_A(s|q) / p_theta(s|prefix)``, 0 where
        ``p_A(s|q) = 0``), all float64.

    Raises:
        ValueError: on mismatched shapes, state indices out of range, NaN log-probabilities, or
            rows that are not log-probabilities (the message mentions ``log_softmax``).
    """
    num_states, width = target_probs.shape
    if log_probs.ndim != 3 or log_probs.shape[-1] != width:
        raise ValueError(f"log_probs must have shape [B, T, {width}], got {list(log_probs.shape)}")
    if states.shape != log_probs.shape[:2] or mask.shape != log_probs.shape[:2]:
        raise ValueError(
            f"states and mask must have shape {list(log_probs.shape[:2])}, got "
            f"{list(states.shape)} and {list(mask.shape)}"
        )
    if states.is_floating_point():
        raise ValueError(f"states must be an integer tensor, got {states.dtype}")
    mask = mask.bool()
    if weights is None:
        weights = torch.ones(log_probs.shape[0], dtype=torch.float64, device=log_probs.device)
    elif weights.shape != log_probs.shape[:1]:
        raise ValueError(
            f"weights must have shape [{log_probs.shape[0]}], got {list(weights.shape)}"
        )
    if validate_args:
        _check_real_positions(log_probs, states, mask, num_states)
    target_probs = target_probs.to(device=log_probs.device, dtype=torch.float64)
    w = weights.to(device=log_probs.device, dtype=torch.float64)[:, None].expand(mask.shape)
    valid = mask & (w > 0)
    q = torch.where(valid, states.long(), torch.zeros_like(states, dtype=torch.long))
    p = target_probs[q]  # [B, T, |S|+1]
    support = valid[..., None] & (p > 0)
    # log p_A - log p_theta on the support of p_A only: never NaN, +inf where p_theta = 0.
    ratio = torch.where(support, p.log() - log_probs.to(torch.float64), torch.zeros_like(p))
    kl = (p * ratio).sum(-1)
    w = torch.where(valid, w, torch.zeros_like(w))
    flat_q = q.reshape(-1)
    counts = torch.zeros(num_states, dtype=torch.float64, device=p.device)
    counts.index_add_(0, flat_q, w.reshape(-1))
    kl_sums = torch.zeros_like(counts)
    kl_sums.index_add_(0, flat_q, torch.where(valid, w * kl, 0.0).reshape(-1))
    weighted_ratio = torch.where(support, w[..., None] * ratio, torch.zeros_like(ratio))
    ratio_sums = torch.zeros(num_states, width, dtype=torch.float64, device=p.device)
    ratio_sums.index_add_(0, flat_q, weighted_ratio.reshape(-1, width))
    return counts, kl_sums, ratio_sums


def _decomposed_kl_compute(
    counts: Tensor, kl_sums: Tensor, ratio_sums: Tensor, target_probs: Tensor, visits: Tensor
) -> dict[str, Tensor]:
    """Reduce sufficient statistics to the weighted and unweighted decompositions.

    Args:
        counts: ``[Q]``, kl_sums: ``[Q]``, ratio_sums: ``[Q, |S|+1]`` from
            :func:`_decomposed_kl_update` (summed over batches).
        target_probs: ``[Q, |S|+1]`` automaton next-symbol distribution.
        visits: ``[Q]`` exact expected visits ``p_pi(q)``.

    Returns:
        dict of float64 tensors: ``state`` ``[Q]``, ``transition`` ``[Q, |S|+1]``, ``symbol``
        ``[|S|+1]`` (weighted; no NaN; each sums to ``total``), their ``*_unweighted`` versions
        (NaN for unvisited states, for ``p_A(s|q) = 0`` and for symbols that no visited state
        can emit), and ``total``
        (scalar, nats per string). Unvisited states contribute 0 to the weighted outputs.
    """
    device = counts.device
    counts, kl_sums, ratio_sums = (t.to(torch.float64) for t in (counts, kl_sums, ratio_sums))
    probs = target_probs.to(device=device, dtype=torch.float64)
    visits = visits.to(device=device, dtype=torch.float64)
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=device)
    zero = torch.zeros((), dtype=torch.float64, device=device)
    seen = counts > 0
    denom = torch.where(seen, counts, torch.ones_like(counts))
    state_unw = torch.where(seen, kl_sums / denom, nan)
    trans_ok = seen[:, None] & (probs > 0)
    trans_unw = torch.where(trans_ok, ratio_sums / denom[:, None], nan)
    state = torch.where(seen & (visits > 0), visits * state_unw, zero)
    trans_weight = visits[:, None] * probs
    transition = torch.where(trans_ok & (trans_weight > 0), trans_weight * trans_unw, zero)
    symbol = transition.sum(0)
    # U(s): the p_pi(q, s)-weighted mean of U(q, s) over the visited states only
    symbol_weight = torch.where(trans_ok, trans_weight, zero).sum(0)
    symbol_ok = symbol_weight > 0
    symbol_unw = torch.where(symbol_ok, symbol / torch.where(symbol_ok, symbol_weight, 1.0), nan)
    return {
        "total": state.sum(),
        "state": state,
        "transition": transition,
        "symbol": symbol,
        "state_unweighted": state_unw,
        "transition_unweighted": trans_unw,
        "symbol_unweighted": symbol_unw,
    }


def decomposed_kl(
    automaton: Automaton, log_probs: Tensor, states: Tensor, mask: Tensor, weights: Tensor | None = None
) -> dict[str, Tensor]:
    """Decomposed ``KL(p_A || p_theta)`` of one batch of strings drawn from ``automaton``.

    Args:
        automaton: the automaton ``A`` the strings were drawn from.
        log_probs: ``[B, T, |S|+1]`` model next-symbol log-probabilities (EOS last).
        states: ``[B, T]`` automaton state after each prefix (position 0: initial state).
        mask: ``[B, T]`` bool, True on real positions.
        weights: optional ``[B]`` per-string weights (default 1).

    Returns:
        the dict of :func:`_decomposed_kl_compute` (see :class:`DecomposedKL`).

    Example:
        >>> from cfl_lightning import parity_starfree_pfsa
        >>> A = parity_starfree_pfsa(0.3)
        >>> states = torch.tensor([[0, 3, 3]]); mask = torch.ones(1, 3, dtype=torch.bool)
        >>> out = decomposed_kl(A, A.next_symbol_probs().log()[states], states, mask)
        >>> float(out["total"])
        0.0
    """
    probs, visits = class_tables(automaton)
    stats = _decomposed_kl_update(log_probs, states, mask, probs, weights)
    return _decomposed_kl_compute(*stats, probs, visits)
