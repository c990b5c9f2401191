"""``python -m cfl_lightning analyze DIR_OR_SWEEP... --output fig.png``: causal vs correlational.

Examples::

    python -m cfl_lightning analyze runs/sweeps/parity_starfree_causal_exact \\
        runs/sweeps/parity_starfree_correlational --output figures/parity.png
    python -m cfl_lightning analyze runs/sweeps/fixed_topology_* --target state:q1 \\
        --target state:q37 --metric kl_target_unweighted --bins 10 --output fixed.pdf
    python -m cfl_lightning analyze ENTITY/PROJECT/SWEEP_ID ENTITY/PROJECT/SWEEP_ID2 --output f.png

Every ``results.json`` below the given directories is read; an argument that is not an existing
directory is taken as a W&B sweep path and read through the public API (finished runs only).
Per (automaton, model, intervention, target, count) the repeat with the lowest ``kl_total`` is
kept. By default the targets are the causal runs' intervened events; an unconstrained
(correlational) run contributes to every target, since its results.json records all events'
occurrences and decomposed KL. Causal runs give one point per intervention count (mean +- one
standard error over automata); correlational runs are binned by realized count (``--bins``,
``--binning``). The curve points are also written as CSV beside the figure (``fig.csv`` for
``fig.png``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cfl_lightning.cli.common import ArgumentParser, command_args, run_command

__all__ = ["main", "build_parser"]

PROG = "python -m cfl_lightning analyze"
METRICS = ("kl_target", "kl_target_unweighted", "kl_total")
BINNINGS = ("quantile", "log", "linear")
FORMATS = ("png", "pdf", "svg")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description="Plot decomposed KL against target occurrences (causal vs correlational).",
    )
    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="DIR_OR_SWEEP",
        help="run directories (searched for results.json) or W&B sweeps ENTITY/PROJECT/SWEEP_ID",
    )
    parser.add_argument("--output", required=True, help="figure path (.png, .pdf or .svg)")
    parser.add_argument(
        "--target",
        action="append",
        metavar="EVENT",
        help="target event, e.g. state:odd (repeatable; default: the causal runs' targets)",
    )
    parser.add_argument(
        "--metric", choices=METRICS, default="kl_target", help="y axis (default kl_target)"
    )
    parser.add_argument("--bins", type=int, default=8, help="correlational bins (default 8)")
    parser.add_argument(
        "--binning", choices=BINNINGS, default="quantile", help="correlational bins' edges"
    )
    parser.add_argument("--logx", action="store_true", help="logarithmic x axis")
    parser.add_argument("--title", help="figure title")
    parser.add_argument("--columns", type=int, default=4, help="panels per row (default 4)")
    return parser


def _sweep_path(text: str) -> str | None:
    """``ENTITY/PROJECT/SWEEP_ID`` (also from ``ENTITY/PROJECT/sweeps/SWEEP_ID``), else None."""
    parts = text.strip("/").split("/")
    if len(parts) == 4 and parts[2] == "sweeps":
        parts = [parts[0], parts[1], parts[3]]
    return "/".join(parts) if len(parts) == 3 and all(parts) else None


def main(argv: list[str] | None = None) -> int:
    argv = command_args(argv, "analyze")
    parser = build_parser()
    args = parser.parse_args(argv)
    output = Path(args.output)
    if output.suffix.lstrip(".").lower() not in FORMATS:
        parser.error(f"--output must end in .png, .pdf or .svg, got {args.output!r}")
    if args.bins < 1:
        parser.error(f"--bins must be positive, got {args.bins}")
    if args.columns < 1:
        parser.error(f"--columns must be positive, got {args.columns}")

    def body() -> int:
        from cfl_lightning.analysis.aggregate import (
            aggregate,
            best_of_repeats,
            default_targets,
            expand_correlational,
            load_results,
            load_wandb_sweep,
            write_table,
        )
        from cfl_lightning.analysis.plot import plot_curves
        from cfl_lightning.errors import CflError

        records, problems = [], []
        for item in args.inputs:
            if os.path.isdir(item):
                found, skipped = load_results(item)
            elif _sweep_path(item) and not os.path.exists(item):
                found, skipped = load_wandb_sweep(_sweep_path(item))
            else:
                raise CflError(
                    f"{item}: not a directory, nor a W&B sweep path ENTITY/PROJECT/SWEEP_ID"
                )
            records += found
            problems += skipped
        if problems:
            sys.stderr.write(f"{PROG}: skipped {len(problems)} run(s), e.g. {problems[0]}\n")
        if not records:
            raise CflError(f"no results.json found under {' '.join(args.inputs)}")
        targets = args.target or default_targets(records)
        known = {r.event for r in records if r.event is not None}
        for r in records:
            known.update(r.occurrences or ())
        unknown = [t for t in targets if t not in known]
        if unknown:
            raise CflError(
                f"no runs about target {unknown[0]}; found: {', '.join(sorted(known)) or 'none'}"
            )
        best = best_of_repeats(expand_correlational(records, targets))
        rows = aggregate(
            best, metric=args.metric, bins=args.bins, binning=args.binning, targets=targets
        )
        if not rows:
            raise CflError(
                f"{len(records)} runs found, none with a target event and a finite {args.metric}"
            )
        table = output.with_suffix(".csv")
        write_table(rows, table)
        plot_curves(
            rows, output, metric=args.metric, title=args.title, logx=args.logx, columns=args.columns
        )
        settings = sorted({r.setting for r in rows})
        sys.stderr.write(
            f"{PROG}: {len(records)} runs ({len(best)} run/target points after best-of-repeats), "
            f"{len({r.target for r in rows})} target(s), {', '.join(settings)}; "
            f"wrote {output} and {table}\n"
        )
        return 0

    return run_command(body, PROG)
