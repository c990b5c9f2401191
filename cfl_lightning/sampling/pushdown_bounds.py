"""The most occurrences of an event one string of a pushdown automaton can hold.

The excursion system in the (max, +) semiring: ``M[X, p, r]`` is the largest event count of an
excursion (``-inf``: none has positive probability), ``T[p]`` that of a path to the end. Kleene
iteration from ``-inf`` reaches every value realised by a derivation tree of height ``h`` after
``h`` rounds; a finite optimum is realised by a tree of height at most ``n`` (the number of
variables: a repeated variable on a path is a pump that adds nothing, else the count would be
unbounded), so a value that still grows after ``n + 1`` rounds is unbounded; the string's count
is unbounded when ``T[initial]`` grows after that round, or
depends (through the Jacobian's dependency graph at the fixed point) on a variable that does.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from cfl_lightning.automata.pushdown_fixpoint import (
    KEEP,
    POP,
    dependents,
    jacobian,
    least_fixed_point,
)

__all__ = ["max_occurrences"]


def _max_table(values: Tensor, mask: Tensor, index: tuple[Tensor, ...], shape) -> Tensor:
    """``[shape]`` the largest count among the steps ``mask`` at each index (``-inf``: none)."""
    lin = torch.zeros(int(mask.sum()), dtype=torch.long)
    for i, size in zip(index, shape):
        lin = lin * size + i[mask]
    out = torch.full((math.prod(shape),), -math.inf, dtype=torch.float64)
    return out.scatter_reduce(0, lin, values.double()[mask], reduce="amax").reshape(shape)


def max_occurrences(pda, degrees: Tensor) -> int | None:
    """The structural maximum of the event count of one string, or ``None`` if unbounded.

    Args:
        pda: the automaton (``target``, ``action``, ``weights``, ``final``, ``initial``).
        degrees: ``[Q, G + 1, S]`` int64 event count of each step.
    """
    target, action = pda.target.cpu(), pda.action.cpu()
    q, g1, _ = target.shape
    g = g1 - 1
    live = (target >= 0) & (pda.weights.cpu() > 0)
    src, top, _sym = torch.nonzero(live, as_tuple=True)
    dst, act, deg = target[live], action[live], degrees.cpu()[live]
    gs = max(g, 1)
    pop = _max_table(deg, act == POP, (top, src, dst), (gs, q, q))[:g]
    keep = _max_table(deg, act == KEEP, (top, src, dst), (g1, q, q))
    push = _max_table(deg, act >= 0, (top, act.clamp(min=0), src, dst), (g1, gs, q, q))[:, :g]
    final = torch.where(pda.final.cpu() > 0, 0.0, -math.inf).double()
    m = torch.full((g, q, q), -math.inf, dtype=torch.float64)
    t = torch.full((q,), -math.inf, dtype=torch.float64)
    rounds = g * q * q + q + 1
    snapshot = None
    for step in range(2 * rounds):
        inner = (push[:, :, :, :, None] + m[None, :, None, :, :]).amax(dim=(1, 3))  # [G+1, Q, Q]
        new_m = torch.maximum(pop, (keep[:g, :, :, None] + m[:, None, :, :]).amax(dim=2))
        new_m = torch.maximum(new_m, (inner[:g, :, :, None] + m[:, None, :, :]).amax(dim=2))
        new_t = torch.maximum(final, (keep[g] + t[None, :]).amax(dim=1))
        new_t = torch.maximum(new_t, (inner[g] + t[None, :]).amax(dim=1))
        if torch.equal(new_m, m) and torch.equal(new_t, t):
            break
        m, t = new_m, new_t
        if step + 1 == rounds:
            snapshot = torch.cat([m.reshape(-1), t])
        elif snapshot is not None and float(t[pda.initial]) > float(snapshot[-q + pda.initial]):
            return None  # grew after the height bound: unbounded
    if snapshot is not None:
        growing = torch.cat([m.reshape(-1), t]) > snapshot
        system = pda.excursion_system()
        jac = jacobian(system, least_fixed_point(system).vector())
        if bool((growing & dependents(jac, g * q * q + pda.initial)).any()):
            return None
    value = float(t[pda.initial])
    return int(value) if math.isfinite(value) else 0
