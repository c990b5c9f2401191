"""Brute-force reference for pushdown automata: enumeration with an explicit Python stack.

Independent of the package's tensors, fixed points and samplers: it reads the automaton's JSON
form (a public interface) into plain dicts, and walks every string depth first with a Python
list as the stack. Enumeration stops at ``max_len`` symbols and (optionally) at prefixes whose
probability falls below ``min_prob``; :attr:`Enumeration.missing` is the probability mass not
enumerated, which bounds what the truncation left out of every probability below.

Events are plain predicates on one step ``(state, top, symbol, action)`` (``top`` ``None`` on
the empty stack; ``action`` ``("push", X)``, ``("pop",)`` or ``("keep",)``):
:func:`symbol_event`, :func:`state_event`, :func:`transition_event`, :func:`push_event`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Step = tuple[str, Any, str, tuple]
EventFn = Callable[[str, Any, str, tuple], int]


@dataclass
class RefPDA:
    """The JSON form as dicts: ``arcs[(state, top)][symbol] = (target, action, weight)``."""

    initial: str
    final: dict[str, float]
    arcs: dict[tuple[str, Any], dict[str, tuple[str, tuple, float]]]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RefPDA:
        arcs: dict = defaultdict(dict)
        for arc in data["transitions"]:
            if arc.get("pop"):
                action: tuple = ("pop",)
            elif arc.get("push") is not None:
                action = ("push", arc["push"])
            else:
                action = ("keep",)
            arcs[(arc["source"], arc["top"])][arc["symbol"]] = (arc["target"], action, arc["weight"])
        return cls(data["initial"], dict(data.get("final", {})), dict(arcs))

    def choices(self, state: str, stack: list[str]) -> list[tuple[str | None, str, tuple, float]]:
        """``(symbol or None for the end, target, action, weight)`` from a configuration."""
        top = stack[-1] if stack else None
        out = [(sym, t, a, w) for sym, (t, a, w) in self.arcs.get((state, top), {}).items()]
        if not stack and self.final.get(state, 0.0) > 0:
            out.append((None, state, ("keep",), self.final[state]))
        return out


def class_name(state: str, stack: list[str]) -> str:
    return f"{state}/{stack[-1] if stack else '-'}"


@dataclass
class RefString:
    """One enumerated string: symbols, probability, the classes before each symbol and the end,
    and its steps ``(state, top, symbol, action)``."""

    symbols: tuple[str, ...]
    prob: float
    classes: list[str]
    steps: list[Step] = field(default_factory=list)

    def count(self, event: EventFn) -> int:
        return sum(event(*step) for step in self.steps)


@dataclass
class Enumeration:
    strings: list[RefString]
    missing: float  # probability mass not enumerated (longer or pruned strings)

    def law(self) -> dict[tuple[str, ...], float]:
        return {s.symbols: s.prob for s in self.strings}

    def count_law(self, event: EventFn) -> dict[int, float]:
        law: dict[int, float] = defaultdict(float)
        for s in self.strings:
            law[s.count(event)] += s.prob
        return dict(law)

    def conditional_law(self, event: EventFn, n: int, at_least: bool = False) -> dict:
        """Strings given exactly ``n`` (or at least ``n``) occurrences, normalised."""
        keep = {s.symbols: s.prob for s in self.strings if (s.count(event) >= n if at_least else s.count(event) == n)}
        total = math.fsum(keep.values())
        return {k: v / total for k, v in keep.items()}

    def class_visits(self) -> dict[str, float]:
        visits: dict[str, float] = defaultdict(float)
        for s in self.strings:
            for c in s.classes:
                visits[c] += s.prob
        return dict(visits)

    def expected(self, event: EventFn) -> float:
        return math.fsum(s.prob * s.count(event) for s in self.strings)


def enumerate_pda(data: Mapping[str, Any], max_len: int, min_prob: float = 0.0) -> Enumeration:
    """Every string of at most ``max_len`` symbols (prefixes below ``min_prob`` pruned)."""
    pda = RefPDA.from_dict(data)
    out: list[RefString] = []
    # explicit DFS: (state, stack, prob, symbols, classes, steps)
    todo = [(pda.initial, [], 1.0, (), [], [])]
    while todo:
        state, stack, prob, symbols, classes, steps = todo.pop()
        here = classes + [class_name(state, stack)]
        for sym, target, action, w in pda.choices(state, stack):
            p = prob * w
            if p == 0 or p < min_prob:
                continue
            if sym is None:
                out.append(RefString(symbols, p, here, steps))
                continue
            if len(symbols) >= max_len:
                continue
            new = list(stack)
            if action[0] == "push":
                new.append(action[1])
            elif action[0] == "pop":
                new.pop()
            step = (state, stack[-1] if stack else None, sym, action)
            todo.append((target, new, p, symbols + (sym,), here, steps + [step]))
    return Enumeration(out, 1.0 - math.fsum(s.prob for s in out))


@dataclass
class Forward:
    """Prefix masses merged by configuration, summed over all lengths.

    Attributes:
        visits: expected positions per string in each class ``"state/top"``.
        flow: expected traversals of each step ``(state, top, symbol, action)``.
        count_law: probability of ending with each event count (when an event was given).
        missing: mass pruned or still live when the loop stopped (bounds the error).
    """

    visits: dict[str, float]
    flow: dict[Step, float]
    count_law: dict[int, float]
    missing: float

    def expected(self, event: EventFn) -> float:
        return math.fsum(p * event(*step) for step, p in self.flow.items())


def forward(
    data: Mapping[str, Any], event: EventFn | None = None, prune: float = 1e-13, max_len: int = 5000
) -> Forward:
    """Push prefix mass through configurations ``(state, stack, count)`` one symbol at a time.

    Unlike :func:`enumerate_pda` it merges prefixes that reach the same configuration, so it
    reaches long strings; configurations below ``prune`` are dropped (counted in ``missing``).
    """
    pda = RefPDA.from_dict(data)
    live: dict = {(pda.initial, (), 0): 1.0}
    visits: dict = defaultdict(float)
    flow: dict = defaultdict(float)
    law: dict = defaultdict(float)
    dropped = 0.0
    for _ in range(max_len):
        if not live:
            break
        new: dict = defaultdict(float)
        for (state, stack, count), p in live.items():
            visits[class_name(state, list(stack))] += p
            for sym, target, action, w in pda.choices(state, list(stack)):
                if sym is None:
                    law[count] += p * w
                    continue
                step = (state, stack[-1] if stack else None, sym, action)
                flow[step] += p * w
                if action[0] == "push":
                    nxt = stack + (action[1],)
                else:
                    nxt = stack[:-1] if action[0] == "pop" else stack
                new[(target, nxt, count + (event(*step) if event else 0))] += p * w
        live = {k: v for k, v in new.items() if v >= prune}
        dropped += math.fsum(v for v in new.values() if v < prune)
    return Forward(dict(visits), dict(flow), dict(law), dropped + math.fsum(live.values()))


def walk(data: Mapping[str, Any], symbols: list[str] | tuple[str, ...]) -> tuple[float, list[Step]]:
    """Probability of one string (0 outside the support) and its steps, by one explicit walk."""
    pda = RefPDA.from_dict(data)
    state, stack, prob, steps = pda.initial, [], 1.0, []
    for sym in symbols:
        top = stack[-1] if stack else None
        arc = pda.arcs.get((state, top), {}).get(sym)
        if arc is None:
            return 0.0, steps
        steps.append((state, top, sym, arc[1]))
        state, action, w = arc
        prob *= w
        if action[0] == "push":
            stack.append(action[1])
        elif action[0] == "pop":
            stack.pop()
    return (prob * pda.final.get(state, 0.0) if not stack else 0.0), steps


def string_prob(data: Mapping[str, Any], symbols: list[str]) -> float:
    """Probability of one string (0 outside the support)."""
    return walk(data, symbols)[0]


def symbol_event(symbol: str) -> EventFn:
    return lambda state, top, sym, action: int(sym == symbol)


def state_event(name: str) -> EventFn:
    return lambda state, top, sym, action: int(state == name)


def transition_event(cls: str, symbol: str) -> EventFn:
    return lambda state, top, sym, action: int(f"{state}/{top or '-'}" == cls and sym == symbol)


def push_event(stack_symbol: str) -> EventFn:
    return lambda state, top, sym, action: int(action == ("push", stack_symbol))


# ---------------------------------------------------------------------- small automata (JSON)
def dyck_json(k: int = 1, open_probs=None, close: float = 0.7, final: float = 0.5) -> dict:
    """Dyck-k in one state: on the empty stack ends with ``final``, opens bracket i with
    ``open_probs[i]`` (default equal shares); on a non-empty stack closes with ``close``."""
    pairs = [("(", ")"), ("[", "]"), ("{", "}")][:k]
    shares = open_probs or [1.0 / k] * k
    arcs = []
    for top in [None] + [o for o, _ in pairs]:
        scale = (1 - final) if top is None else (1 - close)
        for (o, c), share in zip(pairs, shares):
            arcs.append({"source": "q", "top": top, "symbol": o, "target": "q", "push": o, "weight": scale * share})
            if top == o:
                arcs.append({"source": "q", "top": top, "symbol": c, "target": "q", "pop": True, "weight": close})
    return {"kind": "pushdown", "alphabet": [s for p in pairs for s in p], "states": ["q"],
            "stack_alphabet": [o for o, _ in pairs], "initial": "q", "final": {"q": final},
            "transitions": arcs}  # fmt: skip


def anbn_json(p: float = 0.5) -> dict:
    """a^n b^n, n >= 0 geometric: P(n) = (1 - p) p^n."""
    return {"kind": "pushdown", "alphabet": ["a", "b"], "states": ["A", "B"], "stack_alphabet": ["X"],
            "initial": "A", "final": {"A": 1 - p, "B": 1.0}, "transitions": [
                {"source": "A", "top": None, "symbol": "a", "target": "A", "push": "X", "weight": p},
                {"source": "A", "top": "X", "symbol": "a", "target": "A", "push": "X", "weight": p},
                {"source": "A", "top": "X", "symbol": "b", "target": "B", "pop": True, "weight": 1 - p},
                {"source": "B", "top": "X", "symbol": "b", "target": "B", "pop": True, "weight": 1.0}]}  # fmt: skip


def two_state_json() -> dict:
    """Two states, two stack symbols, every action kind, keeps on stacks and moves between
    states (pops land in either state)."""
    t = [
        ("p", None, "a", "q", ("push", "X"), 0.3), ("p", None, "b", "p", ("keep",), 0.2),
        ("p", "X", "a", "p", ("push", "Y"), 0.2), ("p", "X", "b", "q", ("pop",), 0.5),
        ("p", "X", "c", "p", ("keep",), 0.3),
        ("p", "Y", "b", "p", ("pop",), 0.6), ("p", "Y", "c", "q", ("keep",), 0.4),
        ("q", None, "a", "p", ("push", "Y"), 0.4), ("q", None, "c", "q", ("keep",), 0.2),
        ("q", "X", "b", "p", ("pop",), 0.7), ("q", "X", "a", "q", ("push", "X"), 0.3),
        ("q", "Y", "c", "p", ("pop",), 0.8), ("q", "Y", "a", "q", ("keep",), 0.2),
    ]  # fmt: skip
    arcs = []
    for src, top, sym, dst, act, w in t:
        arc = {"source": src, "top": top, "symbol": sym, "target": dst, "weight": w}
        if act[0] == "push":
            arc["push"] = act[1]
        elif act[0] == "pop":
            arc["pop"] = True
        arcs.append(arc)
    return {"kind": "pushdown", "alphabet": ["a", "b", "c"], "states": ["p", "q"],
            "stack_alphabet": ["X", "Y"], "initial": "p", "final": {"p": 0.5, "q": 0.4},
            "transitions": arcs}  # fmt: skip


def pop_event(stack_symbol: str) -> EventFn:
    """Steps that pop ``stack_symbol`` (the top they pop is the symbol)."""
    return lambda state, top, sym, action: int(action == ("pop",) and top == stack_symbol)


def class_event(cls: str) -> EventFn:
    """Steps from the class ``state/top`` (``state/-`` on the empty stack)."""
    return lambda state, top, sym, action: int(f"{state}/{top or '-'}" == cls)
