"""The most occurrences of an event one string of a pushdown automaton can hold.

Variables are those of the excursion system (``E[X, p, r]``, ``T[p]``;
:mod:`cfl_lightning.automata.pushdown_fixpoint`) in the ``[G + 1, Q, Q]`` layout; a variable is
*productive* when it is positive at the least fixed point, and ``A`` is the set of productive
variables ``T[initial]`` depends on through productive monomials. A variable *may count* when
one of its derivations holds an occurrence (a boolean least fixed point). The count of a string
is unbounded exactly when some derivation from ``T[initial]`` pumps an occurrence: a variable
``v`` in ``A`` derives ``alpha v beta`` with an occurrence on the way (a counted step, or a
sibling that may count). In the dependency graph on ``A`` whose edge ``a -> b`` is *positive*
when one of its monomials holds a counted step or a sibling that may count, that is a positive
edge inside one strongly connected component (Tarjan). Otherwise every variable in ``A`` is
bounded and Kleene iteration in the (max, +) semiring, restricted to ``A``, reaches the maximum
exactly in finitely many rounds.

(An earlier version iterated the (max, +) system ``2 n`` rounds on every variable: the values of
a pumpable system double per round and overflowed float64 beyond about 1024 rounds, so an
automaton with ``n = G Q^2 + Q`` above ~512 variables was reported as holding no occurrence.)
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from cfl_lightning.automata.pushdown_fixpoint import KEEP, POP, support
from cfl_lightning.automata.pushdown_structured import dependents, joint

__all__ = ["max_occurrences"]


def _max_table(values: Tensor, mask: Tensor, index: tuple[Tensor, ...], shape) -> Tensor:
    """``[shape]`` the largest count among the steps ``mask`` at each index (``-inf``: none)."""
    lin = torch.zeros(int(mask.sum()), dtype=torch.long)
    for i, size in zip(index, shape):
        lin = lin * size + i[mask]
    out = torch.full((math.prod(shape),), -math.inf, dtype=torch.float64)
    return out.scatter_reduce(0, lin, values.double()[mask], reduce="amax").reshape(shape)


def _tables(pda, degrees: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Largest step counts: pop ``[G + 1, Q, Q]`` (slot ``G`` empty), keep, push ``[G+1, G, Q, Q]``."""
    target, action = pda.target.cpu(), pda.action.cpu()
    q, g1, _ = target.shape
    live = (target >= 0) & (pda.weights.cpu() > 0)
    src, top, _sym = torch.nonzero(live, as_tuple=True)
    dst, act, deg = target[live], action[live], degrees.cpu()[live]
    gs = max(g1 - 1, 1)
    pop = _max_table(deg, act == POP, (top, src, dst), (g1, q, q))
    keep = _max_table(deg, act == KEEP, (top, src, dst), (g1, q, q))
    push = _max_table(deg, act >= 0, (top, act.clamp(min=0), src, dst), (g1, gs, q, q))
    return pop, keep, push[:, : g1 - 1]


def _pushed(push: Tensor, v: Tensor) -> Tensor:
    """``[G + 1, Q, Q]`` boolean ``sum_Y push[t, Y] v[Y]``."""
    return torch.einsum("typs,ysu->tpu", push.double(), v[: push.shape[1]].double()) > 0


def _may_count(pop, keep, push, prod: Tensor) -> Tensor:
    """``[G + 1, Q, Q]`` bool: productive variables with a derivation holding an occurrence."""
    k_any, k_pos, p_any, p_pos = keep > -math.inf, keep > 0, push > -math.inf, push > 0
    f = prod.double()
    fixed = (pop > 0) | ((k_pos.double() @ f) > 0) | ((_pushed(p_pos, prod).double() @ f) > 0)
    fixed &= prod
    cont = _pushed(p_any, prod).double()
    may = fixed
    while True:
        m = may.double()
        new = fixed | ((k_any.double() @ m) > 0) | ((_pushed(p_any, may).double() @ f) > 0)
        new = (new | ((cont @ m) > 0)) & prod
        if torch.equal(new, may):
            return may
        may = new


