"""``DecomposedKL``: the paper's per-state / transition / symbol KL as a torchmetrics Metric."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from cfl_lightning.automata.protocol import Automaton, class_tables
from cfl_lightning.metrics.functional import _decomposed_kl_compute, _decomposed_kl_update

__all__ = ["DecomposedKL"]


class DecomposedKL(Metric):
    """Decomposed ``KL(p_A || p_theta)`` (nats per string) over strings drawn from an automaton.

    The positions are grouped by the automaton's *classes* (a PFSA's states; a pushdown
    automaton's (state, top of stack) pairs): ``q`` below is a class. The weights ``p_pi(q)``,
    ``p_pi(q, s) = p_pi(q) p_A(s|q)`` and ``p_pi(s)`` are exact (from
    ``automaton.expected_class_visits()``); only the unweighted parts are Monte-Carlo averages over
    the prefixes fed to :meth:`update`:

    .. math::
        \\mathrm{total} = \\sum_q p_\\pi(q)\\,\\overline{\\mathrm{KL}}_q
        = \\sum_{q,s} p_\\pi(q,s)\\,\\overline{\\log\\tfrac{p_A(s|q)}{p_\\theta(s|x)}}_q
        = \\sum_s p_\\pi(s)\\,U(s),

    where :math:`\\overline{\\cdot}_q` averages over the positions whose prefix reaches ``q``. The
    three decompositions sum to the same ``total`` (a stratified estimator of the KL; it is exact
    when ``p_theta`` depends on the state alone, and when ``update`` is fed an exhaustive
    enumeration with ``weights`` equal to the string probabilities).

    Args:
        pfsa: the automaton ``A`` the evaluation strings are drawn from (any
            :class:`~cfl_lightning.automata.Automaton`).
        validate_args: check state indices and NaN log-probabilities in :meth:`update`.
        kwargs: passed to :class:`torchmetrics.Metric`.

    ``compute()`` returns a dict of float64 tensors:

    * ``total``: scalar;
    * ``state`` ``[Q]``, ``transition`` ``[Q, |S|+1]``, ``symbol`` ``[|S|+1]`` (EOS last):
      weighted contributions, each summing to ``total``; never NaN (an unvisited state or a
      zero-probability transition contributes 0; ``+inf`` where the model gives probability 0 to
      something the automaton can emit);
    * ``state_unweighted``, ``transition_unweighted``, ``symbol_unweighted``: same shapes; NaN
      where undefined (state never visited, ``p_A(s|q) = 0``, ``p_pi(s) = 0`` or no data).

    Example:
        >>> from cfl_lightning import parity_starfree_pfsa
        >>> A = parity_starfree_pfsa(0.3)
        >>> metric = DecomposedKL(A)
        >>> states = torch.tensor([[0, 3, 3], [0, 1, 0]]); mask = states.new_ones(2, 3).bool()
        >>> mask[1, 2] = False
        >>> log_probs = torch.full((2, 3, 3), 1 / 3).log()
        >>> metric.update(log_probs, states, mask)
        >>> out = metric.compute()
        >>> out["state"].shape, out["transition"].shape, out["symbol"].shape
        (torch.Size([4]), torch.Size([4, 3]), torch.Size([3]))
        >>> bool(torch.isclose(out["state"].sum(), out["total"]))
        True
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = False

    counts: Tensor
    kl_sums: Tensor
    ratio_sums: Tensor

    def __init__(self, pfsa: Automaton, *, validate_args: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pfsa = pfsa
        self.validate_args = validate_args
        probs, visits = class_tables(pfsa)
        # Plain attributes (not buffers): kept float64 whatever the module's dtype; moved lazily.
        self._target_probs = probs.cpu()
        self._visits = visits.cpu()
        num_states, width = probs.shape
        f64 = torch.float64
        self.add_state("counts", torch.zeros(num_states, dtype=f64), dist_reduce_fx="sum")
        self.add_state("kl_sums", torch.zeros(num_states, dtype=f64), dist_reduce_fx="sum")
        ratio = torch.zeros(num_states, width, dtype=f64)
        self.add_state("ratio_sums", ratio, dist_reduce_fx="sum")

    def _tables(self, device: torch.device) -> tuple[Tensor, Tensor]:
        if self._target_probs.device != device:
            self._target_probs = self._target_probs.to(device)
            self._visits = self._visits.to(device)
        return self._target_probs, self._visits

    def update(
        self, log_probs: Tensor, states: Tensor, mask: Tensor, weights: Tensor | None = None
    ) -> None:
        """Accumulate one batch of strings drawn from the automaton.

        Args:
            log_probs: ``[B, T, |S|+1]`` model next-symbol log-probabilities (EOS last).
            states: ``[B, T]`` long automaton state after each prefix (position 0: initial).
            mask: ``[B, T]`` bool, True on real positions (``n + 1`` for a string of length n).
            weights: optional ``[B]`` per-string weights (default 1): with an exhaustive
                enumeration of the strings and ``weights`` their probabilities, the result is
                the exact decomposition.
        """
        probs, _ = self._tables(log_probs.device)
        counts, kl_sums, ratio_sums = _decomposed_kl_update(
            log_probs, states, mask, probs, weights, validate_args=self.validate_args
        )
        self.counts += counts.to(self.counts)
        self.kl_sums += kl_sums.to(self.kl_sums)
        self.ratio_sums += ratio_sums.to(self.ratio_sums)

    def compute(self) -> dict[str, Tensor]:
        """The weighted and unweighted decompositions (see the class docstring)."""
        probs, visits = self._tables(self.counts.device)
        return _decomposed_kl_compute(self.counts, self.kl_sums, self.ratio_sums, probs, visits)
