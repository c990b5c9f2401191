"""``python -m cfl_lightning stratify SWEEP.yaml ...``: a stratified correlational sweep.

Example (the headline study's correlational arm, docs/headline_study.md)::

    python -m cfl_lightning stratify sweeps/random_topology_correlational.yaml \\
        --event symbol:a --edges 100,141,200,283,400,566,800,1131,1600 --per-bin 16 \\
        --seed 0 --parallel 2 --output sweeps/headline/correlational.yaml

For every distinct data setting of the sweep's grid, the training corpus is built as its run
will build it (same arguments and seed, through ``PFADataModule`` and its corpus cache) and the
event's realized count is read off; nothing is trained. Settings are binned by that count
(``[E_i, E_{i+1})``) and up to ``--per-bin`` are chosen per bin by a draw seeded with
``(--seed, bin)`` (:mod:`cfl_lightning.stratify`). Writes ``OUT.yaml`` (a grid sweep of exactly the
chosen settings, with every model and seed of the original) and ``OUT.csv`` (one row per
setting: its varying ``data.*`` values, ``realized_count``, ``unit``, ``bin`` and ``chosen``), and
prints the candidates and chosen per bin. The same call gives the same choice.

A pooled event, ``--event 'symbol:*'`` or ``'state:*'``, bins (setting, symbol) pairs: each
setting is measured for every symbol (state), and settings are chosen until every bin holds
``--per-bin`` pairs from ``--min-settings`` settings, or all it has (rarest bin first; one setting
fills several bins at once; :func:`cfl_lightning.stratify.choose_pooled`). ``OUT.csv`` then has
one row per pair (an ``event`` column). Example (the headline study's version 2)::

    python -m cfl_lightning stratify sweeps/headline/correlational_candidates.yaml \\
        --event 'symbol:*' --edges 50,71,100,141,200,283,400,566,800,1131,1600 --per-bin 40 \\
        --min-settings 30 --seed 0 --parallel 2 --output sweeps/headline/v2/correlational.yaml
"""

from __future__ import annotations

import sys

from cfl_lightning.cli.common import (
    ArgumentParser,
    command_args,
    edges_type,
    path_type,
    run_command,
)

__all__ = ["main", "build_parser"]

PROG = "python -m cfl_lightning stratify"


def build_parser() -> ArgumentParser:
    from cfl_lightning.cli.common import positive_type, seed_type

    parser = ArgumentParser(
        prog=PROG,
        description="Choose a correlational sweep's data settings by the realized count of an "
        "event: up to K per count bin (a stratified design). Nothing is trained.",
    )
    parser.add_argument("sweep", help="W&B grid sweep YAML of unconstrained (correlational) runs")
    parser.add_argument(
        "--event", required=True,
        help="state:NAME, symbol:SYM or transition:SRC:SYM; or pooled: 'symbol:*', 'state:*'",
    )
    parser.add_argument(
        "--edges", required=True, type=edges_type, metavar="E0,E1,...",
        help="increasing bin edges; bin i holds realized counts in [E_i, E_i+1)",
    )
    parser.add_argument(
        "--per-bin", required=True, type=int, metavar="K",
        help="choose up to K settings per bin (pooled event: until a bin holds K pairs)",
    )
    parser.add_argument(
        "--min-settings", type=int, default=None, metavar="M",
        help="pooled event only: a bin is full when it also holds pairs of M settings (default 0)",
    )
    parser.add_argument("--seed", type=seed_type, default=0, help="seed of the choice (default 0)")
    parser.add_argument(
        "--units", choices=("occurrences", "strings"), default="occurrences",
        help="count total occurrences (default) or strings containing the event",
    )
    parser.add_argument(
        "--parallel", "-j", type=positive_type, default=1, metavar="J",
        help="processes building corpora at once",
    )
    parser.add_argument(
        "--max-points", type=positive_type, default=None, metavar="N",
        help="refuse grids with more points (default 100000)",
    )
    parser.add_argument(
        "--output", required=True, metavar="OUT.yaml", type=path_type,
        help="the stratified sweep; OUT.csv beside it lists every setting",
    )
    return parser


def _pooled_table(result) -> str:  # noqa: ANN001 - a Stratification
    lines = [f"bin ({result.units} of {result.event})   candidate pairs (settings)   "
             "chosen pairs (settings)"]
    for (lo, hi), (cp, cs, p, s) in zip(zip(result.edges, result.edges[1:]), result.pair_counts):
        name = f"[{lo:g}, {hi:g})"
        lines.append(f"{name}{'':<{max(1, 20 - len(name))}}{f'{cp} ({cs})':>26}   "
                     f"{f'{p} ({s})':>22}")
    lines.append(
        f"total: {len(result.chosen)} of {len(result.settings)} settings chosen "
        f"(bins full at {result.per_bin} pairs from {result.min_settings} settings)"
    )
    return "\n".join(lines) + "\n"


def _table(result) -> str:  # noqa: ANN001 - a Stratification
    if result.pooled:
        return _pooled_table(result)
    lines = [f"bin ({result.units} of {result.event})   candidates   chosen"]
    for (lo, hi), (candidates, chosen) in zip(zip(result.edges, result.edges[1:]), result.counts):
        lines.append(f"[{lo:g}, {hi:g}){'':<{max(1, 20 - len(f'[{lo:g}, {hi:g})'))}}"
                     f"{candidates:>10}   {chosen:>6}")
    outside = sum(1 for s in result.settings if s.bin is None)
    total = sum(c for c, _ in result.counts)
    lines.append(
        f"total: {len(result.chosen)} chosen of {total} in the bins "
        f"({outside} of {len(result.settings)} settings outside every bin)"
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = command_args(argv, "stratify")
    args = build_parser().parse_args(argv)

    def body() -> int:
        from pathlib import Path

        import yaml

        from cfl_lightning.sweep import load_sweep
        from cfl_lightning.io import atomic_write_text, check_output
        from cfl_lightning.stratify import StratifyError, check_design, settings_csv, stratified_sweep, stratify

        from cfl_lightning.stratify import pooled_kind

        check_design(args.edges, args.per_bin, args.units)  # before any corpus is built
        if pooled_kind(args.event) is None and args.min_settings is not None:
            raise StratifyError("--min-settings applies to a pooled event (symbol:* or state:*)")
        if args.min_settings is not None and args.min_settings < 0:
            raise StratifyError(f"--min-settings must be an integer >= 0, got {args.min_settings}")
        output = Path(args.output)
        table = output.with_suffix(".csv")
        if table == output:
            raise StratifyError(f"--output {output}: expected a .yaml path (OUT.csv is written beside it)")
        for path in (output, table):
            check_output(path, [args.sweep], what="--output")
        config = load_sweep(args.sweep)
        result = stratify(
            config, event=args.event, edges=args.edges, per_bin=args.per_bin, seed=args.seed,
            units=args.units, parallel=args.parallel, max_points=args.max_points, progress=True,
            min_settings=args.min_settings,
        )
        sweep = stratified_sweep(config, result)
        header = (
            f"# Stratified from {args.sweep} by `{PROG} {' '.join(argv)}`\n"
            f"# {len(result.chosen)} of {len(result.settings)} data settings chosen; every "
            f"setting, its realized count and bin: {table.name}\n"
        )
        atomic_write_text(table, settings_csv(result), inputs=[args.sweep])
        atomic_write_text(output, header + yaml.safe_dump(sweep, sort_keys=False), inputs=[args.sweep])
        sys.stdout.write(_table(result))
        sys.stdout.write(f"wrote {output} and {table}\n")
        return 0

    return run_command(body, PROG)
