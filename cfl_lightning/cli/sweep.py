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

``--dry-run`` prints the commands and then checks each printed point as ``fit`` reads it, in
one process of its own (:mod:`cfl_lightning.sweep.check`: the model class imported, the options
parsed, the data settings built, nothing trained or written): one ``bad point NAME: problem``
line per point that would stop before training, and exit status 2 when there is one
(``--no-check``: print only). ``sweep DIR --status`` on a folder that holds no sweep is one
line, exit status 2.

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
    parser.add_argument(
        "sweep", help="W&B sweep YAML (method: grid, flat dotted parameters); with --status, DIR"
    )
    parser.add_argument(
        "--output", metavar="DIR", type=path_type, help="holds one directory per grid point"
    )
    parser.add_argument(
        "--status", action="store_true",
        help="show DIR's points: done, running, pending, failed (with their logs); run nothing",
    )
    parser.add_argument(
        "--parallel", "-j", type=positive_type, default=1, metavar="J", help="runs at a time"
    )
    parser.add_argument(
        "--limit", type=positive_type, metavar="N", help="run at most N of the pending points"
    )
    parser.add_argument(
        "--dry-run", action="store_true",
        help="print the commands and check each point as fit reads it (its model class "
        "imported, its options and data settings checked: one line per bad point, exit 2); run "
        "nothing",
    )
    parser.add_argument(
        "--no-check", action="store_true",
        help="with --dry-run: only print the commands (no process that imports the training code)",
    )
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
    _add_slurm_arguments(parser)
    return parser


def _add_slurm_arguments(parser: ArgumentParser) -> None:
    group = parser.add_argument_group("cluster (--executor slurm; submitit job array)")
    group.add_argument(
        "--executor", choices=("local", "slurm"), default="local",
        help="local: processes on this machine (default); slurm: one SLURM array task per "
        "point or ensemble job",
    )
    group.add_argument("--scheduler", metavar="YAML", help="scheduler settings file (the flags "
                       "below override it)")
    group.add_argument("--partition", help="SLURM partition (default: the cluster's default)")
    group.add_argument("--time", help="time limit per task (minutes, H:M:S, D-H:M:S)")
    group.add_argument("--cpus-per-task", type=positive_type, metavar="N")
    group.add_argument("--gpus-per-task", type=positive_type, metavar="N")
    group.add_argument("--mem", help="memory per task (sbatch --mem, e.g. 8G)")
    group.add_argument("--array-parallelism", type=positive_type, metavar="N",
                       help="array tasks running at a time (default 256)")
    group.add_argument("--sbatch", action="append", metavar="LINE",
                       help="an extra sbatch option, e.g. --sbatch=--qos=normal (repeatable)")
    group.add_argument("--no-wait", action="store_true",
                       help="return once the array is submitted (follow it with --status)")


_SLURM_FLAGS = ("scheduler", "partition", "time", "cpus_per_task", "gpus_per_task", "mem",
                "array_parallelism", "sbatch", "no_wait")


def _scheduler(args) -> object:  # noqa: ANN001
    from cfl_lightning.sweep.scheduler import load_scheduler

    overrides = {key: getattr(args, key) for key in _SLURM_FLAGS[1:-1]}
    if overrides["cpus_per_task"] is None and args.threads > 1:
        overrides["cpus_per_task"] = args.threads
    return load_scheduler(args.scheduler, overrides)


def main(argv: list[str] | None = None) -> int:
    argv = command_args(argv, "sweep")
    args = build_parser().parse_args(argv)

    def body() -> int:
        from pathlib import Path

        from cfl_lightning.sweep import SweepError, load_sweep, run_sweep

        if args.status:
            from cfl_lightning.sweep.status import print_status

            print_status(Path(args.output or args.sweep), sys.stdout)
            return 0
        if args.output is None:
            raise SweepError("--output DIR is required (or give DIR with --status)")
        if args.no_check and not args.dry_run:
            raise SweepError("--no-check goes with --dry-run")
        slurm = args.executor == "slurm"
        given = [k for k in _SLURM_FLAGS if getattr(args, k) not in (None, False)]
        if given and not slurm:
            flag = "--" + given[0].replace("_", "-")
            raise SweepError(f"{flag} needs --executor slurm")
        settings = _scheduler(args) if slurm else None
        config = load_sweep(args.sweep)
        output = Path(args.output)
        if output.exists() and not output.is_dir():
            raise SweepError(f"--output {output} exists and is not a directory")
        if slurm and not args.dry_run:
            from cfl_lightning.sweep.cluster import run_slurm_sweep

            summary = run_slurm_sweep(
                config, args.output, settings, ensemble=args.ensemble, limit=args.limit,
                threads=args.threads, wait=not args.no_wait, source=args.sweep,
                max_points=args.max_points,
            )
            if args.no_wait:
                return 0
        else:
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
                check=not args.no_check,
            )
        if args.dry_run:
            return 2 if summary.failed else 0
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
