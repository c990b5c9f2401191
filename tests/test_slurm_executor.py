"""``sweep --executor slurm`` without a cluster (issue 39): settings, refusals, status, Lightning.

The SLURM commands are small scripts on PATH that log their calls, so a test can say that
nothing was submitted. The real cluster is in tests/test_slurm_cluster.py.
"""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # before anything imports wandb

import json
import stat
import warnings
from pathlib import Path

import pytest

from cfl_lightning import cluster_env
from cfl_lightning.sweep import lock
from cfl_lightning.sweep.grid import SweepError
from cfl_lightning.sweep.scheduler import load_scheduler, parse_time, sbatch_extra
from cfl_lightning.sweep.status import point_states
from cfl_lightning.sweep.task import FAILED
from tests.helpers import run_cli

GRID = """\
method: grid
parameters:
  x:
    values: [1, 2]
command:
  - ${env}
  - ${interpreter}
  - fit.py
  - ${args}
"""


def _tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\necho {name} \"$@\" >> {folder / 'calls.txt'}\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """sbatch, squeue, sinfo and srun on PATH (partition ``debug`` is the default); their calls
    logged. Complete, so the quick lane passes on a machine without SLURM."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "sinfo", 'case "$*" in *%L*) echo "30:00|1-00:00:00";; *) echo "debug*"; '
          'echo gpu;; esac')
    _tool(bin_dir, "sbatch", "echo Submitted batch job 7")
    _tool(bin_dir, "squeue", "true")
    _tool(bin_dir, "srun", "true")  # submitit refuses to submit without one on PATH
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "grid.yaml").write_text(GRID)
    return bin_dir


def _calls(bin_dir: Path) -> list[str]:
    path = bin_dir / "calls.txt"
    return path.read_text().splitlines() if path.exists() else []


def _sweep(tmp_path, *extra):
    return run_cli("sweep", tmp_path / "grid.yaml", "--output", tmp_path / "out", *extra)


# ----------------------------------------------------------------------- settings


def test_slurm_times_read_as_minutes_and_a_bad_one_is_refused():
    assert [parse_time(t) for t in ("90", "1:30", "2:00:00", "1-12", "1-00:00:30")] == [
        90, 2, 120, 2160, 1441]
    for bad in ("", "soon", "1:2:3:4", "0", "-5"):
        with pytest.raises(SweepError, match="time"):
            parse_time(bad)


def test_a_scheduler_yaml_with_flags_on_top(tmp_path):
    path = tmp_path / "slurm.yaml"
    path.write_text("partition: gpu\ntime: '4:00:00'\ngpus-per-task: 1\nmem: 8G\n"
                    "sbatch: ['--qos=normal']\n")
    settings = load_scheduler(path, {"time": "30", "sbatch": ["--exclusive"], "mem": None})
    assert (settings.partition, settings.time, settings.minutes, settings.gpus_per_task,
            settings.mem) == ("gpu", "30", 30, 1, "8G")
    assert sbatch_extra(settings) == {"qos": "normal", "exclusive": True}
    assert load_scheduler().partition is None  # no file, no flags: the cluster's default


@pytest.mark.parametrize("text, message", [
    ("partition: [gpu\n", "invalid YAML"),
    ("- gpu\n", "expected a mapping"),
    ("partitions: gpu\n", "unknown scheduler setting 'partitions'"),
    ("cpus_per_task: 0\n", "cpus_per_task must be a positive integer"),
    ("time: tomorrow\n", "not a SLURM time limit"),
    ("sbatch: ['qos=normal']\n", "sbatch lines"),
])
def test_a_malformed_scheduler_yaml_is_one_line_exit_2_and_submits_nothing(
    tmp_path, fake_slurm, text, message
):
    (tmp_path / "slurm.yaml").write_text(text)
    result = _sweep(tmp_path, "--executor", "slurm", "--scheduler", tmp_path / "slurm.yaml")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr
    assert not any(c.startswith("sbatch") for c in _calls(fake_slurm))
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------- refusals


def test_no_slurm_on_path_is_one_line_exit_2(tmp_path, monkeypatch):
    (tmp_path / "grid.yaml").write_text(GRID)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    result = _sweep(tmp_path, "--executor", "slurm")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "no `sbatch`, `squeue`, `sinfo`, `srun` on PATH" in result.stderr
    assert not (tmp_path / "out").exists()