def _edges(keep, push, prod: Tensor, reach: Tensor, may: Tensor):
    """Dependency edges among ``reach`` (flat joint indices) and whether each is positive."""
    p_any, p_pos = push > -math.inf, push > 0
    cont_any = _pushed(p_any, prod)
    cont_pos = _pushed(p_pos, prod) | _pushed(p_any, may)
    step_any = (keep > -math.inf) | cont_any  # [t, p, s]
    step_pos = (keep > 0) | cont_pos
    # (t, p, r) -> (t, s, r): a kept step, or a push whose excursion returns to s
    same = step_any[:, :, :, None] & reach[:, :, None, :] & prod[:, None, :, :]
    t, p, s, r = same.nonzero(as_tuple=True)
    q = prod.shape[1]
    tails, heads = [(t * q + p) * q + r], [(t * q + s) * q + r]
    labels = [step_pos[t, p, s]]
    # (t, p, r) -> (Y, s, u): a push of Y whose continuation (t, u, r) is productive
    tk, yk, pk, sk = p_any.nonzero(as_tuple=True)
    pair = reach[tk, pk][:, None, :] & prod[tk][:, :, :] & prod[yk, sk][:, :, None]  # [K, u, r]
    k, u, r = pair.nonzero(as_tuple=True)
    tails.append((tk[k] * q + pk[k]) * q + r)
    heads.append((yk[k] * q + sk[k]) * q + u)
    labels.append(p_pos[tk[k], yk[k], pk[k], sk[k]] | may[tk[k], u, r])
    return torch.cat(tails).numpy(), torch.cat(heads).numpy(), torch.cat(labels).numpy()


def _components(n: int, tails: np.ndarray, heads: np.ndarray) -> np.ndarray:
    """Strongly connected component id of each of ``n`` nodes (iterative Tarjan)."""
    order = np.argsort(tails, kind="stable")
    succ = heads[order].tolist()
    start = np.searchsorted(tails[order], np.arange(n + 1)).tolist()
    index, low, comp = [-1] * n, [0] * n, [-1] * n
    on_stack, stack, counter, ncomp = [False] * n, [], 0, 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work = [(root, start[root])]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, i = work[-1]
            if i < start[v + 1]:
                work[-1] = (v, i + 1)
                w = succ[i]
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, start[w]))
                elif on_stack[w]:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp[w] = ncomp
                    if w == v:
                        break
                ncomp += 1
    return np.asarray(comp)


def _kleene_max(pop, keep, push, final: Tensor, reach: Tensor) -> Tensor:
    """The (max, +) least fixed point on ``reach`` (all bounded): ``[G + 1, Q, Q]``."""
    g = push.shape[1]
    floor = torch.full_like(pop, -math.inf)
    base = pop.clone()
    base[g, :, 0] = final
    v = floor.clone()
    while True:
        inner = (push[:, :, :, :, None] + v[None, :g, None, :, :]).amax(dim=(1, 3))
        new = torch.maximum(base, (keep[:, :, :, None] + v[:, None, :, :]).amax(dim=2))
        new = torch.maximum(new, (inner[:, :, :, None] + v[:, None, :, :]).amax(dim=2))
        new = torch.where(reach, new, floor)
        if torch.equal(new, v):
            return v
        v = new


def max_occurrences(pda, degrees: Tensor) -> int | None:
    """The structural maximum of the event count of one string, or ``None`` if unbounded.

    Args:
        pda: the automaton (``target``, ``action``, ``weights``, ``final``, ``initial``).
        degrees: ``[Q, G + 1, S]`` int64 event count of each step.
    """
    q, g = pda.num_states, pda.num_stack
    system = pda.excursion_system()
    prod = joint(support(system).double(), g, q) > 0
    start = (g, pda.initial, 0)
    if not bool(prod[start]):
        return 0
    reach = dependents(system, prod.double(), start) & prod
    pop, keep, push = _tables(pda, degrees)
    may = _may_count(pop, keep, push, prod)
    if not bool(may[start]):
        return 0
    tails, heads, labels = _edges(keep, push, prod, reach, may)
    comp = _components(prod.numel(), tails, heads)
    if bool((labels & (comp[tails] == comp[heads])).any()):
        return None
    final = torch.where(pda.final.cpu() > 0, 0.0, -math.inf).double()
    value = float(_kleene_max(pop, keep, push, final, reach)[start])
    return int(value) if math.isfinite(value) else 0
