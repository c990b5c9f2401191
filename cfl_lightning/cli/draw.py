"""``python -m cfl_lightning draw A.json --output A.png``: render an automaton with graphviz.

Examples::

    python -m cfl_lightning automaton parity --eta 0.3 --output parity.json
    python -m cfl_lightning draw parity.json --output parity.png
    python -m cfl_lightning draw runs/.../results.json --output automaton.svg --digits 3

Accepting states are double circles labelled ``name/final``; the initial state has an incoming
arrow; edges read ``symbol/weight``. The input may also be a ``results.json`` (its
``automaton``). The format comes from the output's extension (png, svg, pdf) or ``--format``.
Needs graphviz's ``dot`` program (``apt-get install graphviz``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from cfl_lightning.cli.common import ArgumentParser, command_args, run_command

__all__ = ["main", "build_parser"]

PROG = "python -m cfl_lightning draw"
FORMATS = ("png", "svg", "pdf")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description="Render an automaton JSON file with graphviz.")
    parser.add_argument("automaton", help="automaton JSON file (or a results.json)")
    parser.add_argument("--output", required=True, help="output file (.png, .svg or .pdf)")
    parser.add_argument("--format", choices=FORMATS, help="default: the output's extension")
    parser.add_argument("--digits", type=int, default=2, help="decimals of the weights (default 2)")
    parser.add_argument("--rankdir", choices=("LR", "TB"), default="LR", help="layout direction")
    parser.add_argument("--title", help="caption above the drawing")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = command_args(argv, "draw")
    parser = build_parser()
    args = parser.parse_args(argv)
    suffix = Path(args.output).suffix.lstrip(".").lower()
    if args.format is None and suffix not in FORMATS:
        parser.error(f"cannot tell the format of {args.output!r}: use .png, .svg, .pdf or --format")
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
        )
        sys.stderr.write(f"wrote {path}\n")
        return 0

    return run_command(body, PROG)
