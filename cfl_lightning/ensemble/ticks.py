"""Which batch each member trains on at each tick of an epoch.

Every member goes through its own epoch order (its data module's ``BatchOrderSampler``), batch
after batch; a member that is not given a batch at a tick (``-1``) is idle there: no loss, no
update. Members need not move in lockstep, because their updates are independent; only the
order of each member's own batches matters, and both pacings keep it.

* :func:`lockstep`: tick ``s`` trains every member on its ``s``-th batch. Fewest cells when
  the cost is the arithmetic (CPU).
* :func:`by_width`: a tick trains the members whose next batch is at most ``L`` positions wide,
  with ``L`` chosen greedily to maximise members advanced per cost. On a GPU a recurrent step
  is launch-bound: its time grows with the number of time steps ``L`` of the packed rows,
  hardly with the number of members, and in lockstep ``L`` is the widest of M random batches at
  every tick. On a CPU the cost is the packed cells (``members x R x L``), which grouping by
  width also keeps close to the real positions (the trainer packs only a tick's members).
"""

from __future__ import annotations

import numpy as np

__all__ = ["lockstep", "by_width"]


def lockstep(orders: list[np.ndarray]) -> np.ndarray:
    """``[M, max_m n_m]`` global batch ids: member ``m``'s order, then ``-1`` (idle)."""
    ticks = np.full((len(orders), max(len(o) for o in orders)), -1, dtype=np.int64)
    for row, order in enumerate(orders):
        ticks[row, : len(order)] = order
    return ticks


def by_width(
    orders: list[np.ndarray],
    widths: np.ndarray,
    sizes: np.ndarray,
    overhead: float = 8.0,
    cell_cost: float = 0.0,
) -> np.ndarray:
    """``[M, ticks]`` global batch ids, grouping members whose next batches are about as wide.

    At each tick, for every candidate row length ``L`` (a width some next batch has), the
    members whose next batch is at most ``L`` wide would take part, in ``R`` packed rows; the
    tick costs ``overhead + L + cell_cost * members * R * L`` (fixed work, time steps, cells).
    The ``L`` that advances the most members per cost is taken.

    Args:
        orders: per member, its epoch's global batch ids in order.
        widths: ``[num global batches]`` positions of each batch's longest string.
        sizes: ``[num global batches]`` strings of each batch.
        overhead: fixed cost of a tick, in time steps (optimizer, loss, output layer).
        cell_cost: cost of one packed cell, in time steps (0 when launch-bound, as on a GPU).
    """
    members = len(orders)
    pointer = np.zeros(members, dtype=np.int64)
    lengths = np.array([len(o) for o in orders], dtype=np.int64)
    columns = []
    while True:
        todo = np.nonzero(pointer < lengths)[0]
        if todo.size == 0:
            break
        nxt = np.array([orders[m][pointer[m]] for m in todo], dtype=np.int64)
        w, b = widths[nxt], sizes[nxt]
        candidates = np.unique(w)  # [C]
        fits = w[None, :] <= candidates[:, None]  # [C, U]
        per_row = np.maximum(candidates[:, None] // w[None, :], 1)
        rows = np.where(fits, -(-b[None, :] // per_row), 0).max(axis=1)
        count = fits.sum(axis=1)
        cost = overhead + candidates + cell_cost * count * rows * candidates
        limit = candidates[int(np.argmax(count / cost))]
        column = np.full(members, -1, dtype=np.int64)
        go = w <= limit
        column[todo[go]] = nxt[go]
        pointer[todo[go]] += 1
        columns.append(column)
    return np.stack(columns, axis=1)
