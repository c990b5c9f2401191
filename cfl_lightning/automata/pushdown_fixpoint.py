"""The excursion system of a pushdown automaton: least fixed point and linear expectations.

For a real-time deterministic pushdown automaton (see :mod:`cfl_lightning.automata.pushdown`)
with ``Q`` states and ``G`` stack symbols, the unknowns are

* ``E[X, p, r]``: the total weight of the paths that start in state ``p`` with ``X`` on top and
  end at the step that pops this ``X``, arriving in ``r`` (an *excursion*), and
* ``T[p]``: the total weight of the paths from ``p`` on the empty stack to the end.

Split the transitions by stack action into ``pop[X, p, r]``, ``keep[t, p, s]`` and
``push[t, Y, p, s]`` (``t`` a top, ``t = G`` the empty stack; entries sum the weights of the
symbols doing that). Then ``(E, T)`` is the least fixed point of the polynomial map

.. math::

    E[X] = pop[X] + keep[X] E[X] + \\sum_Y push[X, Y] E[Y] E[X], \\qquad
    T = final + keep[G] T + \\sum_Y push[G, Y] E[Y] T

(matrix products over states). With the transition probabilities as coefficients, ``T[p]`` is
the probability of ending from ``(p, empty)``; with coefficients restricted to the steps of one
event count (``weights * [f == 0]`` and so on) the same map gives the degree-0 coefficients of
the count law.

The least fixed point is found by Newton's method from 0 on the variables whose value is
positive (found first by a boolean Kleene iteration). On such a *clean* monotone system Newton's
sequence is well defined, increasing and converges to the least fixed point (Esparza, Kiefer and
Luttenberger 2010, "Computing the least fixed point of positive polynomial systems"; Etessami
and Yannakakis 2009 for the decomposed form); quadratically when the Jacobian's spectral radius
at the fixed point is below 1, linearly (one bit per step) on a critical system.

Variables are laid out as one vector: ``E`` flattened in ``(X, p, r)`` order, then ``T``:
``n = G * Q * Q + Q``. :func:`variable_classes` maps each to its position class
``q * (G + 1) + t``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from cfl_lightning.automata import pushdown_structured as structured
from cfl_lightning.errors import PDAError

__all__ = [
    "KEEP",
    "POP",
    "ExcursionSystem",
    "FixedPoint",
    "excursion_system",
    "apply_system",
    "jacobian",
    "support",
    "least_fixed_point",
    "dependents",
    "variable_classes",
    "spectral_radius",
    "expected_class_visits",
]

KEEP = -1
POP = -2


@dataclass(frozen=True)
class ExcursionSystem:
    """Coefficients of the excursion system for one weighting of the transitions.

    Attributes:
        pop: ``[G, Q, Q]`` ``pop[X, p, r]``: weight of popping ``X`` from ``p`` into ``r``.
        keep: ``[G + 1, Q, Q]`` ``keep[t, p, s]``: weight of keeping the stack from ``(p, t)``.
        push: ``[G + 1, G, Q, Q]`` ``push[t, Y, p, s]``: weight of pushing ``Y`` from ``(p, t)``.
        final: ``[Q]`` ending weight on the empty stack.
    """

    pop: Tensor
    keep: Tensor
    push: Tensor
    final: Tensor

    @property
    def num_states(self) -> int:
        return int(self.final.shape[0])

    @property
    def num_stack(self) -> int:
        return int(self.pop.shape[0])

    @property
    def num_variables(self) -> int:
        g, q = self.num_stack, self.num_states
        return g * q * q + q


@dataclass(frozen=True)
class FixedPoint:
    """The least fixed point of an :class:`ExcursionSystem`.

    Attributes:
        excursions: ``[G, Q, Q]`` ``E[X, p, r]``.
        ends: ``[Q]`` ``T[p]``.
        iterations: Newton steps taken.
        residual: ``max |F(x) - x|`` at the returned point.
    """

    excursions: Tensor
    ends: Tensor
    iterations: int
    residual: float

    def vector(self) -> Tensor:
        """``[n]`` the variables in the module's layout (``E`` flattened, then ``T``)."""
        return torch.cat([self.excursions.reshape(-1), self.ends])


