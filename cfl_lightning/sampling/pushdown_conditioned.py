r"""Top-down generation from a pushdown automaton conditioned on per-string event counts.

Every string keeps a stack of frames (:mod:`~cfl_lightning.sampling.pushdown_tables`): the
current one in vectors (state ``q``, top ``t``, exit ``r``, budget ``b``, mode ``m``), the ones
below in ``[K, depth]`` tensors indexed by string id (grown by doubling). All strings advance one
symbol per step: one uniform per string picks the symbol (or the end) by inverse CDF from the
tabulated row of its lifted state ``(m, t, q, r, b)``; strings that push draw one more uniform
for the pushed excursion's exit state and budget ``(u, i)``. Finished strings drop out. One
explicit ``torch.Generator``: the same seed gives the same corpus.

Rows are built in log space and normalized by their largest entry, then cumulated and divided
by their total (the last entry is exactly 1), so ``#{j : cdf_j <= u}`` never picks a zero
weight. The lifted chain is tabulated when it has at most :data:`TABLE_MAX` entries, else rows
are formed per step from the same function.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from cfl_lightning.automata.pushdown_fixpoint import KEEP, POP
from cfl_lightning.errors import InterventionError
from cfl_lightning.progress import Progress
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.paths import _assemble, _cumulative
from cfl_lightning.sampling.pushdown_tables import WalkTables

__all__ = ["ConditionedWalk", "generate_conditioned", "TABLE_MAX"]

TABLE_MAX = 1 << 22  # largest tabulated lifted chain, in cumulative-table entries


class ConditionedWalk:
    """The lifted chain of one automaton, event and table set.

    Args:
        pda: the automaton (its tensors on the CPU).
        degrees: ``[Q, G + 1, S]`` int64 event count of each step.
        tables: the walk's log tables.
    """

    def __init__(self, pda, degrees: Tensor, tables: WalkTables) -> None:
        self.q, self.g1, self.s = (int(x) for x in pda.target.shape)
        self.budget = tables.budget
        self.tables = tables
        valid = pda.target >= 0
        self.target = torch.where(valid, pda.target, 0).cpu()
        self.action = pda.action.cpu()
        self.valid = valid.cpu()
        self.degree = torch.where(valid, degrees.cpu().long(), 0)
        self.log_w = torch.where(valid, pda.weights.cpu().double().log(), -math.inf)
        self.log_final = pda.final.cpu().double().log()
        self.lv_flat = tables.lv.reshape(-1)
        self.lc_flat = tables.lc.reshape(-1)
        rows = 2 * self.g1 * self.q * self.q * (self.budget + 1)
        self.table = None
        if rows * (self.s + 1) <= TABLE_MAX:
            self.table = self.rows(torch.arange(rows))
        self.excursion_table = self._excursion_table()

    def index(self, m: Tensor, t: Tensor, q: Tensor, r: Tensor, b: Tensor) -> Tensor:
        """Lifted state id of ``(mode, top, state, exit, budget)``."""
        return (((m * self.g1 + t) * self.q + q) * self.q + r) * (self.budget + 1) + b

    def _lv(self, m: Tensor, n: Tensor, t: Tensor, p: Tensor, r: Tensor) -> Tensor:
        """``log V^m_n[t, p, r]`` gathered (``n`` in range)."""
        b1 = self.budget + 1
        return self.lv_flat[(((m * b1 + n) * self.g1 + t) * self.q + p) * self.q + r]

    def rows(self, z: Tensor) -> Tensor:
        """``[Z, S + 1]`` cumulative rows of lifted states ``z``."""
        b1 = self.budget + 1
        b, r = z % b1, (z // b1) % self.q
        q, t, m = (z // (b1 * self.q)) % self.q, (z // (b1 * self.q * self.q)) % self.g1, z // (
            b1 * self.q * self.q * self.g1
        )
        cls = q * self.g1 + t
        s = self.target.reshape(-1, self.s)[cls]  # [Z, S]
        act = self.action.reshape(-1, self.s)[cls]
        n = b[:, None] - self.degree.reshape(-1, self.s)[cls]
        at_least = m[:, None] == 1
        ok = (n >= 0) | at_least
        nc = n.clamp(min=0)
        mm, tt, rr = m[:, None].expand_as(n), t[:, None].expand_as(n), r[:, None].expand_as(n)
        keep = self._lv(mm, nc, tt, s, rr)
        yy = act.clamp(min=0)
        lc_idx = ((((mm * b1 + nc) * (self.g1 - 1) + yy) * self.g1 + tt) * self.q + s) * self.q + rr
        push = self.lc_flat[lc_idx.clamp(max=self.lc_flat.numel() - 1)] if self.g1 > 1 else keep
        pop_ok = (s == rr) & ((n == 0) | (at_least & (n <= 0)))
        pop = torch.where(pop_ok, 0.0, -math.inf)
        tail = torch.where(act == KEEP, keep, torch.where(act == POP, pop, push))
        logits = torch.where(ok, self.log_w.reshape(-1, self.s)[cls] + tail, -math.inf)
        end = torch.where((t == self.g1 - 1) & (b == 0) & (r == 0), self.log_final[q], -math.inf)
        logits = torch.cat([logits, end[:, None]], dim=1)
        peak = logits.amax(dim=1, keepdim=True)
        peak = torch.where(torch.isfinite(peak), peak, 0.0)
        return _cumulative((logits - peak).exp())

    def cdf(self, z: Tensor) -> Tensor:
        return self.rows(z) if self.table is None else self.table.index_select(0, z)

    def _excursion_cdf(self, m, t, r, nb, y, s, width: int) -> Tensor:
        """``[P, width * Q]`` cumulative weights of ``(i, u)`` (column ``i * Q + u``)."""
        i = torch.arange(width)[None, :, None]  # [1, W, 1]
        u = torch.arange(self.q)[None, None, :]
        n = nb[:, None, None]
        child_m = m[:, None, None] * (i == n)
        ic, rest = i.clamp(max=self.budget), (n - i).clamp(min=0)
        first = self._lv(child_m, ic.expand(-1, -1, self.q), y[:, None, None], s[:, None, None], u)
        second = self._lv(m[:, None, None], rest, t[:, None, None], u, r[:, None, None])
        logits = torch.where(i <= n, first + second, -math.inf).reshape(nb.numel(), -1)
        peak = logits.amax(dim=1, keepdim=True)
        return _cumulative((logits - torch.where(torch.isfinite(peak), peak, 0.0)).exp())

    def _excursion_index(self, m, t, r, nb, y, s) -> Tensor:
        g = self.g1 - 1
        return ((((m * self.g1 + t) * self.q + r) * (self.budget + 1) + nb) * g + y) * self.q + s

    def _excursion_table(self) -> Tensor | None:
        g, b1 = self.g1 - 1, self.budget + 1
        rows = 2 * self.g1 * self.q * b1 * g * self.q
        if g == 0 or rows * b1 * self.q > TABLE_MAX:
            return None
        z = torch.arange(rows)
        s, y = z % self.q, (z // self.q) % g
        rest = z // (self.q * g)
        nb, rest = rest % b1, rest // b1
        r, rest = rest % self.q, rest // self.q
        t, m = rest % self.g1, rest // self.g1
        return self._excursion_cdf(m, t, r, nb, y, s, b1)

    def excursion(self, m, t, r, nb, y, s, u01) -> tuple[Tensor, Tensor, Tensor]:
        """Draw ``(u, i)`` for pushed excursions: the child's exit state, budget and mode.

        Args:
            m, t, r: the current frame's mode, top and exit ``[P]``.
            nb: its budget after the pushing step ``[P]``.
            y, s: the pushed stack symbol and the state after the push ``[P]``.
            u01: ``[P]`` uniforms.
        """
        if self.excursion_table is not None:
            index = self._excursion_index(m, t, r, nb, y, s)
            width = (int(nb.max()) + 1) * self.q
            cdf = self.excursion_table.index_select(0, index)[:, :width]
        else:
            cdf = self._excursion_cdf(m, t, r, nb, y, s, int(nb.max()) + 1)
        pick = (cdf <= u01[:, None]).sum(dim=1).clamp(max=cdf.shape[1] - 1)
        ii, uu = pick // self.q, pick % self.q
        return uu, ii, m * (ii == nb)


class _Frames:
    """The frames below each string's current one: ``[K, depth]`` tensors by string id."""

    def __init__(self, num_strings: int) -> None:
        self.depth = torch.zeros(num_strings, dtype=torch.long)
        self.data = torch.zeros(4, num_strings, 8, dtype=torch.long)  # t, r, b, m

    def push(self, ids: Tensor, frame: list[Tensor]) -> None:
        d = self.depth[ids]
        if ids.numel() and int(d.max()) >= self.data.shape[2]:
            self.data = torch.cat([self.data, torch.zeros_like(self.data)], dim=2)
        self.data[:, ids, d] = torch.stack(frame)
        self.depth[ids] = d + 1

    def pop(self, ids: Tensor) -> Tensor:
        d = self.depth[ids] - 1
        self.depth[ids] = d
        return self.data[:, ids, d]


