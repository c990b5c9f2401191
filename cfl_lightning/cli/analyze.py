"""``python -m cfl_lightning analyze INPUT... --output fig.png``: causal vs correlational.

Examples::

    python -m cfl_lightning analyze runs/sweeps/parity_starfree_causal_exact \\
        runs/sweeps/parity_starfree_correlational --output figures/parity.png
    python -m cfl_lightning analyze runs/sweeps/fixed_topology_* --target state:q1 \\
        --target state:q37 --metric kl_target --bins 10 --output fixed.pdf
    python -m cfl_lightning analyze ENTITY/PROJECT/SWEEP_ID ENTITY/PROJECT/SWEEP_ID2 --output f.png
    python -m cfl_lightning analyze runs/sweeps/parity_* --export-results parity.jsonl
    python -m cfl_lightning analyze parity.jsonl --output figures/parity.png
    python -m cfl_lightning analyze runs/ --target 'symbol:*' --metric kl_target --output p.png
    python -m cfl_lightning analyze docs/headline/results.jsonl --plan docs/headline/plan_v1.yaml
    python -m cfl_lightning analyze docs/headline/v3/results.jsonl --target symbol:a \\
        --control non-target --metric both --output did.png

An input is a directory (every ``results.json`` below it is read), a ``.jsonl`` file (one
results object per line, as ``--export-results`` writes them), or a W&B sweep path
``ENTITY/PROJECT/SWEEP_ID`` read through the public API (finished runs only). A path that starts
with ``/``, ``.`` or ``~``, or whose first part is a local directory, is always local: if it does
not exist, the command says so. Per (automaton, model, intervention, target, count) the repeat
with the lowest ``kl_total`` is kept. By default the targets are the causal runs' intervened
events; an unconstrained (correlational) run contributes to every target, since its
results.json records all events' occurrences and decomposed KL. Causal runs give one point per
intervention count (mean over automata, with a 95% Student-t interval, on the log scale for
non-negative quantities: the CSV's ``ci_method``); correlational runs are
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

A pooled target (``--target 'symbol:*'``, ``'state:*'``, ``'transition:*'``) puts every event of
that kind of every run at its own count (realized, or intervened for a causal run's event): one
curve per architecture and setting. The automaton stays the independent unit: a point's pairs
are reduced to one mean per automaton before its mean and interval, ``n`` counts automata and the
CSV's ``pairs``/``gap_pairs`` columns the (run, event) pairs.

With ``--metric`` ``kl_target_unweighted`` (the default) or ``kl_target``, stdout gives the gap
table under both measures (the paper names both readings: unweighted, and weighted by the
stationary probability ``p_pi``), the figure and CSV the ``--metric`` one.

``--export-results OUT.jsonl`` writes the runs read (every repeat) as JSON Lines in a compact
form: the keys the analysis reads, the config cut down to what identifies the point, and the
per-event values (``occurrences``, ``kl``, ``kl_unweighted``, ``test_visits``): every event of
every run without ``--target``, the targets' only with it. Analysing the export with the same
``--target`` options gives the same CSV as analysing the inputs. An export with no run to write
is an error.

``--metric both`` draws the two readings side by side (a panel each; one CSV, its ``metric``
column telling them apart).

``--control non-target`` compares the target with the rest of the corpus
(:mod:`cfl_lightning.analysis.control`): per run, the mean of the same measure over the run's
other events of the target's kind with a test visit (EOS excluded); ``did`` = target minus
control per run, averaged per automaton, with a 95% t-interval over automata. The CSV gains
``control``, ``did``, ``did_ci_low``, ``did_ci_high`` and ``did_n``, the figure a lower row of
panels, stdout a table per reading (with or without ``--output``).

``--unit seed`` takes every interval over the training seeds of the runs of one automaton
(refused over several): repeats with different seeds are kept apart instead of reduced to the
best; stdout, the CSV's ``unit`` column and the figure's title say that such intervals do not
generalize over automata.

``--plan PLAN.yaml`` evaluates a plan of pre-registered contrasts
(:mod:`cfl_lightning.analysis.plan`) on the runs read and prints its tables and verdict, under
both measures unless the plan names its ``measures``; with ``--output`` the curves take the
plan's target and bins (unless ``--edges`` is given).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cfl_lightning.analysis.aggregate import X_AXES
from cfl_lightning.analysis.control import CONTROL_METRICS, CONTROLS
from cfl_lightning.analysis.pooling import is_pooled
from cfl_lightning.analysis.report import (
    BINNINGS,
    BOTH,
    DEFAULT_METRIC,
    FORMATS,
    METRICS,
    did_table,
    gap_table,
    input_kind,
    model_label,
)
from cfl_lightning.analysis.selection import UNITS
from cfl_lightning.cli.common import (
    ArgumentParser,
    command_args,
    edges_type,
    path_type,
    run_command,
)

__all__ = ["main", "build_parser", "check_args", "analyze", "input_kind", "gap_table"]

PROG = "python -m cfl_lightning analyze"
SHOWN_PROBLEMS = 5  # skipped runs named one per line on stderr; the rest are counted


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
        "--x",
        choices=X_AXES,
        default="count",
        help=(
            "x axis: count (default; occurrences, or strings containing the target) or "
            "train_tokens (the symbols each run trained on, results.json train_tokens: causal "
            "points at their runs' mean, correlational runs binned on it, no gap)"
        ),
    )
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
        "--output", type=path_type,
        help="figure path (.png, .pdf or .svg); the CSV goes beside it",
    )
    parser.add_argument(
        "--export-results",
        type=path_type,
        metavar="OUT.jsonl",
        help=(
            "also (or, without --output, only) write the runs read as compact JSON Lines: the "
            "keys the analysis reads and the per-event values (every event of every run; with "
            "--target, the targets' only); an export of no run is an error"
        ),
    )
    parser.add_argument(
        "--target",
        action="append",
        metavar="EVENT",
        help=(
            "target event, e.g. state:odd, or a pooled target, e.g. 'symbol:*' (every symbol of "
            "every run; intervals over automata) (repeatable; default: the causal runs' targets)"
        ),
    )
    parser.add_argument(
        "--plan",
        metavar="PLAN.yaml",
        help=(
            "evaluate a plan of pre-registered contrasts (bins, counts, contrasts, claims) and "
            "print its tables and verdict under both measures"
        ),
    )
    parser.add_argument(
        "--level",
        type=float,
        metavar="P",
        help=(
            "with --plan: every interval at coverage P instead of the plan's own (e.g. 0.99; a "
            "sensitivity check: the plan's level is what it pre-registered)"
        ),
    )


def _add_curve_arguments(parser: ArgumentParser) -> None:
    """What the curves show: --metric, --min-visits and the correlational bins."""
    parser.add_argument(
        "--metric",
        choices=(*METRICS, BOTH),
        default=DEFAULT_METRIC,
        help=(
            "y axis: kl_target_unweighted (default; the paper's per-state/-transition/-symbol "
            "contribution, nats per visit), kl_target (the same times p_pi, nats per string), "
            "both (a panel per reading; one CSV) or kl_total"
        ),
    )
    parser.add_argument(
        "--control",
        choices=CONTROLS,
        help=(
            "non-target: per run, the mean of the same measure over the run's other events of "
            "the target's kind (>= 1 test visit, EOS excluded); the CSV, a lower row of panels "
            "and stdout give did = target - control, per automaton, with 95%% intervals"
        ),
    )
    parser.add_argument(
        "--unit",
        choices=UNITS,
        default="automaton",
        help=(
            "the independent unit of every interval: automaton (default), or seed: the training "
            "seeds of the runs of ONE automaton (intervals that do not generalize over automata)"
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
    parser.add_argument(
        "--repeats", choices=("best", "mean"), default="best",
        help="repeats of one corpus: keep the best (lowest kl_total; default), or one run per "
        "training seed, averaged per automaton before any interval (mean)",
    )
    parser.add_argument(
        "--split", choices=("test", "long"), default="test",
        help="the evaluation split whose values are analysed: test (default) or long (the "
        "length split, data.long_min_length; runs without one are skipped and named)",
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
    if (args.output is None and args.export_results is None and args.plan is None
            and args.control is None):
        return ("give --output FIGURE, --export-results OUT.jsonl, or both (or --plan PLAN.yaml, "
                "or --control non-target for its tables)")
    if args.control is not None and args.metric not in (*CONTROL_METRICS, BOTH):
        return f"--control takes a per-event measure: --metric {args.metric} has no control"
    if args.plan is not None and args.target:
        return "--plan names its own target: leave out --target"
    if args.level is not None and (args.plan is None or not 0.5 < args.level < 1):
        return "--level takes a coverage in (0.5, 1) and goes with --plan"
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
    gap table, the non-target control's table (``--control``) and the plan's tables. Every check
    comes first: nothing is written when the analysis is refused.

    Returns:
        0.

    Raises:
        CflError: no results, a target no run is about, nothing to plot or to export, a bad plan,
            ``--unit seed`` on runs of several automata.
    """
    from cfl_lightning.analysis import report
    from cfl_lightning.errors import CflError

    plan = _load_plan(args)
    inputs = report.read_inputs(args.inputs, split=args.split)
    _report_skipped(inputs.problems, len(inputs.records))
    records = inputs.records
    if not records:
        raise CflError(f"no results found in {' '.join(args.inputs)}")
    targets, events = report.resolve_targets(records, [plan.target] if plan else args.target)
    tables = _plan_text(records, plan, args.unit) if plan is not None else ""
    output = None if args.output is None else Path(args.output)
    curves = None
    if output is not None or (args.control is not None and plan is None):
        curves = _curves(records, targets, events, args, plan)
    if args.export_results is not None:
        _export(records, args.target and events, args.export_results, inputs.jsonl)
    if curves is not None:
        _write(curves, len(records), targets, output, args)
    sys.stdout.write(tables)
    return 0


