"""Gradient clipping and Adam for M members stored as the rows of one ``[M, P]`` tensor.

Both follow PyTorch exactly, row by row: :func:`clip_rows_` is
``torch.nn.utils.clip_grad_norm_(member.parameters(), max_norm)`` (the member's own total
2-norm, coefficient ``max_norm / (norm + 1e-6)`` clamped to 1) and :class:`StackedAdam` is
``torch.optim.Adam`` (default betas and eps, no weight decay) with its own learning rate and
step count per member. A member that is not ``active`` at a step (its epoch is over, or it has
stopped) keeps its parameters and its Adam state unchanged, as if the step had not happened.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["clip_rows_", "StackedAdam"]


def clip_rows_(grad: Tensor, max_norm: float) -> Tensor:
    """Clip each row of ``grad`` ``[M, P]`` to 2-norm ``max_norm`` in place; returns the norms ``[M]``."""
    norms = torch.linalg.vector_norm(grad, dim=1)
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    grad.mul_(coef.unsqueeze(1))
    return norms


class StackedAdam:
    """Adam over the rows of a ``[M, P]`` parameter tensor, one learning rate per row.

    Args:
        param: ``[M, P]`` leaf tensor (its ``.grad`` is read by :meth:`step`).
        lr: ``[M]`` learning rates (changed by assigning to :attr:`lr`).
        betas: Adam's ``(beta1, beta2)``.
        eps: Adam's epsilon.
    """

    def __init__(
        self, param: Tensor, lr: Tensor, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8
    ) -> None:
        self.param, self.betas, self.eps = param, betas, eps
        self.lr = lr.to(param.device, torch.float64)
        self.exp_avg = torch.zeros_like(param)
        self.exp_avg_sq = torch.zeros_like(param)
        # step counts and bias corrections in float64, as PyTorch's Python-float scalars
        self.steps = torch.zeros(param.shape[0], dtype=torch.float64, device=param.device)

    @torch.no_grad()
    def step(self, active: Tensor) -> None:
        """One Adam step for the rows where ``active`` ``[M]`` (bool) is True."""
        beta1, beta2 = self.betas
        grad = self.param.grad
        live = active.unsqueeze(1)
        self.steps += active.to(self.steps.dtype)
        steps = self.steps.clamp_min(1)
        bias1 = 1 - beta1**steps
        bias2_sqrt = (1 - beta2**steps).sqrt()
        exp_avg = torch.where(live, torch.lerp(self.exp_avg, grad, 1 - beta1), self.exp_avg)
        exp_avg_sq = torch.where(
            live, self.exp_avg_sq.mul(beta2).addcmul_(grad, grad, value=1 - beta2), self.exp_avg_sq
        )
        self.exp_avg.copy_(exp_avg)
        self.exp_avg_sq.copy_(exp_avg_sq)
        dtype = self.param.dtype
        denom = (exp_avg_sq.sqrt() / bias2_sqrt.to(dtype).unsqueeze(1)).add_(self.eps)
        step_size = torch.where(active, self.lr / bias1, torch.zeros_like(self.lr)).to(dtype)
        self.param.addcdiv_(exp_avg * step_size.unsqueeze(1), denom, value=-1.0)

    def select(self, rows: Tensor, param: Tensor) -> None:
        """Keep only ``rows`` (after the parameter tensor was compacted to ``param``)."""
        self.param = param
        self.lr, self.steps = self.lr[rows], self.steps[rows]
        self.exp_avg, self.exp_avg_sq = self.exp_avg[rows], self.exp_avg_sq[rows]
