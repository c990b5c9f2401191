"""The pushdown automaton's JSON form (a public interface) and its Graphviz drawing.

See :mod:`cfl_lightning.automata.pushdown` for the format. Reading checks the file's structure
(keys, names, one transition per (source, top, symbol), push and pop not both) with one-line
:class:`~cfl_lightning.errors.PDAError` messages; the automaton's constructor then validates
weights and termination.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch

from cfl_lightning.automata.json_checks import check_keys, json_type, require_name
from cfl_lightning.automata.pushdown_fixpoint import KEEP, POP
from cfl_lightning.automata.pushdown_validate import check_stack_names
from cfl_lightning.errors import PDAError

# ``pda`` below is a :class:`~cfl_lightning.automata.pushdown.PushdownAutomaton` (not imported:
# that module imports this one)
PushdownAutomaton = Any

__all__ = ["pda_to_dict", "pda_from_dict", "pda_to_dot", "pda_arcs", "TOP_KEYS", "ARC_KEYS"]

_REQUIRED = ("source", "top", "symbol", "target", "weight")
#: the keys of the format: the top level, and each transition
TOP_KEYS = ("kind", "alphabet", "states", "stack_alphabet", "initial", "final", "transitions")
ARC_KEYS = ("source", "top", "symbol", "target", "push", "pop", "weight")


def pda_to_dict(pda: PushdownAutomaton) -> dict[str, Any]:
    """The JSON form: transitions in (source, top, symbol) index order, the empty stack last."""
    g = pda.num_stack
    target, action = pda.target.cpu().tolist(), pda.action.cpu().tolist()
    weights, final = pda.weights.cpu().tolist(), pda.final.cpu().tolist()
    arcs = []
    for q in range(pda.num_states):
        for t in range(g + 1):
            for a in range(pda.num_symbols):
                if target[q][t][a] < 0:
                    continue
                arc: dict[str, Any] = {
                    "source": pda.states[q],
                    "top": None if t == g else pda.stack_alphabet[t],
                    "symbol": pda.alphabet[a],
                    "target": pda.states[target[q][t][a]],
                }
                if action[q][t][a] >= 0:
                    arc["push"] = pda.stack_alphabet[action[q][t][a]]
                elif action[q][t][a] == POP:
                    arc["pop"] = True
                arc["weight"] = weights[q][t][a]
                arcs.append(arc)
    return {
        "kind": "pushdown",
        "alphabet": list(pda.alphabet),
        "states": list(pda.states),
        "stack_alphabet": list(pda.stack_alphabet),
        "initial": pda.states[pda.initial],
        "final": {pda.states[q]: f for q, f in enumerate(final) if f != 0},
        "transitions": arcs,
    }


def _names(data: Mapping[str, Any], key: str, where: str) -> list[str]:
    names = data[key]
    if not isinstance(names, list):
        raise PDAError(f"{where}{key!r} must be a list of strings, got {json_type(names)}")
    for k, name in enumerate(names):
        require_name(name, f"{key}[{k}]", where=where, error=PDAError)
    return names


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PDAError(f"{what} must be a number, got {json_type(value)}")
    return float(value)


def _lookup(index: dict[str, int], name: Any, at: str, field: str, key: str) -> int:
    """The index of ``name`` in ``index``; ``AT: 'KEY' must be a name (a string), got null`` or
    ``AT: unknown FIELD 'x'`` otherwise."""
    require_name(name, f"{at}: {key!r}", where="", error=PDAError)
    if name not in index:
        raise PDAError(f"{at}: unknown {field} {name!r}")
    return index[name]


def _label(arc: Any, k: int) -> str:
    """``transition 'q' top '(' --')'--> (transitions[2])``: a transition by its source, top and
    symbol, with its place in the file's list (counted from 0)."""
    if not isinstance(arc, Mapping):
        return f"transitions[{k}]"
    top = "-" if arc.get("top") is None else _shown(arc.get("top"))
    return (f"transition {_shown(arc.get('source'))} top {top} --{_shown(arc.get('symbol'))}--> "
            f"(transitions[{k}])")


def _shown(value: Any) -> str:
    """A name as written (``'q'``), anything else in JSON's words (``null``, ``a list``)."""
    return repr(value) if isinstance(value, str) else json_type(value)


def _arc(arc: Any, k: int, ix: dict[str, dict[str, int]], where: str) -> tuple[int, ...]:
    """One transition as ``(source, top, symbol, target, action)`` indices."""
    if not isinstance(arc, Mapping) or not set(_REQUIRED) <= set(arc):
        raise PDAError(f"{where}{_label(arc, k)} must have keys {', '.join(_REQUIRED)}")
    check_keys(arc, ARC_KEYS, where=where, place=_label(arc, k), error=PDAError)
    at = f"{where}{_label(arc, k)}"
    src = _lookup(ix["state"], arc["source"], at, "source state", "source")
    dst = _lookup(ix["state"], arc["target"], at, "target state", "target")
    sym = _lookup(ix["symbol"], arc["symbol"], at, "symbol", "symbol")
    g = len(ix["stack"])
    top = g if arc["top"] is None else _lookup(ix["stack"], arc["top"], at, "stack top", "top")
    pop = arc.get("pop", False)
    if not isinstance(pop, bool):
        raise PDAError(f"{at}: 'pop' must be true or false, got {json_type(pop)}")
    if pop and arc.get("push") is not None:
        raise PDAError(f"{at}: both push and pop (one stack action per step)")
    if pop:
        act = POP
    elif arc.get("push") is not None:
        act = _lookup(ix["stack"], arc["push"], at, "pushed stack symbol", "push")
    else:
        act = KEEP
    return src, top, sym, dst, act


