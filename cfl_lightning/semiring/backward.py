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
  recurrence from ``T_0 = 1``. Bins are produced by doubling (``log2 N`` matrix products) and
  every bin is rescaled to max 1 with its log scale kept apart (:class:`ScaledBins`), so ``N`` in
  the millions neither underflows nor overflows.
* :func:`initial_count_law` -- only the initial state's bins (the per-string count law), by
  baby and giant steps, without the ``[N, Q]`` array.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from cfl_lightning.automata.pfsa import PFSA
from cfl_lightning.semiring.binning import BinningSemiring
from cfl_lightning.semiring.powers import ScaledRows, first_row_law, power_rows

__all__ = [
    "ScaledBins",
    "backward_fast",
    "backward_lehmann",
    "bins_from_operator",
    "count_operator",
    "initial_count_law",
    "lifted_transition_matrix",
]


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


def count_operator(pfsa: PFSA, event_fn: Tensor, *, tail: bool = False) -> tuple[Tensor, Tensor]:
    """The recurrence of the fast route: ``A = (I - W0)^-1 W1`` and its start vector.

    Args:
        pfsa: the automaton.
        event_fn: ``[Q, |S|]`` with entries in ``{0, 1}``.
        tail: start from ``T_0 = 1`` (tails) instead of ``beta_0 = (I - W0)^-1 f``.

    Returns:
        ``A`` ``[Q, Q]`` and the start ``[Q]``, non-negative float64 on ``pfsa.device``
        (rounding negatives clamped to 0). The ``Q x Q`` solve runs on the CPU (no solver
        launches on a GPU; the same ``A`` on every device).
    """
    device = pfsa.device
    host = pfsa if device.type == "cpu" else pfsa.to("cpu")
    mask = event_fn.cpu().double()
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("backward_fast needs a 0/1 event function; use backward_lehmann")
    q = host.num_states
    eye = torch.eye(q, dtype=torch.float64)
    lu = torch.linalg.lu_factor(eye - host.transition_matrix(1.0 - mask))
    step = torch.linalg.lu_solve(*lu, host.transition_matrix(mask)).clamp(min=0.0)
    if tail:
        start = torch.ones(q, dtype=torch.float64)
    else:
        start = torch.linalg.lu_solve(*lu, host.final[:, None])[:, 0].clamp(min=0.0)
    return step.to(device), start.to(device)


def backward_fast(
    pfsa: PFSA, event_fn: Tensor, num_bins: int, *, tail: bool = False, block: int | None = 4096
) -> ScaledBins:
    """Backward weights for a 0/1 event function by the ``(I - W0)^-1`` recurrence.

    Bins come by doubling up to ``block`` bins, then in blocks of ``block`` bins
    (:func:`~cfl_lightning.semiring.powers.power_rows`): ``O(log block + N / block)`` matrix
    products (kernel launches on a GPU), each bin rescaled to max 1.

    Args:
        pfsa: the automaton.
        event_fn: ``[Q, |S|]`` with entries in ``{0, 1}``.
        num_bins: number of bins ``n = 0 .. num_bins - 1`` to produce.
        tail: produce tails ``P(count >= n)`` instead of ``P(count = n)``.
        block: at most this many bins per matrix product (a power of two; ``None``: doubling all
            the way, ``O(log N)`` products; on a CPU, blocks of 4096 are faster).

    Returns:
        :class:`ScaledBins` with ``values`` ``[num_bins, Q]`` on ``pfsa.device``.
    """
    if num_bins < 1:
        raise ValueError("num_bins must be >= 1")
    return bins_from_operator(*count_operator(pfsa, event_fn, tail=tail), num_bins, block)


def bins_from_operator(
    step: Tensor, start: Tensor, num_bins: int, block: int | None = 4096
) -> ScaledBins:
    """Bins ``A^n start`` for ``n < num_bins`` from :func:`count_operator`'s output."""
    rows, _ = power_rows(start, step.T, num_bins, block)  # row n = (A^n start)^T
    return ScaledBins(rows.values, rows.log_scale)


def initial_count_law(
    pfsa: PFSA, event_fn: Tensor, length: int, *, tail: bool = False
) -> tuple[Tensor, ScaledRows]:
    """Log backward weights of the initial state only, ``log beta_n(q_init)`` for ``n < L``.

    The forward rows ``e^T A^n`` by baby and giant steps
    (:func:`~cfl_lightning.semiring.powers.first_row_law`): ``O(L Q + sqrt(L) Q^2)``, no
    ``[L, Q]`` array.

    Args:
        pfsa: the automaton.
        event_fn: ``[Q, |S|]`` 0/1.
        length: number of bins wanted.
        tail: tails ``log P(count >= n)`` instead.

    Returns:
        ``[L]`` float64 log weights on ``pfsa.device`` for some ``L >= length``, and the scaled
        row ``e^T A^L`` (its product with ``sum_m A^m start`` bounds the mass beyond ``L``).
    """
    step, start = count_operator(pfsa, event_fn, tail=tail)
    return first_row_law(pfsa.initial, step, start, length)
