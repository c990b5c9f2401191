"""Running a pushdown automaton over a flat corpus: the class of every position.

All strings advance together, one symbol per step (a loop over the longest length, longest
strings first so the strings still going are a prefix), each with its own stack held in one
``[K, depth]`` int64 tensor grown by doubling.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from cfl_lightning.automata.pushdown_fixpoint import POP
from cfl_lightning.errors import CflError, SupportError

# ``pda`` below is a :class:`~cfl_lightning.automata.pushdown.PushdownAutomaton` (not imported:
# that module imports this one)
PushdownAutomaton = Any

__all__ = ["annotate", "grow_stack"]


def grow_stack(stack: Tensor, depth: int) -> Tensor:
    """``stack`` ``[K, D]`` with at least ``depth`` columns (doubling; new cells are 0)."""
    width = stack.shape[1]
    if depth <= width:
        return stack
    new = max(depth, 2 * width, 4)
    return torch.cat([stack, stack.new_zeros(stack.shape[0], new - width)], dim=1)


def _string_at(starts: Tensor, pos: int) -> int:
    where = torch.tensor([pos], device=starts.device)
    return int(torch.searchsorted(starts, where, right=True)[0]) - 1


def annotate(
    pda: PushdownAutomaton,
    tokens: Tensor,
    offsets: Tensor,
    device: torch.device | str | None = None,
) -> Tensor:
    """The class (state, top) before every symbol and before the end of every string.

    Args:
        pda: the automaton.
        tokens: ``[L]`` int64 symbol ids, string after string.
        offsets: ``[K + 1]`` int64; string ``k`` is ``tokens[offsets[k]:offsets[k+1]]``.
        device: where to run (default: the CPU); the result stays there.

    Returns:
        ``[L + K]`` int64 class ids ``q * (G + 1) + t``; string ``k`` (length ``n``) at
        ``offsets[k] + k ... offsets[k] + k + n``.

    Raises:
        CflError: a symbol id out of range, a symbol with no transition (naming the string and
            the symbol position), or a string that ends on a non-empty stack.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    tokens, offsets = tokens.to(device).long(), offsets.to(device).long()
    g, s = pda.num_stack, pda.num_symbols
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= s):
        raise CflError(f"corpus has a symbol id outside [0, {s})")
    target, action = pda.target.to(device), pda.action.to(device)
    num = offsets.numel() - 1
    lengths = offsets[1:] - offsets[:-1]
    out = torch.empty(tokens.numel() + num, dtype=torch.long, device=device)
    if num == 0:
        return out
    # longest first: the strings still going at step i are a prefix of ``order``
    order = torch.sort(lengths, descending=True, stable=True).indices
    tok_start = offsets[:-1][order]
    out_start = (offsets[:-1] + torch.arange(num, device=device))[order]
    alive = torch.bincount(lengths, minlength=int(lengths.max()) + 2).flip(0).cumsum(0).flip(0)
    state = torch.full((num,), pda.initial, dtype=torch.long, device=device)
    depth = torch.zeros(num, dtype=torch.long, device=device)
    stack = torch.zeros(num, 4, dtype=torch.long, device=device)
    rows = torch.arange(num, device=device)
    for i, (n, m) in enumerate(zip(alive[:-1].tolist(), alive[1:].tolist())):
        d = depth[:n]
        top = torch.where(d > 0, stack[rows[:n], (d - 1).clamp(min=0)], g)
        out[out_start[:n] + i] = state[:n] * (g + 1) + top
        if bool((d[m:] > 0).any()):  # strings ending here with symbols on the stack
            j = m + int((d[m:] > 0).nonzero()[0])
            raise SupportError(
                f"string {int(order[j])} ends with {int(d[j])} symbols on the stack",
                int(order[j]), i,
            )
        if m == 0:
            break
        sym = tokens[tok_start[:m] + i]
        nxt, act = target[state[:m], top[:m], sym], action[state[:m], top[:m], sym]
        if bool((nxt < 0).any()):
            j = int((nxt < 0).nonzero()[0])
            raise SupportError(
                f"string {int(order[j])} leaves the automaton's support at symbol #{i} (no "
                f"transition from class {pda.class_names[int(state[j]) * (g + 1) + int(top[j])]!r} "
                f"on {pda.alphabet[int(sym[j])]!r}); the corpus does not belong to this automaton",
                int(order[j]), i,
            )
        push = act >= 0
        if bool(push.any()):
            stack = grow_stack(stack, int(depth[:m].max()) + 1)
            stack[rows[:m][push], depth[:m][push]] = act[push]
        depth[:m] += push.long() - (act == POP).long()
        state[:m] = nxt
    return out
