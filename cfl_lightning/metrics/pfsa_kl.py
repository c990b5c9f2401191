"""Closed-form KL divergence between two PFSAs sharing a topology.

When both automata are deterministic with the same transition table, after every prefix ``x`` they
are in the same state ``q = delta(x)``, so the chain rule gives exactly

.. math::
    \\mathrm{KL}(p \\,\\|\\, q) = \\sum_{s \\in Q} p_\\pi(s)\\,
    \\mathrm{KL}\\bigl(p(\\cdot \\mid s) \\,\\|\\, q(\\cdot \\mid s)\\bigr),

with ``p_pi`` the expected visits under ``p``. Its per-state / transition / symbol decompositions
are the ones :class:`~cfl_lightning.metrics.DecomposedKL` estimates, without Monte-Carlo error.
"""

from __future__ import annotations

import torch
from torch import Tensor

from cfl_lightning.automata import PFSA
from cfl_lightning.errors import PFSAError
from cfl_lightning.automata.protocol import class_tables
from cfl_lightning.metrics.functional import _decomposed_kl_compute

__all__ = ["pfsa_kl", "pfsa_kl_decomposed"]


def _log_ratio(p: PFSA, q: PFSA) -> tuple[Tensor, Tensor, Tensor]:
    """``p(.|s)`` ``[Q, |S|+1]``, visits ``[Q]`` and ``log p/q`` on p's support (0 elsewhere)."""
    if p.num_states != q.num_states or p.num_symbols != q.num_symbols:
        raise PFSAError(
            f"pfsa_kl needs automata of the same size, got {p.num_states}x{p.num_symbols} and "
            f"{q.num_states}x{q.num_symbols}"
        )
    if not p.same_topology(q):
        raise PFSAError(
            "pfsa_kl needs automata with the same topology (transition table and initial state)"
        )
    probs, visits = class_tables(p)
    other = q.next_symbol_probs().to(device=probs.device, dtype=torch.float64)
    support = probs > 0
    # 0 log 0/q = 0; p log p/0 = +inf.
    ratio = torch.where(support, probs.log() - other.log(), torch.zeros_like(probs))
    return probs, visits, ratio


def pfsa_kl_decomposed(p: PFSA, q: PFSA) -> dict[str, Tensor]:
    """Exact decomposed ``KL(p || q)`` for two automata with the same topology.

    Args:
        p: the reference automaton (the expectation is under ``p``).
        q: the model automaton (same transition table and initial state: ``PFSA.same_topology``).

    Returns:
        the same dict as :meth:`DecomposedKL.compute`, float64: ``total`` (scalar, nats per
        string), ``state`` ``[Q]``, ``transition`` ``[Q, |S|+1]``, ``symbol`` ``[|S|+1]`` and
        their ``*_unweighted`` parts. Here ``state_unweighted[s] = KL(p(.|s) || q(.|s))`` and
        ``transition_unweighted[s, a] = log p(a|s) / q(a|s)``; unweighted entries are NaN where
        the conditioning event has probability 0 under ``p`` (unreachable state, ``p(a|s) = 0``,
        ``p_pi(a) = 0``), as in :class:`DecomposedKL`.

    Raises:
        PFSAError: the automata differ in size, transition table or initial state.
    """
    probs, visits, ratio = _log_ratio(p, q)
    kl_state = (probs * ratio).sum(-1)
    # Expected per-string sufficient statistics: visits play the role of position counts.
    reached = visits > 0
    kl_sums = torch.where(reached, visits * kl_state, torch.zeros_like(kl_state))
    ratio_sums = torch.where(reached[:, None], visits[:, None] * ratio, torch.zeros_like(ratio))
    return _decomposed_kl_compute(visits, kl_sums, ratio_sums, probs, visits)


def pfsa_kl(p: PFSA, q: PFSA) -> Tensor:
    """Exact ``KL(p || q)`` in nats per string for two automata with the same topology.

    Args:
        p: the reference automaton.
        q: the model automaton (same transition table and initial state: ``PFSA.same_topology``).

    Returns:
        scalar float64 tensor, ``sum_s p_pi(s) KL(p(.|s) || q(.|s))``; ``+inf`` when ``q`` gives
        probability 0 to a symbol (or EOS) that ``p`` can emit from a reachable state.

    Raises:
        PFSAError: the automata differ in size, transition table or initial state.

    Example:
        >>> from cfl_lightning import parity_starfree_pfsa
        >>> float(pfsa_kl(parity_starfree_pfsa(0.3), parity_starfree_pfsa(0.3)))
        0.0
    """
    probs, visits, ratio = _log_ratio(p, q)
    kl_state = (probs * ratio).sum(-1)
    return torch.where(visits > 0, visits * kl_state, torch.zeros_like(kl_state)).sum()