def test_no_srun_on_path_is_one_line_exit_2_and_writes_nothing(tmp_path, fake_slurm, monkeypatch):
    """submitit runs each task under ``srun`` and refuses without it: checked before writing.
    PATH holds only the fake tools (a real SLURM, as CI installs, would put srun back)."""
    (fake_slurm / "srun").unlink()
    monkeypatch.setenv("PATH", str(fake_slurm))
    result = _sweep(tmp_path, "--executor", "slurm")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "no `srun` on PATH" in result.stderr
    assert not (tmp_path / "out").exists()  # no .sweep.json, no point folders
    assert not any(c.startswith("sbatch") for c in _calls(fake_slurm))


def test_an_unknown_partition_is_refused_naming_the_known_ones(tmp_path, fake_slurm):
    result = _sweep(tmp_path, "--executor", "slurm", "--partition", "gpuz")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "--partition gpuz: no such partition (known: debug, gpu)" in result.stderr
    assert not any(c.startswith("sbatch") for c in _calls(fake_slurm))


def test_an_output_held_by_another_runner_submits_nothing(tmp_path, fake_slurm):
    with lock.lock_output(tmp_path / "out"):
        result = _sweep(tmp_path, "--executor", "slurm")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "is in use by another sweep runner" in result.stderr
    assert not any(c.startswith("sbatch") for c in _calls(fake_slurm))


def test_an_output_whose_array_still_runs_submits_nothing(tmp_path, fake_slurm):
    record = tmp_path / "out" / ".slurm" / "arrays" / "41.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"array": "41", "submitted": "x", "tasks": [
        {"id": "41_0", "points": ["x1_aaaa"], "log": "l", "job": None}]}))
    _tool(fake_slurm, "squeue", 'echo "41_0|RUNNING"; echo "99_0|RUNNING"')
    result = _sweep(tmp_path, "--executor", "slurm")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "has SLURM array 41 with 1 task(s) still queued or running" in result.stderr
    assert not any(c.startswith("sbatch") for c in _calls(fake_slurm))
    _tool(fake_slurm, "squeue", 'echo "41_0|COMPLETED"')  # negative control: it has ended
    from cfl_lightning.sweep import load_sweep
    from cfl_lightning.sweep.cluster import run_slurm_sweep

    summary = run_slurm_sweep(load_sweep(tmp_path / "grid.yaml"), tmp_path / "out",
                              load_scheduler(), wait=False, stream=open(os.devnull, "w"))
    assert summary.not_run == 2
    assert (tmp_path / "out" / ".slurm" / "arrays" / "7.json").is_file()
    assert any(c.startswith("sbatch") for c in _calls(fake_slurm))


def test_slurm_flags_need_the_slurm_executor(tmp_path):
    (tmp_path / "grid.yaml").write_text(GRID)
    result = _sweep(tmp_path, "--partition", "gpu")
    assert result.returncode == 2 and "--partition needs --executor slurm" in result.stderr


# ----------------------------------------------------------------------- status


def _point(out: Path, name: str, params: dict, results: str | None = None, log: str | None = None):
    directory = out / name
    directory.mkdir(parents=True)
    (directory / "params.json").write_text(json.dumps(params))
    if results is not None:
        (directory / "csv").mkdir()
        (directory / "csv" / "results.json").write_text(results)
    if log is not None:
        (directory / "run.log").write_text(log)


def test_status_of_a_cluster_run(tmp_path, fake_slurm):
    from cfl_lightning.sweep import load_sweep, plan_sweep
    from cfl_lightning.sweep.runner import write_sweep_record

    config = load_sweep(tmp_path / "grid.yaml")
    config["parameters"]["x"]["values"] = [1, 2, 3, 4, 5]
    out = tmp_path / "out"
    out.mkdir()
    write_sweep_record(out, config, "grid.yaml")
    names = [p.name for p in plan_sweep(config, out)]
    _point(out, names[0], {"x": 1}, '{"kl_total": 0.5}')
    _point(out, names[1], {"x": 2}, log=f"# x\n{FAILED}exit 3: boom\n")
    _point(out, names[2], {"x": 3}, log="# started\n")
    _point(out, names[3], {"x": 4}, log="# started\n")
    record = out / ".slurm" / "arrays" / "7.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"array": "7", "submitted": "x", "tasks": [
        {"id": f"7_{i}", "points": [n], "log": "l", "job": None} for i, n in enumerate(names)]}))
    _tool(fake_slurm, "squeue", 'echo "7_2|RUNNING"; echo "7_4|PENDING"; echo "7_3|CANCELLED"')
    states = {p.name: (s, d) for s, p, d in point_states(out)}
    assert [states[n][0] for n in names] == ["done", "failed", "running", "failed", "pending"]
    assert "exit 3: boom; log: " in states[names[1]][1]
    assert "SLURM task 7_2 RUNNING" in states[names[2]][1]
    assert "ended without a results.json" in states[names[3]][1]
    result = run_cli("sweep", out, "--status")
    assert result.returncode == 0
    assert "5 points: 1 done, 1 running, 1 pending, 2 failed" in result.stdout
    assert result.stdout.count("\nfailed ") == 2


