"""Gradient clipping and Adam for M members stored as the rows of one ``[M, P]`` tensor.

Both follow PyTorch exactly, row by row: :func:`clip_rows_` is
``torch.nn.utils.clip_grad_norm_(member.parameters(), max_norm)`` (the member's own total
2-norm, coefficient ``max_norm / (norm + 1e-6)`` clamped to 1) and :class:`StackedAdam` is
``torch.optim.Adam`` (default betas and eps, no weight decay) with its own learning rate and
step count per member. A step updates only the rows given; the others (members idle at this
tick, or stopped) keep their parameters and Adam state, as if the step had not happened.
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
        param: ``[M, P]`` parameters (updated in place).
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
    def step(self, grad: Tensor, rows: Tensor | None = None) -> None:
        """One Adam step of the rows ``rows`` (default: all) with gradients ``grad`` ``[len(rows), P]``."""
        beta1, beta2 = self.betas
        if rows is None:
            param, exp_avg, exp_avg_sq = self.param, self.exp_avg, self.exp_avg_sq
            self.steps += 1
            steps, lr = self.steps, self.lr
        else:
            param, exp_avg, exp_avg_sq = self.param[rows], self.exp_avg[rows], self.exp_avg_sq[rows]
            self.steps.index_add_(0, rows, torch.ones_like(rows, dtype=self.steps.dtype))
            steps, lr = self.steps[rows], self.lr[rows]
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        dtype = param.dtype
        bias2_sqrt = (1 - beta2**steps).sqrt().to(dtype).unsqueeze(1)
        step_size = (lr / (1 - beta1**steps)).to(dtype).unsqueeze(1)
        denom = (exp_avg_sq.sqrt() / bias2_sqrt).add_(self.eps)
        param.addcdiv_(exp_avg * step_size, denom, value=-1.0)
        if rows is not None:
            self.param.index_copy_(0, rows, param)
            self.exp_avg.index_copy_(0, rows, exp_avg)
            self.exp_avg_sq.index_copy_(0, rows, exp_avg_sq)

    def select(self, rows: Tensor, param: Tensor) -> None:
        """Keep only ``rows`` (after the parameter tensor was compacted to ``param``)."""
        self.param = param
        self.lr, self.steps = self.lr[rows], self.steps[rows]
        self.exp_avg, self.exp_avg_sq = self.exp_avg[rows], self.exp_avg_sq[rows]
