"""``python -m cfl_lightning automaton random|parity ... --output A.json``.

Examples::

    python -m cfl_lightning automaton random --states 50 --symbols 10 \\
        --topology-seed 0 --weight-seed 0 --output random.json
    python -m cfl_lightning automaton parity --eta 0.3 --output parity.json
    python -m cfl_lightning automaton parity --weight-seed 7 --output parity7.json
"""

from __future__ import annotations

import sys

from cfl_lightning.cli.common import (
    ArgumentParser,
    command_args,
    probability_type,
    run_command,
    seed_type,
)

__all__ = ["main", "build_parser"]

PROG = "python -m cfl_lightning automaton"


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog=PROG, description="Generate an automaton JSON file.")
    kinds = parser.add_subparsers(dest="kind", required=True, parser_class=ArgumentParser)
    rnd = kinds.add_parser("random", help="random topology with Dirichlet weights")
    rnd.add_argument("--states", type=int, default=50)
    rnd.add_argument("--symbols", type=int, default=10)
    rnd.add_argument("--topology-seed", type=seed_type, default=0)
    rnd.add_argument("--weight-seed", type=seed_type, default=0)
    rnd.add_argument("--final-weight", type=float, default=0.3)
    rnd.add_argument("--keep-prob", type=probability_type, default=0.5)
    rnd.add_argument("--accept-prob", type=probability_type, default=0.3)
    rnd.add_argument("--concentration", type=float, default=1.0)
    rnd.add_argument("--output", required=True)
    par = kinds.add_parser("parity", help="the paper's parity + star-free automaton (Figure 1)")
    par.add_argument("--eta", type=float, default=0.5, help="P(a) at init (fixed weights)")
    par.add_argument(
        "--weight-seed",
        type=seed_type,
        default=None,
        help="resample Dirichlet weights with this seed",
    )
    par.add_argument(
        "--final-weight", type=float, default=None,
        help="final weight of odd and rep with --weight-seed (default 0.1)",
    )
    par.add_argument("--output", required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = command_args(argv, "automaton")
    args = build_parser().parse_args(argv)

    def body() -> int:
        from cfl_lightning.automata import generators
        from cfl_lightning.errors import CflError
        from cfl_lightning.io import check_output

        check_output(args.output, what="--output")
        if args.kind == "random":
            from cfl_lightning.sampling.budget import automaton_bytes, check_bytes

            if args.states >= 1 and args.symbols >= 1:
                check_bytes(
                    automaton_bytes(args.states, args.symbols),
                    what=f"an automaton with {args.states:,} states and {args.symbols:,} symbols",
                )
            pfsa = generators.random_pfsa(
                args.states,
                args.symbols,
                args.topology_seed,
                args.weight_seed,
                keep_prob=args.keep_prob,
                accept_prob=args.accept_prob,
                final_weight=args.final_weight,
                concentration=args.concentration,
            )
        elif args.weight_seed is not None:
            final = 0.1 if args.final_weight is None else args.final_weight
            pfsa = generators.resampled_parity_starfree_pfsa(args.weight_seed, final_weight=final)
        elif args.final_weight is not None:
            raise CflError(
                "--final-weight applies only with --weight-seed (Figure 1 fixes it at 0.1)"
            )
        else:
            pfsa = generators.parity_starfree_pfsa(args.eta)
        pfsa.to_json(args.output)
        sys.stderr.write(f"wrote {pfsa!r} to {args.output}\n")
        return 0

    return run_command(body, PROG)
