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
for the "at least ``r``" variant.

Both walks are the same ancestral walk over a :class:`Chain`: the automaton itself, or the
lifted automaton over pairs ``(r, q)`` numbered ``z = r Q + q``. For budgets up to ``R`` the
lifted chain is tabulated once (``[(R + 1) Q, |S| + 1]`` cumulative rows, ``[(R + 1) Q, |S|]``
successors), so a conditioned step costs what an unconstrained step costs: one row gather, one
comparison with the uniform, one successor lookup. Rows are built in log space from the rescaled
backward weights and normalized by their largest entry, so no ratio underflows or overflows;
beyond a size cap the rows are computed per step from the same formula.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cfl_lightning.automata.pfsa import PFSA
from cfl_lightning.progress import Progress
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.semiring.backward import ScaledBins

__all__ = ["Chain", "TableChain", "LiftedChain", "lifted_chain", "sample_paths", "walk"]

TABLE_MAX = 1 << 22  # largest tabulated chain, in cumulative-table entries


def _cumulative(weights: Tensor) -> Tensor:
    """Rows of non-negative weights ``[B, A]`` as cumulative sums divided by the row total.

    Each row ends in exactly 1.0 (``x / x``), so ``#{j : cdf_j <= u}`` for ``u`` in ``[0, 1)``
    never passes the last positive entry and never picks a zero weight. All-zero rows (states
    that are never entered) become all ones instead of NaN.
    """
    cum = weights.cumsum(dim=1)
    total = cum[:, -1:]
    return torch.where(total > 0, cum / torch.where(total > 0, total, 1.0), 1.0)


class Chain:
    """A Markov chain whose actions are the automaton's symbols ``0 .. S-1`` and EOS (``S``).

    Attributes:
        num_symbols: ``S``.
        records: whether :meth:`hits` gives event counts.
    """

    num_symbols: int
    records: bool = False

    def cdf(self, z: Tensor) -> Tensor:
        """``[B, S + 1]`` cumulative action probabilities of states ``z`` ``[B]`` (end in 1)."""
        raise NotImplementedError

    def move(self, z: Tensor, a: Tensor) -> Tensor:
        """``[B]`` successor states after symbols ``a`` ``[B]`` (never EOS)."""
        raise NotImplementedError

    def hits(self, z: Tensor, a: Tensor) -> Tensor:
        """``[B]`` event occurrences of the moves (only when :attr:`records`)."""
        raise NotImplementedError


class TableChain(Chain):
    """A tabulated chain.

    Args:
        cdf: ``[Z, S + 1]`` float64 cumulative rows ending in 1.0 (:func:`_cumulative`).
        successor: ``[Z, S]`` int64 next state (any valid index where the weight is 0).
        hits: optional ``[Z, S]`` int64 event occurrences per move.
    """

    def __init__(self, cdf: Tensor, successor: Tensor, hits: Tensor | None = None) -> None:
        self.table = cdf
        self.num_symbols = int(successor.shape[1])
        self.successor = successor.reshape(-1)
        self.hit_table = None if hits is None else hits.reshape(-1).long()
        self.records = hits is not None

    @classmethod
    def of(cls, pfsa: PFSA, event_fn: Tensor | None = None) -> TableChain:
        """The automaton itself (ancestral sampling), recording ``event_fn`` when given."""
        hits = None if event_fn is None else event_fn.to(pfsa.device).long()
        return cls(_cumulative(pfsa.next_symbol_probs()), pfsa.next_state.clamp(min=0), hits)

    def cdf(self, z: Tensor) -> Tensor:
        return self.table.index_select(0, z)

    def move(self, z: Tensor, a: Tensor) -> Tensor:
        return self.successor.take(z * self.num_symbols + a)

    def hits(self, z: Tensor, a: Tensor) -> Tensor:
        assert self.hit_table is not None
        return self.hit_table.take(z * self.num_symbols + a)