def _load_plan(args: argparse.Namespace) -> object:
    """The plan of ``--plan`` (None without), at ``--level`` and with ``--control`` if given."""
    if args.plan is None:
        return None
    from dataclasses import replace

    from cfl_lightning.analysis.plan import load_plan

    plan = load_plan(args.plan)
    if args.level is not None:
        plan = replace(plan, level=args.level)
    if args.control is not None:
        plan = replace(plan, control=args.control)
    return plan


def _plan_text(records: list, plan: object, unit: str) -> str:
    """The plan's tables and verdict (Markdown); with ``unit`` ``seed`` over training seeds."""
    from cfl_lightning.analysis.plan import evaluate_plan
    from cfl_lightning.analysis.plan_table import format_plan
    from cfl_lightning.analysis.plot_text import SEED_NOTE
    from cfl_lightning.analysis.selection import seed_units

    if unit != "seed":
        return format_plan(evaluate_plan(records, plan))
    text = format_plan(evaluate_plan(seed_units(records), plan))
    return text.replace("\n", f"\n\n{SEED_NOTE} (every n below counts seeds)\n", 1)


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


def _export(records: list, events: list[str] | None, path: str, inputs: list[str]) -> None:
    """Write the runs about ``events`` (None: every run, every event) as compact JSON Lines and
    say how large it is."""
    import os

    from cfl_lightning.analysis.records import write_jsonl
    from cfl_lightning.analysis.report import export_selection

    about, what = export_selection(records, events)
    lines = write_jsonl(about, path, events=events, inputs=inputs)
    size = ""
    if os.path.isfile(path):  # not a pipe
        total = os.path.getsize(path)
        size = f": {total:,} bytes, {total / max(lines, 1):,.0f} bytes per run"
    sys.stderr.write(
        f"{PROG}: exported {lines} of {len(records)} run(s) ({what}) to {path}{size}\n"
    )


