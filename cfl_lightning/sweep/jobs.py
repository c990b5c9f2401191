"""Grid points grouped into ensemble jobs, for ``python -m cfl_lightning sweep --ensemble M``.

Points that differ only in ``data.*`` and ``seed_everything`` share the architecture and
hyperparameters and can be trained together; they are grouped, and each group is cut into
jobs of at most M members, more jobs when that is needed to keep ``parallel`` processes busy
(the sizes balanced, members dealt round-robin so that slow grid values spread over the jobs).
Points whose command is not ``... -m cfl_lightning fit ...`` are left to the plain runner.

A job is one process, ``python -m JOB_MODULE SPEC.json`` (:data:`JOB_MODULE`), started in its
folder ``OUTPUT/.ensembles/<id>/``, which holds

* ``spec.json``: ``{"members": [{"name": str, "args": [str, ...]}], "checkpoint_dir": str}``,
  ``args`` being each member's ``fit`` command line after ``python -m cfl_lightning fit``
  (with its ``--trainer.default_root_dir=POINT_DIR``: each member writes into its own point
  directory, so resuming and ``analyze`` see the same files as for plain runs);
* ``checkpoints/``: the job's ``checkpoint_dir`` (it resumes from ``checkpoints/last.ckpt``, or
  ``last-K.ckpt`` per group when it trains several);
* ``job.log`` (the job's stderr, appended at each start) and ``members.out`` (its stdout: one
  line per member, ``done NAME`` or ``FAILED NAME: reason``, preceded by ``alone NAME: why``
  for a member the job fits on its own because it cannot be ensembled).

Membership is stable across reruns: a job of an earlier run that holds a checkpoint and a
member still to do is started again as it was, with every member (:func:`resumable_jobs`); the
job itself skips members whose valid ``results.json`` exists. Only the remaining points are
grouped anew.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfl_lightning.io import atomic_write_text, read_text
from cfl_lightning.results import find_results
from cfl_lightning.sweep.command import build_command
from cfl_lightning.sweep.plan import SweepPoint

__all__ = [
    "EnsembleJob",
    "member_key",
    "fit_args",
    "plan_jobs",
    "resumable_jobs",
    "parse_member_line",
    "parse_alone_line",
    "AloneNotes",
    "ALONE",
    "ENSEMBLE_DIR",
    "JOB_MODULE",
]

#: where jobs keep their spec, checkpoints and logs, under the sweep's output directory
ENSEMBLE_DIR = ".ensembles"
#: the module run as ``python -m JOB_MODULE SPEC.json`` for each ensemble job
JOB_MODULE = "cfl_lightning.cli.ensemble_job"
#: the checkpoints a job resumes from, in its ``checkpoint_dir``: ``last.ckpt`` (``last-K.ckpt``
#: for its K-th group when it trains several)
CHECKPOINTS = "last*.ckpt"
_LINE = re.compile(r"^(done|FAILED) ([^\s:]+)(?::\s*(.*))?$")
#: the word of a job's stdout line ``alone NAME: why`` (a member fitted on its own, not ensembled)
ALONE = "alone"
_ALONE = re.compile(rf"^{ALONE} ([^\s:]+):\s*(.*)$")


@dataclass(frozen=True)
class EnsembleJob:
    """One process training several grid points as an ensemble.

    Attributes:
        points: every member's grid point, in the spec's order (for a resumed job, also the
            members already done).
        members: the spec's members, ``{"name": ..., "args": [...]}``, in the same order.
        directory: the job's folder, ``OUTPUT/.ensembles/<id>``.
        resumed: whether it continues an earlier run's job from its checkpoint.
    """

    points: tuple[SweepPoint, ...]
    members: tuple[Mapping[str, Any], ...]
    directory: Path
    resumed: bool = False

    @property
    def spec(self) -> Path:
        return self.directory / "spec.json"

    @property
    def log(self) -> Path:
        return self.directory / "job.log"

    @property
    def out(self) -> Path:
        return self.directory / "members.out"

    @property
    def checkpoint_dir(self) -> Path:
        return self.directory / "checkpoints"

    @property
    def command(self) -> tuple[str, ...]:
        return (sys.executable, "-m", JOB_MODULE, str(self.spec))

    def write_spec(self) -> None:
        """Write ``spec.json`` (atomically)."""
        members = [dict(m) for m in self.members]
        spec = {"members": members, "checkpoint_dir": str(self.checkpoint_dir)}
        atomic_write_text(self.spec, json.dumps(spec, indent=1) + "\n")

    def clear_checkpoints(self) -> None:
        """Remove the job's checkpoints (once every member is done they are dead weight)."""
        shutil.rmtree(self.checkpoint_dir, ignore_errors=True)


