"""The automaton seam: what the rest of the package needs from an automaton.

Every layer above the core (data, metrics, callbacks, results, ensembles, analysis, CLI) talks to
an automaton through this protocol only: no ``isinstance`` on an automaton class and no read of
an implementation's tensors outside ``automata/``, ``semiring/`` and ``sampling/``. Two
implementations: :class:`~cfl_lightning.automata.PFSA` (``kind = "pfsa"``) and the probabilistic
pushdown automaton (``kind = "pushdown"``).

**Position classes.** The decomposed KL groups the positions of a string by a finite *class*
that fixes the automaton's next-symbol distribution there: for a PFSA its state, for a
real-time deterministic pushdown automaton the pair (state, top of stack), named
``"STATE/TOP"`` (``"STATE/-"`` on the empty stack). ``kl.state`` in ``results.json`` and the batch
key ``states`` hold classes; ``kl.transition`` is keyed ``"CLASS:SYMBOL"`` (``EOS`` for ending).
Class names never contain ``:``.

**Events.** An :class:`~cfl_lightning.automata.Event` is a set of (class, symbol) pairs; its
*table* on an automaton is a ``[C, S]`` int64 tensor counting the occurrences that emitting
symbol ``s`` from class ``c`` adds (0/1 for every built-in kind). Counting on a corpus is then
``sum_t table[class_t, symbol_t]`` for every automaton kind. A grammar's ``rule`` event counts
steps of the derivation instead, which an ambiguous grammar does not recover from the string:
it has no such table (:func:`counting_table` gives None), and its per-string counts are the
sampler's (``Corpus.counts``).

Sampling is not part of this protocol's methods (the core's floors put ``sampling`` above
``automata``): :mod:`cfl_lightning.sampling.backend` holds one sampler backend per automaton kind,
registered by ``kind``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from cfl_lightning.automata.events import Event
from cfl_lightning.kinds.events import counted_from_tokens

if TYPE_CHECKING:
    from cfl_lightning.automata.diagram import Diagram

__all__ = [
    "Automaton", "expected_event_count", "counting_table", "class_tables", "spread_events",
]


@runtime_checkable
class Automaton(Protocol):
    """A probabilistic automaton over a finite alphabet, seen through its position classes.

    Attributes:
        kind: the implementation's name, as in the JSON ``"kind"`` field (``"pfsa"`` when absent).
        alphabet: symbol names, in index order (token ids ``0 .. S-1``; ``EOS = S``).
        source: where the automaton came from (a file name), for error messages; or ``None``.
    """

    kind: str
    alphabet: tuple[str, ...]
    source: str | None

    @property
    def num_symbols(self) -> int:
        """``S``."""
        ...

    @property
    def eos(self) -> int:
        """Index of EOS in next-symbol distributions: ``S``."""
        ...

    @property
    def device(self) -> torch.device:
        """Where the automaton's tensors live."""
        ...

    def to(self, device: str | torch.device) -> Automaton:
        """A copy on ``device``."""
        ...

    # ------------------------------------------------------------------ position classes
    @property
    def class_label(self) -> str:
        """What a class is, for docs and plots: ``"state"`` or ``"state/top"``."""
        ...

    @property
    def class_names(self) -> tuple[str, ...]:
        """``C`` class names in index order (a PFSA's state names)."""
        ...

    def class_probs(self) -> Tensor:
        """Next-symbol distribution of every class.

        Returns:
            ``[C, S + 1]`` float64 on :attr:`device`; column ``S`` is EOS. Rows of classes that
            can occur sum to one.
        """
        ...

    def class_transitions(self) -> Tensor:
        """Which (class, symbol) transitions exist (the keys of ``kl.transition``).

        Returns:
            ``[C, S + 1]`` bool: a symbol transition defined at the class (zero-weight ones
            included), and the EOS column where ending has positive weight.
        """
        ...

    def expected_class_visits(self) -> Tensor:
        """Expected number of positions per string in each class (the weighted reading's weights).

        Returns:
            ``[C]`` float64, never negative, exactly 0 for classes no string reaches (the
            decomposed KL leaves them out); a PFSA's
            :meth:`~cfl_lightning.automata.PFSA.expected_visits` masked by reachability.
        """
        ...

    def expected_length(self) -> float:
        """Expected number of symbols per string."""
        ...

    def annotate(
        self, tokens: Tensor, offsets: Tensor, device: torch.device | str | None = None
    ) -> Tensor:
        """The class of every position of a flat corpus.

        Args:
            tokens: ``[L]`` int64 symbol ids, string after string.
            offsets: ``[K + 1]`` int64; string ``k`` is ``tokens[offsets[k]:offsets[k+1]]``.
            device: where to run (default: the CPU); the result stays there.

        Returns:
            ``[L + K]`` int64: for string ``k`` of length ``n`` the ``n + 1`` classes before each
            of its symbols and before its end, at ``offsets[k] + k ... offsets[k] + k + n``.

        Raises:
            CflError: a symbol id is out of range, or a string leaves the automaton's support
                (one line naming the string and the symbol position).
        """
        ...

    # ------------------------------------------------------------------ events
    def event_table(self, event: Event) -> Tensor:
        """Occurrences of ``event`` added by each (class, symbol) step.

        Returns:
            ``[C, S]`` int64 on :attr:`device`, zero where no transition exists.

        Raises:
            EventError: an unknown name, or an event kind this automaton does not have.
        """
        ...

    def expected_occurrences(self) -> dict[str, float]:
        """Expected occurrences per string of every built-in event of this automaton.

        Returns:
            ``{event text: expected count}``, in the order ``results.json`` lists them
            (``state:``, ``symbol:``, then every existing ``transition:``; a pushdown automaton
            adds ``push:``). The keys are the events the correlational record counts
            (:func:`cfl_lightning.data.occurrences.occurrences`).
        """
        ...

    def event_location(self, event: Event) -> tuple[str, tuple[int, ...]]:
        """Where ``event`` lives in a decomposed KL result (its ``kl_target``).

        Returns:
            the part and its flat indices: ``("state", (c, ...))`` (classes),
            ``("symbol", (s,))``, or ``("transition", (c * (S + 1) + s, ...))``. A PFSA's events
            have one place; a pushdown automaton's ``state:NAME`` spans the classes of the
            state and ``push:X`` the transitions pushing ``X`` (their contributions are summed,
            :func:`cfl_lightning.metrics.target_values`); a grammar's ``rule`` event has none
            (``("rule", ())``: its ``kl_target`` is null).

        Raises:
            EventError: an unknown name, or an event kind this automaton does not have.
        """
        ...

    # ------------------------------------------------------------------ interchange
    def diagram(self) -> Diagram:
        """What a drawing shows (:class:`~cfl_lightning.automata.diagram.Diagram`): states,
        final weights, initial state, labelled arcs; :mod:`cfl_lightning.analysis.draw` lays it
        out with graphviz."""
        ...

    def validate(self) -> None:
        """Raise the kind's error (one line naming the place) if the automaton is malformed."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (a public interface: see docs/reference.md)."""
        ...

    def to_json(self, path: str | os.PathLike) -> None:
        """Write the JSON form atomically (temporary file, then rename)."""
        ...


