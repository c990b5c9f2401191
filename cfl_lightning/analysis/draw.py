"""Render an automaton with graphviz, in the style of the paper's Figure 1.

States are circles; accepting states (final weight > 0) are double circles labelled
``name/final``; the initial state has an incoming arrow from nowhere; each edge is labelled
``symbol/weight`` (transitions between the same two states share one edge, one label line per
symbol). Needs the ``graphviz`` Python package and graphviz's ``dot`` program.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cfl_lightning.errors import CflError
from cfl_lightning.io import atomic_open, atomic_write_text, check_output, read_text

__all__ = ["DotNotFoundError", "format_weight", "automaton_graph", "render_automaton", "FORMATS"]

FORMATS = ("png", "svg", "pdf")
INSTALL_HINT = (
    "graphviz's `dot` program was not found on PATH; install it with "
    "`apt-get install graphviz` (Debian/Ubuntu), `brew install graphviz` (macOS) "
    "or `conda install graphviz`"
)


class DotNotFoundError(CflError):
    """graphviz's ``dot`` executable is not installed.

    Attributes:
        dot_path: where the graph's source was written instead (or None).
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


def _load(source: str | os.PathLike | Mapping[str, Any]) -> dict[str, Any]:
    """The automaton's JSON dict from a file (an automaton, or a results.json) or a dict."""
    from cfl_lightning.automata import PFSA

    if isinstance(source, Mapping):
        data, where = dict(source), "automaton"
    else:
        where = os.fspath(source)
        try:
            data = json.loads(read_text(source, error=CflError))
        except FileNotFoundError:
            raise CflError(f"no such file: {where}") from None
        except IsADirectoryError:
            raise CflError(f"{where}: is a directory, not an automaton file") from None
        except UnicodeDecodeError:
            raise CflError(
                f"{where}: not a text file (not UTF-8); expected automaton JSON"
            ) from None
        except json.JSONDecodeError as err:
            raise CflError(f"{where}: invalid JSON (line {err.lineno}): {err.msg}") from None
        except OSError as err:
            raise CflError(f"{where}: cannot read ({err.strerror or err})") from None
    if isinstance(data, Mapping) and isinstance(data.get("automaton"), Mapping):
        data = dict(data["automaton"])  # a results.json
    return PFSA.from_dict(data, source=where).to_dict()  # validated and canonical


def automaton_graph(
    source: str | os.PathLike | Mapping[str, Any],
    *,
    digits: int = 2,
    rankdir: str = "LR",
    title: str | None = None,
) -> Any:
    """A ``graphviz.Digraph`` of the automaton (an automaton JSON path, results.json or dict).

    Node ids are ``s_<state>`` (state names never contain ``:``, which graphviz would read as a
    port: :meth:`PFSA.validate` rejects it); labels are plain text, never HTML-like.
    """
    try:
        import graphviz
    except ImportError:
        raise CflError("the graphviz Python package is missing: pip install graphviz") from None
    nohtml = graphviz.nohtml

    data = _load(source)
    final = {k: float(v) for k, v in (data.get("final") or {}).items()}
    graph = graphviz.Digraph("automaton")
    graph.attr(rankdir=rankdir, nodesep="0.45", ranksep="0.7", margin="0.1")
    graph.attr(
        "node", shape="circle", fontname="Helvetica", fontsize="12", width="0.55", fixedsize="false"
    )
    graph.attr("edge", fontname="Helvetica", fontsize="10", arrowsize="0.7")
    if title:
        graph.attr(label=nohtml(title), labelloc="t", fontname="Helvetica", fontsize="14")
    graph.node("__start__", label="", shape="none", width="0", height="0")
    for state in data["states"]:
        weight = final.get(state, 0.0)
        if weight > 0:
            graph.node(
                _id(state),
                label=nohtml(f"{state}/{format_weight(weight, digits)}"),
                shape="doublecircle",
            )
        else:
            graph.node(_id(state), label=nohtml(state))
    graph.edge("__start__", _id(data["initial"]))
    labels: dict[tuple[str, str], list[str]] = defaultdict(list)
    zero: set[tuple[str, str]] = set()
    for arc in data["transitions"]:
        key = (arc["source"], arc["target"])
        labels[key].append(f"{arc['symbol']}/{format_weight(arc['weight'], digits)}")
        if float(arc["weight"]) == 0:
            zero.add(key)
    for (src, dst), lines in labels.items():
        style = "dashed" if (src, dst) in zero and len(lines) == 1 else "solid"
        graph.edge(_id(src), _id(dst), label=nohtml("\n".join(lines)), style=style)
    return graph


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
) -> Path:
    """Render the automaton to ``output`` (atomically); the format defaults to its extension.

    When graphviz's ``dot`` is missing, the graph's source is written to ``output`` with the
    suffix ``.dot`` instead (render it later with ``dot -T<fmt>``), and
    :class:`DotNotFoundError` says so.

    Raises:
        DotNotFoundError: ``dot`` is not installed (its ``dot_path`` is the source written).
        CflError: bad input file or format.
        OutputError: ``output`` is the input file, a directory or another unsafe path.
    """
    output = Path(output)
    fmt = (fmt or output.suffix.lstrip(".")).lower()
    if fmt not in FORMATS:
        raise CflError(f"unsupported format {fmt!r} for {output}; use one of {', '.join(FORMATS)}")
    inputs = [] if isinstance(source, Mapping) else [source]
    check_output(output, inputs)
    graph = automaton_graph(source, digits=digits, rankdir=rankdir, title=title)
    import graphviz

    try:
        if shutil.which("dot") is None:
            raise graphviz.ExecutableNotFound(["dot"])
        data = graph.pipe(format=fmt)
    except graphviz.ExecutableNotFound:
        dot_path = output.with_suffix(".dot")
        atomic_write_text(dot_path, graph.source, inputs=inputs)
        raise DotNotFoundError(
            f"{INSTALL_HINT}; wrote the graph source to {dot_path} instead "
            f"(render it with `dot -T{fmt} {dot_path} -o {output}`)",
            dot_path,
        ) from None
    except graphviz.CalledProcessError as err:
        text = (err.stderr or b"").decode(errors="replace").strip().splitlines()
        raise CflError(f"dot failed: {text[0] if text else err}") from None
    with atomic_open(output, "wb", inputs=inputs) as handle:
        handle.write(data)
    return output
