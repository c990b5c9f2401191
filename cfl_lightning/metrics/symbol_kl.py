"""``SymbolKL``: the KL per string split by next symbol, for automata without position classes.

A PCFG's next-symbol law depends on the whole prefix (no finite classes), so the decomposition
by state and transition (:class:`~cfl_lightning.metrics.DecomposedKL`) does not exist for it. What
does: with ``p`` the exact law at a position (a batch's ``target_probs``) and ``q`` the model's,

.. math::
    \\mathrm{KL}_\\text{string} = \\sum_\\text{positions} \\sum_s p(s) \\log\\tfrac{p(s)}{q(s)}
    = \\sum_s \\mathrm{symbol}(s),

each ``symbol(s)`` averaged over the strings fed to :meth:`SymbolKL.update` (weighted by their
``weights`` when given). ``total`` equals the epoch's ``kl_per_string``
(:class:`~cfl_lightning.metrics.EpochLoss`) on the same strings.

``symbol(s)`` estimates the same quantity as :class:`~cfl_lightning.metrics.DecomposedKL`'s
weighted per-symbol contribution (the expected KL per string at the positions' ``s`` entries);
its unweighted reading divides by the exact expected occurrences of ``s`` per string
(:func:`symbol_unweighted`), as ``p_pi(s)`` does for an automaton with classes. ``stakes(s)``
counts the real positions where ``p(s) > 0`` (where ``s`` is at stake: the symbol's test visits).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

__all__ = ["SymbolKL", "symbol_unweighted", "symbol_terms", "symbol_result"]


class SymbolKL(Metric):
    """Sums of ``p(s) log(p(s) / q(s))`` per symbol over real positions, and the string count.

    Args:
        num_symbols: ``S`` (the laws have ``S + 1`` entries, EOS last).
        kwargs: passed to :class:`torchmetrics.Metric`.

    ``compute()`` returns ``total`` (scalar), ``symbol`` ``[S + 1]`` (float64, nats per
    string; NaN without strings; ``+inf`` where the model gives 0 to a symbol the law can emit)
    and ``stakes`` ``[S + 1]`` (int64: real positions where the law gives the symbol ``p > 0``).
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = False

    sums: Tensor
    strings: Tensor
    stakes: Tensor

    def __init__(self, num_symbols: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        f64 = torch.float64
        self.add_state("sums", torch.zeros(num_symbols + 1, dtype=f64), dist_reduce_fx="sum")
        self.add_state("strings", torch.zeros((), dtype=f64), dist_reduce_fx="sum")
        self.add_state(
            "stakes", torch.zeros(num_symbols + 1, dtype=torch.long), dist_reduce_fx="sum"
        )

    def update(self, log_probs: Tensor, batch: Mapping[str, Tensor]) -> None:
        """Add one batch (``target_probs``, ``mask``, optionally ``weights``)."""
        mask = batch["mask"].bool()
        terms, stakes = symbol_terms(log_probs, batch["target_probs"], mask)
        weights = batch.get("weights")
        w = torch.ones(mask.shape[0], dtype=torch.float64, device=terms.device) \
            if weights is None else weights.to(device=terms.device, dtype=torch.float64)
        self.sums += (terms.sum(dim=1) * w[:, None]).sum(dim=0).to(self.sums)
        self.strings += w.sum().to(self.strings)
        self.stakes += stakes.sum(dim=(0, 1)).to(self.stakes)

    def compute(self) -> dict[str, Tensor]:
        """``total`` and ``symbol`` per string (see the class docstring)."""
        return symbol_result(self.sums, self.strings, self.stakes)


def symbol_terms(log_probs: Tensor, target_probs: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Each position's per-symbol terms ``p(s) log(p(s) / q(s))`` and where ``s`` is at stake.

    The one per-position rule of :class:`SymbolKL` (an ensemble's members use it on their packed
    positions: :class:`~cfl_lightning.ensemble.metrics.MemberSymbolKL`).

    Args:
        log_probs: ``[..., S + 1]`` the model's log-probabilities ``log q``.
        target_probs: ``[..., S + 1]`` the exact laws ``p``.
        mask: ``[...]`` bool, True on real positions.

    Returns:
        ``terms`` ``[..., S + 1]`` float64 (0 where ``p(s) = 0`` and off ``mask``) and
        ``stakes`` ``[..., S + 1]`` bool (``p(s) > 0`` at a real position).
    """
    p = target_probs.to(torch.float64)
    q = log_probs.detach().to(torch.float64)
    terms = torch.where(p > 0, p * (p.clamp_min(1e-300).log() - q), torch.zeros_like(p))
    return terms * mask[..., None], (p > 0) & mask[..., None]


def symbol_result(sums: Tensor, strings: Tensor, stakes: Tensor) -> dict[str, Tensor]:
    """:meth:`SymbolKL.compute` from its sums.

    Args:
        sums: ``[S + 1]`` float64 (weighted) sums of :func:`symbol_terms` over the strings.
        strings: ``[]`` float64 (weighted) number of strings.
        stakes: ``[S + 1]`` int64 real positions where the law gives the symbol ``p > 0``.

    Returns:
        ``total`` (scalar), ``symbol`` ``[S + 1]`` per string (NaN without strings) and a copy of
        ``stakes``.
    """
    nan = torch.full_like(sums, float("nan"))
    symbol = torch.where(strings > 0, sums / strings.clamp_min(1), nan)
    return {"total": symbol.sum(), "symbol": symbol, "stakes": stakes.clone()}


def symbol_unweighted(symbol: Tensor, expected: Tensor) -> Tensor:
    """The unweighted per-symbol KL: ``symbol(s) / E[occurrences of s per string]``.

    Args:
        symbol: ``[S + 1]`` weighted contributions (:class:`SymbolKL`), EOS last.
        expected: ``[S + 1]`` exact expected occurrences per string (EOS: 1).

    Returns:
        ``[S + 1]`` float64; NaN where a symbol never occurs (expected 0) or ``symbol`` is NaN.
    """
    expected = expected.to(symbol)
    ok = expected > 0
    return torch.where(ok, symbol / torch.where(ok, expected, 1.0), float("nan"))