def generate_conditioned(
    walk: ConditionedWalk,
    initial: int,
    budgets: Tensor,
    generator: torch.Generator,
    *,
    at_least: bool = False,
    progress: Progress | None = None,
) -> Corpus:
    """One string per budget, from the automaton conditioned on exactly (or at least) it.

    Args:
        walk: the lifted chain; its tables must cover ``max(budgets)`` (and tails for
            ``at_least``).
        initial: the initial state.
        budgets: ``[K]`` int64 per-string counts.
        generator: the random stream (CPU).
        at_least: at least ``budgets[k]`` occurrences instead of exactly.
        progress: optional progress reporter.

    Returns:
        The corpus with realized per-string ``counts``.

    Raises:
        InterventionError: a budget has probability 0 (or exceeds the tables).
    """
    k = budgets.numel()
    budgets = budgets.cpu().long()
    if k and int(budgets.max()) > walk.budget:
        raise InterventionError("internal: walk tables do not cover the largest budget")
    ids = torch.arange(k)
    g = walk.g1 - 1
    q = torch.full((k,), initial, dtype=torch.long)
    t = torch.full((k,), g, dtype=torch.long)
    r = torch.zeros(k, dtype=torch.long)
    b = budgets.clone()
    m = torch.full((k,), int(at_least), dtype=torch.long)
    if k and not bool(torch.isfinite(walk._lv(m, b, t, q, r)).all()):
        raise InterventionError("a per-string count has probability 0 under the automaton")
    frames, counts = _Frames(k), torch.zeros(k, dtype=torch.long)
    rec_ids, rec_syms = [], []
    while ids.numel():
        u01 = torch.rand(ids.numel(), generator=generator, dtype=torch.float64)
        a = (walk.cdf(walk.index(m, t, q, r, b)) <= u01[:, None]).sum(dim=1)
        live = torch.nonzero(a != walk.s).squeeze(1)
        if progress is not None:
            progress.update(ids.numel() - live.numel())
        ids, q, t, r, b, m, a = (x.index_select(0, live) for x in (ids, q, t, r, b, m, a))
        rec_ids.append(ids)
        rec_syms.append(a)
        cls = (q * walk.g1 + t) * walk.s + a
        s, act, d = (x.reshape(-1).take(cls) for x in (walk.target, walk.action, walk.degree))
        counts.index_add_(0, ids, d)
        b = (b - d).clamp(min=0)
        pushing = torch.nonzero(act >= 0).squeeze(1)
        if pushing.numel():
            u2 = torch.rand(pushing.numel(), generator=generator, dtype=torch.float64)
            pm, pt, pr, pb = (x.index_select(0, pushing) for x in (m, t, r, b))
            y, ps = act.index_select(0, pushing), s.index_select(0, pushing)
            eu, ei, em = walk.excursion(pm, pt, pr, pb, y, ps, u2)
            frames.push(ids.index_select(0, pushing), [pt, pr, pb - ei, pm])
            t.index_copy_(0, pushing, y)
            r.index_copy_(0, pushing, eu)
            b.index_copy_(0, pushing, ei)
            m.index_copy_(0, pushing, em)
        popping = torch.nonzero(act == POP).squeeze(1)
        if popping.numel():
            below = frames.pop(ids.index_select(0, popping))
            for vec, row in zip((t, r, b, m), below):
                vec.index_copy_(0, popping, row)
        q = s
    corpus = _assemble(k, rec_ids, rec_syms, counts, torch.device("cpu"))
    return corpus
