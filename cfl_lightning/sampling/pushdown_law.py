r"""The per-string count law of an event on a pushdown automaton, coefficient by coefficient.

Mark every occurrence of the event with ``z`` (a step of event count ``d`` weighs ``w z^d``).
The excursion system of :mod:`cfl_lightning.automata.pushdown_fixpoint` becomes a system of
power series: ``E[X, p, r](z)`` (an excursion of ``X`` from ``p``, popping into ``r``) and
``T[p](z)`` (from ``(p, empty)`` to the end). The count law is the coefficients of
``T[initial](z)``: ``P(count = n) = [z^n] T[initial]``.

Write ``V = (E, T)`` (``T`` stored as column 0 of slot ``G`` of a ``[G + 1, Q, Q]`` tensor) and
``P_k[t] = sum_d sum_Y push_d[t, Y] E_{k - d}[Y]`` ("push, then a whole excursion", of total
degree ``k``). Then

.. math::
    V_n[t] = pop_n[t] + \sum_d keep_d[t] V_{n - d}[t] + \sum_{k=0}^{n} P_k[t] V_{n - k}[t].

Degree 0 is the least fixed point of the event-free system (Newton from 0). Degree ``n >= 1``
is linear in ``V_n``: its terms in ``V_n`` (``keep_0 V_n``, ``P_0 V_n``, ``(push_0 E_n) V_0``)
are the Jacobian ``J`` at ``V_0``, the same for every ``n``, so ``M = (I - J)^{-1}`` is formed
once (nonnegative: structural zeros are set from the dependency graph's closure) and each
degree costs one matrix-vector product plus the convolution ``sum_{k=1}^{n-1} P_k V_{n-k}`` as one
batched matrix product over the stacked lower degrees: ``O(n G Q^3)`` for degree ``n``,
``O(N^2 G Q^3)`` for the law up to ``N``. Coefficients are :class:`ScaledSeries` (one log scale
per degree), so ``N`` in the thousands neither underflows nor overflows and impossible counts
come out as exact zeros (``-inf`` in the log law, never NaN).

Tails ``Vbar_b = sum_{n >= b} V_n`` (for generation with *at least* ``b`` occurrences) follow
the same scheme without cancellation: ``Vbar_0 = V(1)`` (the probabilities of ending), and for
``b >= 1`` the tail of a product, ``tail_b(P V) = sum_{k < b} P_k Vbar_{b-k} + Pbar_b Vbar_0``,
is linear in ``Vbar_b`` through ``Jbar`` (the Jacobian with ``Vbar_0`` on the right).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from cfl_lightning.automata import pushdown_structured as structured
from cfl_lightning.automata.pushdown_fixpoint import (
    ExcursionSystem,
    excursion_system,
    least_fixed_point,
    support,
)
from cfl_lightning.sampling.budget import check_bytes
from cfl_lightning.sampling.pushdown_series import ScaledSeries, Term, combine, convolve

__all__ = ["ExcursionSeries", "law_bytes", "mixed_jacobian", "nonnegative_inverse", "value_at"]


def law_bytes(num_states: int, num_stack: int, length: int, *, tails: bool = False) -> int:
    """Peak bytes of the count series up to ``length`` coefficients (``O(L G Q^2)``).

    Each :class:`ScaledSeries` of ``[G + 1, Q, Q]`` float64 coefficients holds three copies (the
    values and the two product layouts), allocated in powers of two and copied when doubled (the
    old and the new arrays live together for a moment); ``V`` and ``P`` are two series, and the
    tails two more.
    """
    cap = 64
    while cap < length:
        cap *= 2
    per_series = 3 * 8 * (num_stack + 1) * num_states**2 * cap
    series = 4 if tails else 2
    return series * per_series + per_series // 2  # one layout's old copy while it doubles


def mixed_jacobian(system: ExcursionSystem, left: Tensor, right: Tensor) -> Tensor:
    """The Jacobian of ``V -> keep V + (push E) V`` with ``left`` for the pushed excursions and
    ``right`` for the continuation, on the joint layout (``E`` ``(X, p, r)`` flattened, then
    ``T``).

    Args:
        system: the degree-0 coefficients.
        left: ``[G, Q, Q]`` excursions ``E[Y, s, u]`` of the pushed symbol.
        right: ``[G + 1, Q, Q]`` continuation (``E``, and ``T`` in column 0 of slot ``G``).

    Returns:
        ``[n, n]`` float64, ``n = G Q^2 + Q``.
    """
    g, q = system.num_stack, system.num_states
    step = system.keep + torch.einsum("typs,ysu->tpu", system.push, left)
    n_e = g * q * q
    jac = left.new_zeros(n_e + q, n_e + q)
    eye_g = torch.eye(g, dtype=left.dtype)
    eye_q = torch.eye(q, dtype=left.dtype)
    j_ee = torch.einsum("xy,rv,xps->xprysv", eye_g, eye_q, step[:g]) + torch.einsum(
        "xyps,xvr->xprysv", system.push[:g], right[:g]
    )
    jac[:n_e, :n_e] = j_ee.reshape(n_e, n_e)
    jac[n_e:, :n_e] = torch.einsum("yps,v->pysv", system.push[g], right[g, :, 0]).reshape(q, n_e)
    jac[n_e:, n_e:] = step[g]
    return jac


def nonnegative_inverse(jac: Tensor) -> Tensor:
    """``(I - J)^{-1}`` for a nonnegative ``J`` of spectral radius below 1, with exact zeros.

    ``(I - J)^{-1} = sum_k J^k`` is positive exactly where the dependency graph of ``J`` (plus
    self-loops) connects the pair: that closure (boolean squaring) fixes the structural zeros,
    and rounding of the LU solve is clamped to nonnegative values.
    """
    n = jac.shape[0]
    eye = torch.eye(n, dtype=jac.dtype)
    inverse = torch.linalg.solve(eye - jac, eye)
    reach = (jac > 0).float() + torch.eye(n)
    while True:
        wider = ((reach @ reach) > 0).float()
        if torch.equal(wider, reach):
            break
        reach = wider
    return torch.where(reach > 0, inverse.clamp(min=0.0), 0.0)


class _Inverse:
    """``V -> (I - J)^{-1} V`` on the ``[G + 1, Q, Q]`` layout: a dense nonnegative inverse up
    to ``structured.DENSE_MAX`` variables, else the structured splitting (exact zeros kept by
    both)."""

    def __init__(self, system: ExcursionSystem, left: Tensor, right: Tensor, mask: Tensor):
        g = system.num_stack
        self.num_stack = g
        self.split: structured.Splitting | None = None
        self.dense: np.ndarray | None = None
        if system.num_variables > structured.DENSE_MAX:
            self.split = structured.Splitting.at(system.keep, system.push, left, right, mask)
        else:
            self.dense = nonnegative_inverse(mixed_jacobian(system, left[:g], right)).numpy()

    def __call__(self, rhs: np.ndarray) -> np.ndarray:
        g = self.num_stack
        if self.split is not None:
            return self.split.solve_array(rhs)
        return _joint(self.dense @ _flat(rhs, g), g, rhs.shape[1])


def _joint(vec, g: int, q: int):
    """A flat joint vector ``[G Q^2 + Q]`` as the ``[G + 1, Q, Q]`` layout (tensor or array)."""
    out = np.zeros((g + 1, q, q)) if isinstance(vec, np.ndarray) else vec.new_zeros(g + 1, q, q)
    out[:g] = vec[: g * q * q].reshape(g, q, q)
    out[g, :, 0] = vec[g * q * q :]
    return out


def _flat(v: np.ndarray, g: int) -> np.ndarray:
    return np.concatenate([v[:g].reshape(-1), v[g, :, 0]])


def value_at(systems: list[ExcursionSystem], z: float) -> Tensor | None:
    """``V(z)`` ``[G + 1, Q, Q]``: the least fixed point with each degree-``d`` step times ``z^d``.

    Returns ``None`` when Newton's method does not converge (``z`` beyond the radius).
    """
    base = systems[0]
    scaled = ExcursionSystem(
        *(
            sum(getattr(s, field) * z**d for d, s in enumerate(systems))
            for field in ("pop", "keep", "push")
        ),
        base.final,
    )
    point = least_fixed_point(scaled, upper=None, max_iter=40)
    x = point.vector()
    scale = max(1.0, float(x.abs().max())) if x.numel() else 1.0
    if not bool(torch.isfinite(x).all()) or point.residual > 1e-9 * scale:
        return None
    return _joint(x, base.num_stack, base.num_states)


class ExcursionSeries:
    """The count series ``V_n`` (and tails ``Vbar_b``) of one automaton and event, extendable.

    Args:
        target, action, weights, final: the automaton's tensors (``[Q, G + 1, S]``, ``[Q]``).
        initial: the initial state.
        degrees: ``[Q, G + 1, S]`` int64 event count of each step (0 for no event).
    """

    def __init__(
        self,
        target: Tensor,
        action: Tensor,
        weights: Tensor,
        final: Tensor,
        initial: int,
        degrees: Tensor | None = None,
    ) -> None:
        target, action = target.cpu(), action.cpu()
        weights, final = weights.cpu().double(), final.cpu().double()
        deg = torch.zeros_like(target) if degrees is None else degrees.cpu().long()
        deg = torch.where(target >= 0, deg, 0)
        if bool((deg < 0).any()):
            raise ValueError("event counts must be nonnegative")
        self.max_degree = int(deg.max()) if deg.numel() else 0
        self.initial = int(initial)
        self.num_states, self.num_stack = int(target.shape[0]), int(target.shape[1]) - 1
        self.systems = [
            excursion_system(target, action, weights * (deg == d), final * (d == 0))
            for d in range(self.max_degree + 1)
        ]
        g, q = self.num_stack, self.num_states
        # numpy copies for the degree-by-degree recursion: push as [t, p, (Y, s)] matrices
        self.pop = [s.pop.numpy() for s in self.systems]
        self.keep = [s.keep.numpy() for s in self.systems]
        self.push = [
            s.push.permute(0, 2, 1, 3).reshape(g + 1, q, g * q).numpy() for s in self.systems
        ]
        zero = _joint(least_fixed_point(self.systems[0]).vector(), g, q)
        # the variables positive at some degree: the support of the whole system at z = 1
        whole = excursion_system(target, action, weights, final)
        self.mask = structured.joint(support(whole).double(), g, q) > 0
        self.inverse = _Inverse(self.systems[0], zero, zero, self.mask)
        self.v = ScaledSeries((g + 1, q, q))
        self.p = ScaledSeries((g + 1, q, q))
        zero = zero.numpy()
        self.v.append((zero, 0.0))
        self.p.append((self._push(0, zero[:g]), 0.0))
        self._tails: tuple[ScaledSeries, ScaledSeries, _Inverse] | None = None

    @classmethod
    def of(cls, pda, table: Tensor | None = None) -> ExcursionSeries:
        """From a :class:`~cfl_lightning.automata.pushdown.PushdownAutomaton` and a ``[C, S]``
        event table (``None``: no event)."""
        shape = pda.target.shape
        deg = None if table is None else table.reshape(shape)
        return cls(pda.target, pda.action, pda.weights, pda.final, pda.initial, deg)

    def _push(self, d: int, e: np.ndarray) -> np.ndarray:
        """``[G + 1, Q, Q]`` ``push_d[t, Y] @ E[Y]`` summed over ``Y``."""
        return np.matmul(self.push[d], e.reshape(-1, self.num_states))

    def _keep_terms(self, series: ScaledSeries, n: int, clamp: bool) -> list[Term | None]:
        terms: list[Term | None] = []
        for d in range(1, self.max_degree + 1):
            j = max(n - d, 0) if clamp else n - d
            if j >= 0:
                values, scale = series.term(j)
                terms.append((np.matmul(self.keep[d], values), scale))
        return terms

    def _pushed_terms(self, e_series: ScaledSeries, n: int, clamp: bool) -> Term | None:
        """``sum_{d >= 1} push_d E_{n - d}`` (``E_{max(n - d, 0)}`` with ``clamp``)."""
        terms: list[Term | None] = []
        g = self.num_stack
        for d in range(1, self.max_degree + 1):
            j = max(n - d, 0) if clamp else n - d
            if j >= 0:
                values, scale = e_series.term(j)
                terms.append((self._push(d, values[:g]), scale))
        return combine(terms)

    def _solve(self, terms: list[Term | None], inverse: _Inverse) -> Term | None:
        rhs = combine(terms)
        if rhs is None:
            return None
        return inverse(rhs[0]), rhs[1]

    def _convolve(self, v: ScaledSeries, n: int) -> Term | None:
        """``sum_{k=1}^{n-1} P_k V_{n-k}``: the ``E`` slots as ``Q x Q`` products, the ``T`` slot
        (column 0 only) as matrix-vector products (a quarter of the work at ``G = 3``) above
        ``DENSE_MAX`` variables; below, one product as before (the same bits)."""
        g = self.num_stack
        if self.inverse.split is None or self.num_states == 1:
            return convolve(self.p, v, n, 1, n - 1)
        e_part = convolve(self.p, v, n, 1, n - 1, part=(slice(0, g), self.num_states))
        t_part = convolve(self.p, v, n, 1, n - 1, part=(slice(g, g + 1), 1))
        if e_part is None or t_part is None:
            return None
        out = np.zeros((g + 1, self.num_states, self.num_states))
        out[:g], out[g, :, :1] = e_part[0], t_part[0]
        return out, e_part[1]

    def check_size(self, upto: int, *, tails: bool = False) -> None:
        """Raise :class:`~cfl_lightning.errors.SizeError` when the series up to ``upto`` would
        not fit in the memory available (one line, with the estimate and the cost law)."""
        if upto < self.v.values.shape[0] and (not tails or self._tails is not None):
            return
        need = law_bytes(self.num_states, self.num_stack, upto + 1, tails=tails)
        g, q = self.num_stack, self.num_states
        check_bytes(
            need,
            what=f"the pushdown count law up to N = {upto} ({q} states, {g} stack symbols; "
            "memory O(N G Q^2), time O(N^2 G Q^3))",
        )

    def ensure(self, upto: int) -> None:
        """Compute the coefficients ``V_n`` (and ``P_n``) for every ``n <= upto``.

        Raises:
            SizeError: the series would not fit in the memory available.
        """
        self.check_size(upto)
        g = self.num_stack
        v0 = self.v.term(0)
        while len(self.v) <= upto:
            n = len(self.v)
            terms = self._keep_terms(self.v, n, clamp=False)
            if n <= self.max_degree:
                pop = np.zeros_like(v0[0])
                pop[:g] = self.pop[n]
                terms.append((pop, 0.0))
            terms.append(self._convolve(self.v, n))
            pushed = self._pushed_terms(self.v, n, clamp=False)
            if pushed is not None:
                terms.append((np.matmul(pushed[0], v0[0]), pushed[1] + v0[1]))
            v_n = self._solve(terms, self.inverse)
            self.v.append(v_n)
            own = None if v_n is None else (self._push(0, v_n[0][:g]), v_n[1])
            self.p.append(combine([pushed, own]))

    def log_law(self, upto: int) -> Tensor:
        """``[upto + 1]`` float64 ``log P(count = n)`` from the initial state."""
        self.ensure(upto)
        return self.v.log(upto + 1)[:, self.num_stack, self.initial, 0].clone()

    # ------------------------------------------------------------------ tails
    def _tail_start(self) -> tuple[ScaledSeries, ScaledSeries, _Inverse]:
        if self._tails is None:
            g, q = self.num_stack, self.num_states
            one = value_at(self.systems, 1.0)
            if one is None:
                raise FloatingPointError("the ending probabilities did not converge")
            zero = torch.from_numpy(self.v.term(0)[0])
            inverse = _Inverse(self.systems[0], zero, one, self.mask)
            vbar, pbar = ScaledSeries((g + 1, q, q)), ScaledSeries((g + 1, q, q))
            one = one.numpy()
            vbar.append((one, 0.0))
            pbar.append((sum(self._push(d, one[:g]) for d in range(self.max_degree + 1)), 0.0))
            self._tails = (vbar, pbar, inverse)
        return self._tails

    def ensure_tails(self, upto: int) -> tuple[ScaledSeries, ScaledSeries]:
        """Tails ``Vbar_b`` (and ``Pbar_b``) for every ``b <= upto`` (exact ``V`` as well)."""
        self.check_size(upto, tails=True)
        vbar, pbar, inverse = self._tail_start()
        self.ensure(upto)
        g = self.num_stack
        one = vbar.term(0)
        while len(vbar) <= upto:
            b = len(vbar)
            terms = self._keep_terms(vbar, b, clamp=True)
            if b <= self.max_degree:
                pop = np.zeros_like(one[0])
                pop[:g] = sum(self.pop[b:])
                terms.append((pop, 0.0))
            terms.append(self._convolve(vbar, b))
            pushed = self._pushed_terms(vbar, b, clamp=True)
            if pushed is not None:
                terms.append((np.matmul(pushed[0], one[0]), pushed[1] + one[1]))
            tail = self._solve(terms, inverse)
            vbar.append(tail)
            own = None if tail is None else (self._push(0, tail[0][:g]), tail[1])
            pbar.append(combine([pushed, own]))
        return vbar, pbar

    def log_tails(self, upto: int) -> Tensor:
        """``[upto + 1]`` float64 ``log P(count >= n)`` from the initial state."""
        vbar, _ = self.ensure_tails(upto)
        return vbar.log(upto + 1)[:, self.num_stack, self.initial, 0].clone()

    def log_value(self, z: float) -> float:
        """``log T[initial](z)`` (``inf`` beyond the radius of convergence)."""
        value = value_at(self.systems, z)
        if value is None:
            return math.inf
        t = float(value[self.num_stack, self.initial, 0])
        return math.log(t) if t > 0 else -math.inf
