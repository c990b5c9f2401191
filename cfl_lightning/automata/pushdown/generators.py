"""Pushdown automaton generators: Dyck-k, random pushdown automata, and a^n b^n.

Random draws use :class:`numpy.random.Generator` seeded explicitly (bit-for-bit reproducible),
then the automaton is built as torch tensors. The generator registry
(:mod:`cfl_lightning.kinds.generators`) lists each with its parameters.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from cfl_lightning.automata.generators import _integer, _real, _seed, default_alphabet
from cfl_lightning.automata.pushdown.automaton import KEEP, POP, PushdownAutomaton
from cfl_lightning.errors import PDAError

__all__ = ["dyck_pda", "random_pda", "anbn_pda", "bracket_names"]

_BRACKETS = ("()", "[]", "{}", "<>")


def bracket_names(k: int) -> list[tuple[str, str]]:
    """Opening and closing names of ``k`` bracket types: ``()[]{}<>``, then ``o{i}``/``c{i}``."""
    if k <= len(_BRACKETS):
        return [(b[0], b[1]) for b in _BRACKETS[:k]]
    return [(f"o{i}", f"c{i}") for i in range(k)]


def dyck_pda(
    k: int = 2,
    seed: int = 0,
    *,
    concentration: float = 1.0,
    close_prob: float = 0.6,
    final_weight: float = 0.5,
    neutral_prob: float = 0.0,
) -> PushdownAutomaton:
    """Dyck-``k``: well-nested strings over ``k`` bracket types, one state ``q``.

    On the empty stack the string ends with ``final_weight`` and opens bracket ``i`` with
    ``(1 - final_weight) * d_i``; with ``X`` on top it closes ``X`` with ``close_prob`` and opens
    ``i`` with ``(1 - close_prob) * d'_i``; ``d, d'`` are independent ``Dirichlet(concentration)``
    draws (one per top). Opening pushes the bracket (the stack alphabet is the opening brackets).

    Termination by construction: the stack height is a random walk that steps down with
    probability ``close_prob > 1/2``, so every bracket closes with probability 1 after
    ``1 / (2 close_prob - 1)`` steps in expectation, and ``final_weight > 0`` ends the string
    after a geometric number of top-level brackets: expected length
    ``(1 - f) / f * 2 close_prob / (2 close_prob - 1)`` with ``f = final_weight``.

    With ``neutral_prob = nu > 0`` a neutral symbol ``x`` (last in the alphabet; it keeps the
    stack) is read at every step with probability ``nu`` and every other weight is scaled by
    ``1 - nu``: each bracket and the end are preceded by a geometric number of ``x`` (mean
    ``nu / (1 - nu)``), so the expected length is ``B + (B + 1) nu / (1 - nu)`` with ``B`` the
    length above. The brackets' law is unchanged and the string's length is no longer twice its
    brackets' pops (so a corpus's size and its count of one bracket can be set apart). The same
    seed draws the same bracket weights whatever ``nu``; ``nu = 0`` is the automaton without ``x``.
    """
    k = _integer(k, "k", 1)
    rng = np.random.default_rng(_seed(seed, "seed"))
    concentration = _real(concentration, "concentration", 0.0, np.inf, open_low=True)
    close_prob = _real(close_prob, "close_prob", 0.5, 1.0, open_low=True)
    final_weight = _real(final_weight, "final_weight", 0.0, 1.0, open_low=True)
    neutral = _real(neutral_prob, "neutral_prob", 0.0, 1.0)
    if neutral >= 1.0:
        raise PDAError(f"neutral_prob must be below 1, got {neutral_prob}")
    if close_prob <= 0.5:  # _real's open_low excludes 0.5 itself
        raise PDAError(f"close_prob must be above 0.5, got {close_prob}")
    names = bracket_names(k)
    opens, closes = [o for o, _ in names], [c for _, c in names]
    alphabet = [s for pair in names for s in pair] + (["x"] if neutral > 0 else [])
    shape = (1, k + 1, len(alphabet))
    target = torch.zeros(shape, dtype=torch.long)
    action = torch.full(shape, KEEP, dtype=torch.long)
    weights = torch.zeros(shape, dtype=torch.float64)
    for t in range(k + 1):  # t = k is the empty stack
        share = (1 - final_weight) if t == k else (1 - close_prob)
        draw = rng.dirichlet(np.full(k, concentration))
        for i in range(k):
            weights[0, t, 2 * i] = share * float(draw[i])
            action[0, t, 2 * i] = i
        for i in range(k):
            if t == i:
                weights[0, t, 2 * i + 1] = close_prob
                action[0, t, 2 * i + 1] = POP
            else:
                target[0, t, 2 * i + 1] = -1
    if neutral > 0:  # x keeps the stack (action KEEP, target q) at every top
        weights[..., : 2 * k] *= 1 - neutral
        weights[..., 2 * k] = neutral
    final = torch.tensor([final_weight * (1 - neutral)], dtype=torch.float64)
    del closes
    return PushdownAutomaton(["q"], alphabet, opens, target, action, weights, final, 0)


def anbn_pda(p_continue: float = 0.5, *, min_n: int = 0) -> PushdownAutomaton:
    """``a^n b^n`` with ``P(n) = (1 - p) p^(n - min_n)`` for ``n >= min_n`` (``min_n`` 0 or 1).

    States ``a`` (reading ``a``, initial) and ``b``; stack alphabet ``A``. In ``a`` each ``a``
    pushes ``A`` (probability ``p_continue`` once ``n >= min_n``); the first ``b`` pops and moves
    to ``b``, where every ``b`` pops; ``b`` ends on the empty stack. With ``min_n = 0`` the empty
    string has probability ``1 - p_continue``. Expected length ``2 (min_n + p / (1 - p))``.
    """
    p = _real(p_continue, "p_continue", 0.0, 1.0)
    if p >= 1.0:
        raise PDAError("p_continue must be below 1 (else a^n b^n never ends)")
    min_n = _integer(min_n, "min_n", 0, 1)
    shape = (2, 2, 2)  # states a, b; tops A, -; symbols a, b
    target = torch.full(shape, -1, dtype=torch.long)
    action = torch.full(shape, KEEP, dtype=torch.long)
    weights = torch.zeros(shape, dtype=torch.float64)
    target[0, 1, 0], action[0, 1, 0] = 0, 0  # (a, -) --a--> a, push A
    weights[0, 1, 0] = 1.0 if min_n else p
    target[0, 0, 0], action[0, 0, 0], weights[0, 0, 0] = 0, 0, p  # (a, A) --a--> a, push A
    target[0, 0, 1], action[0, 0, 1], weights[0, 0, 1] = 1, POP, 1 - p  # (a, A) --b--> b, pop
    target[1, 0, 1], action[1, 0, 1], weights[1, 0, 1] = 1, POP, 1.0  # (b, A) --b--> b, pop
    final = torch.tensor([0.0 if min_n else 1 - p, 1.0], dtype=torch.float64)
    return PushdownAutomaton(["a", "b"], ["a", "b"], ["A"], target, action, weights, final, 0)


def _draw_tables(
    rng: np.random.Generator, q: int, s: int, g: int, opts: dict[str, float]
) -> tuple[torch.Tensor, ...]:
    """One draw of the random procedure: topology, stack actions, Dirichlet weights."""
    keep = rng.random((q, g + 1, s)) < opts["keep_prob"]
    accepting = rng.random(q) < opts["accept_prob"]
    # a class that cannot end keeps one uniformly drawn symbol when the draw kept none
    forced = rng.integers(0, s, (q, g + 1))
    empty = ~keep.any(axis=2)
    empty[:, g] &= ~accepting
    keep[empty, forced[empty]] = True
    tgt = np.where(keep, rng.integers(0, q, (q, g + 1, s)), -1)
    u = rng.random((q, g + 1, s))
    pushed = rng.integers(0, g, (q, g + 1, s)) if g else np.zeros((q, g + 1, s), dtype=np.int64)
    pop_p, push_p = opts["pop_prob"], opts["push_prob"]
    act = np.where(u < push_p, pushed, np.where(u < push_p + pop_p, POP, KEEP))
    act[:, g, :] = np.where(u[:, g, :] < push_p, pushed[:, g, :], KEEP)  # no pop on empty stack
    weights = np.zeros((q, g + 1, s))
    final = np.where(accepting, opts["final_weight"], 0.0)
    for state in range(q):
        for t in range(g + 1):
            present = np.flatnonzero(tgt[state, t] >= 0)
            if len(present) == 0:  # an accepting state's empty stack with no symbol: it ends
                final[state] = 1.0 if t == g else final[state]
                continue
            share = 1.0 - (final[state] if t == g else 0.0)
            draw = rng.dirichlet(np.full(len(present), opts["concentration"]))
            weights[state, t, present] = draw * share
    act = np.where(tgt >= 0, act, KEEP)
    return (torch.from_numpy(tgt.astype(np.int64)), torch.from_numpy(act.astype(np.int64)),
            torch.from_numpy(weights), torch.from_numpy(final.astype(np.float64)))  # fmt: skip


def random_pda(
    num_states: int = 4,
    num_symbols: int = 4,
    num_stack: int = 2,
    seed: int = 0,
    *,
    keep_prob: float = 0.5,
    accept_prob: float = 0.3,
    final_weight: float = 0.3,
    concentration: float = 1.0,
    push_prob: float = 0.25,
    pop_prob: float = 0.5,
    max_expected_length: float | None = None,
    max_tries: int = 1000,
) -> PushdownAutomaton:
    """A random pushdown automaton: the paper's random topology with a stack action per step.

    For every class (state, top): each symbol is kept with ``keep_prob`` and sent to a uniform
    target (a class that keeps none gets one uniformly drawn symbol, except an accepting state's
    empty stack, which then ends with probability 1); its action is push (a uniform stack
    symbol) with ``push_prob``, pop with ``pop_prob``
    (not on the empty stack) and keep otherwise. Each state accepts with ``accept_prob``
    (final weight ``final_weight`` on the empty stack); the weights of each class are
    ``Dirichlet(concentration)``, scaled to ``1 - final``. A draw is kept only if it ends with
    probability 1, has a finite expected length (at most ``max_expected_length`` when given),
    and reaches every class (positive expected visits); otherwise the next draw of the same stream is taken, at most ``max_tries`` times:
    the result is a deterministic function of the arguments (the paper's distribution
    conditioned on those properties). States ``q0..``, symbols ``a, b, ...``, stack ``X0..``.

    Raises:
        PDAError: no valid draw in ``max_tries`` tries.
    """
    q = _integer(num_states, "num_states", 1)
    s = _integer(num_symbols, "num_symbols", 1)
    g = _integer(num_stack, "num_stack", 0)
    opts = {
        "keep_prob": _real(keep_prob, "keep_prob", 0.0, 1.0),
        "accept_prob": _real(accept_prob, "accept_prob", 0.0, 1.0),
        "final_weight": _real(final_weight, "final_weight", 0.0, 1.0, open_low=True),
        "concentration": _real(concentration, "concentration", 0.0, np.inf, open_low=True),
        "push_prob": _real(push_prob, "push_prob", 0.0, 1.0),
        "pop_prob": _real(pop_prob, "pop_prob", 0.0, 1.0),
    }
    if opts["push_prob"] + opts["pop_prob"] > 1:
        raise PDAError("push_prob + pop_prob must be at most 1")
    tries = _integer(max_tries, "max_tries", 1)
    cap = math.inf if max_expected_length is None else _real(
        max_expected_length, "max_expected_length", 0.0, math.inf, open_low=True
    )
    rng = np.random.default_rng(_seed(seed, "seed"))
    names = ([f"q{i}" for i in range(q)], default_alphabet(s), [f"X{i}" for i in range(g)])
    for _ in range(tries):
        tables = _draw_tables(rng, q, s, g, opts)
        try:
            pda = PushdownAutomaton(*names, *tables, 0)
        except PDAError:
            continue
        if bool((pda.expected_class_visits() > 0).all()) and pda.expected_length() <= cap:
            return pda
    raise PDAError(
        f"no random pushdown automaton with {q} states, {s} symbols and {g} stack symbols that "
        f"ends with probability 1, reaches every class and meets the length cap in {tries} tries "
        f"(seed {seed})"
    )


#: generator name -> build reference, description and parameters (name, type, default, help)
