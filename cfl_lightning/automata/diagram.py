"""What a drawing of an automaton shows, independent of its kind and of graphviz.

Each kind builds a :class:`Diagram` (``automaton.diagram()``); :mod:`cfl_lightning.analysis.draw`
lays it out with graphviz. Nodes are states; an arc's ``label`` is its symbol (a pushdown
automaton adds the stack action, e.g. ``"(, push ("``) and the drawing appends its weight.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Diagram", "Arc"]


@dataclass(frozen=True)
class Arc:
    """One transition: from ``source`` to ``target`` (state names), ``label``, ``weight``."""

    source: str
    target: str
    label: str
    weight: float


@dataclass(frozen=True)
class Diagram:
    """States (names, in order), their final weights (0: not accepting), the initial state, arcs."""

    states: tuple[str, ...]
    final: tuple[float, ...]
    initial: str
    arcs: tuple[Arc, ...]
