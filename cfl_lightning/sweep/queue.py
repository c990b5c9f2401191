"""What SLURM says about a sweep's arrays, and the record of each array under ``OUTPUT/.slurm/``.

Every submission writes ``OUTPUT/.slurm/arrays/<array id>.json``: ``{"array", "submitted",
"partition", "tasks": [{"id": "<array>_<i>", "points": [NAME, ...], "log": PATH,
"job": ENSEMBLE_DIR | null}]}``, ``log`` being the task's own (submitit's) stdout file. The
states come from one ``squeue`` call (no accounting database is needed); a task that ``squeue``
no longer lists has ended.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cfl_lightning.io import atomic_write_text, read_text

__all__ = [
    "SLURM_DIR", "ENDED", "array_records", "write_record", "queue_states", "task_log",
    "active_tasks",
]

#: submitit's folder and the array records, under the sweep's output directory
SLURM_DIR = ".slurm"
#: squeue states after which a task does not run again
ENDED = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
    "DEADLINE", "SPECIAL_EXIT", "REVOKED",
})


def task_log(output: Path, task_id: str) -> Path:
    """submitit's stdout file of a task (``OUTPUT/.slurm/<id>/<id>_0_log.out``)."""
    return Path(output) / SLURM_DIR / task_id / f"{task_id}_0_log.out"


def write_record(output: Path, record: dict[str, Any]) -> Path:
    """Write one array's record (atomically)."""
    path = Path(output) / SLURM_DIR / "arrays" / f"{record['array']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")
    return path


def array_records(output: Path) -> list[dict[str, Any]]:
    """The sweep's array records, oldest first (unreadable ones are skipped)."""
    records = []
    for path in (Path(output) / SLURM_DIR / "arrays").glob("*.json"):
        try:
            record = json.loads(read_text(path, limit=256 << 20))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("tasks"), list):
            records.append(record)
    return sorted(records, key=lambda r: (str(r.get("submitted", "")), str(r.get("array"))))


def queue_states(arrays: Iterable[str]) -> dict[str, str] | None:
    """``{task id: state}`` of the given arrays' tasks that ``squeue`` still lists, or None when
    ``squeue`` fails (then nothing is known: a caller must not take the tasks as ended).

    Ended tasks stay listed for the cluster's ``MinJobAge`` (COMPLETED, CANCELLED...), then
    vanish.
    """
    wanted = {str(a) for a in arrays}
    if not wanted:
        return {}
    try:
        out = subprocess.run(
            ["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T", "-u", str(os.getuid())],
            capture_output=True, text=True, timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    states = {}
    for line in out.stdout.splitlines():
        task, _, state = line.strip().partition("|")
        if task.split("_", 1)[0] in wanted:
            states[task] = state.split()[0] if state else "UNKNOWN"
    return states


def active_tasks(output: Path) -> dict[str, list[str]]:
    """``{array id: [task ids]}`` of the sweep's arrays with tasks still queued or running."""
    records = array_records(output)
    states = queue_states(str(r["array"]) for r in records)
    if states is None:
        from cfl_lightning.sweep.grid import SweepError

        raise SweepError(f"{output}: squeue failed, so whether its earlier SLURM arrays still "
                         "run is unknown; try again")
    active: dict[str, list[str]] = {}
    for task, state in states.items():
        if state not in ENDED:
            active.setdefault(task.split("_", 1)[0], []).append(task)
    return active
