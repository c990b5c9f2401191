"""``python -m cfl_lightning analyze INPUT... --output fig.png``: causal vs correlational.

Examples::

    python -m cfl_lightning analyze runs/sweeps/parity_starfree_causal_exact \\
        runs/sweeps/parity_starfree_correlational --output figures/parity.png
    python -m cfl_lightning analyze runs/sweeps/fixed_topology_* --target state:q1 \\
        --target state:q37 --metric kl_target --bins 10 --output fixed.pdf
    python -m cfl_lightning analyze ENTITY/PROJECT/SWEEP_ID ENTITY/PROJECT/SWEEP_ID2 --output f.png
    python -m cfl_lightning analyze runs/sweeps/parity_* --export-results parity.jsonl
    python -m cfl_lightning analyze parity.jsonl --output figures/parity.png

An input is a directory (every ``results.json`` below it is read), a ``.jsonl`` file (one
results object per line, as ``--export-results`` writes them), or a W&B sweep path
``ENTITY/PROJECT/SWEEP_ID`` read through the public API (finished runs only). A path that starts
with ``/``, ``.`` or ``~``, or whose first part is a local directory, is always local: if it does
not exist, the command says so. Per (automaton, model, intervention, target, count) the repeat
with the lowest ``kl_total`` is kept. By default the targets are the causal runs' intervened
events; an unconstrained (correlational) run contributes to every target, since its
results.json records all events' occurrences and decomposed KL. Causal runs give one point per
intervention count (mean over automata, with a 95% Student-t interval); correlational runs are
binned by realized count (``--bins``, ``--binning``). The curve points are also written as CSV
beside the figure (``fig.csv`` for ``fig.png``), with the gap at each causal count (causal mean /
mean of the correlational runs within a factor sqrt2 of the count, or the difference for signed
quantities) and its 95% interval; stdout lists the points whose gap interval excludes no gap.

The y axis is the paper's per-state / per-transition / per-symbol contribution
(``kl_target_unweighted``) unless ``--metric`` says otherwise; the CSV's ``metric`` and
``quantity`` columns name it. Runs whose target the test strings visit fewer than
``--min-visits`` times are left out of both arms (their contribution is unknown, never 0); stderr
and the CSV (``excluded_min_visits``, ``no_value``) say how many per curve. Results files that
cannot be read, or that hold a wrong type in a key the analysis reads, are skipped and named on
stderr; in a ``.jsonl`` input such a line is an error naming the file and line.

``--export-results OUT.jsonl`` writes the runs read (every repeat; only those about the
targets) as JSON Lines in a compact form: the keys the analysis reads, each run's per-event
values for the targets only, and the config cut down to what identifies the point. Analysing
the export with the same ``--target`` options gives the same CSV as analysing the inputs.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from cfl_lightning.cli.common import ArgumentParser, command_args, edges_type, run_command

__all__ = ["main", "build_parser", "check_args", "analyze", "input_kind", "gap_table"]

PROG = "python -m cfl_lightning analyze"
METRICS = ("kl_target", "kl_target_unweighted", "kl_total")
DEFAULT_METRIC = "kl_target_unweighted"
BINNINGS = ("quantile", "log", "linear")
FORMATS = ("png", "pdf", "svg")
SHOWN_PROBLEMS = 5  # skipped runs named one per line on stderr; the rest are counted
_WANDB_PART = re.compile(r"[A-Za-z0-9_.-]+")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description=(
            "Plot the target's per-state/-transition/-symbol contribution to the decomposed KL "
            "against its training occurrences (causal vs correlational), with 95% intervals "
            "over automata and the causal/correlational gap."
        ),
    )
    _add_input_arguments(parser)
    _add_curve_arguments(parser)
    parser.add_argument(
        "--logx",
        action="store_true",
        help="logarithmic x axis (ticks at the causal counts; bins at their median count)",
    )
    parser.add_argument("--title", help="figure title")
    parser.add_argument("--columns", type=int, default=4, help="panels per row (default 4)")
    return parser


def _add_input_arguments(parser: ArgumentParser) -> None:
    """What is read and written: the inputs, --output, --export-results, --target."""
    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help=(
            "run directories (searched for results.json), .jsonl files of results (one object "
            "per line, as --export-results writes them) or W&B sweeps ENTITY/PROJECT/SWEEP_ID"
        ),
    )
    parser.add_argument(
        "--output", help="figure path (.png, .pdf or .svg); the CSV goes beside it"
    )
    parser.add_argument(
        "--export-results",
        metavar="OUT.jsonl",
        help=(
            "also (or, without --output, only) write the runs read as compact JSON Lines: the "
            "keys the analysis reads, per-event values for the targets only"
        ),
    )
    parser.add_argument(
        "--target",
        action="append",
        metavar="EVENT",
        help="target event, e.g. state:odd (repeatable; default: the causal runs' targets)",
    )


def _add_curve_arguments(parser: ArgumentParser) -> None:
    """What the curves show: --metric, --min-visits and the correlational bins."""
    parser.add_argument(
        "--metric",
        choices=METRICS,
        default=DEFAULT_METRIC,
        help=(
            "y axis: kl_target_unweighted (default; the paper's per-state/-transition/-symbol "
            "contribution, nats per visit), kl_target (the same times p_pi, nats per string) or "
            "kl_total"
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
        "--edges", type=edges_type, default=None, metavar="E0,E1,...",
        help="correlational bins [E_i, E_i+1) given exactly (e.g. a stratified design's; runs "
        "outside [E0, Ek) are left out of the correlational curves); overrides --bins/--binning",
    )
    parser.add_argument(
        "--binning", choices=BINNINGS, default="quantile", help="correlational bins' edges"
    )


def _sweep_path(text: str) -> str | None:
    """``ENTITY/PROJECT/SWEEP_ID`` (also from ``ENTITY/PROJECT/sweeps/SWEEP_ID``), else None."""
    parts = text.strip("/").split("/")
    if len(parts) == 4 and parts[2] == "sweeps":
        parts = [parts[0], parts[1], parts[3]]
    return "/".join(parts) if len(parts) == 3 and all(parts) else None


def input_kind(item: str) -> tuple[str, str]:
    """What an input names: ``("dir", path)``, ``("jsonl", path)`` or ``("wandb", sweep)``.

    A W&B sweep is ``ENTITY/PROJECT/SWEEP_ID`` (or ``ENTITY/PROJECT/sweeps/SWEEP_ID``): three
    names of letters, digits, ``_``, ``.`` and ``-``, no leading ``/``, ``.`` or ``~``, and a
    first part that is not a local directory. Anything else is a local path.

    Raises:
        CflError: a local path that does not exist, or is a file but not ``.jsonl``.
    """
    from cfl_lightning.errors import CflError

    if os.path.isdir(item):
        return "dir", item
    if item.endswith(".jsonl") and os.path.isfile(item):
        return "jsonl", item
    if os.path.exists(item):
        raise CflError(f"{item}: not a directory nor a .jsonl file of results")
    sweep = _sweep_path(item)
    local = (
        item.startswith(("/", ".", "~"))
        or item.endswith(".jsonl")
        or os.path.isdir(item.split("/", 1)[0])
    )
    names = sweep.split("/") if sweep else []
    if names and not local and all(_WANDB_PART.fullmatch(p) and p.strip(".") for p in names):
        return "wandb", sweep
    raise CflError(
        f"{item}: no such directory or file (a W&B sweep is written ENTITY/PROJECT/SWEEP_ID)"
    )


def main(argv: list[str] | None = None) -> int:
    argv = command_args(argv, "analyze")
    parser = build_parser()
    args = parser.parse_args(argv)
    problem = check_args(args)
    if problem:
        parser.error(problem)
    return run_command(lambda: analyze(args), PROG)


def check_args(args: argparse.Namespace) -> str | None:
    """The first problem with parsed ``analyze`` arguments (a usage error), or None."""
    if args.output is None and args.export_results is None:
        return "give --output FIGURE, --export-results OUT.jsonl, or both"
    if args.output is not None and Path(args.output).suffix.lstrip(".").lower() not in FORMATS:
        return f"--output must end in .png, .pdf or .svg, got {args.output!r}"
    if args.export_results is not None and not args.export_results.endswith(".jsonl"):
        return f"--export-results must end in .jsonl, got {args.export_results!r}"
    if args.bins < 1:
        return f"--bins must be positive, got {args.bins}"
    if args.edges is not None and (
        len(args.edges) < 2 or any(not b > a for a, b in zip(args.edges, args.edges[1:]))
    ):
        return f"--edges must be at least two strictly increasing numbers, got {args.edges}"
    if args.columns < 1:
        return f"--columns must be positive, got {args.columns}"
    if args.min_visits < 0:
        return f"--min-visits must be 0 or more, got {args.min_visits}"
    return None


def analyze(args: argparse.Namespace) -> int:
    """Run the analysis of checked arguments (:func:`check_args`): read the inputs, then write
    the export, the CSV and the figure; stderr says what was read and left out, stdout holds the
    gap table. Every check comes first: nothing is written when the analysis is refused.

    Returns:
        0.

    Raises:
        CflError: no results, a target no run is about, or nothing to plot.
    """
    from cfl_lightning.analysis.aggregate import default_targets, expand_correlational
    from cfl_lightning.analysis.pooling import concrete_targets, covers
    from cfl_lightning.errors import CflError

    records, jsonl_inputs = _load(args.inputs)
    if not records:
        raise CflError(f"no results found in {' '.join(args.inputs)}")
    targets = args.target or default_targets(records)
    known = {r.event for r in records if r.event is not None}
    for r in records:
        known.update(r.occurrences or ())
    unknown = [t for t in targets if not any(covers(t, k) for k in known)]
    if unknown:
        raise CflError(
            f"no runs about target {unknown[0]}; found: {', '.join(sorted(known)) or 'none'}"
        )
    output = None if args.output is None else Path(args.output)
    events = concrete_targets(targets, known)
    expanded = expand_correlational(records, events)
    curves = _curves(expanded, targets, args) if output is not None else None
    if args.export_results is not None:
        _export(records, args.target and events, args.export_results, jsonl_inputs)
    if curves is not None:
        _write(*curves, len(records), targets, output, args)
    return 0


def _load(inputs: list[str]) -> tuple[list, list[str]]:
    """Every input's records (skipped results reported on stderr), and the .jsonl inputs."""
    from cfl_lightning.analysis.records import load_jsonl, load_results, load_wandb_sweep

    records, problems, jsonl_inputs = [], [], []
    for kind, path in [input_kind(item) for item in inputs]:  # every input checked first
        if kind == "dir":
            found, skipped = load_results(path)
        elif kind == "jsonl":
            found, skipped = load_jsonl(path), []
            jsonl_inputs.append(path)
        else:
            found, skipped = load_wandb_sweep(path)
        records += found
        problems += skipped
    _report_skipped(problems, len(records))
    return records, jsonl_inputs


