"""Where a target is at stake in test strings, and test strings that surely reach it.

A target's unweighted contribution (the paper's per-state / per-transition / per-symbol
contribution) is an average over the test positions at which the target is *at stake*: positions
in the target state (state and transition targets), or in any state where the target symbol has
positive probability (symbol targets). With no such position it is unknown.

For a rare target, :func:`sample_visiting` draws strings from the automaton conditioned on
reaching an at-stake state (exactly, with the project's at-least-once sampler on the event
"a transition enters an at-stake state"). Every prefix ``x`` that reaches an at-stake state
belongs only to strings that satisfy the condition, so its expected number of occurrences is
``P_prefix(x) / P(reach)``: the same factor for every such prefix. The per-visit prefix
distribution at an at-stake state -- and with it the unweighted contribution -- is therefore
unchanged by the conditioning; the law of the other states' prefixes is not.
:func:`mixture_weights` turns a test set of plain strings plus conditioned ones back into
unbiased estimates for *every* state: the importance weight ``P(y) / mix(y)`` of each string.

(Conditioning on the intervention event of a ``state:`` target -- a transition *leaving* the
state -- would not do: it excludes strings that stop at their first visit, which tilts the
per-visit distribution whenever the state has a final weight.)
"""

from __future__ import annotations

import torch
from torch import Tensor

from cfl_lightning.automata import PFSA, Automaton, Event, spread_events
from cfl_lightning.errors import CflError, InterventionError
from cfl_lightning.sampling.backend import backend_for
from cfl_lightning.sampling.corpus import Corpus
from cfl_lightning.sampling.paths import sample_paths
from cfl_lightning.semiring.backward import backward_fast

__all__ = [
    "stake_states",
    "position_counts",
    "target_visits",
    "visits_by_event",
    "entering_function",
    "reach_probability",
    "containing_probability",
    "sample_visiting",
    "mixture_weights",
]

EOS_NAME = "EOS"


