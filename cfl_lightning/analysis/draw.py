"""Render an automaton with graphviz, in the style of the paper's Figure 1.

States are circles; accepting states (final weight > 0) are double circles labelled
``name/final``; the initial state has an incoming arrow from nowhere; each edge is labelled
``symbol/weight`` (transitions between the same two states share one edge, one label line per
symbol). Needs the ``graphviz`` Python package and graphviz's ``dot`` program.

Large automata stay readable (``engine="auto"``, ``edge_labels="auto"``): above
:data:`LARGE_STATES` states the layout is ``sfdp`` (force-directed; ``dot``'s layered layout of
a 40-state automaton was a 5,809 x 7,570 pixel picture and took half a minute), above
:data:`MAX_LABELED_EDGES` edges the edge labels are left out (an edge's width then grows with
its largest weight), the initial state is drawn with a bold outline instead of an arrow from
nowhere, and every drawing is scaled down to fit :data:`MAX_INCHES` (at graphviz's 96 dpi:
about 1,536 x 1,152 pixels). Small automata are drawn as before.
"""

from __future__ import annotations

import os
import shutil
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfl_lightning.errors import CflError
from cfl_lightning.io import atomic_open, atomic_write_text, check_output, read_json

if TYPE_CHECKING:  # the automaton core (torch) is imported only when something is drawn
    from cfl_lightning.automata.diagram import Arc, Diagram

__all__ = [
    "DotNotFoundError", "format_weight", "automaton_graph", "render_automaton", "FORMATS",
    "ENGINES", "EDGE_LABELS", "LARGE_STATES", "MAX_LABELED_EDGES", "MAX_INCHES",
]

FORMATS = ("png", "svg", "pdf", "dot")  # dot: the graph's source, no graphviz program needed
#: graphviz layout programs (``auto``: ``dot`` up to :data:`LARGE_STATES` states, else ``sfdp``)
ENGINES = ("auto", "dot", "neato", "sfdp", "fdp", "circo")
#: edge labels: ``auto`` (up to :data:`MAX_LABELED_EDGES` edges), ``all`` or ``none``
EDGE_LABELS = ("auto", "all", "none")
LARGE_STATES = 12
MAX_LABELED_EDGES = 40
#: the largest drawing, in inches (width, height); larger layouts are scaled down to fit
MAX_INCHES = (16, 12)
INSTALL_HINT = (
    "graphviz's `dot` program was not found on PATH; install it with "
    "`apt-get install graphviz` (Debian/Ubuntu), `brew install graphviz` (macOS) "
    "or `conda install graphviz`"
)


class DotNotFoundError(CflError):
    """graphviz's ``dot`` executable is not installed.

    Attributes:
        dot_path: kept for callers of earlier releases; always None (nothing is written).
    """

    def __init__(self, message: str, dot_path: Path | None = None) -> None:
        super().__init__(message)
        self.dot_path = dot_path


def format_weight(weight: float, digits: int = 2) -> str:
    """``0.4512`` -> ``0.45``, ``0.5`` -> ``0.5``, ``1.0`` -> ``1``, ``0.0042`` -> ``0.004``."""
    weight = float(weight)
    if weight == 0:
        return "0"
    if abs(weight) >= 10 ** (-digits):
        text = f"{weight:.{digits}f}".rstrip("0").rstrip(".")
        return text or "0"
    return f"{weight:.1g}"


def _load(source: str | os.PathLike | Mapping[str, Any]) -> Diagram:
    """What to draw of the automaton in a file (an automaton of any kind, or a results.json)
    or a dict: its :meth:`~cfl_lightning.automata.Automaton.diagram` (validated)."""
    from cfl_lightning.automata import load_automaton
    from cfl_lightning.automata.loading import text_form_kind

    if isinstance(source, Mapping):
        data, where = dict(source), "automaton"
    elif text_form_kind(os.fspath(source)) is not None:  # a grammar's g.pcfg: read as one
        return load_automaton(source).diagram()
    else:
        where = os.fspath(source)
        data = read_json(where, error=CflError)  # one line naming the file, as load_automaton
    if isinstance(data, Mapping) and isinstance(data.get("automaton"), Mapping):
        data = dict(data["automaton"])  # a results.json
    return load_automaton(data, where=where).diagram()