def _report_skipped(problems: list[str], kept: int) -> None:
    """stderr: how many runs were skipped (of how many), each named up to SHOWN_PROBLEMS."""
    if not problems:
        return
    total = kept + len(problems)
    sys.stderr.write(f"{PROG}: skipped {len(problems)} of {total} run(s):\n")
    for problem in problems[:SHOWN_PROBLEMS]:
        sys.stderr.write(f"{PROG}:   {problem}\n")
    if len(problems) > SHOWN_PROBLEMS:
        sys.stderr.write(f"{PROG}:   ... and {len(problems) - SHOWN_PROBLEMS} more\n")


def _export(records: list, targets: list[str] | None, path: str, inputs: list[str]) -> None:
    """Write the runs about ``targets`` (concrete events; None: every run with every event) as
    compact JSON Lines and say how large it is.

    Raises:
        CflError: no run to export (nothing is written).
    """
    from cfl_lightning.analysis.aggregate import for_target
    from cfl_lightning.analysis.records import write_jsonl
    from cfl_lightning.errors import CflError

    if targets is None:
        about, what = list(records), "every run, every event"
    else:
        about = [
            r
            for r in records
            if r.event in targets
            or (r.setting == "correlational" and any(for_target(r, t) for t in targets))
        ]
        what = f"those about {', '.join(targets)}"
    if not about:
        raise CflError(f"nothing to export: none of the {len(records)} run(s) is about "
                       f"{', '.join(targets or [])}; {path} not written")
    lines = write_jsonl(about, path, events=targets, inputs=inputs)
    size = ""
    if os.path.isfile(path):  # not a pipe
        total = os.path.getsize(path)
        size = f": {total:,} bytes, {total / max(lines, 1):,.0f} bytes per run"
    sys.stderr.write(
        f"{PROG}: exported {lines} of {len(records)} run(s) ({what}) to {path}{size}\n"
    )


