"""The SLURM settings of ``sweep --executor slurm``: from flags or a small YAML, checked before
anything is submitted.

A scheduler YAML holds any of these keys (flags of the same name override it)::

    partition: gpu            # default: the cluster's default partition
    time: "4:00:00"           # per task: minutes, M:S, H:M:S, D-H, D-H:M or D-H:M:S
    cpus_per_task: 1
    gpus_per_task: 1
    mem: 8G                   # per task (sbatch --mem)
    array_parallelism: 64     # tasks of the array running at a time
    sbatch: ["--account=lab", "--qos=normal"]   # extra sbatch lines, passed as they are
    max_requeues: 3           # time-limit requeues per task before it counts as failed

:func:`check_cluster` refuses a machine without one of ``sbatch``, ``squeue``, ``sinfo`` and
``srun`` (naming every one missing) and an unknown partition (naming the known ones). Every
problem is one :class:`~cfl_lightning.sweep.grid.SweepError` line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from cfl_lightning.io import read_text
from cfl_lightning.sweep.grid import SweepError

__all__ = ["SchedulerSettings", "load_scheduler", "parse_time", "check_cluster", "sbatch_extra",
           "partition_minutes", "SLURM_COMMANDS"]

#: what the submitter runs: ``sinfo`` (partitions), ``sbatch`` (submitting), ``squeue``
#: (following), and ``srun``, which submitit's tasks run under (it refuses to start without it)
SLURM_COMMANDS = ("sbatch", "squeue", "sinfo", "srun")

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


@dataclass(frozen=True)
class SchedulerSettings:
    """What each array task asks SLURM for (None: the cluster's default)."""

    partition: str | None = None
    time: str | None = None
    cpus_per_task: int = 1
    gpus_per_task: int | None = None
    mem: str | None = None
    array_parallelism: int = 256
    sbatch: tuple[str, ...] = field(default_factory=tuple)
    max_requeues: int = 3

    @property
    def minutes(self) -> int:
        """The time limit in minutes (submitit's ``timeout_min``; 7 days when unset)."""
        return 7 * 24 * 60 if self.time is None else parse_time(self.time)


def parse_time(text: str) -> int:
    """Minutes of a SLURM time limit (``90``, ``1:30:00``, ``2-12``, ``1-00:00:00``; rounded up).

    Raises:
        SweepError: not a SLURM time.
    """
    match = _TIME.match(str(text).strip())
    if match is None:
        raise SweepError(
            f"time {text!r} is not a SLURM time limit (minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S)"
        )
    days, a, b, c = match.groups()
    if days is not None:  # D-H, D-H:M, D-H:M:S
        hours, mins, secs = int(a), int(b or 0), int(c or 0)
        total = int(days) * 1440 * 60 + hours * 3600 + mins * 60 + secs
    elif c is not None:  # H:M:S
        total = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:  # M:S
        total = int(a) * 60 + int(b)
    else:  # M
        total = int(a) * 60
    if total <= 0:
        raise SweepError(f"time {text!r} must be positive")
    return -(-total // 60)


def _positive(source: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SweepError(f"{source}: {key} must be a positive integer, not {value!r}")
    return value


def _check(settings: SchedulerSettings, source: str) -> SchedulerSettings:
    for key in ("cpus_per_task", "array_parallelism"):
        _positive(source, key, getattr(settings, key))
    if settings.gpus_per_task is not None:
        _positive(source, "gpus_per_task", settings.gpus_per_task)
    if isinstance(settings.max_requeues, bool) or not isinstance(settings.max_requeues, int) or (
        settings.max_requeues < 0
    ):
        raise SweepError(f"{source}: max_requeues must be an integer >= 0")
    for key in ("partition", "mem"):
        value = getattr(settings, key)
        if value is not None and (not isinstance(value, str) or not value.strip()
                                  or any(c.isspace() for c in value)):
            raise SweepError(f"{source}: {key} must be a word, not {value!r}")
    if settings.time is not None:
        parse_time(settings.time)
    for line in settings.sbatch:
        if not isinstance(line, str) or not line.strip().startswith("--") or "\n" in line:
            raise SweepError(f"{source}: sbatch lines must be strings like '--qos=normal', "
                             f"not {line!r}")
    return settings


def load_scheduler(
    path: str | os.PathLike | None = None, overrides: Mapping[str, Any] | None = None
) -> SchedulerSettings:
    """The settings of a scheduler YAML (or the defaults), with ``overrides`` (flags) on top.

    ``overrides`` entries that are None are ignored; an ``sbatch`` override adds lines.

    Raises:
        SweepError: the file is unreadable or malformed, or holds an unknown key or a bad value.
    """
    import yaml

    known = {f.name for f in fields(SchedulerSettings)}
    data: dict[str, Any] = {}
    source = "scheduler settings"
    if path is not None:
        source = str(path)
        try:
            loaded = yaml.safe_load(read_text(Path(path), error=SweepError))
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise SweepError(f"{path}: invalid YAML{where}") from None
        except (OSError, UnicodeDecodeError) as err:
            raise SweepError(f"cannot read scheduler file {path}: "
                             f"{getattr(err, 'strerror', None) or err}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise SweepError(f"{path}: expected a mapping of scheduler settings "
                             f"({', '.join(sorted(known))})")
        unknown = sorted(str(k) for k in loaded if str(k).replace("-", "_") not in known)
        if unknown:
            raise SweepError(f"{path}: unknown scheduler setting {unknown[0]!r} "
                             f"(known: {', '.join(sorted(known))})")
        data = {str(k).replace("-", "_"): v for k, v in loaded.items()}
    sbatch = data.get("sbatch") or []
    if isinstance(sbatch, str):
        sbatch = [sbatch]
    if not isinstance(sbatch, list):
        raise SweepError(f"{source}: sbatch must be a list of lines")
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key == "sbatch":
            sbatch = [*sbatch, *value]
        else:
            data[key] = value
    if data.get("time") is not None and isinstance(data["time"], int):
        data["time"] = str(data["time"])
    data["sbatch"] = tuple(sbatch)
    return _check(replace(SchedulerSettings(), **data), source)


def _run(command: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SweepError(f"cannot run {command[0]}: {err}") from None


def check_cluster(settings: SchedulerSettings) -> str:
    """Check that this machine can submit to SLURM and the partition exists.

    Returns:
        the partition the tasks go to (the given one, or the cluster's default).

    Raises:
        SweepError: a command of :data:`SLURM_COMMANDS` missing from PATH (all of them named),
            ``sinfo`` fails, or an unknown partition.
    """
    missing = [tool for tool in SLURM_COMMANDS if shutil.which(tool) is None]
    if missing:
        names = ", ".join(f"`{tool}`" for tool in missing)
        raise SweepError(f"--executor slurm: no {names} on PATH (needed: "
                         f"{', '.join(SLURM_COMMANDS)}; is this a SLURM login node? use "
                         "--executor local on one machine)")
    out = _run(["sinfo", "-h", "-o", "%P"])
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise SweepError(f"--executor slurm: sinfo failed: {last}")
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    default = next((n[:-1] for n in names if n.endswith("*")), None)
    plain = [n.rstrip("*") for n in names]
    if settings.partition is None:
        if default is None:
            raise SweepError("--executor slurm: the cluster has no default partition; "
                             f"name one with --partition ({', '.join(plain) or 'none known'})")
        return default
    if settings.partition not in plain:
        raise SweepError(f"--partition {settings.partition}: no such partition "
                         f"(known: {', '.join(plain) or 'none'})")
    return settings.partition


def partition_minutes(partition: str) -> int | None:
    """The partition's default time limit in minutes (else its maximum; None: unlimited)."""
    out = _run(["sinfo", "-h", "-p", partition, "-o", "%L|%l"])
    for value in (out.stdout.strip().splitlines() or ["|"])[0].split("|"):
        value = value.strip()
        if value and value not in ("n/a", "infinite", "UNLIMITED", "NONE"):
            try:
                return parse_time(value)
            except SweepError:
                continue
    return None


def sbatch_extra(settings: SchedulerSettings) -> dict[str, Any]:
    """The extra sbatch lines as submitit's ``additional_parameters`` (``--key=value``)."""
    extra: dict[str, Any] = {}
    for line in settings.sbatch:
        key, _, value = line.strip()[2:].partition("=")
        extra[key.replace("-", "_")] = value if value else True
    return extra