def _readings(metric: str) -> tuple[list[str], list[str]]:
    """(the measures drawn, the measures tabulated on stdout) for ``--metric``: both readings of
    the paper's measure are tabulated whenever one is asked for (issue 27)."""
    pair = ["kl_target_unweighted", "kl_target"]  # the paper's two readings of its measure
    if metric == BOTH:
        return pair, pair
    if metric in pair:
        return [metric], [metric, pair[1 - pair.index(metric)]]
    return [metric], [metric]


def _curves(records: list, targets: list[str], events: list[str], args, plan) -> dict:
    """``{measure: Curves}`` (:func:`~cfl_lightning.analysis.report.build_curves`) of every
    tabulated measure (:func:`_readings`), the drawn ones first; stderr: what was left out. A
    plan gives its bins as edges unless ``--edges`` is given."""
    from cfl_lightning.analysis.report import build_curves
    from cfl_lightning.errors import CflError

    edges = args.edges if args.edges is not None or plan is None else list(plan.bins)
    options = dict(bins=args.bins, binning=args.binning, edges=edges, min_visits=args.min_visits,
                   control=args.control is not None, unit=args.unit, x=args.x,
                   repeats=args.repeats)
    drawn, tabulated = _readings(args.metric)
    out = {}
    for metric in tabulated:
        try:
            out[metric] = build_curves(records, targets, events, metric=metric, **options)
        except CflError:
            if metric in drawn:
                raise
            sys.stderr.write(f"{PROG}: no point has a value of {metric} (the other measure)\n")
            continue
        if metric == drawn[0]:
            _report_left_out(out[metric], metric, args.min_visits)
    return out


