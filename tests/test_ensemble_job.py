"""The ensemble job (``python -m cfl_lightning.cli.ensemble_job SPEC.json``): files, failures, resume.

Each member's ``results.json`` must be the one its own ``fit`` writes, a failing member must be
reported alone, a member with a valid ``results.json`` must never be trained or written again,
and a job killed mid-run must continue from its checkpoint to the same results.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def fit_args(seed: int, root: Path, *extra: str, epochs: int = 3) -> list[str]:
    return ["--config", "configs/parity_starfree.yaml", f"--seed_everything={seed}",
            "--data.num_strings=40", "--data.count=80", "--data.val_strings=20",
            "--data.test_strings=30", "--data.cache_dir=none", f"--trainer.max_epochs={epochs}",
            "--model.init_args.dropout=0", "--model.init_args.param_budget=8000",
            f"--trainer.default_root_dir={root}", *extra]


def write_spec(path: Path, members: list[tuple[str, list[str]]], checkpoint_dir=None) -> Path:
    spec = {"members": [{"name": n, "args": a} for n, a in members],
            "checkpoint_dir": None if checkpoint_dir is None else str(checkpoint_dir)}
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def job(spec: Path, tmp_path: Path, **kwargs) -> subprocess.Popen | subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="disabled", PYTHONPATH=str(ROOT),
               CFL_LIGHTNING_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "cfl_lightning.cli.ensemble_job", str(spec)]
    if kwargs.pop("background", False):
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["stacked", "loop"])
def test_members_write_the_results_their_own_fit_writes(engine, tmp_path):
    """``run_job`` vs ``python -m cfl_lightning fit`` (in-process) on the same arguments."""
    from cfl_lightning.cli.ensemble_job import run_job
    from cfl_lightning.cli.train import main as fit_main

    seeds = (0, 1)
    for seed in seeds:
        assert fit_main(["fit", *fit_args(seed, tmp_path / "plain" / str(seed))]) == 0
    status = run_job(
        [(f"s{seed}", fit_args(seed, tmp_path / "ens" / str(seed))) for seed in seeds],
        engine=engine,
    )
    assert status == {"s0": None, "s1": None}
    for seed in seeds:
        (plain,) = (tmp_path / "plain" / str(seed)).rglob("results.json")
        (ens,) = (tmp_path / "ens" / str(seed)).rglob("results.json")
        assert plain.relative_to(tmp_path / "plain" / str(seed)) == ens.relative_to(
            tmp_path / "ens" / str(seed)
        )
        a, b = json.loads(plain.read_text()), json.loads(ens.read_text())
        assert list(a) == list(b)
        for key in ("model", "intervention", "event", "count", "realized_count", "num_strings",
                    "num_parameters", "seed", "automaton_id", "epochs", "steps", "occurrences",
                    "test_visits", "target_test_visits", "stopped_early"):
            assert a[key] == b[key], key
        assert b["kl_total"] == pytest.approx(a["kl_total"], rel=1e-4)
        assert b["best_val_loss"] == pytest.approx(a["best_val_loss"], rel=1e-5)
        assert b["kl"]["state"] == pytest.approx(a["kl"]["state"], rel=1e-3, abs=1e-7)
        # the same config but for the run directory
        moved = json.dumps(a["config"]).replace(str(tmp_path / "plain"), str(tmp_path / "ens"))
        assert json.loads(moved) == b["config"]


@pytest.mark.slow
def test_a_failing_member_is_reported_alone_and_done_members_are_left_alone(tmp_path, capsys):
    from cfl_lightning.cli.ensemble_job import run_job

    members = [
        ("good0", fit_args(0, tmp_path / "p0")),
        ("unknown_event", fit_args(1, tmp_path / "p1", "--data.event=state:nosuch")),
        ("too_big", fit_args(2, tmp_path / "p2", "--data.count=100000000")),  # size refused
        ("good3", fit_args(3, tmp_path / "p3")),
    ]
    status = run_job(members)
    assert status["good0"] is None and status["good3"] is None
    assert "nosuch" in status["unknown_event"] and "SizeError" in status["too_big"]
    out = capsys.readouterr().out.splitlines()  # one line per member, nothing else on stdout
    assert sorted(out) == sorted(
        ["done good0", "done good3", f"FAILED unknown_event: {status['unknown_event']}",
         f"FAILED too_big: {status['too_big']}"]
    )
    found = sorted(tmp_path.rglob("results.json"))
    assert [f.relative_to(tmp_path).parts[0] for f in found] == ["p0", "p3"]
    stamps = {f: f.stat().st_mtime_ns for f in found}
    # rerun: the done members are neither trained nor written again
    again = run_job([members[0], members[3]])
    assert again == {"good0": None, "good3": None}
    assert {f: f.stat().st_mtime_ns for f in sorted(tmp_path.rglob("results.json"))} == stamps
    # negative control: a corrupt file does not count as done; it is replaced, not joined
    found[0].write_text("{}", encoding="utf-8")
    assert run_job(members[:1]) == {"good0": None}
    assert sorted(tmp_path.rglob("results.json")) == found
    assert json.loads(found[0].read_text())["kl_total"] is not None


@pytest.mark.parametrize("content,message", [
    ("not json", "cannot read"), ('[{"name": "a", "args": []}]', "expected"),
    ('{"members": [{"name": "a"}]}', "members[0]"),
    ('{"members": [], "checkpoint_dir": 3}', "checkpoint_dir"),
])
def test_a_bad_spec_gets_one_line_and_exit_2(content, message, tmp_path, capsys):
    from cfl_lightning.cli.ensemble_job import main

    spec = tmp_path / "spec.json"
    spec.write_text(content, encoding="utf-8")
    assert main([str(spec)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert message in line and str(spec) in line


@pytest.mark.slow
def test_a_killed_job_resumes_from_its_checkpoint_to_the_same_results(tmp_path):
    """SIGKILL after the third epoch's checkpoint; the rerun continues from it (no epoch is
    trained twice) and writes exactly the uninterrupted run's results, one file per member."""
    epochs = 8
    members = lambda root: [  # noqa: E731
        (f"s{seed}", fit_args(seed, root / f"s{seed}", "--early_stopping.patience=100",
                              epochs=epochs))
        for seed in (0, 1)
    ]
    whole = job(write_spec(tmp_path / "whole.json", members(tmp_path / "whole")), tmp_path)
    assert whole.returncode == 0, whole.stderr[-3000:]
    checkpoints = tmp_path / "ckpt"
    spec = write_spec(tmp_path / "spec.json", members(tmp_path / "killed"), checkpoints)
    proc = job(spec, tmp_path, background=True)
    last, seen, deadline = checkpoints / "last.ckpt", 0, time.monotonic() + 300
    while seen < 3 and time.monotonic() < deadline and proc.poll() is None:
        stamp = last.stat().st_mtime_ns if last.exists() else None
        if stamp is not None and stamp != getattr(proc, "_stamp", None):
            proc._stamp, seen = stamp, seen + 1
        time.sleep(0.01)
    assert seen >= 1 and proc.poll() is None, "the job ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert not list((tmp_path / "killed").rglob("results.json"))
    rerun = job(spec, tmp_path)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert sorted(rerun.stdout.splitlines()) == ["done s0", "done s1"]
    resumed = [line for line in rerun.stderr.splitlines() if line.startswith("resuming")]
    assert len(resumed) == 1 and int(resumed[0].split()[-1]) >= 1, rerun.stderr[-2000:]
    assert not last.exists()  # removed once every member was written
    for name in ("s0", "s1"):
        (a,) = (tmp_path / "whole" / name).rglob("results.json")
        (b,) = (tmp_path / "killed" / name).rglob("results.json")
        ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
        assert rb["epochs"] == ra["epochs"] == epochs and rb["steps"] == ra["steps"]
        assert rb["kl_total"] == ra["kl_total"] and rb["kl"] == ra["kl"]
        assert rb["best_val_loss"] == ra["best_val_loss"]
