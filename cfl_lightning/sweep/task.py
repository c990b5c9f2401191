"""What one SLURM array task of ``sweep --executor slurm`` does: run a point or an ensemble job.

:class:`SlurmTask` is the callable that submitit pickles for each task (its argument is a
plain-data spec, :func:`task_spec`). On the node it

1. skips the points already done (a valid ``results.json``) and sets aside the files of an
   unfinished point's earlier attempt (a requeued or resubmitted task), exactly as the local
   runner does before it starts a point;
2. runs the point's ``fit`` (or the ensemble job) behind the same guard as the local runner, with
   its output in the point's ``run.log`` (a job's stderr in ``job.log``, its member lines in
   ``members.out``);
3. writes each failed point's reason at the end of its ``run.log`` (``# FAILED: ...``), which is
   what the submitter and ``sweep DIR --status`` read.

At a time limit or a preemption SLURM sends SIGUSR2 (submitit's ``--signal``); submitit then calls
:meth:`SlurmTask.checkpoint`, which stops the run (its guard's SIGTERM) and hands back the same
spec, and submitit requeues the task: a plain point starts again, an ensemble job resumes from its
last epoch's checkpoint. The run itself ignores SIGUSR2 (only the task reacts to it). Standard
library only on import, so a task starts fast.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cfl_lightning.io import atomic_write_text
from cfl_lightning.sweep.jobs import parse_member_line
from cfl_lightning.sweep.logfile import append_line, error_line, last_line
from cfl_lightning.sweep.process import start_guarded, stop_all
from cfl_lightning.results import find_results, results_files, results_problem, set_aside

__all__ = ["SlurmTask", "task_spec", "run_task", "failure_line", "last_line", "error_line",
           "FAILED"]

FAILED = "# FAILED: "
_POLL = 0.5


def task_spec(
    points: list[Any], command: list[str], workdir: Path, log: Path, env: Mapping[str, str],
    job: Any = None,
) -> dict[str, Any]:
    """The plain-data spec of one task (what is pickled with it: strings, lists, dicts)."""
    spec: dict[str, Any] = {
        "points": [{"name": p.name, "directory": str(p.directory), "params": p.params}
                   for p in points],
        "command": [str(c) for c in command],
        "workdir": str(workdir),
        "log": str(log),
        "env": dict(env),
        "job": None,
    }
    if job is not None:
        spec["job"] = {"directory": str(job.directory), "out": str(job.out),
                       "checkpoint_dir": str(job.checkpoint_dir), "members": len(job.points),
                       "points": [str(p.directory) for p in job.points]}
    return spec


def failure_line(run_log: Path) -> str | None:
    """The reason of the last ``# FAILED: ...`` line of a point's ``run.log``, else None."""
    try:
        with open(run_log, "rb") as handle:
            handle.seek(max(handle.seek(0, os.SEEK_END) - 4096, 0))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.strip():
            return line[len(FAILED):].strip() if line.startswith(FAILED) else None
    return None


def _prepare(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The spec's points still to do, each with a fresh directory (earlier files set aside)."""
    todo = []
    for point in spec["points"]:
        directory = Path(point["directory"])
        if find_results(directory) is not None:
            continue
        set_aside(directory)
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(directory / "params.json", json.dumps(point["params"], indent=1) + "\n")
        todo.append(point)
    job = spec["job"]
    where = os.environ.get("SLURM_JOB_ID", "?")
    task = os.environ.get("SLURM_ARRAY_JOB_ID", "")
    if task:
        where = f"{task}_{os.environ.get('SLURM_ARRAY_TASK_ID', '?')}"
    for point in todo:
        run_log = Path(point["directory"]) / "run.log"
        if job is None:
            atomic_write_text(run_log, f"# SLURM task {where}\n# {' '.join(spec['command'])}\n")
        else:
            atomic_write_text(run_log, f"# trained in ensemble job {job['directory']} (SLURM task "
                              f"{where}, {job['members']} members); its log: {spec['log']}\n")
    return todo


def _report(spec: Mapping[str, Any], todo: list[dict[str, Any]], code: int) -> dict[str, Any]:
    """``{name: None (done) or reason}`` of a finished run; reasons go into the ``run.log``s."""
    status: dict[str, Any] = {}
    log = Path(spec["log"])
    last = error_line(log)
    job = spec["job"]
    lines: dict[str, tuple[str, str]] = {}
    if job is not None:
        try:
            text = Path(job["out"]).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        for line in text.splitlines():
            parsed = parse_member_line(line)
            if parsed is not None:
                lines[parsed[1]] = (parsed[0], parsed[2])
    for point in todo:
        directory = Path(point["directory"])
        if find_results(directory) is not None:
            status[point["name"]] = None
            continue
        found = results_files(directory)
        if job is not None and lines.get(point["name"], ("", ""))[0] == "FAILED":
            why = lines[point["name"]][1] or "the ensemble job reported it failed"
        elif found:
            why = f"finished, but results.json {results_problem(found[0])}: {found[0]}"
        elif code == 0:
            why = "finished, but no results.json"
        elif job is not None:
            why = f"the ensemble job ended (exit {code}) without a line for this member" + (
                f"; its last error: {last}" if last else "")
        else:
            why = f"exit {code}" + (f": {last}" if last else "")
        status[point["name"]] = why
        append_line(directory / "run.log", FAILED + why)
    if job is not None and code == 0 and all(
        find_results(Path(p)) is not None for p in job["points"]
    ):
        shutil.rmtree(job["checkpoint_dir"], ignore_errors=True)
    return status


def run_task(spec: Mapping[str, Any], owner: SlurmTask | None = None) -> dict[str, Any]:
    """Run one task's point or ensemble job (see the module); ``{name: None or reason}``."""
    todo = _prepare(spec)
    if not todo:
        return {}
    workdir = Path(spec["workdir"])
    workdir.mkdir(parents=True, exist_ok=True)
    job = spec["job"]
    log_mode = "w" if job is None else "a"
    if job is not None:
        Path(job["checkpoint_dir"]).mkdir(parents=True, exist_ok=True)
    with open(spec["log"], log_mode, encoding="utf-8") as log:
        out = log if job is None else open(job["out"], "w", encoding="utf-8")  # noqa: SIM115
        try:
            log.write(f"# {' '.join(spec['command'])}\n")
            log.flush()
            # the run ignores SIGUSR2 (the task's checkpoint signal): the task stops it
            previous = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
            try:
                env = {**os.environ, **spec["env"]}  # the node's environment (GPUs, SLURM_*)
                process = start_guarded(spec["command"], cwd=workdir, env=env,
                                        stdout=out, stderr=log)
            finally:
                signal.signal(signal.SIGUSR2, previous)
            if owner is not None:
                owner.process = process
            while process.poll() is None:
                time.sleep(_POLL)
        finally:
            if out is not log:
                out.close()
    return _report(spec, todo, process.returncode)


class SlurmTask:
    """The callable submitted for each array task (checkpointable: see the module)."""

    def __init__(self) -> None:
        self.process: Any = None

    def __call__(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        return run_task(spec, self)

    def checkpoint(self, spec: Mapping[str, Any]) -> Any:
        """Stop the run and resubmit the same spec (submitit requeues the task)."""
        import submitit

        if self.process is not None:
            stop_all([self.process])
        return submitit.helpers.DelayedSubmission(SlurmTask(), spec)

    def __getstate__(self) -> dict[str, Any]:
        return {}  # a running process is never pickled

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        self.process = None
