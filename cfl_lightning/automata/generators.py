"""Automaton generators from the paper: random topologies and the parity + star-free PFSA.

Each is registered by name in :mod:`cfl_lightning.kinds.generators` (the ``automaton`` command's
subcommands and ``data.generator``).

Random draws use :class:`numpy.random.Generator` seeded explicitly (bit-for-bit reproducible on
every platform), then the automaton is built as torch tensors.
"""

from __future__ import annotations

import math
import operator
import string

import numpy as np
import torch

from cfl_lightning.automata.pfsa import PFSA
from cfl_lightning.errors import PFSAError

__all__ = [
    "random_topology",
    "random_weights",
    "random_pfsa",
    "parity_starfree_pfsa",
    "resampled_parity_starfree_pfsa",
    "parity_generator",
    "default_alphabet",
]


def default_alphabet(num_symbols: int) -> list[str]:
    """``a, b, c, ...`` for up to 26 symbols, else ``s0, s1, ...``."""
    if num_symbols <= 26:
        return list(string.ascii_lowercase[:num_symbols])
    return [f"s{i}" for i in range(num_symbols)]


def _integer(value: object, name: str, low: int, high: int | None = None) -> int:
    """``value`` as a Python int in ``[low, high]`` (numpy integers accepted)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise PFSAError(f"{name} must be an integer, got {value!r}") from None
    if number < low or (high is not None and number > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise PFSAError(f"{name} must be {bound}, got {number}")
    return number


def _seed(value: object, name: str) -> int:
    try:
        return _integer(value, name, 0, 2**64 - 1)
    except PFSAError:
        raise PFSAError(f"{name} must be an integer in 0..2**64-1, got {value!r}") from None


def _real(value: object, name: str, low: float, high: float, *, open_low: bool = False) -> float:
    """``value`` as a finite float in ``[low, high]`` (``(low, high]`` with ``open_low``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise PFSAError(f"{name} must be a number, got {value!r}")
    number = float(value)
    ok = math.isfinite(number) and (low < number if open_low else low <= number) and number <= high
    if not ok:
        if math.isinf(high):
            interval = "positive and finite" if open_low else f">= {low:g} and finite"
        else:
            interval = f"in ({low:g}, {high:g}]" if open_low else f"in [{low:g}, {high:g}]"
        raise PFSAError(f"{name} must be {interval}, got {value!r}")
    return number


def _can_terminate(targets: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """Which states reach an accepting state (backward search over the target table)."""
    ok = accepting.copy()
    changed = True
    while changed:
        step = ok | ((targets >= 0) & ok[np.maximum(targets, 0)]).any(axis=1)
        changed = bool((step != ok).any())
        ok = step
    return ok


def random_topology(
    num_states: int,
    num_symbols: int,
    seed: int,
    *,
    keep_prob: float = 0.5,
    accept_prob: float = 0.3,
    max_tries: int = 10_000,
) -> tuple[np.ndarray, np.ndarray]:
    """Sample a topology as in the paper, conditioned on every state being able to terminate.

    At each state each symbol is kept with probability ``keep_prob`` and sent to a uniformly random
    target; each state is accepting with probability ``accept_prob``. A draw in which some state
    cannot reach an accepting state is rejected and drawn again from the same stream, so the result
    follows the paper's distribution conditioned on validity, and is a deterministic function of
    ``seed``.

    Returns:
        ``targets`` ``[Q, |S|]`` int64 (``-1`` = no transition) and ``accepting`` ``[Q]`` bool.
    """
    num_states = _integer(num_states, "num_states", 1)
    num_symbols = _integer(num_symbols, "num_symbols", 1)
    keep_prob = _real(keep_prob, "keep_prob", 0.0, 1.0)
    accept_prob = _real(accept_prob, "accept_prob", 0.0, 1.0)
    rng = np.random.default_rng(_seed(seed, "topology seed"))
    for _ in range(max_tries):
        keep = rng.random((num_states, num_symbols)) < keep_prob
        targets = np.where(keep, rng.integers(0, num_states, (num_states, num_symbols)), -1)
        accepting = rng.random(num_states) < accept_prob
        if accepting.any() and _can_terminate(targets, accepting).all():
            return targets.astype(np.int64), accepting
    raise PFSAError(
        f"no valid topology with {num_states} states and {num_symbols} symbols in {max_tries} tries"
    )


def random_weights(
    targets: np.ndarray,
    accepting: np.ndarray,
    seed: int,
    *,
    final_weight: float = 0.3,
    concentration: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Dirichlet weights on a fixed topology.

    At each state the outgoing transition weights are ``Dirichlet(concentration)``; at accepting
    states the final weight is pinned at ``final_weight`` and the transition weights are rescaled to
    ``1 - final_weight``. An accepting state without outgoing transitions gets final weight 1 (the
    only normalized choice).

    Returns:
        ``weights`` ``[Q, |S|]`` and ``final`` ``[Q]`` float64.
    """
    final_weight = _real(final_weight, "final_weight", 0.0, 1.0, open_low=True)
    concentration = _real(concentration, "concentration", 0.0, math.inf, open_low=True)
    rng = np.random.default_rng(_seed(seed, "weight seed"))
    num_states, num_symbols = targets.shape
    weights = np.zeros((num_states, num_symbols))
    final = np.zeros(num_states)
    for q in range(num_states):
        present = np.flatnonzero(targets[q] >= 0)
        if len(present) == 0:
            final[q] = 1.0
            continue
        draw = rng.dirichlet(np.full(len(present), concentration))
        final[q] = final_weight if accepting[q] else 0.0
        weights[q, present] = draw * (1.0 - final[q])
    return weights, final


def random_pfsa(
    num_states: int = 50,
    num_symbols: int = 10,
    topology_seed: int = 0,
    weight_seed: int = 0,
    *,
    keep_prob: float = 0.5,
    accept_prob: float = 0.3,
    final_weight: float = 0.3,
    concentration: float = 1.0,
) -> PFSA:
    """A random PFSA: :func:`random_topology` (``topology_seed``) + :func:`random_weights`.

    States are named ``q0 ... q{Q-1}`` (``q0`` initial); symbols by :func:`default_alphabet`.
    Every state can terminate, so the automaton is always valid.
    """
    targets, accepting = random_topology(
        num_states, num_symbols, topology_seed, keep_prob=keep_prob, accept_prob=accept_prob
    )
    weights, final = random_weights(
        targets, accepting, weight_seed, final_weight=final_weight, concentration=concentration
    )
    return PFSA(
        [f"q{i}" for i in range(num_states)],
        default_alphabet(num_symbols),
        torch.from_numpy(targets),
        torch.from_numpy(weights),
        torch.from_numpy(final),
        0,
    )


_PARITY_STATES = ["init", "odd", "even", "rep"]
# (source, symbol, target) of the paper's Figure 1.
_PARITY_ARCS = [
    ("init", "a", "rep"),
    ("init", "b", "odd"),
    ("odd", "a", "odd"),
    ("odd", "b", "even"),
    ("even", "a", "even"),
    ("even", "b", "odd"),
    ("rep", "a", "rep"),
]


def _parity(weights: dict[tuple[str, str], float], final: dict[str, float]) -> PFSA:
    next_state = torch.full((4, 2), -1, dtype=torch.long)
    w = torch.zeros(4, 2, dtype=torch.float64)
    for source, symbol, target in _PARITY_ARCS:
        i, j = _PARITY_STATES.index(source), "ab".index(symbol)
        next_state[i, j] = _PARITY_STATES.index(target)
        w[i, j] = weights[(source, symbol)]
    f = torch.tensor([final.get(s, 0.0) for s in _PARITY_STATES], dtype=torch.float64)
    return PFSA(_PARITY_STATES, ["a", "b"], next_state, w, f, 0)


def parity_starfree_pfsa(eta: float = 0.5) -> PFSA:
    """The parity + star-free PFSA of the paper's Figure 1.

    Recognizes ``a a* | b a* (b a* b a*)*``: ``init --a/eta--> rep`` (the star-free branch,
    ``rep --a/0.9--> rep``, final 0.1) and ``init --b/(1-eta)--> odd`` (the parity branch:
    ``odd --a/0.45--> odd``, ``odd --b/0.45--> even``, final 0.1; ``even --a/0.5--> even``,
    ``even --b/0.5--> odd``).
    """
    eta = _real(eta, "eta", 0.0, 1.0)
    weights = {
        ("init", "a"): eta,
        ("init", "b"): 1.0 - eta,
        ("odd", "a"): 0.45,
        ("odd", "b"): 0.45,
        ("even", "a"): 0.5,
        ("even", "b"): 0.5,
        ("rep", "a"): 0.9,
    }
    return _parity(weights, {"odd": 0.1, "rep": 0.1})


def resampled_parity_starfree_pfsa(
    weight_seed: int, *, final_weight: float = 0.1, concentration: float = 1.0
) -> PFSA:
    """Figure 1's topology with Dirichlet weights (the paper's first case study).

    At the accepting states ``odd`` and ``rep`` the final weight is pinned at ``final_weight``
    (1/10) and the transition weights are rescaled to the rest; at ``init`` and ``even`` the
    transition weights sum to one.
    """
    final_weight = _real(final_weight, "final_weight", 0.0, 1.0, open_low=True)
    concentration = _real(concentration, "concentration", 0.0, math.inf, open_low=True)
    rng = np.random.default_rng(_seed(weight_seed, "weight seed"))
    weights: dict[tuple[str, str], float] = {}
    final = {"odd": final_weight, "rep": final_weight}
    for state in _PARITY_STATES:
        arcs = [(s, sym) for s, sym, _ in _PARITY_ARCS if s == state]
        draw = rng.dirichlet(np.full(len(arcs), concentration))
        for arc, value in zip(arcs, draw):
            weights[arc] = float(value) * (1.0 - final.get(state, 0.0))
    return _parity(weights, final)


def parity_generator(
    eta: float = 0.5, weight_seed: int | None = None, final_weight: float | None = None
) -> PFSA:
    """The ``parity`` generator: Figure 1 with weights set by ``eta``, or resampled.

    With ``weight_seed``, :func:`resampled_parity_starfree_pfsa` (``final_weight`` default 0.1);
    without it, :func:`parity_starfree_pfsa` (``eta``).

    Raises:
        PFSAError: ``final_weight`` without ``weight_seed`` (Figure 1 fixes it at 0.1).
    """
    if weight_seed is not None:
        final = 0.1 if final_weight is None else final_weight
        return resampled_parity_starfree_pfsa(weight_seed, final_weight=final)
    if final_weight is not None:
        raise PFSAError("--final-weight applies only with --weight-seed (Figure 1 fixes it at 0.1)")
    return parity_starfree_pfsa(eta)