def stake_states(automaton: Automaton, event: str | Event) -> Tensor:
    """The classes (a PFSA's states) at which ``event`` is at stake.

    Args:
        automaton: the automaton (any kind: by
            :meth:`~cfl_lightning.automata.Automaton.event_location`).
        event: ``state:NAME``, ``symbol:SYM`` or ``transition:SOURCE:SYM``.

    Returns:
        ``[C]`` bool on the CPU: the target class, or (symbol) every class where the symbol
        has positive probability; ``[0]`` for a kind without position classes (a grammar).

    Raises:
        EventError: malformed event or unknown name.
    """
    event = Event.parse(event) if isinstance(event, str) else event
    kind, indices = automaton.event_location(event)
    out = torch.zeros(len(automaton.class_names), dtype=torch.bool)
    if not automaton.class_names:  # no position classes: nothing is at stake per class
        return out
    for index in indices:
        if kind == "state":
            out[index] = True
        elif kind == "symbol":
            out |= automaton.class_probs()[:, index].cpu() > 0
        else:
            out[index // (automaton.num_symbols + 1)] = True
    return out


def position_counts(states: Tensor, mask: Tensor, num_states: int) -> Tensor:
    """Number of real positions in each state.

    Args:
        states: ``[B, T]`` integer automaton state after each prefix.
        mask: ``[B, T]`` bool, True on real positions.
        num_states: ``Q``.

    Returns:
        ``[Q]`` int64 (on ``states``' device).
    """
    real = states[mask.bool()].long()
    return torch.bincount(real, minlength=num_states)[:num_states]


def target_visits(automaton: Automaton, event: str | Event, counts: Tensor) -> int:
    """Test positions at which ``event`` is at stake, from per-state position ``counts`` ``[Q]``."""
    stake = stake_states(automaton, event).to(counts.device)
    return int(counts[stake].sum())


def visits_by_event(automaton: Automaton, counts: Tensor) -> dict[str, dict[str, int]]:
    """Every event's test visits, named as in ``results.json``'s ``kl``.

    Args:
        automaton: the automaton (any kind).
        counts: ``[C]`` positions per class (:func:`position_counts`).

    Returns:
        ``{"state": {class: n}, "symbol": {name|EOS: n}, "transition": {"CLASS:SYM": n}}``;
        transitions where they exist (:meth:`~cfl_lightning.automata.Automaton.class_transitions`);
        and for every kind of :func:`~cfl_lightning.automata.spread_events` (a pushdown
        automaton's ``push`` and ``pop``) its events' :func:`target_visits`.
    """
    counts = counts.cpu().long()
    probs = automaton.class_probs().cpu()
    exists = automaton.class_transitions().cpu().tolist()
    names = [*automaton.alphabet, EOS_NAME]
    per_state = counts.tolist()
    symbol = ((probs > 0).long() * counts[:, None]).sum(0).tolist()
    transition = {}
    for q, state in enumerate(automaton.class_names):
        for s, name in enumerate(names):
            if exists[q][s]:
                transition[f"{state}:{name}"] = per_state[q]
    out = {
        "state": dict(zip(automaton.class_names, per_state)),
        "symbol": dict(zip(names, symbol)),
        "transition": transition,
    }
    for kind, events in spread_events(automaton).items():
        out[kind] = {name: target_visits(automaton, f"{kind}:{name}", counts) for name in events}
    return out


def entering_function(pfsa: PFSA, stake: Tensor) -> Tensor:
    """The 0/1 event function of "a transition enters an at-stake state".

    Returns:
        ``[Q, |S|]`` int64 on ``pfsa.device``.
    """
    stake = stake.to(pfsa.device)
    exists = pfsa.next_state >= 0
    target = pfsa.next_state.clamp(min=0)
    return (exists & stake[target]).long()


def reach_probability(pfsa: PFSA, stake: Tensor) -> float:
    """``P(reach)``: the probability that a string has a position in an at-stake state (exact).

    Raises:
        CflError: the automaton is not a PFSA (targeted test strings are drawn for PFSAs only).
    """
    if pfsa.kind != "pfsa":
        raise CflError(
            f"test strings that reach a target (test_target_strings) are drawn for PFSAs only, "
            f"not for an automaton of kind {pfsa.kind!r}; use test_target_strings=0"
        )
    if bool(stake[pfsa.initial]):
        return 1.0
    if not bool(stake.any()):
        return 0.0
    return containing_probability(pfsa, entering_function(pfsa, stake))


def containing_probability(automaton: Automaton, event: str | Event | Tensor) -> float:
    """The probability that a string contains the event at least once (exact).

    Args:
        automaton: the automaton (any kind with a sampler backend for an event; a PFSA for a table).
        event: an event (text or :class:`~cfl_lightning.automata.Event`) or a PFSA's
            ``[Q, |S|]`` 0/1 event function.

    Returns:
        ``1 - P(no occurrence)``, from the count-0 bin of the count law, clipped to [0, 1].
    """
    if isinstance(event, str):
        event = Event.parse(event)
    if isinstance(event, Event):
        never = backend_for(automaton).event_counts(event).none_probability()
    else:
        never = backward_fast(automaton, event.to(automaton.device), 1).dense()[0, automaton.initial]
    return float(min(max(1.0 - float(never), 0.0), 1.0))


def sample_visiting(
    pfsa: PFSA, num_strings: int, generator: torch.Generator, stake: Tensor
) -> Corpus:
    """Strings drawn from ``pfsa`` conditioned on reaching an at-stake state (exact sampler).

    Args:
        pfsa: the automaton (sampling runs on its device).
        num_strings: ``K``.
        generator: random stream on ``pfsa.device``.
        stake: ``[Q]`` bool (:func:`stake_states`).

    Returns:
        The corpus (no event counts).

    Raises:
        InterventionError: no string reaches an at-stake state.
    """
    if reach_probability(pfsa, stake) <= 0.0:
        raise InterventionError("no string of the automaton reaches the target's states")
    if bool(stake[pfsa.initial]):
        corpus = sample_paths(pfsa, num_strings, generator)
    else:
        fn = entering_function(pfsa, stake)
        budgets = torch.ones(num_strings, dtype=torch.long, device=pfsa.device)
        tails = backward_fast(pfsa, fn, 2, tail=True)
        corpus = sample_paths(
            pfsa, num_strings, generator, event_fn=fn, budgets=budgets, bins=tails, at_least=True
        )
    return Corpus(corpus.tokens, corpus.offsets, None)


def mixture_weights(reached: Tensor, num_plain: int, num_visiting: int, p_reach: float) -> Tensor:
    """Importance weights ``P(y) / mix(y)`` of a test set mixing plain and conditioned strings.

    ``mix = (n P + m P(. | reach)) / (n + m)`` for ``n = num_plain`` unconditioned strings and
    ``m = num_visiting`` strings conditioned on reaching an at-stake state, so a string that
    reaches one weighs ``(n + m) / (n + m / P(reach))`` and any other ``(n + m) / n``. Every
    weighted per-state average then estimates its unconditioned value; at-stake states' visits
    all carry the same weight (their average is the plain average of all their visits).

    Args:
        reached: ``[K]`` bool, whether each string reaches an at-stake state.
        num_plain: ``n``.
        num_visiting: ``m``.
        p_reach: :func:`reach_probability` (> 0 when ``m > 0``).

    Returns:
        ``[K]`` float64.
    """
    n, m = float(num_plain), float(num_visiting)
    if m and p_reach <= 0:
        raise ValueError("p_reach must be positive when conditioned strings are mixed in")
    hit = (n + m) / (n + m / p_reach) if m else 1.0
    miss = (n + m) / n if n else float("nan")  # a miss never occurs without plain strings
    reached = reached.bool()
    return torch.where(
        reached,
        torch.full(reached.shape, hit, dtype=torch.float64, device=reached.device),
        torch.full(reached.shape, miss, dtype=torch.float64, device=reached.device),
    )
