"""``python -m cfl_lightning analyze DIR_OR_SWEEP... --output fig.png``: causal vs correlational.

Examples::

    python -m cfl_lightning analyze runs/sweeps/parity_starfree_causal_exact \\
        runs/sweeps/parity_starfree_correlational --output figures/parity.png
    python -m cfl_lightning analyze runs/sweeps/fixed_topology_* --target state:q1 \\
        --target state:q37 --metric kl_target --bins 10 --output fixed.pdf
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

The y axis is the paper's per-state / per-transition / per-symbol contribution
(``kl_target_unweighted``) unless ``--metric`` says otherwise; the CSV's ``metric`` and
``quantity`` columns name it. Runs whose target the test strings visit fewer than
``--min-visits`` times are left out of both arms (their contribution is unknown, never 0); stderr
and the CSV (``excluded_min_visits``, ``no_value``) say how many per curve.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cfl_lightning.cli.common import ArgumentParser, command_args, run_command

__all__ = ["main", "build_parser"]

PROG = "python -m cfl_lightning analyze"
METRICS = ("kl_target", "kl_target_unweighted", "kl_total")
DEFAULT_METRIC = "kl_target_unweighted"
BINNINGS = ("quantile", "log", "linear")
FORMATS = ("png", "pdf", "svg")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description=(
            "Plot the target's per-state/-transition/-symbol contribution to the decomposed KL "
            "against its training occurrences (causal vs correlational)."
        ),
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
        "--metric",
        choices=METRICS,
        default=DEFAULT_METRIC,
        help=(
            "y axis: kl_target_unweighted (default; the paper's per-state/-transition/-symbol "
            "contribution), kl_target (the same times p_pi, nats/string) or kl_total"
        ),
    )
    parser.add_argument(
        "--min-visits",
        type=int,
        default=1,
        metavar="N",
        help=(
            "leave out runs whose target the test strings visit fewer than N times "
            "(results.json target_test_visits; both arms; default 1)"
        ),
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
    if args.min_visits < 0:
        parser.error(f"--min-visits must be 0 or more, got {args.min_visits}")

    def body() -> int:
        from cfl_lightning.analysis.aggregate import (
            aggregate,
            best_of_repeats,
            default_targets,
            expand_correlational,
            load_results,
            load_wandb_sweep,
            quantity_name,
            split_by_visits,
            write_table,
        )
        from cfl_lightning.analysis.plot import plot_curves, undrawable
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
        about = [r for r in best if r.event in targets]
        split = split_by_visits(about, args.min_visits)
        _report_visits(about, split, args.min_visits)
        rows = aggregate(
            best,
            metric=args.metric,
            bins=args.bins,
            binning=args.binning,
            targets=targets,
            min_visits=args.min_visits,
        )
        if not rows:
            valueless = sum(getattr(r, args.metric) is None for r in split.kept)
            raise CflError(
                f"nothing to plot: {len(about)} run/target point(s) about {', '.join(targets)}; "
                f"{sum(split.excluded.values())} below --min-visits {args.min_visits}, "
                f"{valueless} without a value of {args.metric}"
            )
        missing = {(r.target, r.model, r.setting, r.num_strings): r.no_value for r in rows}
        if sum(missing.values()):
            sys.stderr.write(
                f"{PROG}: left out {sum(missing.values())} run(s) without a value of "
                f"{args.metric} (unknown, not 0): {_per_curve(missing)}\n"
            )
        table = output.with_suffix(".csv")
        write_table(rows, table)
        plot_curves(
            rows, output, metric=args.metric, title=args.title, logx=args.logx, columns=args.columns
        )
        lost = undrawable(rows)
        if lost:
            sys.stderr.write(f"{PROG}: {lost} point(s) could not be drawn (non-finite x or y)\n")
        names = sorted({quantity_name(args.metric, t) for t in targets})
        sys.stderr.write(f"{PROG}: y axis: {args.metric} ({', '.join(names)})\n")
        settings = sorted({r.setting for r in rows})
        sys.stderr.write(
            f"{PROG}: {len(records)} runs ({len(best)} run/target points after best-of-repeats), "
            f"{len({r.target for r in rows})} target(s), {', '.join(settings)}; "
            f"wrote {output} and {table}\n"
        )
        return 0

    return run_command(body, PROG)


def _curve_text(key: tuple) -> str:
    """``(target, model, setting, num_strings)`` -> ``state:odd LSTM causal_exact``."""
    target, model, setting, _ = key
    model = model[: -len("LanguageModel")] if model.endswith("LanguageModel") else model
    return f"{target} {model} {setting}"


def _per_curve(counts: dict) -> str:
    """``{curve: n}`` -> ``state:odd LSTM causal_exact 2, ...`` (nonzero counts only)."""
    return ", ".join(f"{_curve_text(k)} {n}" for k, n in sorted(counts.items(), key=str) if n)


def _report_visits(records: list, split: object, min_visits: int) -> None:
    """stderr lines: runs left out by ``--min-visits`` per curve; runs with unknown visits."""
    from collections import Counter

    from cfl_lightning.analysis.aggregate import curve_key

    totals = Counter(curve_key(r) for r in records)
    excluded = sum(split.excluded.values())
    if excluded:
        parts = ", ".join(
            f"{_curve_text(k)} {n} of {totals[k]}"
            for k, n in sorted(split.excluded.items(), key=str)
        )
        sys.stderr.write(
            f"{PROG}: --min-visits {min_visits} left out {excluded} run(s) whose target the test "
            f"strings visit fewer than {min_visits} time(s): {parts}\n"
        )
    else:
        sys.stderr.write(f"{PROG}: --min-visits {min_visits} left out no run\n")
    unknown = sum(split.unknown.values())
    if unknown:
        sys.stderr.write(
            f"{PROG}: {unknown} run(s) record no target_test_visits (older results.json): kept, "
            "their test visits unknown\n"
        )