def _report_left_out(curves: object, metric: str, min_visits: int) -> None:
    """stderr: the run/target points a drawn measure's curves left out, and why."""
    _report_visits(curves.about, curves.split, min_visits)
    missing = {(r.target, r.model, r.setting, r.num_strings): r.no_value for r in curves.rows}
    if sum(missing.values()):
        sys.stderr.write(
            f"{PROG}: left out {sum(missing.values())} run(s) without a value of "
            f"{metric} (unknown, not 0): {_per_curve(missing)}\n"
        )


def _write(curves: dict, num_records: int, targets: list[str], output: Path | None, args) -> None:
    """The CSV and the figure (with ``output``), a summary on stderr, and per measure the gap
    table (and the control's table) on stdout."""
    drawn = [m for m in _readings(args.metric)[0] if m in curves]
    if output is not None:
        _figure(curves, drawn, num_records, targets, output, args)
    if args.unit == "seed":
        from cfl_lightning.analysis.plot_text import SEED_NOTE

        sys.stdout.write(f"{SEED_NOTE}\n")
    several = len(curves) > 1
    for metric, these in curves.items():
        if several:
            sys.stdout.write(f"measure {metric}:\n")
        sys.stdout.write(gap_table(these.rows))
        if args.control is not None:
            sys.stdout.write(did_table(these.rows))


def _figure(curves: dict, drawn: list[str], num_records: int, targets: list[str], output: Path,
            args) -> None:
    """The CSV and the figure of the ``drawn`` measures' rows; stderr: what was drawn."""
    from cfl_lightning.analysis.aggregate import quantity_name, write_table
    from cfl_lightning.analysis.plot import plot_curves, undrawable

    rows = [r for metric in drawn for r in curves[metric].rows]
    table = output.with_suffix(".csv")
    write_table(rows, table)
    plot_curves(
        rows, output, metric=drawn[0], title=args.title, logx=args.logx, columns=args.columns
    )
    lost = undrawable(rows)
    if lost:
        sys.stderr.write(f"{PROG}: {lost} point(s) could not be drawn (non-finite x or y)\n")
    for metric in drawn:
        names = sorted({quantity_name(metric, t) for t in targets})
        sys.stderr.write(f"{PROG}: y axis: {metric} ({', '.join(names)})\n")
    settings = sorted({r.setting for r in rows})
    num_best = curves[drawn[0]].num_best
    sys.stderr.write(
        f"{PROG}: {num_records} runs ({num_best} run/target points after "
        f"{'best-of-repeats' if args.repeats == 'best' else 'repeats kept for the mean'}), "
        f"{len({r.target for r in rows})} target(s), {', '.join(settings)}; "
        f"wrote {output} and {table}\n"
    )


def _curve_text(key: tuple) -> str:
    """``(target, model, setting, num_strings)`` -> ``state:odd LSTM causal_exact``."""
    target, model, setting, _ = key
    return f"{target} {model_label(model)} {setting}"


def _per_curve(counts: dict) -> str:
    """``{curve: n}`` -> ``state:odd LSTM causal_exact 2, ...`` (nonzero counts only)."""
    return ", ".join(f"{_curve_text(k)} {n}" for k, n in sorted(counts.items(), key=str) if n)


def _report_visits(records: list, split: object, min_visits: int) -> None:
    """stderr lines: run/target points (a run's, or each of a pooled target's) left out by
    ``--min-visits`` per curve; runs with unknown visits."""
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
            f"{PROG}: --min-visits {min_visits} left out {excluded} run/target point(s) whose "
            f"target the test strings visit fewer than {min_visits} time(s): {parts}\n"
        )
    else:
        sys.stderr.write(f"{PROG}: --min-visits {min_visits} left out no run/target point\n")
    unknown = sum(split.unknown.values())
    if unknown:
        sys.stderr.write(
            f"{PROG}: {unknown} run(s) record no target_test_visits (older results.json): kept, "
            "their test visits unknown\n"
        )