def automaton_graph(
    source: str | os.PathLike | Mapping[str, Any],
    *,
    digits: int = 2,
    rankdir: str = "LR",
    title: str | None = None,
    engine: str = "auto",
    edge_labels: str = "auto",
) -> Any:
    """A ``graphviz.Digraph`` of the automaton (an automaton JSON path, results.json or dict).

    The automaton may be of any kind: what is drawn is its
    :meth:`~cfl_lightning.automata.Automaton.diagram` (a pushdown automaton's arcs name the stack
    action too). Node ids are ``s_<state>`` (state names never contain ``:``, which graphviz
    would read as a port: validation rejects it); labels are plain text, never HTML-like.

    Args:
        source: the automaton.
        digits: decimals of the weights.
        rankdir: ``LR`` or ``TB`` (``dot`` only).
        title: a caption above the drawing.
        engine: one of :data:`ENGINES` (see the module docstring for ``auto``).
        edge_labels: one of :data:`EDGE_LABELS`; without labels an edge's pen width grows
            with its largest weight.

    Raises:
        CflError: an unknown engine or edge-label choice, or a bad automaton.
    """
    if engine not in ENGINES:
        raise CflError(f"unknown engine {engine!r}; use one of {', '.join(ENGINES)}")
    if edge_labels not in EDGE_LABELS:
        raise CflError(f"unknown edge_labels {edge_labels!r}; use one of {', '.join(EDGE_LABELS)}")
    try:
        import graphviz
    except ImportError:
        raise CflError("the graphviz Python package is missing: pip install graphviz") from None

    diagram = _load(source)
    if engine == "auto":
        engine = "sfdp" if len(diagram.states) > LARGE_STATES else "dot"
    graph = _new_graph(graphviz, engine, rankdir, title)
    _add_states(graph, diagram, engine, digits, graphviz.nohtml)
    _add_edges(graph, diagram.arcs, edge_labels, digits, graphviz.nohtml)
    return graph


def _new_graph(graphviz: Any, engine: str, rankdir: str, title: str | None) -> Any:
    """An empty ``graphviz.Digraph`` with the drawing's graph, node and edge attributes."""
    graph = graphviz.Digraph("automaton", engine=engine)
    graph.attr(rankdir=rankdir, nodesep="0.45", ranksep="0.7", margin="0.1",
               size=f"{MAX_INCHES[0]},{MAX_INCHES[1]}")
    if engine != "dot":  # named in the source too, so that `dot -Tpng` of a .dot file agrees
        graph.attr(layout=engine, overlap="prism", sep="+6")
    graph.attr(
        "node", shape="circle", fontname="Helvetica", fontsize="12", width="0.55", fixedsize="false"
    )
    graph.attr("edge", fontname="Helvetica", fontsize="10", arrowsize="0.7")
    if title:
        graph.attr(label=graphviz.nohtml(title), labelloc="t", fontname="Helvetica", fontsize="14")
    return graph


def _add_states(graph: Any, diagram: Diagram, engine: str, digits: int, nohtml) -> None:
    """One node per state (final ones double-circled with their weight) and the start mark: an
    arrow from an invisible node under ``dot``, a bold outline under force-directed layouts."""
    if engine == "dot":
        graph.node("__start__", label="", shape="none", width="0", height="0")
    for state, weight in zip(diagram.states, diagram.final):
        if weight > 0:
            graph.node(
                _id(state),
                label=nohtml(f"{state}/{format_weight(weight, digits)}"),
                shape="doublecircle",
            )
        else:
            graph.node(_id(state), label=nohtml(state))
    if engine == "dot":
        graph.edge("__start__", _id(diagram.initial))
    else:  # force-directed layouts put the arrow's invisible tail anywhere: a bold outline
        graph.node(_id(diagram.initial), penwidth="3")


