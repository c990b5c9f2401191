"""Grid points grouped into ensemble jobs, for ``python -m cfl_lightning sweep --ensemble M``.

Points that differ only in ``data.*`` and ``seed_everything`` share the architecture and
hyperparameters and can be trained together; they are grouped, and each group is cut into
jobs of at most M members, more jobs when that is needed to keep ``parallel`` processes busy
(the sizes balanced, members dealt round-robin so that slow grid values spread over the jobs). A job is one process, ``python -m cfl_lightning.cli.ensemble_job SPEC.json``
(:mod:`cfl_lightning.cli.ensemble_job`), started in ``OUTPUT/.ensembles/`` where its spec and log
live; each member still writes into its own point directory (``--trainer.default_root_dir``,
as the plain runner passes it), so resuming and ``analyze`` see the same files. Points whose
command is not ``... -m cfl_lightning fit ...`` are left to the plain runner.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfl_lightning.analysis.sweeps import SweepPoint, build_command
from cfl_lightning.io import atomic_write_text

__all__ = ["EnsembleJob", "member_key", "fit_args", "plan_jobs", "ENSEMBLE_DIR"]

#: where jobs keep their spec and log, under the sweep's output directory
ENSEMBLE_DIR = ".ensembles"


@dataclass(frozen=True)
class EnsembleJob:
    """One process training several grid points as an ensemble.

    Attributes:
        points: the grid points (members), in grid order.
        command: the process's command line.
        spec: the members' spec file (written by :func:`plan_jobs`).
        log: the process's output.
    """

    points: tuple[SweepPoint, ...]
    command: tuple[str, ...]
    spec: Path
    log: Path


def member_key(params: Mapping[str, Any]) -> str:
    """The parameters that must agree within an ensemble (all but ``data.*`` and the seed)."""
    shared = {k: v for k, v in params.items() if not k.startswith("data.") and k != "seed_everything"}
    return json.dumps(shared, sort_keys=True, default=str)


def fit_args(command: Sequence[str]) -> list[str] | None:
    """The arguments after ``-m cfl_lightning fit`` in a point's command, else None."""
    items = list(command)
    for i in range(len(items) - 2):
        if items[i] == "-m" and items[i + 1] == "cfl_lightning" and items[i + 2] == "fit":
            return items[i + 3 :]
    return None


def _split(points: list[SweepPoint], pieces: int) -> list[list[SweepPoint]]:
    """``points`` dealt round-robin into ``pieces`` chunks (sizes differ by at most one).

    Dealing rather than cutting consecutive runs: a grid varies its slowest parameters (counts,
    corpus sizes) in blocks, and on a CPU a job trains its members one after another, so
    consecutive chunks would put every long corpus into the same last-finishing job.
    """
    chunks = [points[i::pieces] for i in range(pieces)]
    return [chunk for chunk in chunks if chunk]


def plan_jobs(
    config: Mapping[str, Any],
    points: Sequence[SweepPoint],
    output: str | os.PathLike,
    *,
    ensemble: int,
    parallel: int = 1,
    cwd: str | os.PathLike | None = None,
    write: bool = True,
) -> tuple[list[EnsembleJob], list[SweepPoint]]:
    """Group pending ``points`` into ensemble jobs.

    Args:
        config: the sweep config (its ``command`` builds each member's ``fit`` arguments).
        points: the pending points, in grid order.
        output: the sweep's output directory.
        ensemble: at most this many members per job.
        parallel: processes that will run at a time (groups are split to keep them busy).
        cwd: the directory relative paths of the command are taken from (default: this one).
        write: write the spec files (False for a dry run).

    Returns:
        ``(jobs, plain)``: the jobs, and the points that cannot be ensembled (their command is
        not a ``cfl_lightning fit``).
    """
    cwd = Path.cwd() if cwd is None else Path(cwd)
    folder = Path(output) / ENSEMBLE_DIR
    groups: dict[str, list[SweepPoint]] = {}
    args: dict[str, list[str]] = {}
    plain: list[SweepPoint] = []
    for point in points:
        command = build_command(config, point.params, run_dir=point.directory, absolute_from=cwd)
        member_args = fit_args(command)
        if member_args is None:
            plain.append(point)
            continue
        args[point.name] = member_args
        groups.setdefault(member_key(point.params), []).append(point)
    members = list(groups.values())
    pieces = [math.ceil(len(group) / max(ensemble, 1)) for group in members]
    while sum(pieces) < parallel:  # more, smaller ensembles to keep `parallel` processes busy
        room = [i for i, group in enumerate(members) if pieces[i] < len(group)]
        if not room:
            break
        widest = max(room, key=lambda i: len(members[i]) / pieces[i])
        pieces[widest] += 1
    chunks = [chunk for group, n in zip(members, pieces) for chunk in _split(group, n)]
    jobs = []
    for chunk in chunks:
        spec_members = [{"name": p.name, "args": args[p.name]} for p in chunk]
        text = json.dumps({"members": spec_members, "checkpoint_dir": None}, indent=1) + "\n"
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]
        spec, log = folder / f"{digest}.json", folder / f"{digest}.log"
        if write:
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write_text(spec, text)
        command = (sys.executable, "-m", "cfl_lightning.cli.ensemble_job", str(spec))
        jobs.append(EnsembleJob(tuple(chunk), command, spec, log))
    return jobs, plain
