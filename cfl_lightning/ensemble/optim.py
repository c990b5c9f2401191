"""Gradient clipping and Adam for M members stored as the rows of one ``[M, P]`` tensor.

Both follow PyTorch row by row: :func:`clip_rows_` is
``torch.nn.utils.clip_grad_norm_(member.parameters(), max_norm)`` (the member's own total
2-norm, coefficient ``max_norm / (norm + 1e-6)`` clamped to 1) and :class:`StackedAdam` is
``torch.optim.Adam`` (default betas and eps, no weight decay) with its own learning rate and
step count per member. A step updates only the members it is told to (``rows`` or ``active``);
the others (members idle at this tick, or stopped) keep their parameters and Adam state, as if
the step had not happened.

Nothing here reads a tensor on the host: a step can be captured in a CUDA graph (learning rates,
step counts and bias corrections are device tensors, changed in place).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

__all__ = ["clip_rows_", "StackedAdam"]


def clip_rows_(grad: Tensor, max_norm: float) -> Tensor:
    """Clip each row of ``grad`` ``[M, P]`` to 2-norm ``max_norm`` in place; returns the norms ``[M]``."""
    norms = torch.linalg.vector_norm(grad, dim=1)
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    grad.mul_(coef.unsqueeze(1))
    return norms


class StackedAdam(torch.optim.Optimizer):
    """Adam over the rows of one ``[M, P]`` parameter, one learning rate and step count per row.

    Its state (``exp_avg``, ``exp_avg_sq`` ``[M, P]``, ``step`` and ``lr`` ``[M]`` float64) is an
    ordinary optimizer state: Lightning saves it in checkpoints and restores it on resume
    (in place and without casting, see :meth:`load_state_dict`).

    Args:
        param: the ``[M, P]`` parameter (updated in place).
        lr: ``[M]`` learning rates (change them through :attr:`lr`, in place).
        betas: Adam's ``(beta1, beta2)``.
        eps: Adam's epsilon.
        per_row: update ``rows`` (or all rows) member by member with PyTorch's own scalar
            arithmetic (it reads each member's step and learning rate on the host; no gather, no
            broadcast: on a CPU about twice as fast as the batched arithmetic, and bitwise
            ``torch.optim.Adam``). Default: on a CPU. The ``active`` masked update, which CUDA
            graphs capture, is always batched.

    Example:
        >>> p = torch.nn.Parameter(torch.zeros(2, 3))
        >>> adam = StackedAdam(p, torch.tensor([0.1, 0.0], dtype=torch.float64))
        >>> p.grad = torch.ones(2, 3)
        >>> _ = adam.step()
        >>> p.detach()[:, 0].tolist()  # Adam's first step moves by lr
        [-0.10000000149011612, 0.0]
    """

    def __init__(
        self,
        param: Tensor,
        lr: Tensor,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        per_row: bool | None = None,
    ) -> None:
        if param.dim() != 2:
            raise ValueError(f"StackedAdam needs one [M, P] parameter, got shape {list(param.shape)}")
        if lr.shape != param.shape[:1]:
            raise ValueError(f"lr must have shape [{param.shape[0]}], got {list(lr.shape)}")
        super().__init__([param], {"betas": tuple(betas), "eps": float(eps)})
        state = self.state[param]
        state["step"] = torch.zeros(param.shape[0], dtype=torch.float64, device=param.device)
        state["lr"] = lr.detach().to(param.device, torch.float64).clone()
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.contiguous_format)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.contiguous_format)
        self.per_row = param.device.type == "cpu" if per_row is None else bool(per_row)

    @property
    def param(self) -> Tensor:
        """The ``[M, P]`` parameter."""
        return self.param_groups[0]["params"][0]

    @property
    def lr(self) -> Tensor:
        """``[M]`` float64 learning rates (a device tensor: assign with ``lr.copy_(...)``)."""
        return self.state[self.param]["lr"]

    @property
    def steps(self) -> Tensor:
        """``[M]`` float64 step counts."""
        return self.state[self.param]["step"]

    @torch.no_grad()
    def step(  # type: ignore[override]
        self,
        closure: Callable[[], Any] | None = None,
        *,
        rows: Tensor | None = None,
        active: Tensor | None = None,
    ) -> Any:
        """Run ``closure`` (which computes ``param.grad``), then one Adam step (see :meth:`update`)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grad = self.param.grad
        if grad is not None:
            self.update(grad if rows is None else grad[rows], rows=rows, active=active)
        return loss

    @torch.no_grad()
    def update(self, grad: Tensor, *, rows: Tensor | None = None, active: Tensor | None = None) -> None:
        """One Adam step of some members.

        Args:
            grad: ``[M, P]`` gradients, or ``[len(rows), P]`` with ``rows``.
            rows: ``[A]`` int64 members to update (others untouched; their rows are gathered).
            active: ``[M]`` bool members to update, without gathering (fixed shapes, for CUDA
                graphs): every row is computed, inactive rows keep their old values.
        """
        if rows is not None and active is not None:
            raise ValueError("give rows or active, not both")
        state = self.state[self.param]
        group = self.param_groups[0]
        beta1, beta2 = group["betas"]
        param, exp_avg, exp_avg_sq = self.param, state["exp_avg"], state["exp_avg_sq"]
        steps, lr = state["step"], state["lr"]
        if self.per_row and active is None:
            members = range(param.shape[0]) if rows is None else rows.tolist()
            for k, i in enumerate(members):
                steps[i] += 1
                self._row(param[i], exp_avg[i], exp_avg_sq[i], grad[k], float(steps[i]),
                          float(lr[i]), beta1, beta2, group["eps"])
            return
        if rows is not None:
            steps.index_add_(0, rows, torch.ones_like(rows, dtype=steps.dtype))
            new = self._moved(param[rows], exp_avg[rows], exp_avg_sq[rows], grad, steps[rows],
                              lr[rows], beta1, beta2, group["eps"])
            for target, value in zip((param, exp_avg, exp_avg_sq), new):
                target.index_copy_(0, rows, value)
            return
        if active is None:
            steps += 1
            new = self._moved(param, exp_avg, exp_avg_sq, grad, steps, lr, beta1, beta2, group["eps"])
            for target, value in zip((param, exp_avg, exp_avg_sq), new):
                if value is not target:
                    target.copy_(value)
            return
        steps.add_(active.to(steps.dtype))
        new = self._moved(param.clone(), exp_avg.clone(), exp_avg_sq.clone(), grad, steps, lr,
                          beta1, beta2, group["eps"])
        keep = active.unsqueeze(1)
        for target, value in zip((param, exp_avg, exp_avg_sq), new):
            torch.where(keep, value, target, out=target)

    @staticmethod
    def _row(
        param: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, grad: Tensor, step: float, lr: float,
        beta1: float, beta2: float, eps: float,
    ) -> None:
        """``torch.optim.Adam``'s single-tensor step on one member's row views, in place."""
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step_size = lr / (1 - beta1**step)
        denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(eps)
        param.addcdiv_(exp_avg, denom, value=-step_size)

    @staticmethod
    def _moved(
        param: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, grad: Tensor, steps: Tensor,
        lr: Tensor, beta1: float, beta2: float, eps: float,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Adam's arithmetic on (copies of) rows; returns the moved ``(param, exp_avg, exp_avg_sq)``."""
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        dtype = param.dtype
        # bias corrections in float64, as PyTorch's Python-float scalars
        bias2_sqrt = (1 - beta2**steps).sqrt().to(dtype).unsqueeze(1)
        step_size = (lr / (1 - beta1**steps)).to(dtype).unsqueeze(1)
        denom = (exp_avg_sq.sqrt() / bias2_sqrt).add_(eps)
        param.addcdiv_(exp_avg * step_size, denom, value=-1.0)
        return param, exp_avg, exp_avg_sq

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` in place, keeping every state tensor's dtype.

        ``torch.optim.Optimizer.load_state_dict`` would cast the float64 learning rates to the
        parameter's dtype and replace the tensors (a captured CUDA graph holds their addresses).
        """
        saved = state_dict.get("state", {})
        groups = state_dict.get("param_groups", [])
        if len(groups) != 1 or len(saved) != 1:
            raise ValueError("not a StackedAdam state (one parameter group with one parameter)")
        (values,) = saved.values()
        state = self.state[self.param]
        for key, target in state.items():
            if key not in values:
                raise ValueError(f"StackedAdam state lacks {key!r}")
            value = values[key]
            if tuple(value.shape) != tuple(target.shape):
                raise ValueError(
                    f"StackedAdam state {key!r} has shape {list(value.shape)}, expected "
                    f"{list(target.shape)} (a checkpoint of another ensemble?)"
                )
            target.copy_(value.to(target.device, target.dtype))
        group = self.param_groups[0]
        group.update({k: v for k, v in groups[0].items() if k not in ("params", "param_names")})
