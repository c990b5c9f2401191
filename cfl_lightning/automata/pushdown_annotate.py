"""Running a pushdown automaton over a flat corpus: the class of every position.

All strings advance together, one symbol per step (a loop over the longest length), each with its
own stack held in one ``[K, depth]`` int64 tensor grown by doubling.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from cfl_lightning.automata.pushdown_fixpoint import POP
from cfl_lightning.errors import CflError

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
    starts = offsets[:-1] + torch.arange(num, device=device)
    out = torch.empty(tokens.numel() + num, dtype=torch.long, device=device)
    state = torch.full((num,), pda.initial, dtype=torch.long, device=device)
    depth = torch.zeros(num, dtype=torch.long, device=device)
    stack = torch.zeros(num, 4, dtype=torch.long, device=device)
    rows = torch.arange(num, device=device)
    longest = int(lengths.max()) if num else 0
    for i in range(longest + 1):
        top = torch.where(depth > 0, stack[rows, (depth - 1).clamp(min=0)], g)
        live = i <= lengths
        out[(starts + i)[live]] = (state * (g + 1) + top)[live]
        step = i < lengths
        if not bool(step.any()):
            break
        sym = tokens[(offsets[:-1] + i).clamp(max=max(tokens.numel() - 1, 0))]
        nxt, act = target[state, top, sym], action[state, top, sym]
        missing = step & (nxt < 0)
        if bool(missing.any()):
            k = int(missing.nonzero()[0])
            raise CflError(
                f"string {k} leaves the automaton's support at symbol #{i} (no transition from "
                f"class {pda.class_names[int(state[k]) * (g + 1) + int(top[k])]!r} on "
                f"{pda.alphabet[int(sym[k])]!r}); the corpus does not belong to this automaton"
            )
        push = step & (act >= 0)
        if bool(push.any()):
            stack = grow_stack(stack, int(depth.max()) + 1)
            stack[rows[push], depth[push]] = act[push]
        depth = depth + push.long() - (step & (act == POP)).long()
        state = torch.where(step, nxt, state)
    left = depth > 0
    if bool(left.any()):
        k = int(left.nonzero()[0])
        raise CflError(f"string {k} ends with {int(depth[k])} symbols on the stack")
    return out