def expected_event_count(automaton: Automaton, event: Event) -> float:
    """Expected occurrences of ``event`` per string, ``sum_(c,s) visits(c) p(s | c) table(c, s)``;
    a kind without position classes computes it itself (its ``expected_event_count`` method)."""
    own = getattr(automaton, "expected_event_count", None)
    if own is not None:
        return float(own(event))
    visits = automaton.expected_class_visits()
    probs = automaton.class_probs()[:, : automaton.num_symbols]
    return float((visits[:, None] * probs * automaton.event_table(event)).sum())


def counting_table(automaton: Automaton, event: Event) -> Tensor | None:
    """The table that recounts ``event`` from a corpus's tokens, or None for an event of the
    derivation (a grammar's ``rule``: :func:`~cfl_lightning.kinds.events.counted_from_tokens`),
    whose names are checked all the same (its kind's registered table).

    Returns:
        ``[C, S]`` int64 (:meth:`Automaton.event_table`), or None.

    Raises:
        EventError: an unknown name, or an event kind the automaton does not have.
    """
    if counted_from_tokens(event):
        return automaton.event_table(event)
    event.table(automaton)  # the kind's own table: checks the names
    return None


#: the parts of a decomposed KL result; an event of another kind is reported under its own kind
#: only where it spreads over several of their entries (:func:`spread_events`)
KL_PARTS = ("state", "symbol", "transition")


def spread_events(automaton: Automaton) -> dict[str, tuple[str, ...]]:
    """The events that sum several transitions of a decomposed KL, by kind, in the order of
    :meth:`Automaton.expected_occurrences`: a pushdown automaton's ``push:X`` and ``pop:X``
    (``{"push": ("X0", ...), "pop": (...)}``); empty for a PFSA, whose every event is one
    entry of the ``state``, ``symbol`` or ``transition`` part.

    A kind whose events each sit in one entry of a part (a pushdown automaton's ``class:``, its
    per-class ``state`` entry) is not listed: the part already reports it.
    """
    out: dict[str, list[str]] = {}
    for text in automaton.expected_occurrences():
        kind, _, name = text.partition(":")
        if kind in KL_PARTS:
            continue
        part, _ = automaton.event_location(Event.parse(text))
        if part == "transition":
            out.setdefault(kind, []).append(name)
    return {kind: tuple(names) for kind, names in out.items()}


def class_tables(automaton: Automaton) -> tuple[Tensor, Tensor]:
    """The per-class targets, built in this one place for training, evaluation and ensembles.

    Returns:
        ``probs`` ``[C, S + 1]`` float64, the next-symbol distribution of every class (a batch's
        ``target_probs`` are its rows at the positions' classes), and ``visits`` ``[C]``
        float64, the expected visits per string (exactly 0 where no string reaches).
    """
    probs = automaton.class_probs().to(torch.float64)
    visits = automaton.expected_class_visits().to(device=probs.device, dtype=torch.float64)
    return probs, visits
