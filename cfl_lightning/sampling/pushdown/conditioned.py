r"""Top-down generation from a pushdown automaton conditioned on per-string event counts.

Every string keeps a stack of frames (:mod:`~cfl_lightning.sampling.pushdown.tables`): top
``t``, exit ``r``, budget ``b``, mode ``m``, packed in one integer (budget most significant, so a
step's event count is one subtraction); the current one and the state ``q`` in vectors, the ones
below in a ``[active, depth]`` tensor (grown by doubling, compacted as strings finish). All
strings advance one symbol per step: one uniform per string picks the symbol (or the end) by
inverse CDF from the tabulated row of its lifted state ``frame * Q + q``; strings that push draw
one more uniform for the pushed excursion's exit state and budget ``(u, i)``. Finished strings
drop out. One explicit ``torch.Generator``: the same seed gives the same corpus.

Rows are built in log space and normalized by their largest entry, then cumulated and divided
by their total (the last entry is exactly 1), so ``#{j : cdf_j <= u}`` never picks a zero
weight. The lifted chain is tabulated when it has at most :data:`TABLE_MAX` entries, else rows
are formed per step from the same function.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from cfl_lightning.automata.pushdown.fixpoint import KEEP, POP
from cfl_lightning.errors import InterventionError
from cfl_lightning.progress import Progress
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.paths import _assemble, _cumulative
from cfl_lightning.sampling.pushdown.tables import WalkTables

__all__ = ["ConditionedWalk", "generate_conditioned", "TABLE_MAX"]

TABLE_MAX = 1 << 22  # largest tabulated lifted chain, in cumulative-table entries
_NARROW = 4  # excursion draws with budgets below this read a narrow slice of their rows


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

    def code(self, m: Tensor, t: Tensor, r: Tensor, b: Tensor) -> Tensor:
        """Packed frame ``((b * 2 + m) * (G + 1) + t) * Q + r`` (budget most significant)."""
        return ((b * 2 + m) * self.g1 + t) * self.q + r

    def decode(self, code: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(m, t, r, b)`` of packed frames."""
        r, rest = code % self.q, code // self.q
        t, rest = rest % self.g1, rest // self.g1
        return rest % 2, t, r, rest // 2

    def _lv(self, m: Tensor, n: Tensor, t: Tensor, p: Tensor, r: Tensor) -> Tensor:
        """``log V^m_n[t, p, r]`` gathered (``n`` in range)."""
        b1 = self.budget + 1
        return self.lv_flat[(((m * b1 + n) * self.g1 + t) * self.q + p) * self.q + r]

    def rows(self, z: Tensor) -> Tensor:
        """``[Z, S + 1]`` cumulative rows of lifted states ``z``."""
        b1 = self.budget + 1
        q = z % self.q
        m, t, r, b = self.decode(z // self.q)
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
        """Cumulative rows of lifted states ``z = code * Q + q``."""
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

    def _excursion_table(self) -> Tensor | None:
        """Rows ``(code * G + Y) * Q + s`` over every frame after the step, pushed symbol, state."""
        g, b1 = self.g1 - 1, self.budget + 1
        rows = 2 * self.g1 * self.q * b1 * g * self.q
        if g == 0 or rows * b1 * self.q > TABLE_MAX:
            return None
        z = torch.arange(rows)
        s, y, code = z % self.q, (z // self.q) % g, z // (self.q * g)
        m, t, r, nb = self.decode(code)
        return self._excursion_cdf(m, t, r, nb, y, s, b1)

    def excursion(self, code: Tensor, y: Tensor, s: Tensor, u01: Tensor) -> tuple[Tensor, Tensor]:
        """Draw ``(u, i)`` for pushed excursions.

        Args:
            code: ``[P]`` packed frames after the pushing step (budget already decreased).
            y, s: the pushed stack symbol and the state after the push ``[P]``.
            u01: ``[P]`` uniforms.

        Returns:
            The child's packed frame and the parent's (budget ``nb - i``), ``[P]`` each.
        """
        m, t, r, nb = self.decode(code)
        if self.excursion_table is not None:
            index = (code * (self.g1 - 1) + y) * self.q + s
            pick = torch.empty_like(nb)
            small = nb < _NARROW  # most budgets are small: read only their rows' first columns
            for part in (torch.nonzero(small).squeeze(1), torch.nonzero(~small).squeeze(1)):
                if part.numel():
                    width = (int(nb.index_select(0, part).max()) + 1) * self.q
                    narrow = self.excursion_table[:, :width]
                    rows = narrow.index_select(0, index.index_select(0, part))
                    hits = (rows <= u01.index_select(0, part)[:, None]).sum(dim=1)
                    pick.index_copy_(0, part, hits.clamp(max=width - 1))
        else:
            cdf = self._excursion_cdf(m, t, r, nb, y, s, int(nb.max()) + 1)
            pick = (cdf <= u01[:, None]).sum(dim=1).clamp(max=cdf.shape[1] - 1)
        i, u = pick // self.q, pick % self.q
        child = self.code(m * (i == nb), y, u, i)
        return child, code - i * 2 * self.g1 * self.q


def _push(
    walk: ConditionedWalk,
    pushing: Tensor,
    code: Tensor,
    act: Tensor,
    s: Tensor,
    stack: Tensor,
    depth: Tensor,
    generator: torch.Generator,
) -> Tensor:
    """Strings ``pushing`` pushed ``act``: draw their excursions, stack the parents' frames.

    ``code`` and ``depth`` are updated in place; returns the (possibly widened) stack.
    """
    u2 = torch.rand(pushing.numel(), generator=generator, dtype=torch.float64)
    child, parent = walk.excursion(
        code.index_select(0, pushing), act.index_select(0, pushing), s.index_select(0, pushing), u2
    )
    level = depth.index_select(0, pushing)
    if int(level.max()) >= stack.shape[1]:
        stack = torch.cat([stack, torch.zeros_like(stack)], dim=1)
    stack[pushing, level] = parent
    depth.index_add_(0, pushing, torch.ones_like(pushing))
    code.index_copy_(0, pushing, child)
    return stack


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

    The frames below the current one are packed codes in a ``[active, depth]`` tensor, compacted
    with the active strings (as the unconstrained sampler's stack).

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
    g1, nq, ns = walk.g1, walk.q, walk.s
    stride = 2 * g1 * nq  # one unit of budget in a packed frame
    q = torch.full((k,), initial, dtype=torch.long)
    m = torch.full((k,), int(at_least), dtype=torch.long)
    top, exit_state = torch.full((k,), g1 - 1, dtype=torch.long), torch.zeros(k, dtype=torch.long)
    if k and not bool(torch.isfinite(walk._lv(m, budgets, top, q, exit_state)).all()):
        raise InterventionError("a per-string count has probability 0 under the automaton")
    code = walk.code(m, top, exit_state, budgets)
    ids, counts = torch.arange(k), torch.zeros(k, dtype=torch.long)
    stack, depth = torch.zeros(k, 4, dtype=torch.long), torch.zeros(k, dtype=torch.long)
    target, action, degree = (x.reshape(-1) for x in (walk.target, walk.action, walk.degree))
    rec_ids, rec_syms = [], []
    while ids.numel():
        u01 = torch.rand(ids.numel(), generator=generator, dtype=torch.float64)
        a = (walk.cdf(code * nq + q) <= u01[:, None]).sum(dim=1)
        live = torch.nonzero(a != ns).squeeze(1)
        if progress is not None:
            progress.update(ids.numel() - live.numel())
        if live.numel() < ids.numel():
            ids, q, code, a, depth = (x.index_select(0, live) for x in (ids, q, code, a, depth))
            stack = stack.index_select(0, live)
        rec_ids.append(ids)
        rec_syms.append(a)
        flat = (q * g1 + (code // nq) % g1) * ns + a
        s, act, d = target.take(flat), action.take(flat), degree.take(flat)
        if at_least:  # an exact walk's counts are its budgets
            counts.index_add_(0, ids, d)
            code = code - torch.minimum(d, code // stride) * stride
        else:
            code = code - d * stride
        pushing = torch.nonzero(act >= 0).squeeze(1)
        if pushing.numel():
            stack = _push(walk, pushing, code, act, s, stack, depth, generator)
        popping = torch.nonzero(act == POP).squeeze(1)
        if popping.numel():
            level = depth.index_select(0, popping) - 1
            code.index_copy_(0, popping, stack[popping, level])
            depth.index_copy_(0, popping, level)
        q = s
    realized = counts if at_least else budgets.clone()
    return _assemble(k, rec_ids, rec_syms, realized, torch.device("cpu"))