class LiftedChain(Chain):
    """The lifted automaton over ``z = r Q + q`` (budget ``r``, state ``q``), rows per step.

    Args:
        pfsa: the automaton.
        event_fn: ``[Q, S]`` 0/1 event function.
        bins: backward weights covering budgets ``0 .. R`` (exact bins, or tails when ``clamp``).
        clamp: the at-least walk (budgets clamped at 0, tails).
    """

    def __init__(self, pfsa: PFSA, event_fn: Tensor, bins: ScaledBins, clamp: bool) -> None:
        self.num_states, self.num_symbols = pfsa.num_states, pfsa.num_symbols
        self.clamp, self.records = clamp, clamp
        self.counted = event_fn.to(pfsa.device).long()
        self.log_weights = pfsa.weights.log()
        self.log_final = pfsa.final.log()
        self.targets = pfsa.next_state.clamp(min=0)
        self.log_beta = bins.log()  # [R + 1, Q]

    def cdf(self, z: Tensor) -> Tensor:
        r, q = z // self.num_states, z % self.num_states
        e = self.counted.index_select(0, q)  # [B, S]
        after = r[:, None] - e
        if self.clamp:
            after = after.clamp(min=0)
        target = self.targets.index_select(0, q)
        beta = self.log_beta[after.clamp(min=0), target]  # log beta_{r-e}(q')
        arcs = torch.where(after >= 0, self.log_weights.index_select(0, q) + beta, -torch.inf)
        eos = torch.where(r == 0, self.log_final.index_select(0, q), -torch.inf)
        logits = torch.cat([arcs, eos[:, None]], dim=1)
        peak = logits.amax(dim=1, keepdim=True)
        peak = torch.where(torch.isfinite(peak), peak, 0.0)
        return _cumulative((logits - peak).exp())

    def _after(self, z: Tensor, a: Tensor) -> tuple[Tensor, Tensor]:
        q = z % self.num_states
        flat = q * self.num_symbols + a
        return q, flat

    def move(self, z: Tensor, a: Tensor) -> Tensor:
        q, flat = self._after(z, a)
        r = z // self.num_states - self.counted.reshape(-1).take(flat)
        if self.clamp:
            r = r.clamp(min=0)
        return r.clamp(min=0) * self.num_states + self.targets.reshape(-1).take(flat)

    def hits(self, z: Tensor, a: Tensor) -> Tensor:
        _, flat = self._after(z, a)
        return self.counted.reshape(-1).take(flat)

    def tabulate(self) -> TableChain:
        """The same chain as tables over every ``z`` (``(R + 1) Q`` rows)."""
        device = self.targets.device
        z = torch.arange(self.log_beta.shape[0] * self.num_states, device=device)
        a = torch.arange(self.num_symbols, device=device)
        zz, aa = z[:, None].expand(-1, self.num_symbols), a[None, :].expand(z.numel(), -1)
        successor = self.move(zz.reshape(-1), aa.reshape(-1)).view(z.numel(), -1)
        hits = self.hits(zz.reshape(-1), aa.reshape(-1)).view(z.numel(), -1) if self.clamp else None
        return TableChain(self.cdf(z), successor, hits)


def lifted_chain(pfsa: PFSA, event_fn: Tensor, bins: ScaledBins, clamp: bool = False) -> Chain:
    """The conditioned walk's chain: tabulated when it has at most :data:`TABLE_MAX` entries."""
    chain = LiftedChain(pfsa, event_fn, bins, clamp)
    if bins.num_bins * pfsa.num_states * (pfsa.num_symbols + 1) <= TABLE_MAX:
        return chain.tabulate()
    return chain


def walk(
    chain: Chain,
    start: Tensor,
    generator: torch.Generator,
    *,
    progress: Progress | None = None,
) -> Corpus:
    """Generate one string from each start state ``start`` ``[K]`` by walking ``chain``.

    Every step draws one uniform per active string and picks ``#{j : cdf_j <= u}``; strings that
    pick EOS drop out (compaction keeps the arrays as short as the active set).

    Args:
        chain: the chain (its states, symbols and optional event counts).
        start: ``[K]`` int64 start states on the generator's device.
        generator: the random stream.
        progress: optional progress reporter (strings finished).

    Returns:
        The corpus, with ``counts`` when ``chain.records``.
    """
    device = start.device
    num_strings = start.numel()
    eos = chain.num_symbols
    ids = torch.arange(num_strings, device=device)
    z = start.clone()
    counts = torch.zeros(num_strings, dtype=torch.long, device=device) if chain.records else None
    record_ids: list[Tensor] = []
    record_syms: list[Tensor] = []
    while ids.numel():
        u = torch.rand(ids.numel(), generator=generator, dtype=torch.float64, device=device)
        actions = (chain.cdf(z) <= u[:, None]).sum(dim=1)
        keep = torch.nonzero(actions != eos).squeeze(1)
        if progress is not None:
            progress.update(ids.numel() - keep.numel())
        ids = ids.index_select(0, keep)
        z = z.index_select(0, keep)
        actions = actions.index_select(0, keep)
        record_ids.append(ids)
        record_syms.append(actions)
        if counts is not None:
            counts.index_add_(0, ids, chain.hits(z, actions))
        z = chain.move(z, actions)
    return _assemble(num_strings, record_ids, record_syms, counts, device)