def pda_from_dict(data: Mapping[str, Any], *, source: str | None = None) -> dict[str, Any]:
    """Constructor arguments of a :class:`PushdownAutomaton` from its JSON form.

    Raises:
        PDAError: one line naming the file and the transition or key.
    """
    where = f"{source}: " if source else ""
    if not isinstance(data, Mapping):
        raise PDAError(f"{where}expected a JSON object at the top level")
    if data.get("kind", "pushdown") != "pushdown":
        raise PDAError(f"{where}kind is {data.get('kind')!r}, not 'pushdown'")
    check_keys(data, TOP_KEYS, where=where, place="the top level", error=PDAError)
    for key in ("alphabet", "states", "stack_alphabet", "initial", "transitions"):
        if key not in data:
            raise PDAError(f"{where}missing key {key!r}")
    states, alphabet = _names(data, "states", where), _names(data, "alphabet", where)
    stack = _names(data, "stack_alphabet", where)
    for kind, names in (("state", states), ("symbol", alphabet), ("stack symbol", stack)):
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise PDAError(f"{where}duplicate {kind} name {dup!r}")
    check_stack_names(stack, where)
    ix = {
        kind: {n: i for i, n in enumerate(names)}
        for kind, names in (("state", states), ("symbol", alphabet), ("stack", stack))
    }
    initial = _lookup(ix["state"], data["initial"], f"{where}'initial'", "state", "initial")
    final = torch.zeros(len(states), dtype=torch.float64)
    raw_final = data.get("final", {})
    if not isinstance(raw_final, Mapping):
        raise PDAError(f"{where}'final' must be an object mapping state names to weights")
    for name, weight in raw_final.items():
        q = _lookup(ix["state"], name, f"{where}'final'", "state", "final")
        final[q] = _number(weight, f"{where}final weight of {name!r}")
    shape = (len(states), len(stack) + 1, len(alphabet))
    target = torch.full(shape, -1, dtype=torch.long)
    action = torch.full(shape, KEEP, dtype=torch.long)
    weights = torch.zeros(shape, dtype=torch.float64)
    if not isinstance(data["transitions"], list):
        raise PDAError(f"{where}'transitions' must be a list, got {json_type(data['transitions'])}")
    for k, arc in enumerate(data["transitions"]):
        src, top, sym, dst, act = _arc(arc, k, ix, where)
        if target[src, top, sym] >= 0:
            raise PDAError(
                f"{where}nondeterminism: state {states[src]!r} with top "
                f"{'-' if arc['top'] is None else arc['top']!r} has two transitions on symbol "
                f"{alphabet[sym]!r} (transitions[{k}])"
            )
        target[src, top, sym], action[src, top, sym] = dst, act
        weights[src, top, sym] = _number(arc["weight"], f"{where}weight of {_label(arc, k)}")
    return dict(
        states=states, alphabet=alphabet, stack_alphabet=stack, target=target, action=action,
        weights=weights, final=final, initial=initial,
    )  # fmt: skip


def _action_text(pda: PushdownAutomaton, act: int) -> str:
    if act == POP:
        return "pop"
    return "keep" if act == KEEP else f"push {pda.stack_alphabet[act]}"


def pda_arcs(pda: PushdownAutomaton) -> list[tuple[str, str, str, float]]:
    """Every transition as ``(source, target, "symbol, TOP/ACTION", weight)``."""
    g = pda.num_stack
    target, action = pda.target.cpu().tolist(), pda.action.cpu().tolist()
    weights = pda.weights.cpu().tolist()
    arcs = []
    for q in range(pda.num_states):
        for t in range(g + 1):
            top = "-" if t == g else pda.stack_alphabet[t]
            for a in range(pda.num_symbols):
                if target[q][t][a] >= 0:
                    label = f"{pda.alphabet[a]}, {top}/{_action_text(pda, action[q][t][a])}"
                    dst = pda.states[target[q][t][a]]
                    arcs.append((pda.states[q], dst, label, weights[q][t][a]))
    return arcs


def pda_to_dot(pda: PushdownAutomaton) -> str:
    """Graphviz source: one node per state (double circle where ending has weight), one edge per
    transition labelled ``symbol, TOP/ACTION (weight)`` with ``TOP`` ``-`` for the empty stack."""
    final = pda.final.cpu().tolist()
    lines = ["digraph pushdown {", "  rankdir=LR;", '  __start [shape=point, label=""];']
    for q, name in enumerate(pda.states):
        shape = "doublecircle" if final[q] > 0 else "circle"
        label = f"{name}\nend {final[q]:.3g}" if final[q] > 0 else name
        lines.append(f"  {json.dumps(name)} [shape={shape}, label={json.dumps(label)}];")
    lines.append(f"  __start -> {json.dumps(pda.states[pda.initial])};")
    for src, dst, text, weight in pda_arcs(pda):
        label = json.dumps(f"{text} ({weight:.3g})")
        lines.append(f"  {json.dumps(src)} -> {json.dumps(dst)} [label={label}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
