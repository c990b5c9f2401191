"""Probabilistic deterministic finite-state automata (PFSAs) held as tensors.

A PFSA over states ``Q`` and alphabet ``S`` is stored as

* ``next_state`` ``[Q, |S|]`` (int64): target state of the transition leaving ``q`` on ``s``,
  or ``-1`` when there is none;
* ``weights`` ``[Q, |S|]`` (float64): the transition probabilities (0 where there is none);
* ``final`` ``[Q]`` (float64): the stopping (EOS) probabilities;
* ``initial``: the index of the initial state.

At every state the outgoing weights plus the final weight sum to one, so the next-symbol
distribution ``p(. | q)`` over ``S + [EOS]`` is the row ``[weights[q], final[q]]``.

JSON interchange format (read and written by :meth:`PFSA.from_json` / :meth:`PFSA.to_json`)::

    {"alphabet": ["a", "b"], "states": ["init", "odd", "even", "rep"], "initial": "init",
     "final": {"odd": 0.1, "rep": 0.1},
     "transitions": [{"source": "init", "symbol": "a", "target": "rep", "weight": 0.3}, ...]}

A state missing from ``"final"`` has final weight 0. State and symbol indices follow the order of
``"states"`` and ``"alphabet"``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from cfl_lightning.automata.basics import AutomatonBasics
from cfl_lightning.automata.diagram import Arc, Diagram
from cfl_lightning.automata.json_checks import check_keys, json_type, require_name
from cfl_lightning.automata.pfsa_walk import state_walk
from cfl_lightning.errors import PFSAError

__all__ = ["PFSA", "NORMALIZATION_TOLERANCE", "RESERVED_SYMBOLS", "check_names"]

NORMALIZATION_TOLERANCE = 1e-6
# token names of the models' vocabulary and of results.json's ``kl.symbol`` (EOS column)
RESERVED_SYMBOLS = ("EOS", "BOS", "PAD")
#: the keys of the JSON form: the top level, and each transition
PFSA_KEYS = ("kind", "alphabet", "states", "initial", "final", "transitions")
ARC_KEYS = ("source", "symbol", "target", "weight")


def check_names(states: Sequence[str], alphabet: Sequence[str], where: str = "") -> None:
    """Reject names that collide with the package's own syntax or reserved names.

    * a state name containing ``:`` (events read ``transition:SOURCE:SYMBOL`` and results key
      transitions ``SOURCE:SYMBOL``: the first ``:`` ends the state);
    * a symbol named ``EOS``, ``BOS`` or ``PAD`` (reserved tokens; ``EOS`` is the end-of-string
      column of ``kl.symbol``);
    * an empty name, or a duplicate.

    Symbols may contain ``:`` (the last field of an event is read whole).

    Raises:
        PFSAError: one line naming the state or symbol (and ``where``, e.g. the file).
    """
    for kind, names in (("state", states), ("symbol", alphabet)):
        seen: set[str] = set()
        for name in names:
            if name == "":
                raise PFSAError(f"{where}empty {kind} name")
            if name in seen:
                raise PFSAError(f"{where}duplicate {kind} name {name!r}")
            seen.add(name)
    for name in states:
        if ":" in name:
            raise PFSAError(
                f"{where}state name {name!r} contains ':', which separates the fields of "
                "transition:SOURCE:SYMBOL events; rename the state"
            )
    for name in alphabet:
        if name in RESERVED_SYMBOLS:
            raise PFSAError(
                f"{where}symbol name {name!r} is reserved ({', '.join(RESERVED_SYMBOLS)} are the "
                "end-of-string, beginning and padding tokens); rename the symbol"
            )


class PFSA(AutomatonBasics):
    """A probabilistic deterministic finite-state automaton (the automaton protocol's ``"pfsa"``).

    As an :class:`~cfl_lightning.automata.protocol.Automaton` its position classes are its
    states (``class_label`` ``"state"``).

    Args:
        states: state names, in index order.
        alphabet: symbol names, in index order.
        next_state: ``[Q, |S|]`` int64 target table, ``-1`` for "no transition".
        weights: ``[Q, |S|]`` transition probabilities.
        final: ``[Q]`` final (stopping) probabilities.
        initial: index of the initial state.
        validate: check the automaton (see :meth:`validate`); on by default.
        source: where the automaton came from (a file name), used in error messages.

    Example:
        >>> from cfl_lightning import parity_starfree_pfsa
        >>> A = parity_starfree_pfsa(eta=0.3)
        >>> A.next_symbol_probs().shape
        torch.Size([4, 3])
    """

    kind = "pfsa"
    class_label = "state"
    error = PFSAError

    def __init__(
        self,
        states: Sequence[str],
        alphabet: Sequence[str],
        next_state: Tensor,
        weights: Tensor,
        final: Tensor,
        initial: int = 0,
        *,
        validate: bool = True,
        source: str | None = None,
    ) -> None:
        self.states = tuple(str(s) for s in states)
        self.alphabet = tuple(str(a) for a in alphabet)
        self.next_state = torch.as_tensor(next_state, dtype=torch.long)
        device = self.next_state.device
        self.weights = torch.as_tensor(weights, dtype=torch.float64, device=device)
        self.final = torch.as_tensor(final, dtype=torch.float64, device=device)
        self.initial = int(initial)
        self.source = source
        if validate:
            self.validate()

    # ------------------------------------------------------------------ basic properties
    @property
    def device(self) -> torch.device:
        return self.next_state.device

    def to(self, device: str | torch.device) -> PFSA:
        """A copy of this automaton with its tensors on ``device``."""
        return PFSA(
            self.states,
            self.alphabet,
            self.next_state.to(device),
            self.weights.to(device),
            self.final.to(device),
            self.initial,
            validate=False,
            source=self.source,
        )

    def state_index(self, name: str) -> int:
        try:
            return self.states.index(name)
        except ValueError:
            raise PFSAError(f"{self.where()}unknown state {name!r}") from None

    def symbol_index(self, name: str) -> int:
        try:
            return self.alphabet.index(name)
        except ValueError:
            raise PFSAError(f"{self.where()}unknown symbol {name!r}") from None

    # ------------------------------------------------------------------ distributions
    def next_symbol_probs(self) -> Tensor:
        """Next-symbol distribution at every state.

        Returns:
            ``[Q, |S| + 1]`` float64; column ``|S|`` (last) is EOS. Rows sum to one.
        """
        return torch.cat([self.weights, self.final[:, None]], dim=1)

    # ------------------------------------------------------------------ the automaton protocol
    @property
    def class_names(self) -> tuple[str, ...]:
        """The position classes: the states."""
        return self.states

    def class_probs(self) -> Tensor:
        """``[Q, |S| + 1]``: :meth:`next_symbol_probs`."""
        return self.next_symbol_probs()

    def class_transitions(self) -> Tensor:
        """``[Q, |S| + 1]`` bool: symbol transitions with a target, EOS where final > 0."""
        return torch.cat([self.next_state >= 0, (self.final > 0)[:, None]], dim=1)

    def expected_class_visits(self) -> Tensor:
        """``[Q]``: :meth:`expected_visits`, exactly 0 at unreachable states (never negative)."""
        visits = self.expected_visits().clamp_min(0.0)
        reach = torch.tensor(self.reachable(), dtype=torch.bool, device=visits.device)
        return torch.where(reach, visits, torch.zeros_like(visits))

    def annotate(
        self, tokens: Tensor, offsets: Tensor, device: torch.device | str | None = None
    ) -> Tensor:
        """The state before every symbol and before every end (see
        :func:`~cfl_lightning.automata.pfsa_walk.state_walk`): ``[L + K]`` int64."""
        return state_walk(self.next_state, self.initial, tokens, offsets, device)

    def event_table(self, event: Any) -> Tensor:
        """``[Q, |S|]`` int64: :meth:`Event.function <cfl_lightning.automata.Event.function>`
        of an :class:`~cfl_lightning.automata.Event` (not imported here: events import PFSA)."""
        return event.function(self)

    def event_location(self, event: Any) -> tuple[str, tuple[int, ...]]:
        """The one place of :meth:`Event.transition_index
        <cfl_lightning.automata.Event.transition_index>`."""
        kind, index = event.transition_index(self)
        return kind, (index,)

    def expected_occurrences(self) -> dict[str, float]:
        """Expected occurrences per string of every ``state:``, ``symbol:`` and existing
        ``transition:`` event, keyed by the event's text, in that order."""
        flow = self.expected_visits()[:, None] * self.weights  # [Q, S]
        out = {f"state:{n}": float(v) for n, v in zip(self.states, flow.sum(1))}
        out.update({f"symbol:{a}": float(v) for a, v in zip(self.alphabet, flow.sum(0))})
        table = self.next_state.tolist()
        for i, src in enumerate(self.states):
            for j, a in enumerate(self.alphabet):
                if table[i][j] >= 0:
                    out[f"transition:{src}:{a}"] = float(flow[i, j])
        return out

    def diagram(self) -> Diagram:
        """What a drawing shows: states, final weights, the initial state, ``symbol`` arcs."""
        data = self.to_dict()
        arcs = tuple(
            Arc(t["source"], t["target"], t["symbol"], float(t["weight"]))
            for t in data["transitions"]
        )
        final = tuple(float(f) for f in self.final.cpu().tolist())
        return Diagram(self.states, final, data["initial"], arcs)

    def transition_matrix(self, mask: Tensor | None = None) -> Tensor:
        """State-to-state transition matrix ``W[q, q'] = sum_s weights[q, s] [next(q, s) = q']``.

        Args:
            mask: optional ``[Q, |S|]`` bool or float; only (or weighted by) these transitions.

        Returns:
            ``[Q, Q]`` float64.
        """
        w = self.weights if mask is None else self.weights * mask.to(self.weights.dtype)
        q = self.num_states
        matrix = torch.zeros(q, q, dtype=torch.float64, device=self.device)
        has = self.next_state >= 0
        rows = torch.arange(q, device=self.device)[:, None].expand_as(self.next_state)[has]
        matrix.index_put_((rows, self.next_state[has]), w[has], accumulate=True)
        return matrix

    def expected_visits(self) -> Tensor:
        """Expected number of visits ``p_pi(q)`` to every state per string.

        Counts the initial state once at the start and every arrival by a transition; equals
        the prefix probability mass of histories ending in ``q`` (the paper's ``p_pi(q)``).

        Returns:
            ``[Q]`` float64, from the linear solve ``pi (I - W) = e_init``.
        """
        q = self.num_states
        eye = torch.eye(q, dtype=torch.float64, device=self.device)
        start = torch.zeros(q, dtype=torch.float64, device=self.device)
        start[self.initial] = 1.0
        return torch.linalg.solve((eye - self.transition_matrix()).T, start)

    def allsum(self) -> Tensor:
        """Total probability of all strings (1 for a valid PFSA), by a linear solve.

        Returns:
            scalar float64 tensor, ``beta(q_init)`` with ``beta = (I - W)^{-1} final``.
        """
        q = self.num_states
        eye = torch.eye(q, dtype=torch.float64, device=self.device)
        beta = torch.linalg.solve(eye - self.transition_matrix(), self.final)
        return beta[self.initial]

    def expected_length(self) -> float:
        """Expected number of symbols per string."""
        return float((self.expected_visits() * self.weights.sum(dim=1)).sum())

    # ------------------------------------------------------------------ graph structure
    def _successors(self) -> list[list[int]]:
        table = self.next_state.cpu().tolist()
        weights = self.weights.cpu().tolist()
        return [
            [t for t, w in zip(row, wrow) if t >= 0 and w > 0] for row, wrow in zip(table, weights)
        ]

    def reachable(self) -> list[bool]:
        """Which states are reachable from the initial state by positive-weight transitions."""
        succ = self._successors()
        seen = [False] * self.num_states
        stack = [self.initial]
        seen[self.initial] = True
        while stack:
            for t in succ[stack.pop()]:
                if not seen[t]:
                    seen[t] = True
                    stack.append(t)
        return seen

    def coaccessible(self) -> list[bool]:
        """Which states can reach a state with positive final weight (i.e. can terminate)."""
        succ = self._successors()
        pred: list[list[int]] = [[] for _ in range(self.num_states)]
        for source, targets in enumerate(succ):
            for t in targets:
                pred[t].append(source)
        final = self.final.cpu().tolist()
        ok = [f > 0 for f in final]
        stack = [i for i, flag in enumerate(ok) if flag]
        while stack:
            for p in pred[stack.pop()]:
                if not ok[p]:
                    ok[p] = True
                    stack.append(p)
        return ok

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Check shapes, weights, normalization and termination.

        Raises:
            PFSAError: naming the offending state or symbol (and the file, when known) for
                names that :func:`check_names` rejects, non-finite or negative weights, a state
                whose outgoing plus final weights do not sum to one (tolerance ``1e-6``), a
                target index out of range, or a reachable state from which the automaton cannot
                terminate.
        """
        where = self.where()
        q, s = self.num_states, self.num_symbols
        if q == 0:
            raise PFSAError(f"{where}the automaton has no states")
        if s == 0:
            raise PFSAError(f"{where}the alphabet is empty")
        check_names(self.states, self.alphabet, where)
        if tuple(self.next_state.shape) != (q, s) or tuple(self.weights.shape) != (q, s):
            raise PFSAError(
                f"{where}next_state and weights must have shape [{q}, {s}], got "
                f"{list(self.next_state.shape)} and {list(self.weights.shape)}"
            )
        if tuple(self.final.shape) != (q,):
            raise PFSAError(f"{where}final must have shape [{q}], got {list(self.final.shape)}")
        if not 0 <= self.initial < q:
            raise PFSAError(f"{where}initial state index {self.initial} out of range")
        table = self.next_state.cpu().tolist()
        weights = self.weights.cpu().tolist()
        final = self.final.cpu().tolist()
        for i in range(q):
            state = self.states[i]
            if not math.isfinite(final[i]) or final[i] < 0:
                raise PFSAError(f"{where}state {state!r} has invalid final weight {final[i]!r}")
            total = final[i]
            for j in range(s):
                target, w = table[i][j], weights[i][j]
                if target < -1 or target >= q:
                    raise PFSAError(
                        f"{where}transition {state!r} --{self.alphabet[j]}--> has target index "
                        f"{target} out of range"
                    )
                if target == -1:
                    if w != 0:
                        raise PFSAError(
                            f"{where}state {state!r} has weight {w} on symbol "
                            f"{self.alphabet[j]!r} but no transition"
                        )
                    continue
                if not math.isfinite(w) or w < 0:
                    raise PFSAError(
                        f"{where}transition {state!r} --{self.alphabet[j]}--> "
                        f"{self.states[target]!r} has invalid weight {w!r}"
                    )
                total += w
            if abs(total - 1.0) > NORMALIZATION_TOLERANCE:
                raise PFSAError(
                    f"{where}state {state!r}: outgoing + final weights sum to {total:.9g}, not 1"
                )
        reach, coacc = self.reachable(), self.coaccessible()
        for i in range(q):
            if reach[i] and not coacc[i]:
                raise PFSAError(
                    f"{where}state {self.states[i]!r} is reachable but cannot terminate "
                    "(no path from it reaches a state with positive final weight)"
                )

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """The JSON interchange form (see module docstring)."""
        table = self.next_state.cpu().tolist()
        weights = self.weights.cpu().tolist()
        final = self.final.cpu().tolist()
        transitions = [
            {
                "source": self.states[i],
                "symbol": self.alphabet[j],
                "target": self.states[table[i][j]],
                "weight": weights[i][j],
            }
            for i in range(self.num_states)
            for j in range(self.num_symbols)
            if table[i][j] >= 0
        ]
        return {
            "alphabet": list(self.alphabet),
            "states": list(self.states),
            "initial": self.states[self.initial],
            "final": {self.states[i]: f for i, f in enumerate(final) if f != 0},
            "transitions": transitions,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> PFSA:
        """Build (and validate) an automaton from its JSON interchange form."""
        where = f"{source}: " if source else ""
        if not isinstance(data, Mapping):
            raise PFSAError(f"{where}expected a JSON object at the top level")
        if data.get("kind", "pfsa") != "pfsa":
            raise PFSAError(
                f"{where}an automaton of kind {data.get('kind')!r}, not a PFSA: read it with "
                "cfl_lightning.automata.load_automaton"
            )
        check_keys(data, PFSA_KEYS, where=where, place="the top level", error=PFSAError)
        for key in ("alphabet", "states", "initial", "transitions"):
            if key not in data:
                raise PFSAError(f"{where}missing key {key!r}")
        states, alphabet = data["states"], data["alphabet"]
        for key, names in (("states", states), ("alphabet", alphabet)):
            if not isinstance(names, list):
                raise PFSAError(
                    f"{where}{key!r} must be a list of strings, got {json_type(names)}"
                )
            for k, name in enumerate(names):
                require_name(name, f"{key}[{k}]", where=where, error=PFSAError)
        for kind, names in (("state", states), ("symbol", alphabet)):
            if len(set(names)) != len(names):
                dup = next(n for n in names if names.count(n) > 1)
                raise PFSAError(f"{where}duplicate {kind} name {dup!r}")
        state_ix = {n: i for i, n in enumerate(states)}
        symbol_ix = {n: i for i, n in enumerate(alphabet)}

        def state(name: Any, what: str) -> int:
            subject = what[3:] if what.startswith("as ") else what.removeprefix("in ")
            require_name(name, subject, where=where, error=PFSAError)
            if name not in state_ix:
                raise PFSAError(f"{where}unknown state {name!r} {what}")
            return state_ix[name]

        initial = state(data["initial"], "in 'initial'")
        final = torch.zeros(len(states), dtype=torch.float64)
        raw_final = data.get("final", {})
        if not isinstance(raw_final, Mapping):
            raise PFSAError(f"{where}'final' must be an object mapping state names to weights")
        for name, weight in raw_final.items():
            final[state(name, "in 'final'")] = _number(weight, f"{where}final weight of {name!r}")
        next_state = torch.full((len(states), len(alphabet)), -1, dtype=torch.long)
        weights = torch.zeros(len(states), len(alphabet), dtype=torch.float64)
        if not isinstance(data["transitions"], list):
            got = json_type(data["transitions"])
            raise PFSAError(f"{where}'transitions' must be a list, got {got}")
        for k, arc in enumerate(data["transitions"]):
            if not isinstance(arc, Mapping) or not {"source", "symbol", "target", "weight"} <= set(
                arc
            ):
                raise PFSAError(
                    f"{where}transitions[{k}] must have keys source, symbol, target, weight"
                )
            # a transition is named by its source and symbol; [k] counts from 0 in the list
            src_text, sym_text = (
                repr(v) if isinstance(v, str) else json_type(v) for v in (arc["source"], arc["symbol"])
            )
            name = f"transition {src_text} --{sym_text.strip(chr(39))}--> (transitions[{k}])"
            check_keys(arc, ARC_KEYS, where=where, place=name, error=PFSAError)
            src = state(arc["source"], f"as the source of {name}")
            dst = state(arc["target"], f"as the target of {name}")
            sym = require_name(arc["symbol"], f"the symbol of {name}", where=where, error=PFSAError)
            if sym not in symbol_ix:
                raise PFSAError(f"{where}unknown symbol {sym!r} in {name}")
            j = symbol_ix[sym]
            if next_state[src, j] >= 0:
                raise PFSAError(
                    f"{where}nondeterminism: state {arc['source']!r} has two transitions on "
                    f"symbol {sym!r}"
                )
            next_state[src, j] = dst
            weights[src, j] = _number(
                arc["weight"], f"{where}weight of transition {arc['source']!r} --{sym}-->"
            )
        return cls(states, alphabet, next_state, weights, final, initial, source=source)

    def __repr__(self) -> str:
        return (
            f"PFSA(states={self.num_states}, symbols={self.num_symbols}, "
            f"initial={self.states[self.initial]!r})"
        )

    def same_topology(self, other: PFSA) -> bool:
        """Whether ``other`` has the same transition table and initial state (weights aside)."""
        return self.initial == other.initial and torch.equal(
            self.next_state.cpu(), other.next_state.cpu()
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PFSA):
            return NotImplemented
        return (
            self.states == other.states
            and self.alphabet == other.alphabet
            and self.initial == other.initial
            and torch.equal(self.next_state.cpu(), other.next_state.cpu())
            and torch.equal(self.weights.cpu(), other.weights.cpu())
            and torch.equal(self.final.cpu(), other.final.cpu())
        )

    __hash__ = None  # type: ignore[assignment]


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PFSAError(f"{what} must be a number, got {json_type(value)}")
    return float(value)