def _curves(expanded: list, targets: list[str], args) -> tuple[list, int]:
    """The curve points of the runs ``expanded`` per target (stderr: what was left out), and
    the number of run/target points after best-of-repeats.

    Raises:
        CflError: no point to plot.
    """
    from cfl_lightning.analysis.aggregate import aggregate, best_of_repeats, split_by_visits
    from cfl_lightning.analysis.pooling import pool_records
    from cfl_lightning.errors import CflError

    best = pool_records(best_of_repeats(expanded), targets)
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
        edges=args.edges,
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
    return rows, len(best)


def _write(
    rows: list, num_best: int, num_records: int, targets: list[str], output: Path, args
) -> None:
    """The CSV, the figure, a summary on stderr and the gap table on stdout."""
    from cfl_lightning.analysis.aggregate import quantity_name, write_table
    from cfl_lightning.analysis.plot import plot_curves, undrawable

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
        f"{PROG}: {num_records} runs ({num_best} run/target points after best-of-repeats), "
        f"{len({r.target for r in rows})} target(s), {', '.join(settings)}; "
        f"wrote {output} and {table}\n"
    )
    sys.stdout.write(gap_table(rows))


def gap_table(rows: list) -> str:
    """stdout text: how many causal points have a gap interval, and those that exclude no gap."""
    import math

    from cfl_lightning.analysis.stats import GAP_FACTOR, excludes_no_gap

    with_gap = [r for r in rows if r.gap_kind is not None]
    with_interval = [r for r in with_gap if math.isfinite(r.gap_ci_low)]
    shown = [r for r in with_interval if excludes_no_gap(r.gap_kind, r.gap_ci_low, r.gap_ci_high)]
    factor = "sqrt2" if math.isclose(GAP_FACTOR, math.sqrt(2.0)) else f"{GAP_FACTOR:.3g}"
    head = (
        f"gap at each causal count N: causal mean vs the correlational runs with x in "
        f"[N/{factor}, N*{factor}] (ratio, or difference for signed quantities), "
        f"95% interval over automata\n"
        f"{len(with_gap)} causal point(s) have such runs, {len(with_interval)} an interval; "
        f"{len(shown)} exclude no gap (ratio 1, difference 0)"
    )
    if not shown:
        return head + "\n"
    table = [("target", "model", "setting", "N", "kind", "gap", "95% interval", "n", "gap_n")]
    for r in shown:
        table.append(
            (
                r.target,
                _short(r.model),
                r.setting,
                f"{r.x:g}",
                r.gap_kind,
                f"{r.gap:.3g}",
                f"[{r.gap_ci_low:.3g}, {r.gap_ci_high:.3g}]",
                str(r.n),
                str(r.gap_n),
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in table]
    return head + ":\n" + "\n".join(lines) + "\n"


def _short(model: str) -> str:
    """``LSTMLanguageModel`` -> ``LSTM``."""
    return model[: -len("LanguageModel")] if model.endswith("LanguageModel") else model


def _curve_text(key: tuple) -> str:
    """``(target, model, setting, num_strings)`` -> ``state:odd LSTM causal_exact``."""
    target, model, setting, _ = key
    return f"{target} {_short(model)} {setting}"


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