def _assemble(
    num_strings: int,
    record_ids: list[Tensor],
    record_syms: list[Tensor],
    counts: Tensor | None,
    device: torch.device,
) -> Corpus:
    """Flatten per-step records (step ``t`` holds symbol ``t`` of every string still going).

    Symbol ``t`` of string ``id`` goes to ``offsets[id] + t``: step by step on a CPU
    (:func:`_scatter_steps`), in one concatenated scatter on a GPU, where launches cost more
    than copies (:func:`_scatter_once`).
    """
    scatter = _scatter_steps if device.type == "cpu" else _scatter_once
    tokens, offsets = scatter(num_strings, record_ids, record_syms, device)
    return Corpus(tokens, offsets, counts)


def _scatter_steps(
    num_strings: int, record_ids: list[Tensor], record_syms: list[Tensor], device: torch.device
) -> tuple[Tensor, Tensor]:
    """Lengths from the last step that recorded each string, then one scatter per step."""
    tokens = torch.empty(sum(ids.numel() for ids in record_ids), dtype=torch.long, device=device)
    lengths = torch.zeros(num_strings, dtype=torch.long, device=device)
    for step, ids in enumerate(record_ids):
        lengths.index_fill_(0, ids, step + 1)
    offsets = torch.zeros(num_strings + 1, dtype=torch.long, device=device)
    offsets[1:] = lengths.cumsum(0)
    for step, (ids, syms) in enumerate(zip(record_ids, record_syms)):
        tokens.index_put_((offsets.index_select(0, ids) + step,), syms)
    return tokens, offsets


def _scatter_once(
    num_strings: int, record_ids: list[Tensor], record_syms: list[Tensor], device: torch.device
) -> tuple[Tensor, Tensor]:
    """All records concatenated: a bincount for the lengths and a single scatter."""
    total = sum(ids.numel() for ids in record_ids)
    tokens = torch.empty(total, dtype=torch.long, device=device)
    offsets = torch.zeros(num_strings + 1, dtype=torch.long, device=device)
    if total:
        all_ids = torch.cat(record_ids)
        offsets[1:] = torch.bincount(all_ids, minlength=num_strings).cumsum(0)
        sizes = torch.tensor([ids.numel() for ids in record_ids], device=device)
        steps = torch.repeat_interleave(
            torch.arange(len(record_ids), device=device), sizes, output_size=total
        )
        tokens[offsets.index_select(0, all_ids) + steps] = torch.cat(record_syms)
    return tokens, offsets


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
        The corpus (with per-string ``counts`` when ``event_fn`` is given; under an exact
        budget they are the budgets, which the walk meets by construction).
    """
    if budgets is None:
        start = torch.full((num_strings,), pfsa.initial, dtype=torch.long, device=pfsa.device)
        return walk(TableChain.of(pfsa, event_fn), start, generator, progress=progress)
    if event_fn is None or bins is None:
        raise ValueError("conditioned sampling needs event_fn and bins")
    budgets = budgets.to(pfsa.device)
    if budgets.numel() and int(budgets.max()) >= bins.num_bins:
        raise ValueError("bins do not cover the largest budget")
    chain = lifted_chain(pfsa, event_fn, bins, clamp=at_least)
    corpus = walk(chain, budgets * pfsa.num_states + pfsa.initial, generator, progress=progress)
    if not at_least:
        corpus.counts = budgets.clone()
    return corpus