def _add_edges(
    graph: Any, arcs: Sequence[Arc], edge_labels: str, digits: int, nohtml
) -> None:
    """One edge per (source, target) pair: labelled with its ``label/weight`` lines (a PFSA's
    label is its symbol), or (without labels) with a pen width growing with its largest weight;
    dashed when its only arc weighs 0."""
    labels: dict[tuple[str, str], list[str]] = defaultdict(list)
    heaviest: dict[tuple[str, str], float] = defaultdict(float)
    zero: set[tuple[str, str]] = set()
    for arc in arcs:
        key = (arc.source, arc.target)
        labels[key].append(f"{arc.label}/{format_weight(arc.weight, digits)}")
        heaviest[key] = max(heaviest[key], float(arc.weight))
        if float(arc.weight) == 0:
            zero.add(key)
    labeled = edge_labels == "all" or (edge_labels == "auto" and len(labels) <= MAX_LABELED_EDGES)
    for (src, dst), lines in labels.items():
        style = "dashed" if (src, dst) in zero and len(lines) == 1 else "solid"
        if labeled:
            graph.edge(_id(src), _id(dst), label=nohtml("\n".join(lines)), style=style)
        else:
            width = f"{0.5 + 2.5 * heaviest[(src, dst)]:.2f}"
            graph.edge(_id(src), _id(dst), style=style, penwidth=width)


def _id(state: str) -> str:
    return f"s_{state}"


def render_automaton(
    source: str | os.PathLike | Mapping[str, Any],
    output: str | os.PathLike,
    *,
    fmt: str | None = None,
    digits: int = 2,
    rankdir: str = "LR",
    title: str | None = None,
    engine: str = "auto",
    edge_labels: str = "auto",
) -> Path:
    """Render the automaton to ``output`` (atomically); the format defaults to its extension.

    ``engine`` and ``edge_labels``: see :func:`automaton_graph`.

    The format ``dot`` writes the graph's source (graphviz's language), which needs no graphviz
    program: render it later with ``dot -T<fmt>``. When the layout program is missing, nothing
    is written and :class:`DotNotFoundError` says so, and how to get the source.

    Raises:
        DotNotFoundError: the layout program is not installed (nothing is written).
        CflError: bad input file or format.
        OutputError: ``output`` is the input file, a directory or another unsafe path.
    """
    output = Path(output)
    fmt = (fmt or output.suffix.lstrip(".")).lower()
    if fmt not in FORMATS:
        raise CflError(f"unsupported format {fmt!r} for {output}; use one of {', '.join(FORMATS)}")
    inputs = [] if isinstance(source, Mapping) else [source]
    check_output(output, inputs)
    graph = automaton_graph(
        source, digits=digits, rankdir=rankdir, title=title, engine=engine,
        edge_labels=edge_labels,
    )
    if fmt == "dot":
        atomic_write_text(output, graph.source, inputs=inputs)
        return output
    import graphviz

    try:
        if shutil.which(graph.engine) is None:
            raise graphviz.ExecutableNotFound([graph.engine])
        data = graph.pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        raise DotNotFoundError(
            f"{INSTALL_HINT}; nothing written (--output {output.with_suffix('.dot')} writes "
            "the graph's source, which needs no graphviz, to render later with "
            f"`dot -T{fmt}`)"
        ) from None
    except graphviz.CalledProcessError as err:
        text = (err.stderr or b"").decode(errors="replace").strip().splitlines()
        raise CflError(f"dot failed: {text[0] if text else err}") from None
    with atomic_open(output, "wb", inputs=inputs) as handle:
        handle.write(data)
    return output
