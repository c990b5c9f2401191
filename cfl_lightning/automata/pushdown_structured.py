r"""Structured solves of the excursion system: no ``n x n`` matrix, for large automata.

The Jacobian of the excursion system (:mod:`~cfl_lightning.automata.pushdown_fixpoint`) at a
point ``(left, right)`` acts on ``V = (E, T)`` (``[G + 1, Q, Q]``, ``T`` in column 0 of slot
``G``) as

.. math::
    (J V)[t] = step[t]\, V[t] + \Big(\sum_Y push[t, Y]\, V[Y]\Big)\, right[t],
    \qquad step[t] = keep[t] + \sum_Y push[t, Y]\, left[Y],

``O(G^2 Q^3)`` per product instead of ``(G Q^2 + Q)^2`` entries. ``I - J`` is solved by the
regular splitting ``(I - step) - C`` (``C V = (push V) right``): with ``R = (I - step)^{-1}``
(``G + 1`` matrices ``Q x Q``, nonnegative, structural zeros from the closure of ``step > 0``)

.. math::  V_0 = R B, \qquad V_{k+1} = R\,(B + C V_k),

a sum of nonnegative terms for ``B >= 0`` (no cancellation: exact zeros stay exact) that
increases to ``(I - J)^{-1} B`` at the rate of ``rho(R C) < 1`` whenever ``rho(J) < 1``
(Varga's regular splittings). **Convergence criterion**: stop at the first ``k`` where no entry
grows by more than ``RTOL = 2^-53`` of its new value (in float64 the iteration has then reached
its fixed point up to the last bit of every entry; the remaining error is at most
``RTOL rho / (1 - rho)`` of each entry). An iteration that has not converged in ``max_iter``
steps raises :class:`SolveLimit` (a system too close to critical for this size).

Newton's method for the least fixed point uses the same splitting for each correction (truncated
to ``inner`` steps: an underestimate of the exact Newton step, so the sequence still increases
below the least fixed point (Esparza, Kiefer and Luttenberger 2010, Newton with Kleene
approximations) and stops when a step changes no variable by more than ``tol``, as the dense
method. The spectral radius is bounded above without eigenvalues: with ``y = (I - J)^{-1} 1 > 0``,
``J y = y - 1`` and Collatz-Wielandt give ``rho(J) <= 1 - 1 / max(y)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "DENSE_MAX",
    "RTOL",
    "SolveLimit",
    "Splitting",
    "joint",
    "flat",
    "closure",
    "apply_joint",
    "newton",
    "dependents",
    "visits_and_radius",
]

DENSE_MAX = 1500  # up to this many variables the dense methods run (their results unchanged)
RTOL = 2.0**-53
MAX_ITER = 20000


class SolveLimit(ArithmeticError):
    """The splitting iteration did not converge in its step limit (a near-critical system)."""


def joint(vec: Tensor, g: int, q: int) -> Tensor:
    """A flat ``[G Q^2 + Q]`` vector as ``[G + 1, Q, Q]`` (``T`` in column 0 of slot ``G``)."""
    out = vec.new_zeros(g + 1, q, q)
    out[:g] = vec[: g * q * q].reshape(g, q, q)
    out[g, :, 0] = vec[g * q * q :]
    return out


def flat(v: Tensor, g: int) -> Tensor:
    """Inverse of :func:`joint`: ``[G + 1, Q, Q]`` to ``[G Q^2 + Q]``."""
    return torch.cat([v[:g].reshape(-1), v[g, :, 0]])


def closure(adj: Tensor) -> Tensor:
    """``[..., Q, Q]`` bool: reflexive-transitive closure of each boolean matrix (squaring)."""
    q = adj.shape[-1]
    reach = adj | torch.eye(q, dtype=torch.bool, device=adj.device)
    while True:
        wider = (reach.double() @ reach.double()) > 0
        if torch.equal(wider, reach):
            return reach
        reach = wider


def _pushed(push: Tensor, v: Tensor) -> Tensor:
    """``[G + 1, Q, Q]`` ``sum_Y push[t, Y] @ v[Y]``."""
    g, q = push.shape[1], push.shape[-1]
    tops = push.shape[0]
    lhs = push.permute(0, 2, 1, 3).reshape(tops, q, g * q)
    return lhs @ v[:g].reshape(g * q, q)


@dataclass
class Splitting:
    """``I - J`` at one point, split as ``(I - step) - C`` (module docstring), on a mask.

    Attributes:
        push: ``[G + 1, G, Q, Q]`` push coefficients.
        step: ``[G + 1, Q, Q]`` ``keep + push left`` (restricted to the mask's rows).
        right: ``[G + 1, Q, Q]`` the continuation (``T`` in column 0 of slot ``G``).
        mask: ``[G + 1, Q, Q]`` bool, the variables solved for (others are 0).
        inverse: ``[G + 1, Q, Q]`` ``(I - step)^{-1}`` on the rows with a masked variable.
    """

    push: Tensor
    step: Tensor
    right: Tensor
    mask: Tensor
    inverse: Tensor

    def __post_init__(self) -> None:
        # numpy copies for the iteration (a numpy call on these small matrices costs a fraction
        # of a torch call): push as the matrix [(t, p), (Y, s)], the mask as 0/1
        tops, g, q, _ = self.push.shape
        self._push = self.push.permute(0, 2, 1, 3).reshape(tops * q, g * q).cpu().numpy()
        self._right = self.right.cpu().numpy()
        self._inverse = self.inverse.cpu().numpy()
        self._mask = self.mask.cpu().numpy().astype(np.float64)

    @classmethod
    def at(cls, keep: Tensor, push: Tensor, left: Tensor, right: Tensor, mask: Tensor):
        """The splitting at ``(left, right)`` (both ``[G + 1, Q, Q]``; ``left``'s ``E`` used)."""
        q = push.shape[-1]
        step = keep + _pushed(push, left)
        rows = mask.any(dim=2)  # [G + 1, Q]: states with a variable solved for
        both = rows[:, :, None] & rows[:, None, :]
        step = torch.where(both, step, 0.0)
        eye = torch.eye(q, dtype=step.dtype, device=step.device)
        inverse = torch.linalg.inv(eye - step)
        reach = closure(step > 0) & both
        inverse = torch.where(reach, inverse.clamp(min=0.0), 0.0)
        return cls(push, step, right, mask, inverse)

    def pushed(self, v: np.ndarray) -> np.ndarray:
        """``[G + 1, Q, Q]`` ``sum_Y push[t, Y] @ v[Y]``."""
        tops, q = v.shape[0], v.shape[-1]
        return (self._push @ v[: tops - 1].reshape(-1, q)).reshape(v.shape)

    def coupling(self, v: np.ndarray) -> np.ndarray:
        """``C V = (push V) right``."""
        return np.matmul(self.pushed(v), self._right)

    def coupling_t(self, w: np.ndarray) -> np.ndarray:
        """``C^T W``: ``[Y] = sum_t push[t, Y]^T W[t] right[t]^T`` (slot ``G`` is 0)."""
        tops, q = w.shape[0], w.shape[-1]
        a = np.matmul(w, self._right.transpose(0, 2, 1)).reshape(-1, q)  # [(t, p), u]
        out = np.zeros_like(w)
        out[: tops - 1] = (self._push.T @ a).reshape(tops - 1, q, q)
        return out

    def apply(self, v: Tensor) -> Tensor:
        """``J V`` (``[G + 1, Q, Q]``; masked)."""
        x = v.cpu().numpy()
        out = (np.matmul(self.step.cpu().numpy(), x) + self.coupling(x)) * self._mask
        return torch.from_numpy(out).to(v.device)

    def solve(
        self,
        rhs: Tensor,
        *,
        transpose: bool = False,
        max_iter: int = MAX_ITER,
        steps: int | None = None,
    ) -> Tensor:
        """``(I - J)^{-1} B`` (or ``(I - J)^{-T} B``) for ``B >= 0``, by the splitting iteration.

        Args:
            rhs: ``[G + 1, Q, Q]`` nonnegative (negative rounding is clamped).
            transpose: solve with ``(I - J)^T``.
            max_iter: raise :class:`SolveLimit` when not converged after this many steps.
            steps: stop after this many steps without raising (a truncated, lower solution).

        Returns:
            ``[G + 1, Q, Q]`` nonnegative, 0 off the mask.
        """
        out = self.solve_array(
            rhs.cpu().numpy(), transpose=transpose, max_iter=max_iter, steps=steps
        )
        return torch.from_numpy(out).to(rhs.device)

    def solve_array(
        self,
        rhs: np.ndarray,
        *,
        transpose: bool = False,
        max_iter: int = MAX_ITER,
        steps: int | None = None,
    ) -> np.ndarray:
        """:meth:`solve` on a numpy array."""
        b = np.maximum(rhs, 0.0) * self._mask
        if transpose:
            inverse, couple = self._inverse.transpose(0, 2, 1), self.coupling_t
        else:
            inverse, couple = self._inverse, self.coupling
        limit = max_iter if steps is None else steps
        with np.errstate(over="ignore", invalid="ignore"):  # beyond a radius: inf, caller checks
            v = np.matmul(inverse, b) * self._mask
            for _ in range(limit):
                new = np.maximum(np.matmul(inverse, b + couple(v)) * self._mask, v)
                if not np.isfinite(new).all():  # diverged: rho(J) >= 1 (or beyond a radius)
                    if steps is None:
                        raise SolveLimit("the splitting iteration diverged")
                    return new
                converged = not bool((new - v > RTOL * new).any())
                v = new
                if converged:
                    return v
        if steps is None:
            raise SolveLimit(f"the splitting iteration did not converge in {max_iter} steps")
        return v


def apply_joint(system, v: Tensor) -> Tensor:
    """``F(V)`` of an excursion system (``ExcursionSystem``) in the ``[G + 1, Q, Q]`` layout."""
    g = system.num_stack
    step = system.keep + _pushed(system.push, v)
    out = step @ v
    out[:g] += system.pop
    out[g, :, 0] += system.final
    return out


def newton(
    system, mask: Tensor, *, tol: float, max_iter: int, upper: float | None, inner: int = 100
) -> tuple[Tensor, int]:
    """Newton's method from 0 with structured corrections (module docstring).

    Args:
        system: the ``ExcursionSystem``.
        mask: ``[G + 1, Q, Q]`` bool, the variables positive at the least fixed point.
        tol: stop when a step changes no variable by more than this.
        max_iter: at most this many Newton steps.
        upper: clamp every variable to at most this value (``None``: no clamp).
        inner: splitting steps per correction at most (a truncated correction still increases
            the sequence below the least fixed point).

    Returns:
        ``([G + 1, Q, Q] point, Newton steps taken)``.
    """
    x = torch.zeros_like(mask, dtype=torch.float64)
    steps = 0
    for steps in range(1, max_iter + 1):
        gap = torch.where(mask, apply_joint(system, x) - x, 0.0)
        try:
            split = Splitting.at(system.keep, system.push, x, x, mask)
            delta = split.solve(gap, steps=inner)
        except RuntimeError:  # singular: already at the fixed point of a critical system
            break
        if not bool(torch.isfinite(delta).all()):
            break
        new = torch.maximum(x + delta, x)
        if upper is not None:
            new = new.clamp(max=upper)
        change = float((new - x).abs().max())
        x = new
        if change <= tol:
            break
    return x, steps


def _pattern(system, x: Tensor) -> Splitting:
    """The Jacobian's pattern at ``x`` as a 0/1 splitting (no underflow of tiny products)."""
    push = (system.push > 0).double()
    right = (x > 0).double()
    step = ((system.keep > 0) | (_pushed(push, right) > 0)).double()
    mask = torch.ones_like(x, dtype=torch.bool)
    return Splitting(push, step, right, mask, step)


def dependents(system, x: Tensor, start: tuple[int, int, int]) -> Tensor:
    """``[G + 1, Q, Q]`` bool: the variables ``start`` depends on at ``x`` (itself included)."""
    pattern = _pattern(system, x)
    step_t = pattern.step.numpy().transpose(0, 2, 1)
    seen = np.zeros(tuple(x.shape), dtype=bool)
    seen[start] = True
    while True:
        w = seen.astype(np.float64)
        new = seen | ((np.matmul(step_t, w) + pattern.coupling_t(w)) > 0)
        if np.array_equal(new, seen):
            return torch.from_numpy(seen).to(x.device)
        seen = new


def visits_and_radius(system, x: Tensor, initial: int) -> tuple[Tensor, float]:
    """Expected class visits ``[Q (G + 1)]`` and an upper bound on the spectral radius.

    ``visits_c = sum_{v in c} y_v x_v`` with ``(I - J)^T y = e_{T[initial]}`` on the positive
    variables ``T[initial]`` depends on; the radius bound is Collatz-Wielandt's
    ``max_i (J v)_i / v_i`` at ``v = (I - J)^{-2} 1`` (one inverse iteration past
    ``(I - J)^{-1} 1``): an upper bound, tight when ``v`` is near the Perron vector.

    Raises:
        SolveLimit: the splitting iteration did not converge (spectral radius near 1).
    """
    g, q = system.num_stack, system.num_states
    start = (g, initial, 0)
    live = dependents(system, x, start) & (x > 0)
    visits = x.new_zeros(q * (g + 1))
    if not bool(live[start]):
        return visits, 0.0
    split = Splitting.at(system.keep, system.push, x, x, live)
    rhs = torch.zeros_like(x)
    rhs[start] = 1.0
    y = split.solve(rhs, transpose=True)
    first = split.solve(live.double())
    first = first / float(first.max())
    second = split.solve(first)  # one inverse iteration towards the Perron vector
    ratio = torch.where(live, first / torch.where(live, second, 1.0), 1.0)
    rho = 1.0 - float(ratio.min())  # Collatz-Wielandt: max (J v / v) with J v = v - first
    visits += (y * x).sum(dim=2).T.reshape(-1)
    return visits, rho
