r"""Backward weights of the binning-lifted automaton, two ways.

``beta(q)_n`` is the probability that a string generated from state ``q`` traverses the counted
transitions exactly ``n`` times (the paper's Theorem "Backward Weight Interpretation").

* :func:`backward_lehmann` -- the generic route of the paper: lift every transition into the
  binning semiring, close the transition matrix with Lehmann's algorithm (``O(Q^3)`` semiring
  operations of ``O(N^2)`` each), multiply by the lifted final weights. Any integer event function.
* :func:`backward_fast` -- for 0/1 event functions. Split ``W = W0 + W1`` into uncounted and
  counted transitions; then

  .. math::
      \beta_0 = (I - W_0)^{-1} f, \qquad \beta_n = A \beta_{n-1}, \quad A = (I - W_0)^{-1} W_1,

  one factorization and ``O(Q^2)`` per bin. Tails ``T_n(q) = P(count >= n)`` obey the same
  recurrence from ``T_0 = 1``. Bins are produced in blocks of ``block`` with the stacked powers of
  ``A / rho(A)`` and every bin is rescaled to max 1 with its log scale kept apart
  (:class:`ScaledBins`), so ``N`` in the hundreds of thousands neither underflows nor overflows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from cfl_lightning.automata.pfsa import PFSA
from cfl_lightning.semiring.binning import BinningSemiring

__all__ = ["ScaledBins", "backward_fast", "backward_lehmann", "lifted_transition_matrix"]


@dataclass
class ScaledBins:
    """Per-bin rescaled backward weights: ``beta_n(q) = exp(log_scale[n]) * values[n, q]``.

    Attributes:
        values: ``[n_bins, Q]`` float64, each row scaled to max 1 (or all zero).
        log_scale: ``[n_bins]`` float64 (``-inf`` for an all-zero row).
    """

    values: Tensor
    log_scale: Tensor

    @property
    def num_bins(self) -> int:
        return int(self.values.shape[0])

    def log(self) -> Tensor:
        """``[n_bins, Q]`` log backward weights (``-inf`` for zero)."""
        return self.values.log() + self.log_scale[:, None]

    def log_column(self, state: int) -> Tensor:
        """``[n_bins]`` log backward weights of one state."""
        return self.values[:, state].log() + self.log_scale

    def dense(self) -> Tensor:
        """``[n_bins, Q]`` plain values (may underflow; for tests and small ``N``)."""
        return self.values * self.log_scale[:, None].exp()


def lifted_transition_matrix(
    pfsa: PFSA, event_fn: Tensor, semiring: BinningSemiring
) -> tuple[Tensor, Tensor]:
    """Lift the automaton into the binning semiring (the paper's binning automaton).

    Args:
        pfsa: the automaton.
        event_fn: ``[Q, |S|]`` non-negative integer counts of each transition.
        semiring: the binning semiring (real or log).

    Returns:
        ``W`` ``[Q, Q, N + 1]`` (transitions between the same pair of states summed) and the lifted
        final weights ``[Q, N + 1]`` (final event counts are zero).
    """
    q, s = pfsa.num_states, pfsa.num_symbols
    weights = pfsa.weights.log() if semiring.log else pfsa.weights
    lifted = semiring.lift(weights, event_fn.to(pfsa.device))  # [Q, S, N+1]
    onehot = torch.zeros(q, s, q, dtype=torch.float64, device=pfsa.device)
    has = pfsa.next_state >= 0
    onehot[has.nonzero(as_tuple=True) + (pfsa.next_state[has],)] = 1.0
    if semiring.log:
        mask = torch.where(onehot > 0, 0.0, float("-inf"))  # [Q, S, Q]
        matrix = semiring.sum(lifted[:, :, None, :] + mask[..., None], dim=1)
        final = semiring.lift(pfsa.final.log(), torch.zeros(q, dtype=torch.long))
    else:
        matrix = (lifted[:, :, None, :] * onehot[..., None]).sum(1)
        final = semiring.lift(pfsa.final, torch.zeros(q, dtype=torch.long))
    return matrix, final


def backward_lehmann(pfsa: PFSA, event_fn: Tensor, order: int, *, log: bool = False) -> Tensor:
    """Backward weights by Lehmann's algorithm over the ``order``-th binning semiring.

    Args:
        pfsa: the automaton.
        event_fn: ``[Q, |S|]`` non-negative integer event counts per transition.
        order: ``N``; bin ``N`` collects ``>= N`` occurrences.
        log: work in log space (returns log weights).

    Returns:
        ``[Q, N + 1]`` float64: ``beta(q)_n = P(count = n)`` for ``n < N``, ``P(count >= N)``
        for ``n = N`` (logs when ``log``).
    """
    semiring = BinningSemiring(order, log=log)
    matrix, final = lifted_transition_matrix(pfsa, event_fn, semiring)
    for k in range(pfsa.num_states):
        loop = semiring.star(matrix[k, k])  # [N+1]
        left = semiring.times(matrix[:, k], loop)  # [Q, N+1]
        update = semiring.times(left[:, None, :], matrix[k][None, :, :])  # [Q, Q, N+1]
        matrix = semiring.plus(matrix, update)
    eye = semiring.one(pfsa.num_states, device=pfsa.device)
    closure = matrix.clone()
    diagonal = torch.arange(pfsa.num_states, device=pfsa.device)
    closure[diagonal, diagonal] = semiring.plus(matrix[diagonal, diagonal], eye)
    return semiring.sum(semiring.times(closure, final[None, :, :]), dim=1)


def _spectral_scale(matrix: Tensor) -> float:
    """Spectral radius of ``matrix`` (1 when it is numerically nilpotent)."""
    radius = float(torch.linalg.eigvals(matrix.cpu()).abs().max())
    return radius if radius > 1e-200 else 1.0


def backward_fast(
    pfsa: PFSA, event_fn: Tensor, num_bins: int, *, tail: bool = False, block: int = 256
) -> ScaledBins:
    """Backward weights for a 0/1 event function by the ``(I - W0)^-1`` recurrence.

    Args:
        pfsa: the automaton.
        event_fn: ``[Q, |S|]`` with entries in ``{0, 1}``.
        num_bins: number of bins ``n = 0 .. num_bins - 1`` to produce.
        tail: produce tails ``P(count >= n)`` instead of ``P(count = n)``.
        block: bins per block (one stacked matmul each).

    Returns:
        :class:`ScaledBins` with ``values`` ``[num_bins, Q]`` on ``pfsa.device``.
    """
    if num_bins < 1:
        raise ValueError("num_bins must be >= 1")
    mask = event_fn.to(pfsa.device).double()
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("backward_fast needs a 0/1 event function; use backward_lehmann")
    q = pfsa.num_states
    eye = torch.eye(q, dtype=torch.float64, device=pfsa.device)
    w0 = pfsa.transition_matrix(1.0 - mask)
    w1 = pfsa.transition_matrix(mask)
    lu = torch.linalg.lu_factor(eye - w0)
    step = torch.linalg.lu_solve(*lu, w1)  # A = (I - W0)^-1 W1, [Q, Q]
    if tail:
        start = torch.ones(q, dtype=torch.float64, device=pfsa.device)
    else:
        start = torch.linalg.lu_solve(*lu, pfsa.final[:, None])[:, 0]
    start = start.clamp(min=0.0)
    values = torch.zeros(num_bins, q, dtype=torch.float64, device=pfsa.device)
    log_scale = torch.empty(num_bins, dtype=torch.float64, device=pfsa.device)
    peak = start.abs().max()
    values[0] = start / peak if peak > 0 else start
    log_scale[0] = peak.log()
    if num_bins == 1:
        return ScaledBins(values, log_scale)
    scale = _spectral_scale(step)
    normalized = step / scale
    block = max(1, min(block, num_bins - 1))
    powers = torch.empty(block, q, q, dtype=torch.float64, device=pfsa.device)
    powers[0] = normalized
    for k in range(1, block):
        powers[k] = powers[k - 1] @ normalized
    ks = torch.arange(1, block + 1, dtype=torch.float64, device=pfsa.device)
    offsets = ks * torch.log(torch.tensor(scale, dtype=torch.float64))
    i = 1
    while i < num_bins:
        b = min(block, num_bins - i)
        ys = (powers[:b] @ values[i - 1]).clamp(min=0.0)  # [b, Q]; negatives are rounding
        peaks = ys.amax(dim=1)
        safe = torch.where(peaks > 0, peaks, torch.ones_like(peaks))
        values[i : i + b] = ys / safe[:, None]
        log_scale[i : i + b] = log_scale[i - 1] + offsets[:b] + peaks.log()
        i += b
    return ScaledBins(values, log_scale)