def excursion_system(
    target: Tensor, action: Tensor, weights: Tensor, final: Tensor
) -> ExcursionSystem:
    """Split a pushdown automaton's transitions by stack action.

    Args:
        target: ``[Q, G + 1, S]`` int64 next state or -1.
        action: ``[Q, G + 1, S]`` int64 pushed symbol ``Y >= 0``, :data:`KEEP` or :data:`POP`.
        weights: ``[Q, G + 1, S]`` float64 coefficients (the probabilities, or any nonnegative
            reweighting such as the probabilities times an event mask).
        final: ``[Q]`` float64 ending weights on the empty stack.

    Returns:
        The system's coefficient tensors (on ``weights``' device).
    """
    q, tops, _ = target.shape
    g = tops - 1
    dev, dt = weights.device, weights.dtype
    has = target >= 0
    src, top, _sym = has.nonzero(as_tuple=True)
    dst, act, w = target[has], action[has], weights[has]
    pop = torch.zeros(max(g, 0), q, q, dtype=dt, device=dev)
    keep = torch.zeros(tops, q, q, dtype=dt, device=dev)
    push = torch.zeros(tops, max(g, 0), q, q, dtype=dt, device=dev)
    m = act == POP
    pop.index_put_((top[m], src[m], dst[m]), w[m], accumulate=True)
    m = act == KEEP
    keep.index_put_((top[m], src[m], dst[m]), w[m], accumulate=True)
    m = act >= 0
    push.index_put_((top[m], act[m], src[m], dst[m]), w[m], accumulate=True)
    return ExcursionSystem(pop, keep, push, final.to(dev, dt))


def _split(system: ExcursionSystem, x: Tensor) -> tuple[Tensor, Tensor]:
    g, q = system.num_stack, system.num_states
    return x[: g * q * q].reshape(g, q, q), x[g * q * q :]


def _pushed(system: ExcursionSystem, e: Tensor) -> Tensor:
    """``[G + 1, Q, Q]``: ``sum_Y push[t, Y] @ E[Y]`` (push, then the whole excursion)."""
    return torch.einsum("typs,ysu->tpu", system.push, e)


def apply_system(system: ExcursionSystem, x: Tensor) -> Tensor:
    """One application of the polynomial map ``F``.

    Args:
        system: the coefficients.
        x: ``[n]`` variables (layout of the module docstring).

    Returns:
        ``[n]`` ``F(x)``.
    """
    g = system.num_stack
    e, t = _split(system, x)
    step = system.keep + _pushed(system, e)  # [G + 1, Q, Q]
    new_e = system.pop + step[:g] @ e
    new_t = system.final + step[g] @ t
    return torch.cat([new_e.reshape(-1), new_t])


def jacobian(system: ExcursionSystem, x: Tensor) -> Tensor:
    """The Jacobian ``dF/dx`` at ``x``.

    Returns:
        ``[n, n]`` float64; row = equation, column = variable.
    """
    g, q = system.num_stack, system.num_states
    e, t = _split(system, x)
    step = system.keep + _pushed(system, e)
    n_e = g * q * q
    jac = x.new_zeros(n_e + q, n_e + q)
    eye_g = torch.eye(g, dtype=x.dtype, device=x.device)
    eye_q = torch.eye(q, dtype=x.dtype, device=x.device)
    # dE[x,p,r]/dE[y,s,v] = [x=y][r=v] step[x,p,s] + push[x,y,p,s] E[x,v,r]
    j_ee = torch.einsum("xy,rv,xps->xprysv", eye_g, eye_q, step[:g]) + torch.einsum(
        "xyps,xvr->xprysv", system.push[:g], e
    )
    jac[:n_e, :n_e] = j_ee.reshape(n_e, n_e)
    # dT[p]/dE[y,s,v] = push[G,y,p,s] T[v];  dT[p]/dT[u] = step[G,p,u]
    jac[n_e:, :n_e] = torch.einsum("yps,v->pysv", system.push[g], t).reshape(q, n_e)
    jac[n_e:, n_e:] = step[g]
    return jac


def support(system: ExcursionSystem) -> Tensor:
    """Which variables are positive at the least fixed point (boolean Kleene iteration).

    Returns:
        ``[n]`` bool.
    """
    positive = ExcursionSystem(
        *(c.gt(0).to(torch.float64) for c in (system.pop, system.keep, system.push, system.final))
    )
    x = torch.zeros(system.num_variables, dtype=torch.float64, device=system.final.device)
    for _ in range(system.num_variables + 1):
        new = apply_system(positive, x).gt(0).to(torch.float64)
        if torch.equal(new, x):
            break
        x = new
    return x.bool()


