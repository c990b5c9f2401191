"""``python -m cfl_lightning automaton GENERATOR ... --output A.json``.

One subcommand per registered generator (:mod:`cfl_lightning.kinds.generators`), with one flag
per parameter. Examples::

    python -m cfl_lightning automaton random --states 50 --symbols 10 \\
        --topology-seed 0 --weight-seed 0 --output random.json
    python -m cfl_lightning automaton parity --eta 0.3 --output parity.json
    python -m cfl_lightning automaton parity --weight-seed 7 --output parity7.json
    python -m cfl_lightning automaton random_pcfg --nonterminals 10 --terminals 5 --rules 4 \\
        --seed 0 --output g.pcfg

A ``*.KIND`` output named after the generated automaton's kind (``g.pcfg``) holds its text form;
any other name, JSON.
"""

from __future__ import annotations

import sys

from cfl_lightning.cli.common import (
    ArgumentParser,
    command_args,
    path_type,
    probability_type,
    run_command,
    seed_type,
)

__all__ = ["main", "build_parser"]

PROG = "python -m cfl_lightning automaton"
#: how the command line reads each parameter type of :mod:`cfl_lightning.kinds.generators`
_TYPES = {"int": int, "float": float, "seed": seed_type, "probability": probability_type}


def build_parser() -> ArgumentParser:
    from cfl_lightning.kinds.generators import GENERATOR_REGISTRY

    parser = ArgumentParser(
        prog=PROG, description="Generate an automaton file (JSON, or a grammar's .pcfg text)."
    )
    kinds = parser.add_subparsers(dest="kind", required=True, parser_class=ArgumentParser)
    for entry in GENERATOR_REGISTRY:
        sub = kinds.add_parser(entry.name, help=entry.description, description=entry.description)
        for param in entry.params:
            shown = "" if param.default is None else f" (default {param.default})"
            sub.add_argument(
                param.flag, dest=param.name, type=_TYPES[param.type], default=param.default,
                metavar=param.flag.lstrip("-").replace("-", "_").upper(),
                help=f"{param.help}{shown}".replace("%", "%%"),
            )
        sub.add_argument("--output", required=True, type=path_type)
    return parser


def _write(automaton, path: str, name: str) -> None:  # noqa: ANN001 - any registered kind
    """JSON, or the kind's text form when the suffix names the kind (``g.pcfg``)."""
    from cfl_lightning.automata.loading import text_form_kind
    from cfl_lightning.errors import OutputError
    from cfl_lightning.io import atomic_write_text

    text_kind = text_form_kind(path)
    if text_kind is None:
        automaton.to_json(path)
    elif text_kind == automaton.kind:
        atomic_write_text(path, automaton.to_text())
    else:
        raise OutputError(f"--output {path}: a .{text_kind} file holds a {text_kind}, but "
                          f"{name} builds a {automaton.kind} (name it .json)")


def main(argv: list[str] | None = None) -> int:
    argv = command_args(argv, "automaton")
    args = build_parser().parse_args(argv)

    def body() -> int:
        from cfl_lightning.io import check_output
        from cfl_lightning.kinds.generators import generator

        entry = generator(args.kind)
        params = {p.name: getattr(args, p.name) for p in entry.params}
        check_output(args.output, what="--output")
        if entry.size is not None:
            from cfl_lightning.sampling.budget import automaton_bytes, check_bytes

            states, symbols = entry.size(params)
            if states >= 1 and symbols >= 1:
                check_bytes(
                    automaton_bytes(states, symbols),
                    what=f"an automaton with {states:,} states and {symbols:,} symbols",
                )
        automaton = entry(**params)
        _write(automaton, args.output, args.kind)
        sys.stderr.write(f"wrote {automaton!r} to {args.output}\n")
        return 0

    return run_command(body, PROG)
