"""The decomposed KL and state visits of M members at once, from packed evaluation batches.

Member ``m`` has its own automaton (``Q_m`` states). Its states are numbered ``offset_m ...
offset_m + Q_m - 1`` in one table of ``sum_m Q_m`` rows, the members' next-symbol tables
stacked: one call of the decomposition's own per-batch statistics
(:func:`cfl_lightning.metrics.functional._decomposed_kl_update`, every real cell of every member
as a one-position string with its string's weight) accumulates every member's sums, and each
member's slice of the sums goes through the same reduction as
:class:`~cfl_lightning.metrics.DecomposedKL`'s (``_decomposed_kl_compute``). The statistics are
sums over positions, so the result is the member's own ``DecomposedKL`` on its own batches up to
the order of floating-point additions.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from cfl_lightning.automata import Automaton, class_tables
from cfl_lightning.metrics.functional import _decomposed_kl_compute, _decomposed_kl_update
from cfl_lightning.sampling.visits import position_counts

__all__ = ["MemberDecomposedKL"]


class MemberDecomposedKL(Metric):
    """Every member's ``DecomposedKL`` and ``StateVisits``, accumulated in one update per batch.

    Args:
        pfsas: member ``m``'s automaton (all with the same alphabet size).
        validate_args: check state indices and log-probabilities in :meth:`update`.
        kwargs: passed to :class:`torchmetrics.Metric`.

    Example:
        >>> from cfl_lightning import parity_starfree_pfsa
        >>> A = parity_starfree_pfsa(0.3)
        >>> metric = MemberDecomposedKL([A, A])
        >>> states = torch.tensor([[[0, 3, 3]], [[0, 1, 0]]])  # [M, R, L]
        >>> mask = torch.ones(2, 1, 3, dtype=torch.bool)
        >>> metric.update(A.next_symbol_probs().log()[states].float(), states, mask)
        >>> [float(r["total"]) for r, _ in metric.compute()]
        [0.0, 0.0]
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = False
    # states (add_state): counts, kl_sums [sum Q] float64, ratio_sums [sum Q, |S|+1] float64,
    # visits [sum Q] int64; member m owns rows offset_m ... offset_m + Q_m - 1

    def __init__(self, pfsas: list[Automaton], *, validate_args: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        tables = [class_tables(p) for p in pfsas]
        widths = {int(t[0].shape[1]) for t in tables}
        if len(widths) != 1:
            raise ValueError(f"members' automata differ in alphabet size: {sorted(widths)}")
        self.validate_args = validate_args
        sizes = [int(t[0].shape[0]) for t in tables]
        self._sizes = sizes
        self._offsets = torch.tensor([0, *sizes]).cumsum(0)[:-1]  # [M]
        self._probs = torch.cat([t[0].cpu() for t in tables])  # [sum Q, |S|+1] float64
        self._expected = [t[1].cpu() for t in tables]
        total, width = self._probs.shape
        f64 = torch.float64
        self.add_state("counts", torch.zeros(total, dtype=f64), dist_reduce_fx="sum")
        self.add_state("kl_sums", torch.zeros(total, dtype=f64), dist_reduce_fx="sum")
        self.add_state("ratio_sums", torch.zeros(total, width, dtype=f64), dist_reduce_fx="sum")
        self.add_state("visits", torch.zeros(total, dtype=torch.long), dist_reduce_fx="sum")

    def update(
        self,
        log_probs: Tensor,
        states: Tensor,
        mask: Tensor,
        weights: Tensor | None = None,
        members: Tensor | None = None,
    ) -> None:
        """Accumulate one packed batch.

        Args:
            log_probs: ``[M', R, L, |S|+1]`` log-probabilities of members ``members``.
            states: ``[M', R, L]`` each member's own state indices.
            mask: ``[M', R, L]`` bool, True on real positions.
            weights: optional ``[M', R, L]`` weight of each cell's string (default 1).
            members: ``[M']`` int64 the members of the rows (default: all, in order).
        """
        m = log_probs.shape[0]
        device = log_probs.device
        offsets = self._offsets.to(device)
        if members is not None:
            offsets = offsets[members.to(device)]
        elif m != len(self._sizes):
            raise ValueError(f"log_probs has {m} members, the metric {len(self._sizes)}")
        mask = mask.bool()
        flat_states = (states + offsets.view(m, 1, 1))[mask]  # [N]: one-position strings
        width = log_probs.shape[-1]
        flat_lp = log_probs[mask].view(-1, 1, width)
        flat_w = None if weights is None else weights[mask].to(torch.float64)
        if self.validate_args and mask.any():  # each member's own state range
            local = states[mask]
            sizes = torch.tensor(self._sizes, device=device)
            sizes = sizes if members is None else sizes[members.to(device)]
            bound = sizes.view(m, 1, 1).expand_as(states)[mask]
            if bool(((local < 0) | (local >= bound)).any()):
                raise ValueError("states must lie in each member's [0, Q_m) at real positions")
        counts, kl_sums, ratio_sums = _decomposed_kl_update(
            flat_lp,
            flat_states.view(-1, 1),
            torch.ones(flat_states.numel(), 1, dtype=torch.bool, device=device),
            self._probs.to(device),
            flat_w,
            validate_args=self.validate_args,
        )
        self.counts += counts
        self.kl_sums += kl_sums
        self.ratio_sums += ratio_sums
        every = torch.ones_like(flat_states, dtype=torch.bool)
        self.visits += position_counts(flat_states, every, self.counts.numel()).to(self.visits)

    def compute(self) -> list[tuple[dict[str, Tensor], Tensor]]:
        """Per member, ``(DecomposedKL.compute() of its positions, its [Q_m] state visits)``."""
        out = []
        for offset, size, expected in zip(self._offsets.tolist(), self._sizes, self._expected):
            part = slice(offset, offset + size)
            result = _decomposed_kl_compute(
                self.counts[part], self.kl_sums[part], self.ratio_sums[part],
                self._probs[part], expected,
            )
            out.append((result, self.visits[part].clone()))
        return out