def member_key(params: Mapping[str, Any]) -> str:
    """The parameters that must agree within an ensemble (all but ``data.*`` and the seed)."""
    shared = {
        k: v for k, v in params.items() if not k.startswith("data.") and k != "seed_everything"
    }
    return json.dumps(shared, sort_keys=True, default=str)


def fit_args(command: Sequence[str]) -> list[str] | None:
    """The arguments after ``-m cfl_lightning fit`` in a point's command, else None."""
    items = list(command)
    for i in range(len(items) - 2):
        if items[i] == "-m" and items[i + 1] == "cfl_lightning" and items[i + 2] == "fit":
            return items[i + 3 :]
    return None


def parse_member_line(line: str) -> tuple[str, str, str] | None:
    """``("done", NAME, "")`` or ``("FAILED", NAME, reason)`` from a job's stdout line, or None."""
    match = _LINE.match(line.strip())
    if match is None:
        return None
    status, name, rest = match.groups()
    return status, name, (rest or "").strip() if status == "FAILED" else ""


def parse_alone_line(line: str) -> tuple[str, str] | None:
    """``(NAME, why)`` from a job's ``alone NAME: why`` line (the member is fitted on its own,
    its ``done``/``FAILED`` line follows), else None."""
    match = _ALONE.match(line.strip())
    return None if match is None else (match.group(1), match.group(2).strip())


class AloneNotes:
    """Tells the sweep's output, once per reason, that members are fitted on their own.

    Fed every line of the jobs' stdout; an ``alone NAME: why`` line is said as
    ``not ensembled: why; ...`` the first time its reason is seen (a grid of a model that is no
    ``LanguageModel`` says it once, not once per point).
    """

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.said: set[str] = set()

    def __call__(self, line: str) -> bool:
        """Whether ``line`` was an ``alone`` line (said, or already said)."""
        parsed = parse_alone_line(line)
        if parsed is None:
            return False
        name, why = parsed
        if why not in self.said:
            self.said.add(why)
            self.say(f"not ensembled: {why}; such points are trained one by one by the ordinary "
                     f"fit (first: {name})")
        return True


def _job_id(names: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(names).encode("utf-8")).hexdigest()[:12]


def _split(points: list[SweepPoint], pieces: int) -> list[list[SweepPoint]]:
    """``points`` dealt round-robin into ``pieces`` chunks (sizes differ by at most one).

    Dealing rather than cutting consecutive runs: a grid varies its slowest parameters (counts,
    corpus sizes) in blocks, and on a CPU a job trains its members one after another, so
    consecutive chunks would put every long corpus into the same last-finishing job.
    """
    chunks = [points[i::pieces] for i in range(pieces)]
    return [chunk for chunk in chunks if chunk]


def _member_point(directory: Path) -> SweepPoint | None:
    """A member's point rebuilt from its directory (``params.json``), or None."""
    try:
        params = json.loads(read_text(directory / "params.json", limit=1 << 20))
    except (OSError, ValueError):
        return None
    if not isinstance(params, dict):
        return None
    return SweepPoint(params, directory.name, directory, find_results(directory) is not None)


