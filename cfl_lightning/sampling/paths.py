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
from cfl_lightning.semiring.backward import ScaledBins

__all__ = ["sample_paths", "walk"]

Picker = Callable[[Tensor, Tensor, Tensor], Tensor]


def _inverse_cdf(weights: Tensor, u: Tensor) -> Tensor:
    """Index drawn from each row of ``weights`` ``[B, A]`` (non-negative) with uniforms ``[B]``.

    Picks the first index whose cumulative weight exceeds ``u * total``, so a zero-weight entry is
    never picked; when rounding pushes ``u * total`` to the top (probability ~1e-16) the row falls
    back to its last positive entry.
    """
    cum = weights.cumsum(dim=1)
    threshold = u * cum[:, -1]
    pick = (cum <= threshold[:, None]).sum(dim=1)
    top = weights.shape[1] - 1
    bad = pick > top
    if bool(bad.any()):
        positive = weights[bad] > 0
        pick[bad] = top - positive.flip(1).int().argmax(dim=1)
    return pick


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
    eos = pfsa.num_symbols
    ids = torch.arange(num_strings, device=device)
    states = torch.full((num_strings,), pfsa.initial, dtype=torch.long, device=device)
    budgets = budgets.to(device).clone()
    counts = torch.zeros(num_strings, dtype=torch.long, device=device)
    record_ids: list[Tensor] = []
    record_syms: list[Tensor] = []
    while ids.numel():
        u = torch.rand(ids.numel(), generator=generator, dtype=torch.float64, device=device)
        actions = pick(states, budgets, u)
        going = actions != eos
        if progress is not None:
            progress.update(int((~going).sum()))
        ids, states, budgets, actions = ids[going], states[going], budgets[going], actions[going]
        record_ids.append(ids)
        record_syms.append(actions)
        if event_fn is not None:
            hits = event_fn[states, actions]
            counts.index_add_(0, ids, hits)
            budgets = budgets - hits
            if clamp:
                budgets = budgets.clamp(min=0)
        states = pfsa.next_state[states, actions]
    return _assemble(num_strings, record_ids, record_syms, counts if event_fn is not None else None)


def _assemble(
    num_strings: int, record_ids: list[Tensor], record_syms: list[Tensor], counts: Tensor | None
) -> Corpus:
    """Flatten per-step records (step ``t`` holds symbol ``t`` of every string still going)."""
    device = counts.device if counts is not None else record_ids[0].device
    all_ids = torch.cat(record_ids) if record_ids else torch.empty(0, dtype=torch.long)
    all_ids = all_ids.to(device)
    lengths = torch.bincount(all_ids, minlength=num_strings)
    offsets = torch.zeros(num_strings + 1, dtype=torch.long, device=device)
    offsets[1:] = lengths.cumsum(0)
    tokens = torch.empty(int(offsets[-1]), dtype=torch.long, device=device)
    for step, (ids, syms) in enumerate(zip(record_ids, record_syms)):
        tokens[offsets[ids] + step] = syms
    return Corpus(tokens, offsets, counts)


def _unconstrained_picker(pfsa: PFSA) -> Picker:
    probs = pfsa.next_symbol_probs()

    def pick(states: Tensor, budgets: Tensor, u: Tensor) -> Tensor:
        return _inverse_cdf(probs[states], u)

    return pick


def _conditioned_picker(pfsa: PFSA, event_fn: Tensor, bins: ScaledBins, clamp: bool) -> Picker:
    """Action weights ``w(q,a) beta_{r-e}(q') / exp(s_r)`` from rescaled bins (module doc)."""
    q_count = pfsa.num_states
    weights = pfsa.weights
    stop_weight = pfsa.final * torch.exp(-bins.log_scale[0])
    targets = pfsa.next_state.clamp(min=0)
    counted = event_fn.bool()
    flat = bins.values.reshape(-1)
    scale = bins.log_scale

    def pick(states: Tensor, budgets: Tensor, u: Tensor) -> Tensor:
        e = counted[states]  # [B, S]
        prev = (budgets - 1).clamp(min=0)
        row = torch.where(e, (prev * q_count)[:, None], (budgets * q_count)[:, None])
        value = flat[row + targets[states]]  # v_{r-e}(q')
        ratio = torch.exp(scale[prev] - scale[budgets])  # exp(s_{r-1} - s_r), [B]
        arcs = weights[states] * value * torch.where(e, ratio[:, None], 1.0)
        empty = budgets == 0
        if not clamp:  # exact: a counted arc needs budget left
            arcs = arcs.masked_fill(e & empty[:, None], 0.0)
        stop = torch.where(empty, stop_weight[states], 0.0)
        return _inverse_cdf(torch.cat([arcs, stop[:, None]], dim=1), u)

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
            pfsa, num_strings, _unconstrained_picker(pfsa), zero, event_fn, generator,
            progress=progress,
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
