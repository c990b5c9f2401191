"""Events: sets of transitions whose traversals an intervention counts.

Three kinds, with a text form used on the command line and in configs:

* ``state:NAME`` -- every transition leaving state ``NAME`` (stopping at it is not an occurrence);
* ``symbol:SYM`` -- every transition emitting ``SYM``;
* ``transition:SOURCE:SYM`` -- the one transition leaving ``SOURCE`` on ``SYM``.

An event is turned into an *event function* on a concrete automaton: a ``[Q, |S|]`` int64 table
holding 1 on the counted transitions and 0 elsewhere (the paper's ``f_delta``; its initial and final
components are zero).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from cfl_lightning.automata.pfsa import PFSA
from cfl_lightning.errors import EventError

__all__ = ["Event", "EVENT_KINDS"]

EVENT_KINDS = ("state", "symbol", "transition")


@dataclass(frozen=True)
class Event:
    """A set of transitions, by kind and names.

    Args:
        kind: ``"state"``, ``"symbol"`` or ``"transition"``.
        state: the state name (``state`` and ``transition`` events).
        symbol: the symbol name (``symbol`` and ``transition`` events).
    """

    kind: str
    state: str | None = None
    symbol: str | None = None

    @classmethod
    def parse(cls, spec: str) -> Event:
        """Parse ``state:NAME``, ``symbol:SYM`` or ``transition:SOURCE:SYM``.

        Names may themselves contain ``:`` only in the last field.
        """
        if not isinstance(spec, str) or ":" not in spec:
            raise EventError(
                f"bad event {spec!r}: expected state:NAME, symbol:SYM or transition:SOURCE:SYM"
            )
        kind, rest = spec.split(":", 1)
        if kind == "state" and rest:
            return cls("state", state=rest)
        if kind == "symbol" and rest:
            return cls("symbol", symbol=rest)
        if kind == "transition" and ":" in rest:
            source, symbol = rest.split(":", 1)
            if source and symbol:
                return cls("transition", state=source, symbol=symbol)
        raise EventError(
            f"bad event {spec!r}: expected state:NAME, symbol:SYM or transition:SOURCE:SYM"
        )

    def __str__(self) -> str:
        if self.kind == "state":
            return f"state:{self.state}"
        if self.kind == "symbol":
            return f"symbol:{self.symbol}"
        return f"transition:{self.state}:{self.symbol}"

    def _state(self, pfsa: PFSA) -> int:
        if self.state not in pfsa.states:
            raise EventError(f"event {self}: unknown state {self.state!r}")
        return pfsa.states.index(self.state)

    def _symbol(self, pfsa: PFSA) -> int:
        if self.symbol not in pfsa.alphabet:
            raise EventError(f"event {self}: unknown symbol {self.symbol!r}")
        return pfsa.alphabet.index(self.symbol)

    def function(self, pfsa: PFSA) -> Tensor:
        """The 0/1 event function on ``pfsa``.

        Returns:
            ``[Q, |S|]`` int64 on ``pfsa.device``; 1 on the counted transitions that exist.
        """
        mask = torch.zeros(pfsa.num_states, pfsa.num_symbols, dtype=torch.long)
        if self.kind == "state":
            mask[self._state(pfsa), :] = 1
        elif self.kind == "symbol":
            mask[:, self._symbol(pfsa)] = 1
        elif self.kind == "transition":
            q, s = self._state(pfsa), self._symbol(pfsa)
            if int(pfsa.next_state[q, s]) < 0:
                raise EventError(f"event {self}: state {self.state!r} has no transition on {self.symbol!r}")
            mask[q, s] = 1
        else:
            raise EventError(f"unknown event kind {self.kind!r}; expected one of {EVENT_KINDS}")
        mask = mask.to(pfsa.device)
        return mask * (pfsa.next_state >= 0).long()

    def transition_index(self, pfsa: PFSA) -> tuple[str, int]:
        """Where this event lives in a decomposed KL: ``("state", q)``, ``("symbol", s)``..."""
        if self.kind == "state":
            return "state", self._state(pfsa)
        if self.kind == "symbol":
            return "symbol", self._symbol(pfsa)
        return "transition", self._state(pfsa) * (pfsa.num_symbols + 1) + self._symbol(pfsa)

    def expected_count(self, pfsa: PFSA) -> float:
        """Expected number of occurrences per string, ``sum_(q,s) p_pi(q) w(q, s) f(q, s)``."""
        visits = pfsa.expected_visits()
        return float((visits[:, None] * pfsa.weights * self.function(pfsa)).sum())
