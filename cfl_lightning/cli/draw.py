"""``python -m cfl_lightning draw A.json --output A.png``: render an automaton with graphviz.

Examples::

    python -m cfl_lightning automaton parity --eta 0.3 --output parity.json
    python -m cfl_lightning draw parity.json --output parity.png
    python -m cfl_lightning draw runs/.../results.json --output automaton.svg --digits 3

Accepting states are double circles labelled ``name/final``; the initial state has an incoming
arrow; edges read ``symbol/weight``. Large automata stay readable: above 12 states the layout is
``sfdp`` (``--engine``), above 40 edges the labels are left out and an edge's width shows its
largest weight (``--edge-labels all`` keeps them), and the drawing is scaled to at most 16 x 12
inches (1,536 x 1,152 pixels as PNG). The input may also be a ``results.json`` (its
``automaton``). The format comes from the output's extension (png, svg, pdf, dot) or
``--format``. Needs graphviz's ``dot`` program (``apt-get install graphviz``), except for
``.dot`` (the graph's source, to render elsewhere with ``dot -Tpng``); without it nothing is
written.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cfl_lightning.cli.common import ArgumentParser, command_args, path_type, run_command

__all__ = ["main", "build_parser"]

PROG = "python -m cfl_lightning draw"
FORMATS = ("png", "svg", "pdf", "dot")  # cfl_lightning.analysis.draw's
ENGINES = ("auto", "dot", "neato", "sfdp", "fdp", "circo")  # cfl_lightning.analysis.draw's
EDGE_LABELS = ("auto", "all", "none")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description="Render an automaton JSON file with graphviz.")
    parser.add_argument("automaton", help="automaton JSON file (or a results.json)")
    parser.add_argument(
        "--output", required=True, type=path_type,
        help="output file (.png, .svg, .pdf, or .dot: the graph's source)",
    )
    parser.add_argument("--format", choices=FORMATS, help="default: the output's extension")
    parser.add_argument("--digits", type=int, default=2, help="decimals of the weights (default 2)")
    parser.add_argument("--rankdir", choices=("LR", "TB"), default="LR", help="layout direction")
    parser.add_argument("--title", help="caption above the drawing")
    parser.add_argument(
        "--engine", choices=ENGINES, default="auto",
        help="graphviz layout (default auto: dot up to 12 states, else sfdp)",
    )
    parser.add_argument(
        "--edge-labels", choices=EDGE_LABELS, default="auto",
        help="symbol/weight on edges (default auto: up to 40 edges; above, widths show weights)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = command_args(argv, "draw")
    parser = build_parser()
    args = parser.parse_args(argv)
    suffix = Path(args.output).suffix.lstrip(".").lower()
    if args.format is None and suffix not in FORMATS:
        parser.error(
            f"cannot tell the format of {args.output!r}: use .png, .svg, .pdf, .dot or --format"
        )
    if args.format is not None and suffix in FORMATS and suffix != args.format:
        parser.error(f"--format {args.format} does not match the extension of {args.output!r}")
    if not 0 <= args.digits <= 6:
        parser.error(f"--digits must be between 0 and 6, got {args.digits}")

    def body() -> int:
        from cfl_lightning.analysis.draw import render_automaton
        from cfl_lightning.io import check_output

        check_output(args.output, [args.automaton], what="--output")

        path = render_automaton(
            args.automaton,
            args.output,
            fmt=args.format,
            digits=args.digits,
            rankdir=args.rankdir,
            title=args.title,
            engine=args.engine,
            edge_labels=args.edge_labels,
        )
        sys.stderr.write(f"wrote {path}\n")
        return 0

    return run_command(body, PROG)
