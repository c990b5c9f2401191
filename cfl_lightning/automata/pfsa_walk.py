"""A PFSA's annotation of a corpus: the state before every symbol and before every end.

All strings advance together, longest first, one symbol per step (a loop over the longest
length, vectorized across strings, a flat successor lookup per step), never a Python loop per
token. :meth:`PFSA.annotate <cfl_lightning.automata.PFSA.annotate>` is this walk.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cfl_lightning.errors import CflError, SupportError

__all__ = ["state_walk"]


def state_walk(
    next_state: Tensor,
    initial: int,
    tokens: Tensor,
    offsets: Tensor,
    device: torch.device | str | None = None,
) -> Tensor:
    """States visited by every string of a flat corpus.

    Args:
        next_state: ``[Q, S]`` the PFSA's target table (``-1``: no transition).
        initial: the initial state.
        tokens: ``[L]`` int64 symbol ids, string after string.
        offsets: ``[K + 1]`` int64; string ``k`` is ``tokens[offsets[k]:offsets[k+1]]``.
        device: where to run (default: the CPU); the result stays there.

    Returns:
        ``[L + K]`` int64: for string ``k`` (length ``n``) the ``n + 1`` states after its
        prefixes, at ``offsets[k] + k ... offsets[k] + k + n``.

    Raises:
        CflError: a symbol id is out of range or a string leaves the automaton's support.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    tokens, offsets = tokens.to(device).long(), offsets.to(device).long()
    num_q, num_s = next_state.shape
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= num_s):
        raise CflError(f"corpus has a symbol id outside [0, {num_s})")
    # Missing transitions go to an absorbing sink row Q, detected once at the end.
    table = next_state.to(device).clone()
    table[table < 0] = num_q
    table = torch.cat([table, torch.full((1, num_s), num_q, dtype=torch.long, device=device)])
    table = table.reshape(-1)
    num = offsets.numel() - 1
    lengths = offsets[1:] - offsets[:-1]
    starts = offsets[:-1] + torch.arange(num, device=device)  # each string's initial state
    states = torch.empty(tokens.numel() + num, dtype=torch.long, device=device)
    states[starts] = initial
    if tokens.numel() == 0:
        return states
    order = torch.sort(lengths, descending=True, stable=True).indices
    tok_start, pos_start = offsets[:-1][order], starts[order] + 1
    # active[t] = number of strings longer than t; they are a prefix of ``order``.
    active = torch.bincount(lengths, minlength=int(lengths.max()) + 1).flip(0).cumsum(0).flip(0)
    current = torch.full((num,), initial, dtype=torch.long, device=device)
    for t, n_t in enumerate(active[1:].tolist()):
        current = table.take(current[:n_t] * num_s + tokens.take(tok_start[:n_t] + t))
        states[pos_start[:n_t] + t] = current
    bad = torch.nonzero(states == num_q)
    if bad.numel():
        pos = int(bad[0])
        k = int(torch.searchsorted(starts, torch.tensor([pos], device=device), right=True)[0]) - 1
        at = pos - int(starts[k]) - 1
        raise SupportError(
            f"string {k} leaves the automaton's support at symbol #{at} "
            "(no transition); the corpus does not belong to this automaton",
            k, at,
        )
    return states
