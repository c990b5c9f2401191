"""``sweep DIR --status``: where each point of a sweep stands, for a local or a cluster run.

A point is

* **done**: it holds a valid ``results.json``;
* **running** / **pending**: its task in the directory's latest SLURM array is running / queued
  (``squeue``), or, for a local runner that holds ``DIR/.sweep.lock``, it has a ``run.log`` and
  no result yet (running) or nothing yet (pending);
* **failed**: its ``run.log`` ends with ``# FAILED: reason`` (written by the local runner or the
  SLURM task), or its task in the latest SLURM array ended without a result (cancelled, killed,
  out of memory; also before the run started);
* **pending** otherwise (never started, or interrupted: the next ``sweep`` runs it).

The grid comes from ``DIR/.sweep.json`` (written by every runner); without it, from the point
directories (``params.json``). A folder with neither (nor a SLURM array record) is no sweep:
:class:`~cfl_lightning.sweep.grid.SweepError` (one line, exit status 2).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from cfl_lightning.io import read_text
from cfl_lightning.sweep.grid import SweepError
from cfl_lightning.sweep.lock import LOCK_NAME
from cfl_lightning.sweep.plan import SweepPoint, iter_plan
from cfl_lightning.sweep.queue import ENDED, array_records, queue_states, task_log
from cfl_lightning.results import find_results
from cfl_lightning.sweep.runner import SWEEP_RECORD
from cfl_lightning.sweep.task import failure_line

__all__ = ["point_states", "print_status"]


def _points(output: Path) -> Iterator[SweepPoint]:
    try:
        record = json.loads(read_text(output / SWEEP_RECORD, limit=64 << 20))
        config = record["config"]
    except (OSError, ValueError, KeyError, TypeError):
        config = None
    if config is not None:
        yield from iter_plan(config, output)
        return
    for child in sorted(output.iterdir()):
        if (child / "params.json").is_file():
            yield SweepPoint({}, child.name, child, find_results(child) is not None)


def _has_points(output: Path) -> bool:
    """Whether a folder of ``output`` holds a point's ``params.json`` (a sweep without its
    ``.sweep.json``, written before that record existed)."""
    return any((child / "params.json").is_file() for child in output.iterdir())


def _locally_locked(output: Path) -> bool:
    """Whether a local runner holds ``DIR/.sweep.lock`` now."""
    try:
        fd = os.open(output / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def point_states(output: str | os.PathLike) -> list[tuple[str, SweepPoint, str]]:
    """``[(state, point, detail)]`` for every point (see the module); ``detail`` is the log
    path, with the failure's reason or the SLURM task where there is one."""
    output = Path(output)
    if output.is_file():
        raise SweepError(f"{output}: a file, not a sweep directory (give the sweep's --output DIR)")
    if not output.is_dir():
        raise SweepError(f"{output}: no such sweep directory")
    tasks: dict[str, dict[str, Any]] = {}
    records = array_records(output)
    if not (records or (output / SWEEP_RECORD).is_file() or _has_points(output)):
        raise SweepError(f"{output}: not a sweep directory (no {SWEEP_RECORD}, no SLURM array "
                         "record, no point folder with a params.json)")
    for record in records:
        for task in record["tasks"]:
            for name in task.get("points", []):
                tasks[name] = task  # the latest array wins
    states = queue_states({str(r["array"]) for r in records})
    if states is None:
        raise SweepError(f"{output}: squeue failed; the states of its SLURM tasks are unknown")
    local = _locally_locked(output)
    rows = []
    for point in _points(output):
        log = point.directory / "run.log"
        task = tasks.get(point.name)
        state = states.get(task["id"]) if task else None
        if point.done:
            rows.append(("done", point, str(find_results(point.directory))))
        elif state is not None and state not in ENDED:
            kind = "running" if state in ("RUNNING", "COMPLETING") else "pending"
            rows.append((kind, point, f"SLURM task {task['id']} {state}; log: {log}"))
        elif (why := failure_line(log)) is not None:
            rows.append(("failed", point, f"{why}; log: {log}"))
        elif task is not None:  # its task ended (maybe cancelled before the run started)
            where = f"log: {log}; " if log.exists() else ""
            rows.append(("failed", point, f"SLURM task {task['id']} ended without a results.json; "
                         f"{where}task log: {task_log(output, task['id'])}"))
        elif local and log.exists():
            rows.append(("running", point, f"log: {log}"))
        else:
            rows.append(("pending", point, ""))
    return rows


def print_status(output: str | os.PathLike, stream: TextIO) -> Counter:
    """Print one summary line, then a line per failed and running point; the counts."""
    rows = point_states(output)
    counts = Counter(state for state, _, _ in rows)
    order = ("done", "running", "pending", "failed")
    stream.write(f"{output}: {len(rows)} points: "
                 + ", ".join(f"{counts.get(s, 0)} {s}" for s in order) + "\n")
    for state, point, detail in rows:
        if state in ("failed", "running"):
            stream.write(f"{state} {point.name}: {detail}\n")
    stream.flush()
    return counts
