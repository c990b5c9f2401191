r"""Path sampling, vectorized over strings: unconstrained and conditioned on per-string counts.

All strings advance together one symbol per step; finished strings drop out of the active set.
Each step draws one uniform per active string from an explicit ``torch.Generator`` and picks an
action (a symbol, or EOS) by inverse CDF, so a run is deterministic for a seed and a device.

Conditioned walks implement the paper's lifted PFSA (Theorems "Constrained Sampling" and its
at-least variant): at state ``q`` with ``r`` occurrences still to place, action ``a`` leading to
``q'`` with event count ``e`` has probability

.. math::
    w(q, a) \, \beta_{r - e}(q') / \beta_r(q), \qquad
    \text{EOS}: f(q) [r = 0] / \beta_r(q),

with ``beta`` the exact-count backward weights, or the tails ``T`` and the counter clamped at 0
for the "at least ``r``" variant. Backward weights come rescaled per bin
(:class:`~cfl_lightning.semiring.backward.ScaledBins`), so each step works with ratios
``exp(s_{r-e} - s_r)`` that never underflow.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from cfl_lightning.automata.pfsa import PFSA
from cfl_lightning.progress import Progress
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.draw import inverse_cdf
from cfl_lightning.semiring.backward import ScaledBins

__all__ = ["sample_paths", "walk"]

Picker = Callable[[Tensor, Tensor, Tensor], Tensor]


def walk(
    pfsa: PFSA,
    num_strings: int,
    pick: Picker,
    budgets: Tensor,
    event_fn: Tensor | None,
    generator: torch.Generator,
    *,
    clamp: bool = False,
    progress: Progress | None = None,
) -> Corpus:
    """Generate ``num_strings`` strings; ``pick(states, budgets, u)`` chooses each action.

    Args:
        pfsa: the automaton (its device is used).
        num_strings: ``K``.
        pick: maps active ``states`` ``[B]``, remaining ``budgets`` ``[B]`` and uniforms ``[B]`` to
            actions ``[B]`` in ``0 .. |S|`` (``|S|`` = EOS).
        budgets: ``[K]`` int64 remaining occurrences per string (decremented by event counts).
        event_fn: ``[Q, |S|]`` 0/1, or ``None``; when given, per-string counts are recorded.
        generator: the random stream.
        clamp: clamp budgets at 0 on decrement (the at-least walk).
        progress: optional progress reporter (strings finished).

    Returns:
        The corpus, with ``counts`` when ``event_fn`` is given.
    """
    device = pfsa.device
    num_symbols = pfsa.num_symbols
    next_flat = pfsa.next_state.reshape(-1)
    event_flat = None if event_fn is None else event_fn.to(device).long().reshape(-1)
    ids = torch.arange(num_strings, device=device)
    states = torch.full((num_strings,), pfsa.initial, dtype=torch.long, device=device)
    budgets = budgets.to(device).clone()
    counts = torch.zeros(num_strings, dtype=torch.long, device=device)
    record_ids: list[Tensor] = []
    record_syms: list[Tensor] = []
    while ids.numel():
        u = torch.rand(ids.numel(), generator=generator, dtype=torch.float64, device=device)
        actions = pick(states, budgets, u)
        keep = torch.nonzero(actions != num_symbols).squeeze(1)
        if progress is not None:
            progress.update(ids.numel() - keep.numel())
        ids = ids.index_select(0, keep)
        states = states.index_select(0, keep)
        actions = actions.index_select(0, keep)
        budgets = budgets.index_select(0, keep)
        record_ids.append(ids)
        record_syms.append(actions)
        flat = states * num_symbols + actions
        if event_flat is not None:
            hits = event_flat.take(flat)
            counts.index_add_(0, ids, hits)
            budgets = budgets - hits
            if clamp:
                budgets = budgets.clamp(min=0)
        states = next_flat.take(flat)
    return _assemble(num_strings, record_ids, record_syms, counts if event_fn is not None else None)


def _assemble(
    num_strings: int, record_ids: list[Tensor], record_syms: list[Tensor], counts: Tensor | None
) -> Corpus:
    """Flatten per-step records (step ``t`` holds symbol ``t`` of every string still going)."""
    device = record_ids[0].device if record_ids else torch.device("cpu")
    all_ids = torch.cat(record_ids) if record_ids else torch.empty(0, dtype=torch.long)
    lengths = torch.bincount(all_ids, minlength=num_strings)
    offsets = torch.zeros(num_strings + 1, dtype=torch.long, device=device)
    offsets[1:] = lengths.cumsum(0)
    steps = torch.cat(
        [torch.full_like(ids, step) for step, ids in enumerate(record_ids)]
    ) if record_ids else all_ids
    tokens = torch.empty(int(offsets[-1]), dtype=torch.long, device=device)
    if record_ids:
        tokens[offsets.index_select(0, all_ids) + steps] = torch.cat(record_syms)
    return Corpus(tokens, offsets, counts)


def _table_picker(cumulative: Tensor) -> Picker:
    """Pick by a per-state cumulative table ``[Q, |S| + 1]`` (the budget is ignored)."""

    def pick(states: Tensor, budgets: Tensor, u: Tensor) -> Tensor:
        return inverse_cdf(cumulative.index_select(0, states), u, cumulative=True)

    return pick


def _conditioned_weights(
    pfsa: PFSA, event_fn: Tensor, bins: ScaledBins, clamp: bool
) -> Callable[[Tensor, Tensor], Tensor]:
    """Action weights ``w(q,a) beta_{r-e}(q') / exp(s_r)`` and EOS, ``[B, |S| + 1]`` (module doc)."""
    q_count = pfsa.num_states
    weights = pfsa.weights
    stop_weight = pfsa.final * torch.exp(-bins.log_scale[0])
    targets = pfsa.next_state.clamp(min=0)
    counted = event_fn.bool()
    flat = bins.values.reshape(-1)
    scale = bins.log_scale

    def action_weights(states: Tensor, budgets: Tensor) -> Tensor:
        e = counted.index_select(0, states)  # [B, S]
        prev = (budgets - 1).clamp(min=0)
        row = torch.where(e, (prev * q_count)[:, None], (budgets * q_count)[:, None])
        value = flat.take(row + targets.index_select(0, states))  # v_{r-e}(q')
        ratio = torch.exp(scale.take(prev) - scale.take(budgets))  # exp(s_{r-1} - s_r), [B]
        arcs = weights.index_select(0, states) * value * torch.where(e, ratio[:, None], 1.0)
        empty = budgets == 0
        if not clamp:  # exact: a counted arc needs budget left
            arcs = arcs.masked_fill(e & empty[:, None], 0.0)
        stop = torch.where(empty, stop_weight.take(states), 0.0)
        return torch.cat([arcs, stop[:, None]], dim=1)

    return action_weights


def _conditioned_picker(pfsa: PFSA, event_fn: Tensor, bins: ScaledBins, clamp: bool) -> Picker:
    """Strings with budget 0 use a precomputed per-state table; the rest the full weights."""
    action_weights = _conditioned_weights(pfsa, event_fn, bins, clamp)
    every = torch.arange(pfsa.num_states, device=pfsa.device)
    table = action_weights(every, torch.zeros_like(every)).cumsum(dim=1)  # [Q, S+1]

    def pick(states: Tensor, budgets: Tensor, u: Tensor) -> Tensor:
        busy = torch.nonzero(budgets > 0).squeeze(1)
        if busy.numel() == 0:
            return inverse_cdf(table.index_select(0, states), u, cumulative=True)
        out = torch.empty_like(states)
        idle = torch.nonzero(budgets == 0).squeeze(1)
        if idle.numel():
            rows = table.index_select(0, states.index_select(0, idle))
            out.index_copy_(0, idle, inverse_cdf(rows, u.index_select(0, idle), cumulative=True))
        weights = action_weights(states.index_select(0, busy), budgets.index_select(0, busy))
        out.index_copy_(0, busy, inverse_cdf(weights, u.index_select(0, busy)))
        return out

    return pick


def sample_paths(
    pfsa: PFSA,
    num_strings: int,
    generator: torch.Generator,
    *,
    event_fn: Tensor | None = None,
    budgets: Tensor | None = None,
    bins: ScaledBins | None = None,
    at_least: bool = False,
    progress: Progress | None = None,
) -> Corpus:
    """Sample strings, unconstrained or with per-string occurrence budgets.

    Args:
        pfsa: the automaton (sampling runs on its device).
        num_strings: ``K``.
        generator: random stream on ``pfsa.device``.
        event_fn: ``[Q, |S|]`` 0/1 event function (counts recorded when given).
        budgets: ``[K]`` per-string targets; ``None`` samples unconstrained.
        bins: backward weights for ``budgets``: exact-count bins, or tails when ``at_least``;
            must cover ``0 .. max(budgets)``.
        at_least: each string must have ``>= budgets[k]`` occurrences instead of exactly.
        progress: optional progress reporter.

    Returns:
        The corpus (with per-string ``counts`` when ``event_fn`` is given).
    """
    if budgets is None:
        zero = torch.zeros(num_strings, dtype=torch.long, device=pfsa.device)
        return walk(
            pfsa, num_strings, _table_picker(pfsa.next_symbol_probs().cumsum(dim=1)), zero,
            event_fn, generator, progress=progress,
        )
    if event_fn is None or bins is None:
        raise ValueError("conditioned sampling needs event_fn and bins")
    if budgets.numel() and int(budgets.max()) >= bins.num_bins:
        raise ValueError("bins do not cover the largest budget")
    event_fn = event_fn.to(pfsa.device)
    picker = _conditioned_picker(pfsa, event_fn, bins, clamp=at_least)
    return walk(
        pfsa, num_strings, picker, budgets, event_fn, generator, clamp=at_least, progress=progress
    )