def test_status_of_a_local_run(tmp_path):
    out = tmp_path / "out"
    _point(out, "x1_aaaa", {"x": 1}, '{"kl_total": 0.5}')
    _point(out, "x2_bbbb", {"x": 2}, log="# running\n")
    states = {p.name: s for s, p, _ in point_states(out)}
    assert states == {"x1_aaaa": "done", "x2_bbbb": "pending"}  # no runner: interrupted
    with lock.lock_output(out):
        assert {p.name: s for s, p, _ in point_states(out)}["x2_bbbb"] == "running"
    assert run_cli("sweep", tmp_path / "none", "--status").returncode == 2


def test_status_of_a_folder_that_is_no_sweep_is_one_line_exit_2(tmp_path):
    folder = tmp_path / "photos"
    (folder / "2026").mkdir(parents=True)
    (folder / "notes.txt").write_text("x")
    result = run_cli("sweep", folder, "--status")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"{folder}: not a sweep directory" in result.stderr and result.stdout == ""
    result = run_cli("sweep", folder / "notes.txt", "--status")  # e.g. the sweep's YAML
    assert result.returncode == 2 and "a file, not a sweep directory" in result.stderr
    (folder / ".sweep.json").write_text('{"source": "grid.yaml", "config": null}')
    result = run_cli("sweep", folder, "--status")  # negative control: a sweep's record
    assert result.returncode == 0 and "0 points" in result.stdout


# ----------------------------------------------------------------------- Lightning


def test_lightning_in_a_slurm_step_gets_no_auto_requeue():
    from lightning.fabric.plugins.environments import SLURMEnvironment

    step = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "cfl_sweep"}
    (plugin,) = cluster_env.trainer_plugins(step)
    assert isinstance(plugin, SLURMEnvironment) and plugin.auto_requeue is False
    assert cluster_env.trainer_plugins({}) == []  # negative control: not in SLURM
    assert cluster_env.trainer_plugins({**step, "SLURM_JOB_NAME": "interactive"}) == []


def test_a_single_process_fit_on_a_login_node_does_not_print_the_srun_hint(
    tmp_path, monkeypatch
):
    import lightning.pytorch as pl

    (tmp_path / "srun").write_text("#!/bin/sh\n")
    (tmp_path / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        pl.Trainer(logger=False, enable_checkpointing=False)
    assert any("srun" in str(w.message) for w in seen)  # Lightning does warn here
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert cluster_env.single_process({"devices": 1})
        cluster_env.quiet_srun_hint()
        pl.Trainer(logger=False, enable_checkpointing=False)
    assert not any("srun" in str(w.message) for w in seen)
    assert not cluster_env.single_process({"devices": 2})
    assert not cluster_env.single_process({"num_nodes": 2})


def test_a_failing_squeue_is_never_read_as_tasks_that_ended(tmp_path, fake_slurm):
    out = tmp_path / "out"
    _point(out, "x1_aaaa", {"x": 1}, log="# started\n")
    record = out / ".slurm" / "arrays" / "7.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"array": "7", "submitted": "x", "tasks": [
        {"id": "7_0", "points": ["x1_aaaa"], "log": "l", "job": None}]}))
    _tool(fake_slurm, "squeue", "echo 'slurm_load_jobs error: timeout' >&2; exit 1")
    result = run_cli("sweep", out, "--status")
    assert result.returncode == 2 and "squeue failed" in result.stderr
    result = _sweep(tmp_path, "--executor", "slurm")  # nor submitted over a running array
    assert result.returncode == 2 and "squeue failed" in result.stderr
    assert not any(c.startswith("sbatch") for c in _calls(fake_slurm))
    _tool(fake_slurm, "squeue", 'echo "7_0|RUNNING"')  # negative control: squeue answers
    assert run_cli("sweep", out, "--status").returncode == 0


def test_fit_on_a_login_node_with_srun_prints_no_srun_hint(tmp_path, monkeypatch):
    """``fit`` (one process) with ``srun`` on PATH: Lightning's hint was printed twice before."""
    from tests.helpers import tiny_args

    (tmp_path / "srun").write_text("#!/bin/sh\n")
    (tmp_path / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    for name in ("SLURM_NTASKS", "SLURM_JOB_ID", "SLURM_JOB_NAME"):
        monkeypatch.delenv(name, raising=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = run_cli("fit", *tiny_args(tmp_path / "run"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert not [w for w in seen if cluster_env.SRUN_HINT in str(w.message)]
    assert cluster_env.SRUN_HINT not in result.stderr
