"""Ancestral sampling from a pushdown automaton, vectorized over strings.

Every string carries its state and its own stack (one ``[K, depth]`` int64 tensor, grown by
doubling, compacted with the strings still going); each step draws one uniform per string,
picks the next symbol (or the end, only on the empty stack) from its class (state, top), and
applies the stack action. One loop over steps, one explicit :class:`torch.Generator`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cfl_lightning.automata.pushdown import POP, PushdownAutomaton
from cfl_lightning.automata.pushdown.annotate import grow_stack
from cfl_lightning.progress import Progress
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.paths import _assemble

__all__ = ["sample_unconstrained", "class_cdf"]


def class_cdf(probs: Tensor) -> Tensor:
    """Cumulative next-symbol distributions safe against rounding.

    Args:
        probs: ``[C, S + 1]`` nonnegative rows.

    Returns:
        ``[C, S + 1]`` float64 normalised cumulative sums, with every entry from a row's last
        positive one on set to 2 (above any uniform), so ``#{j : cdf_j <= u}`` never picks a
        zero-probability column, rounding included.
    """
    total = probs.sum(dim=1, keepdim=True)
    cdf = probs.cumsum(dim=1) / torch.where(total > 0, total, 1.0)
    cols = torch.arange(probs.shape[1], device=probs.device)
    last = torch.where(probs > 0, cols, -1).max(dim=1, keepdim=True).values.clamp(min=0)
    return torch.where(cols[None, :] >= last, 2.0, cdf)


def sample_unconstrained(
    pda: PushdownAutomaton,
    num_strings: int,
    generator: torch.Generator,
    *,
    event_table: Tensor | None = None,
    progress: Progress | None = None,
) -> Corpus:
    """``K`` i.i.d. strings from ``pda`` (on its device).

    Args:
        pda: the automaton.
        num_strings: ``K``.
        generator: random stream on ``pda.device``.
        event_table: ``[C, S]`` int64 occurrences per (class, symbol) step
            (:meth:`PushdownAutomaton.event_table`); per-string counts are recorded when given.
        progress: optional progress reporter (strings finished).

    Returns:
        The corpus (``counts`` ``[K]`` when ``event_table`` is given).
    """
    device = pda.device
    g, s = pda.num_stack, pda.num_symbols
    cdf = class_cdf(pda.class_probs())
    target = pda.target.reshape(-1)
    action = pda.action.reshape(-1)
    hits = None if event_table is None else event_table.to(device).long().reshape(-1)
    ids = torch.arange(num_strings, device=device)
    state = torch.full((num_strings,), pda.initial, dtype=torch.long, device=device)
    depth = torch.zeros(num_strings, dtype=torch.long, device=device)
    stack = torch.zeros(num_strings, 4, dtype=torch.long, device=device)
    counts = None if hits is None else torch.zeros(num_strings, dtype=torch.long, device=device)
    record_ids: list[Tensor] = []
    record_syms: list[Tensor] = []
    while ids.numel():
        rows = torch.arange(ids.numel(), device=device)
        top = torch.where(depth > 0, stack[rows, (depth - 1).clamp(min=0)], g)
        cls = state * (g + 1) + top
        u = torch.rand(ids.numel(), generator=generator, dtype=torch.float64, device=device)
        sym = (cdf.index_select(0, cls) <= u[:, None]).sum(dim=1)
        keep = torch.nonzero(sym != s).squeeze(1)
        if progress is not None:
            progress.update(ids.numel() - keep.numel())
        ids, sym, cls = ids[keep], sym[keep], cls[keep]
        depth, stack = depth[keep], stack[keep]
        record_ids.append(ids)
        record_syms.append(sym)
        flat = cls * s + sym
        if counts is not None:
            counts.index_add_(0, ids, hits[flat])
        act = action[flat]
        push = act >= 0
        if bool(push.any()):
            stack = grow_stack(stack, int(depth.max()) + 1)
            stack[push.nonzero().squeeze(1), depth[push]] = act[push]
        depth = depth + push.long() - (act == POP).long()
        state = target[flat]
    return _assemble(num_strings, record_ids, record_syms, counts, device)
