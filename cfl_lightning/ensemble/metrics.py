"""The decomposed KL and state visits of M members at once, from packed evaluation batches.

Member ``m`` has its own automaton (``Q_m`` states). Its states are numbered ``offset_m ...
offset_m + Q_m - 1`` in one table of ``sum_m Q_m`` rows, the members' next-symbol tables
stacked: one call of the decomposition's own per-batch statistics
(:func:`cfl_lightning.metrics.functional._decomposed_kl_update`, every real cell of every member
as a one-position string with its string's weight) accumulates every member's sums, and each
member's slice of the sums goes through the same reduction as
:class:`~cfl_lightning.metrics.DecomposedKL`'s (``_decomposed_kl_compute``). The statistics are
sums over positions, so the result is the member's own ``DecomposedKL`` on its own batches up to
the order of floating-point additions.

Automata without position classes (a PCFG) have no such decomposition: their members'
evaluation is :class:`MemberSymbolKL`, each member's :class:`~cfl_lightning.metrics.SymbolKL`
(the same per-position rule, :func:`~cfl_lightning.metrics.symbol_kl.symbol_terms`, on the
packed exact laws). :func:`member_kl` picks the metric of an ensemble's automata and
:func:`update_member_kl` feeds it one evaluation batch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from cfl_lightning.automata import Automaton, class_tables
from cfl_lightning.callbacks.decomposed_kl import has_position_classes
from cfl_lightning.ensemble.settings import NotEnsembleable
from cfl_lightning.metrics.functional import _decomposed_kl_compute, _decomposed_kl_update
from cfl_lightning.metrics.symbol_kl import symbol_result, symbol_terms
from cfl_lightning.sampling.visits import position_counts

__all__ = [
    "MemberDecomposedKL", "MemberSymbolKL", "member_kl", "update_member_kl", "classless_members",
]


class MemberDecomposedKL(Metric):
    """Every member's ``DecomposedKL`` and ``StateVisits``, accumulated in one update per batch.

    Args:
        pfsas: member ``m``'s automaton (all with the same alphabet size).
        validate_args: check state indices and log-probabilities in :meth:`update`.
        kwargs: passed to :class:`torchmetrics.Metric`.

    Example:
        >>> from cfl_lightning import parity_starfree_pfsa
        >>> A = parity_starfree_pfsa(0.3)
        >>> metric = MemberDecomposedKL([A, A])
        >>> states = torch.tensor([[[0, 3, 3]], [[0, 1, 0]]])  # [M, R, L]
        >>> mask = torch.ones(2, 1, 3, dtype=torch.bool)
        >>> metric.update(A.next_symbol_probs().log()[states].float(), states, mask)
        >>> [float(r["total"]) for r, _ in metric.compute()]
        [0.0, 0.0]
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = False
    # states (add_state): counts, kl_sums [sum Q] float64, ratio_sums [sum Q, |S|+1] float64,
    # visits [sum Q] int64; member m owns rows offset_m ... offset_m + Q_m - 1

    def __init__(self, pfsas: list[Automaton], *, validate_args: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        tables = [class_tables(p) for p in pfsas]
        widths = {int(t[0].shape[1]) for t in tables}
        if len(widths) != 1:
            raise ValueError(f"members' automata differ in alphabet size: {sorted(widths)}")
        self.validate_args = validate_args
        sizes = [int(t[0].shape[0]) for t in tables]
        self._sizes = sizes
        self._offsets = torch.tensor([0, *sizes]).cumsum(0)[:-1]  # [M]
        self._probs = torch.cat([t[0].cpu() for t in tables])  # [sum Q, |S|+1] float64
        self._expected = [t[1].cpu() for t in tables]
        total, width = self._probs.shape
        f64 = torch.float64
        self.add_state("counts", torch.zeros(total, dtype=f64), dist_reduce_fx="sum")
        self.add_state("kl_sums", torch.zeros(total, dtype=f64), dist_reduce_fx="sum")
        self.add_state("ratio_sums", torch.zeros(total, width, dtype=f64), dist_reduce_fx="sum")
        self.add_state("visits", torch.zeros(total, dtype=torch.long), dist_reduce_fx="sum")

    def update(
        self,
        log_probs: Tensor,
        states: Tensor,
        mask: Tensor,
        weights: Tensor | None = None,
        members: Tensor | None = None,
    ) -> None:
        """Accumulate one packed batch.

        Args:
            log_probs: ``[M', R, L, |S|+1]`` log-probabilities of members ``members``.
            states: ``[M', R, L]`` each member's own state indices.
            mask: ``[M', R, L]`` bool, True on real positions.
            weights: optional ``[M', R, L]`` weight of each cell's string (default 1).
            members: ``[M']`` int64 the members of the rows (default: all, in order).
        """
        m = log_probs.shape[0]
        device = log_probs.device
        offsets = self._offsets.to(device)
        if members is not None:
            offsets = offsets[members.to(device)]
        elif m != len(self._sizes):
            raise ValueError(f"log_probs has {m} members, the metric {len(self._sizes)}")
        mask = mask.bool()
        flat_states = (states + offsets.view(m, 1, 1))[mask]  # [N]: one-position strings
        width = log_probs.shape[-1]
        flat_lp = log_probs[mask].view(-1, 1, width)
        flat_w = None if weights is None else weights[mask].to(torch.float64)
        if self.validate_args and mask.any():  # each member's own state range
            local = states[mask]
            sizes = torch.tensor(self._sizes, device=device)
            sizes = sizes if members is None else sizes[members.to(device)]
            bound = sizes.view(m, 1, 1).expand_as(states)[mask]
            if bool(((local < 0) | (local >= bound)).any()):
                raise ValueError("states must lie in each member's [0, Q_m) at real positions")
        counts, kl_sums, ratio_sums = _decomposed_kl_update(
            flat_lp,
            flat_states.view(-1, 1),
            torch.ones(flat_states.numel(), 1, dtype=torch.bool, device=device),
            self._probs.to(device),
            flat_w,
            validate_args=self.validate_args,
        )
        self.counts += counts
        self.kl_sums += kl_sums
        self.ratio_sums += ratio_sums
        every = torch.ones_like(flat_states, dtype=torch.bool)
        self.visits += position_counts(flat_states, every, self.counts.numel()).to(self.visits)

    def compute(self) -> list[tuple[dict[str, Tensor], Tensor]]:
        """Per member, ``(DecomposedKL.compute() of its positions, its [Q_m] state visits)``."""
        out = []
        for offset, size, expected in zip(self._offsets.tolist(), self._sizes, self._expected):
            part = slice(offset, offset + size)
            result = _decomposed_kl_compute(
                self.counts[part], self.kl_sums[part], self.ratio_sums[part],
                self._probs[part], expected,
            )
            out.append((result, self.visits[part].clone()))
        return out


class MemberSymbolKL(Metric):
    """Every member's :class:`~cfl_lightning.metrics.SymbolKL`, accumulated in one update per batch.

    For automata without position classes (a PCFG): the batches' ``target_probs`` are the exact
    law of every position. Per member ``m``, ``sums[m]`` and ``stakes[m]`` add up
    :func:`~cfl_lightning.metrics.symbol_kl.symbol_terms` over its real positions (times its
    string's weight) and ``strings[m]`` its (weighted) strings, as ``SymbolKL`` does on the
    member's own batches (the same values up to the order of floating-point additions).

    Args:
        automata: member ``m``'s automaton (all with the same alphabet size).
        kwargs: passed to :class:`torchmetrics.Metric`.
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = False

    sums: Tensor
    strings: Tensor
    stakes: Tensor

    def __init__(self, automata: list[Automaton], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        widths = {int(a.num_symbols) for a in automata}
        if len(widths) != 1:
            raise ValueError(f"members' automata differ in alphabet size: {sorted(widths)}")
        members, width = len(automata), widths.pop() + 1
        f64 = torch.float64
        self.add_state("sums", torch.zeros(members, width, dtype=f64), dist_reduce_fx="sum")
        self.add_state("strings", torch.zeros(members, dtype=f64), dist_reduce_fx="sum")
        self.add_state(
            "stakes", torch.zeros(members, width, dtype=torch.long), dist_reduce_fx="sum"
        )

    def update(
        self,
        log_probs: Tensor,
        target_probs: Tensor,
        mask: Tensor,
        strings: Tensor,
        weights: Tensor | None = None,
        starts: Tensor | None = None,
        members: Tensor | None = None,
    ) -> None:
        """Accumulate one packed batch.

        Args:
            log_probs: ``[M', R, L, |S|+1]`` log-probabilities of members ``members``.
            target_probs: ``[M', R, L, |S|+1]`` the exact next-symbol laws.
            mask: ``[M', R, L]`` bool, True on real positions.
            strings: ``[M']`` strings of each member in the batch (counted when unweighted).
            weights: optional ``[M', R, L]`` weight of each cell's string (default 1).
            starts: ``[M', R, L]`` bool, True at each string's first position (needed with
                ``weights``: the weighted string count).
            members: ``[M']`` int64 the members of the rows (default: all, in order).
        """
        m = log_probs.shape[0]
        if members is None:
            if m != self.sums.shape[0]:
                raise ValueError(f"log_probs has {m} members, the metric {self.sums.shape[0]}")
            members = torch.arange(m, device=log_probs.device)
        members = members.to(self.sums.device)
        terms, stakes = symbol_terms(log_probs, target_probs, mask.bool())
        if weights is None:
            count = strings.to(torch.float64)
        else:
            if starts is None:
                raise ValueError("weighted batches need starts (each string's first position)")
            w = weights.to(torch.float64)
            terms = terms * w[..., None]
            count = (w * starts).sum(dim=(1, 2))
        self.sums.index_add_(0, members, terms.sum(dim=(1, 2)).to(self.sums))
        self.strings.index_add_(0, members, count.to(self.strings))
        self.stakes.index_add_(0, members, stakes.sum(dim=(1, 2)).to(self.stakes))

    def compute(self) -> list[tuple[dict[str, Tensor], None]]:
        """Per member, ``(SymbolKL.compute() of its positions, None)`` (no state visits)."""
        return [
            (symbol_result(self.sums[m], self.strings[m], self.stakes[m]), None)
            for m in range(self.sums.shape[0])
        ]


def classless_members(automata: list[Automaton]) -> bool:
    """Whether the members' automata have no position classes (a PCFG's kind).

    Raises:
        NotEnsembleable: the members mix kinds with and without (their results are not of one
            form).
    """
    classless = [not has_position_classes(a.kind) for a in automata]
    if any(classless) and not all(classless):
        raise NotEnsembleable(
            "an ensemble's members must all have position classes or all lack them (kinds "
            f"{sorted({a.kind for a in automata})})"
        )
    return bool(classless) and all(classless)


def member_kl(automata: list[Automaton]) -> MemberDecomposedKL | MemberSymbolKL:
    """The members' evaluation metric: :class:`MemberDecomposedKL` for automata with position
    classes, :class:`MemberSymbolKL` for automata without (a PCFG).

    Raises:
        NotEnsembleable: the members mix both (:func:`classless_members`).
    """
    if classless_members(automata):
        return MemberSymbolKL(automata)
    return MemberDecomposedKL(automata)


def update_member_kl(metric: MemberDecomposedKL | MemberSymbolKL, out: Any,
                     weighted: bool = True) -> None:
    """Add one :class:`~cfl_lightning.ensemble.engines.EvalBatch` ``out`` to ``metric``
    (``weighted``: with its string weights, as a test does; validation has none)."""
    weights = out.weights if weighted else None
    if isinstance(metric, MemberSymbolKL):
        metric.update(out.log_probs, out.target_probs, out.mask, out.strings, weights,
                      out.starts, out.members)
    else:
        metric.update(out.log_probs, out.states, out.mask, weights, out.members)
