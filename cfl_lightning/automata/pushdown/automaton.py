"""Real-time deterministic probabilistic pushdown automata (``kind = "pushdown"``) as tensors.

A configuration is (state ``q``, stack). Each step reads one symbol: from ``(q, top)``, where
``top`` is a stack symbol ``X`` or the empty stack (index ``G``, written ``-``), each symbol has
at most one transition with a target state, a weight and one stack action: push ``Y``, pop, or
keep. Ending is allowed only on the empty stack, with weight ``final[q]``. Stored as

* ``target`` ``[Q, G + 1, S]`` int64: next state, ``-1`` for no transition;
* ``action`` ``[Q, G + 1, S]`` int64: the pushed stack symbol ``Y >= 0``, :data:`KEEP` (-1) or
  :data:`POP` (-2);
* ``weights`` ``[Q, G + 1, S]`` float64 (0 where there is no transition);
* ``final`` ``[Q]`` float64; ``initial`` an index.

Position classes are the pairs (state, top): class ``c = q * (G + 1) + t``, named ``"q/X"`` or
``"q/-"``. JSON (a public interface, see docs/reference.md)::

    {"kind": "pushdown", "alphabet": ["(", ")"], "states": ["q"], "stack_alphabet": ["("],
     "initial": "q", "final": {"q": 0.5},
     "transitions": [{"source": "q", "top": null, "symbol": "(", "target": "q", "push": "(",
                      "weight": 0.5}, ...]}

``top: null`` is the empty stack; ``"push": X`` pushes, ``"pop": true`` pops, neither keeps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from cfl_lightning.automata.basics import AutomatonBasics
from cfl_lightning.automata.pushdown import annotate as pushdown_annotate
from cfl_lightning.automata.pushdown import events as pushdown_events
from cfl_lightning.automata.pushdown import fixpoint as pushdown_fixpoint
from cfl_lightning.automata.pushdown.fixpoint import KEEP, POP
from cfl_lightning.automata.pushdown.json_form import (
    pda_arcs,
    pda_from_dict,
    pda_to_dict,
    pda_to_dot,
)
from cfl_lightning.automata.pushdown.validate import check_tables, check_termination
from cfl_lightning.errors import PDAError

if TYPE_CHECKING:
    from cfl_lightning.automata.events import Event

__all__ = ["PushdownAutomaton", "KEEP", "POP"]


class PushdownAutomaton(AutomatonBasics):
    """A real-time deterministic probabilistic pushdown automaton (the :class:`Automaton` seam).

    Args:
        states: state names, in index order.
        alphabet: symbol names, in index order.
        stack_alphabet: stack symbol names, in index order.
        target: ``[Q, G + 1, S]`` int64 next state or -1.
        action: ``[Q, G + 1, S]`` int64 pushed symbol, :data:`KEEP` or :data:`POP`.
        weights: ``[Q, G + 1, S]`` transition probabilities.
        final: ``[Q]`` ending weights (on the empty stack).
        initial: index of the initial state.
        validate: check the automaton (tables, then termination); on by default.
        source: where it came from (a file name), for error messages.
    """

    kind = "pushdown"
    class_label = "state/top"
    error = PDAError

    def __init__(
        self,
        states: Sequence[str],
        alphabet: Sequence[str],
        stack_alphabet: Sequence[str],
        target: Tensor,
        action: Tensor,
        weights: Tensor,
        final: Tensor,
        initial: int = 0,
        *,
        validate: bool = True,
        source: str | None = None,
    ) -> None:
        self.states = tuple(str(s) for s in states)
        self.alphabet = tuple(str(a) for a in alphabet)
        self.stack_alphabet = tuple(str(x) for x in stack_alphabet)
        self.target = torch.as_tensor(target, dtype=torch.long)
        device = self.target.device
        self.action = torch.as_tensor(action, dtype=torch.long, device=device)
        self.weights = torch.as_tensor(weights, dtype=torch.float64, device=device)
        self.final = torch.as_tensor(final, dtype=torch.float64, device=device)
        self.initial = int(initial)
        self.source = source
        self._solved: tuple[pushdown_fixpoint.FixedPoint, Tensor, float] | None = None
        if validate:
            self.validate()

    # ------------------------------------------------------------------ sizes and device
    @property
    def num_stack(self) -> int:
        """``G``, the number of stack symbols (the empty-stack top has index ``G``)."""
        return len(self.stack_alphabet)

    @property
    def num_classes(self) -> int:
        return self.num_states * (self.num_stack + 1)

    @property
    def device(self) -> torch.device:
        return self.target.device

    def to(self, device: str | torch.device) -> PushdownAutomaton:
        """A copy with its tensors on ``device``."""
        return PushdownAutomaton(
            self.states, self.alphabet, self.stack_alphabet, self.target.to(device),
            self.action.to(device), self.weights.to(device), self.final.to(device), self.initial,
            validate=False, source=self.source,
        )  # fmt: skip

    # ------------------------------------------------------------------ position classes
    @property
    def class_names(self) -> tuple[str, ...]:
        """``"state/top"`` for every class, ``"state/-"`` on the empty stack."""
        tops = (*self.stack_alphabet, "-")
        return tuple(f"{q}/{t}" for q in self.states for t in tops)

    def class_probs(self) -> Tensor:
        """``[C, S + 1]`` float64: ``[weights[q, t], final[q] if t is empty else 0]``."""
        ends = self.weights.new_zeros(self.num_states, self.num_stack + 1, 1)
        ends[:, -1, 0] = self.final
        probs = torch.cat([self.weights, ends], dim=2)
        return probs.reshape(self.num_classes, self.num_symbols + 1)

    def class_transitions(self) -> Tensor:
        """``[C, S + 1]`` bool: a defined symbol transition, or EOS where ending has weight > 0."""
        ends = torch.zeros_like(self.target[:, :, :1], dtype=torch.bool)
        ends[:, -1, 0] = self.final > 0
        exists = torch.cat([self.target >= 0, ends], dim=2)
        return exists.reshape(self.num_classes, self.num_symbols + 1)

    # ------------------------------------------------------------------ the excursion system
    def excursion_system(self, weights: Tensor | None = None) -> pushdown_fixpoint.ExcursionSystem:
        """The excursion system with ``weights`` (default: the probabilities) as coefficients."""
        w = self.weights if weights is None else weights
        return pushdown_fixpoint.excursion_system(self.target, self.action, w, self.final)

    def _solve(self) -> tuple[pushdown_fixpoint.FixedPoint, Tensor, float]:
        if self._solved is None:
            system = self.excursion_system()
            point = pushdown_fixpoint.least_fixed_point(system)
            visits, rho = pushdown_fixpoint.expected_class_visits(system, point, self.initial)
            self._solved = (point, visits, rho)
        return self._solved

    def fixed_point(self) -> pushdown_fixpoint.FixedPoint:
        """The least fixed point at z = 1: ``E[X, p, r]`` and ``T[p]``, probabilities of ending."""
        return self._solve()[0]

    def ending_probability(self) -> float:
        """The probability of ending from the initial configuration (1 for a valid automaton)."""
        return float(self._solve()[0].ends[self.initial])

    def visits_and_radius(self) -> tuple[Tensor, float]:
        """Expected class visits ``[C]`` and the spectral radius that makes them finite (< 1)."""
        _, visits, rho = self._solve()
        return visits, rho

    def expected_class_visits(self) -> Tensor:
        """``[C]`` float64: expected positions per string in each class (symbols and the end)."""
        return self._solve()[1]

    def expected_length(self) -> float:
        """Expected number of symbols per string (positions minus the end)."""
        return float(self.expected_class_visits().sum()) - 1.0

    # ------------------------------------------------------------------ corpus and events
    def annotate(
        self, tokens: Tensor, offsets: Tensor, device: torch.device | str | None = None
    ) -> Tensor:
        """``[L + K]`` class ids of a flat corpus (see :func:`pushdown_annotate.annotate`)."""
        return pushdown_annotate.annotate(self, tokens, offsets, device)

    def event_table(self, event: Event) -> Tensor:
        """``[C, S]`` int64 occurrences per (class, symbol) step (``push:X`` included)."""
        return pushdown_events.event_table(self, event)

    def event_location(self, event: Event) -> tuple[str, tuple[int, ...]]:
        """Where ``event`` lives in a decomposed KL result (``state:`` spans the state's classes,
        ``push:X`` every transition pushing ``X``)."""
        return pushdown_events.event_location(self, event)

    def expected_occurrences(self) -> dict[str, float]:
        """Expected occurrences per string of every built-in event, keyed by its text:
        ``state:``, ``symbol:``, every existing ``transition:CLASS:SYM``, then ``push:``,
        ``pop:`` and ``class:``."""
        flow = self.expected_class_visits()[:, None] * self.class_probs()[:, : self.num_symbols]
        per_state = flow.reshape(self.num_states, self.num_stack + 1, self.num_symbols)
        out = {f"state:{n}": float(v) for n, v in zip(self.states, per_state.sum((1, 2)))}
        out.update({f"symbol:{a}": float(v) for a, v in zip(self.alphabet, flow.sum(0))})
        exists = self.class_transitions()[:, : self.num_symbols].tolist()
        for c, name in enumerate(self.class_names):
            for a, sym in enumerate(self.alphabet):
                if exists[c][a]:
                    out[f"transition:{name}:{sym}"] = float(flow[c, a])
        act = self.action.reshape(self.num_classes, self.num_symbols)
        for x, name in enumerate(self.stack_alphabet):
            out[f"push:{name}"] = float(flow[act == x].sum())
        pops = flow * (act == POP)  # [C, S]: popping steps, each from a class with X on top
        per_top = pops.reshape(self.num_states, self.num_stack + 1, self.num_symbols).sum((0, 2))
        for x, name in enumerate(self.stack_alphabet):
            out[f"pop:{name}"] = float(per_top[x])
        out.update({f"class:{n}": float(v) for n, v in zip(self.class_names, flow.sum(1))})
        return out

    # ------------------------------------------------------------------ validation and JSON
    def validate(self) -> None:
        """Raise :class:`PDAError` (one line) unless well formed, ending with probability 1 and
        with a finite expected length."""
        check_tables(self)
        check_termination(self)

    def to_dict(self) -> dict[str, Any]:
        """The JSON interchange form (module docstring)."""
        return pda_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> PushdownAutomaton:
        """Build (and validate) an automaton from its JSON form."""
        return cls(**pda_from_dict(data, source=source), source=source)

    def to_dot(self) -> str:
        """Graphviz source; edges labelled ``symbol, TOP/push Y`` (or ``pop``, ``keep``)."""
        return pda_to_dot(self)

    def diagram(self) -> Any:
        """What a drawing shows (``automata.diagram.Diagram``): arcs labelled
        ``symbol, TOP/ACTION`` (``TOP`` ``-`` on the empty stack; ``push Y``, ``pop``, ``keep``)."""
        from cfl_lightning.automata.diagram import Arc, Diagram  # the seam's module

        arcs = tuple(Arc(*arc) for arc in pda_arcs(self))
        final = tuple(float(f) for f in self.final.cpu().tolist())
        return Diagram(self.states, final, self.states[self.initial], arcs)

    def __repr__(self) -> str:
        return (
            f"PushdownAutomaton(states={self.num_states}, symbols={self.num_symbols}, "
            f"stack={self.num_stack}, initial={self.states[self.initial]!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PushdownAutomaton):
            return NotImplemented
        return (
            (self.states, self.alphabet, self.stack_alphabet, self.initial)
            == (other.states, other.alphabet, other.stack_alphabet, other.initial)
            and all(
                torch.equal(getattr(self, n).cpu(), getattr(other, n).cpu())
                for n in ("target", "action", "weights", "final")
            )
        )

    __hash__ = None  # type: ignore[assignment]