def least_fixed_point(
    system: ExcursionSystem,
    *,
    tol: float = 1e-15,
    max_iter: int = 200,
    upper: float | None = 1.0,
) -> FixedPoint:
    """The least fixed point of ``x = F(x)`` by Newton's method from 0 on the positive variables.

    Args:
        system: the coefficients (nonnegative).
        tol: stop when a Newton step changes no variable by more than this.
        max_iter: at most this many Newton steps (a critical system gains one bit per step).
        upper: clamp every variable to at most this value (1 for probabilities: guards the
            nearly singular last steps of a critical system); ``None`` for no clamp.

    Returns:
        The :class:`FixedPoint` (zero on the variables outside :func:`support`).
    """
    keep = support(system)
    x = torch.zeros(system.num_variables, dtype=torch.float64, device=system.final.device)
    steps = 0
    g, q = system.num_stack, system.num_states
    if system.num_variables > structured.DENSE_MAX and bool(keep.any()):
        mask = structured.joint(keep.double(), g, q) > 0
        point, steps = structured.newton(
            system, mask, tol=tol, max_iter=max_iter, upper=upper
        )
        x = structured.flat(point, g)
    elif bool(keep.any()):
        idx = keep.nonzero(as_tuple=True)[0]
        eye = torch.eye(len(idx), dtype=x.dtype, device=x.device)
        for steps in range(1, max_iter + 1):
            gap = (apply_system(system, x) - x)[idx]
            lhs = eye - jacobian(system, x)[idx][:, idx]
            try:
                delta = torch.linalg.solve(lhs, gap)
            except RuntimeError:  # singular: already at the fixed point of a critical system
                break
            if not bool(torch.isfinite(delta).all()):
                break
            new = x.clone()
            new[idx] = torch.maximum(x[idx] + delta, x[idx])  # Newton's sequence increases
            if upper is not None:
                new = new.clamp(max=upper)
            change = float((new - x).abs().max())
            x = new
            if change <= tol:
                break
    residual = float((apply_system(system, x) - x).abs().max()) if len(x) else 0.0
    e, t = _split(system, x)
    return FixedPoint(e, t, steps, residual)


def dependents(jac: Tensor, start: int) -> Tensor:
    """Variables reachable from ``start`` in the dependency graph ``jac > 0``.

    Returns:
        ``[n]`` bool, ``start`` included.
    """
    adj = jac.gt(0).to(torch.float64)
    seen = torch.zeros(jac.shape[0], dtype=torch.float64, device=jac.device)
    seen[start] = 1.0
    while True:
        new = ((seen @ adj).gt(0) | seen.bool()).to(torch.float64)
        if torch.equal(new, seen):
            return seen.bool()
        seen = new


def variable_classes(num_states: int, num_stack: int, device: torch.device | str = "cpu") -> Tensor:
    """The position class of every variable: ``E[X, p, r]`` at ``(p, X)``, ``T[p]`` at ``(p, -)``.

    Returns:
        ``[n]`` int64 class ids ``p * (G + 1) + t``.
    """
    q, g = num_states, num_stack
    states = torch.arange(q, device=device)
    tops = torch.arange(g, device=device)[:, None, None]
    e_cls = (states[None, :, None] * (g + 1) + tops).expand(g, q, q)
    return torch.cat([e_cls.reshape(-1), states * (g + 1) + g])


def spectral_radius(matrix: Tensor) -> float:
    """Largest eigenvalue modulus of a square matrix (0 for an empty one)."""
    if matrix.numel() == 0:
        return 0.0
    return float(torch.linalg.eigvals(matrix.cpu()).abs().max())


def expected_class_visits(
    system: ExcursionSystem, point: FixedPoint, initial: int
) -> tuple[Tensor, float]:
    """Expected positions per string in each class, and the spectral radius that bounds them.

    Marking every step taken from class ``c`` (a symbol or the end) with ``z_c`` multiplies each
    equation of class ``c`` by ``z_c``, so ``dF/dz_c = x`` on that class's variables and the
    derivative of ``T[initial]`` is ``y^T diag(x)`` summed per class, with
    ``(I - J)^T y = e_T[initial]`` restricted to the positive variables ``T[initial]`` depends on.

    Args:
        system: the coefficients (the transition probabilities).
        point: its least fixed point.
        initial: the initial state.

    Returns:
        ``([Q * (G + 1)] float64 visits, rho)`` with ``rho`` the spectral radius of the restricted
        Jacobian; visits are meaningful only when ``rho < 1`` (else the expectation is infinite).
    """
    q, g = system.num_states, system.num_stack
    x = point.vector()
    if system.num_variables > structured.DENSE_MAX:
        try:
            return structured.visits_and_radius(system, structured.joint(x, g, q), initial)
        except structured.SolveLimit:
            raise PDAError(
                f"the excursion system ({system.num_variables} variables) is too close to "
                "critical for its size: its structured solve diverged or did not converge in "
                f"{structured.MAX_ITER} steps (expected string length too large to compute)"
            ) from None
    jac = jacobian(system, x)
    start = g * q * q + initial
    live = dependents(jac, start) & x.gt(0)
    visits = x.new_zeros(q * (g + 1))
    if not bool(live[start]):
        return visits, 0.0
    idx = live.nonzero(as_tuple=True)[0]
    sub = jac[idx][:, idx]
    rho = spectral_radius(sub)
    rhs = (idx == start).to(x.dtype)
    eye = torch.eye(len(idx), dtype=x.dtype, device=x.device)
    try:
        y = torch.linalg.solve((eye - sub).T, rhs)
    except RuntimeError:
        return visits, max(rho, 1.0)
    classes = variable_classes(q, g, x.device)[idx]
    visits.index_add_(0, classes, y * x[idx])
    return visits, rho
