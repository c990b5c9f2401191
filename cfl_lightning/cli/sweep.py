"""``python -m cfl_lightning sweep SWEEP.yaml --output DIR``: run a W&B grid sweep offline.

Example::

    python -m cfl_lightning sweep sweeps/parity_starfree_causal_exact.yaml \\
        --output runs/sweeps/parity_exact --parallel 8
    python -m cfl_lightning sweep sweeps/parity_starfree_correlational.yaml \\
        --output runs/sweeps/parity_corr --limit 20 --dry-run

The grid is expanded lazily in the order of W&B's own engine (``sweeps.next_runs``), and
refused above ``--max-points`` (default 100,000) with one line naming the largest parameter;
``--limit`` and ``--dry-run`` never build the whole grid. Each point's command is
built from the sweep's ``command:`` like ``wandb agent`` does (``${interpreter}`` is this
Python), plus ``--trainer.default_root_dir=DIR/<run_name>``. Every point runs in
``DIR/<run_name>`` (``params.json``, ``run.log``, the run's outputs) with one CPU thread and
``WANDB_MODE=offline`` unless ``WANDB_MODE`` is set. Points whose directory already holds a
valid ``results.json`` (it parses and has a finite ``kl_total``) are skipped, so an interrupted
sweep resumes where it stopped; the files of an unfinished point's earlier attempt are moved to
``DIR/<run_name>/.attempts/N/`` (an invalid ``results.json`` renamed ``results.json.invalid``)
before it runs again. The runs stop with the runner, even when it is killed (each runs behind a
guard process), and one runner at a time may use DIR (``DIR/.sweep.lock``): a second one
refuses with one line naming the first (pid, host, start time). Exit status: 0 when every point
is done, 1 when some point failed, 2 on bad input or a locked DIR, 130 when interrupted.

``--ensemble M`` trains the points that differ only in ``data.*`` and ``seed_everything`` as
ensembles of up to M members, one process each (:mod:`cfl_lightning.sweep.jobs`): each member
writes the ``results.json`` its own run would, in its own directory, and is reported (and
fails) alone; ``--parallel J`` runs J ensembles at a time (a group is split to keep J busy).
A job checkpoints into ``DIR/.ensembles/<job>/checkpoints/``; a rerun starts an interrupted job
again with the same members, from its last checkpoint.
"""

from __future__ import annotations

import sys

from cfl_lightning.cli.common import (
    ArgumentParser,
    command_args,
    path_type,
    positive_type,
    run_command,
)

__all__ = ["main", "build_parser"]

PROG = "python -m cfl_lightning sweep"


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=PROG, description="Run a W&B grid sweep YAML offline, resumably, J runs at a time.",
        epilog="A point is done when it holds a results.json that parses and has a finite "
        "kl_total; other points run again, their earlier files moved to POINT/.attempts/N/. "
        "Runs stop with the runner, even a killed one. One runner per DIR (DIR/.sweep.lock): a "
        "second refuses, naming the first. Exit: 0 all done, 1 some failed, 2 bad input or DIR "
        "locked, 130 interrupted."
    )
    parser.add_argument("sweep", help="W&B sweep YAML (method: grid, flat dotted parameters)")
    parser.add_argument(
        "--output", required=True, metavar="DIR", type=path_type,
        help="holds one directory per grid point",
    )
    parser.add_argument(
        "--parallel", "-j", type=positive_type, default=1, metavar="J", help="runs at a time"
    )
    parser.add_argument(
        "--limit", type=positive_type, metavar="N", help="run at most N of the pending points"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--threads", type=positive_type, default=1, help="CPU threads per run")
    parser.add_argument(
        "--max-points", type=positive_type, default=None, metavar="N",
        help="refuse grids with more points (default 100000)",
    )
    parser.add_argument(
        "--ensemble", type=positive_type, default=None, metavar="M",
        help="train points differing only in data.* and seed_everything together, up to M "
        "per process (one batched model; an interrupted job resumes from its checkpoint)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = command_args(argv, "sweep")
    args = build_parser().parse_args(argv)

    def body() -> int:
        from pathlib import Path

        from cfl_lightning.sweep import SweepError, load_sweep, run_sweep

        config = load_sweep(args.sweep)
        output = Path(args.output)
        if output.exists() and not output.is_dir():
            raise SweepError(f"--output {output} exists and is not a directory")
        summary = run_sweep(
            config,
            args.output,
            parallel=args.parallel,
            limit=args.limit,
            dry_run=args.dry_run,
            threads=args.threads,
            source=args.sweep,
            max_points=args.max_points,
            ensemble=args.ensemble,
        )
        if args.dry_run:
            return 0
        parts = [
            f"{summary.done} done",
            f"{summary.skipped} skipped (already done)",
            f"{len(summary.failed)} failed",
        ]
        if summary.not_run:
            parts.append(f"{summary.not_run} not run")
        sys.stderr.write(f"{PROG}: {', '.join(parts)} of {summary.total} points\n")
        if summary.interrupted:
            return 130
        return 1 if summary.failed else 0

    return run_command(body, PROG)