def resumable_jobs(
    output: str | os.PathLike, pending: Mapping[str, SweepPoint]
) -> list[EnsembleJob]:
    """The jobs of earlier runs to start again: with a checkpoint and a ``pending`` member.

    Each keeps its full membership and spec. A job whose spec is unreadable, whose member
    directories are gone, or that shares a member with a job already chosen, is not resumed
    (its pending members are planned anew).

    Args:
        output: the sweep's output directory.
        pending: the points to run, by name.
    """
    jobs: list[EnsembleJob] = []
    claimed: set[str] = set()
    for spec_path in sorted((Path(output) / ENSEMBLE_DIR).glob("*/spec.json")):
        directory = spec_path.parent
        if not any((directory / "checkpoints").glob(CHECKPOINTS)):
            continue
        try:
            members = json.loads(read_text(spec_path, limit=64 << 20))["members"]
            names = [str(m["name"]) for m in members]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if len(set(names)) < len(names) or claimed & set(names):
            continue
        if not any(n in pending for n in names):
            continue
        points = [pending.get(n) or _member_point(Path(output) / n) for n in names]
        if any(p is None for p in points):
            continue
        claimed.update(names)
        jobs.append(EnsembleJob(tuple(points), tuple(members), directory, resumed=True))
    return jobs


def plan_jobs(
    config: Mapping[str, Any],
    points: Sequence[SweepPoint],
    output: str | os.PathLike,
    *,
    ensemble: int,
    parallel: int = 1,
    cwd: str | os.PathLike | None = None,
    write: bool = True,
    resume: bool = True,
) -> tuple[list[EnsembleJob], list[SweepPoint]]:
    """Group pending ``points`` into ensemble jobs: earlier runs' jobs first, then new ones.

    Args:
        config: the sweep config (its ``command`` builds each member's ``fit`` arguments).
        points: the pending points, in grid order.
        output: the sweep's output directory.
        ensemble: at most this many members per new job.
        parallel: processes that will run at a time (groups are split to keep them busy).
        cwd: the directory relative paths of the command are taken from (default: this one).
        write: write the new jobs' spec files (False for a dry run).
        resume: start earlier runs' jobs again (:func:`resumable_jobs`).

    Returns:
        ``(jobs, plain)``: the jobs (resumed ones first), and the points that cannot be
        ensembled (their command is not a ``cfl_lightning fit``).
    """
    cwd = Path.cwd() if cwd is None else Path(cwd)
    folder = Path(output) / ENSEMBLE_DIR
    resumed = resumable_jobs(output, {p.name: p for p in points}) if resume else []
    claimed = {p.name for job in resumed for p in job.points}
    groups: dict[str, list[SweepPoint]] = {}
    args: dict[str, list[str]] = {}
    plain: list[SweepPoint] = []
    for point in points:
        if point.name in claimed:
            continue
        command = build_command(config, point.params, run_dir=point.directory, absolute_from=cwd)
        member_args = fit_args(command)
        if member_args is None:
            plain.append(point)
            continue
        args[point.name] = member_args
        groups.setdefault(member_key(point.params), []).append(point)
    members = list(groups.values())
    pieces = [math.ceil(len(group) / max(ensemble, 1)) for group in members]
    while sum(pieces) + len(resumed) < parallel:  # more, smaller ensembles to keep J busy
        room = [i for i, group in enumerate(members) if pieces[i] < len(group)]
        if not room:
            break
        widest = max(room, key=lambda i: len(members[i]) / pieces[i])
        pieces[widest] += 1
    chunks = [chunk for group, n in zip(members, pieces) for chunk in _split(group, n)]
    jobs = list(resumed)
    for chunk in chunks:
        spec_members = tuple({"name": p.name, "args": args[p.name]} for p in chunk)
        job = EnsembleJob(tuple(chunk), spec_members, folder / _job_id(p.name for p in chunk))
        if write:
            job.write_spec()
        jobs.append(job)
    return jobs, plain
