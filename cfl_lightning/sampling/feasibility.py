"""Structural bounds on how often an event can occur in one string."""

from __future__ import annotations

import torch
from torch import Tensor

from cfl_lightning.automata.pfsa import PFSA

__all__ = ["max_occurrences"]


def max_occurrences(pfsa: PFSA, event_fn: Tensor) -> int | None:
    """The largest event count of any string the automaton generates, or ``None`` if unbounded.

    Unbounded exactly when a counted transition lies on a cycle of reachable states (every
    reachable state of a valid PFSA can terminate). Otherwise the bound is a longest path in
    event counts from the initial state (Bellman-Ford with max; no cycle carries a count).

    Args:
        pfsa: a valid automaton.
        event_fn: ``[Q, |S|]`` non-negative integer counts.

    Returns:
        The bound, or ``None``.
    """
    q = pfsa.num_states
    table = pfsa.next_state.cpu()
    has = (table >= 0) & (pfsa.weights.cpu() > 0)
    src, sym = has.nonzero(as_tuple=True)
    dst = table[src, sym]
    cost = event_fn.cpu()[src, sym].long()
    reach = torch.tensor(pfsa.reachable())
    # reach_from[a, b]: b reachable from a (transitive closure by repeated squaring).
    adj = torch.eye(q, dtype=torch.bool)
    adj[src, dst] = True
    for _ in range(max(1, q.bit_length())):
        adj = (adj.float() @ adj.float()) > 0
    counted = (cost > 0) & reach[src]
    if bool((counted & adj[dst, src]).any()):
        return None
    best = torch.full((q,), -1, dtype=torch.long)  # -1 = not reached
    best[pfsa.initial] = 0
    for _ in range(q):
        cand = torch.where(best[src] >= 0, best[src] + cost, torch.full_like(cost, -1))
        new = best.scatter_reduce(0, dst, cand, reduce="amax")
        if torch.equal(new, best):
            break
        best = new
    return int(best.max())
