"""``sweep --executor slurm`` against a real one-node SLURM on localhost (issue 39; slow).

The cluster (tests/slurm_cluster.py: Debian's slurm-wlm and munge, its own config, spool and
munge socket in a temporary folder) starts once for the module and is torn down after it; the
tests skip, with the reason, where it cannot start (not root, binaries missing). CI installs
and starts it (.ci/run).

The end-to-end test runs a tiny grid of 8 points plain and as 2 ensemble jobs (``--ensemble
4``), cancels one task (``scancel``) while it runs, resubmits, and compares every point's
``results.json`` with the local runner's: one per point; plain runs bit-identical; ensembles
identical to the local runner's ensembles (and within 5% of the plain runs' ``kl_total``: their
dropout streams differ, docs/guide/cluster.md).
"""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # before anything imports wandb

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, tiny_fit_grid
from tests.slurm_cluster import cannot_start, local_slurm

pytestmark = pytest.mark.slow

GRID = tiny_fit_grid("tiny", "values: [0, 1, 2, 3]", "values: [30, 40]")
# what differs between two runs of the same point whatever runs them
VOLATILE = ("config", "log_dir", "train_time_s", "train_time_resumed_s")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    why = cannot_start()
    if why is not None:
        pytest.skip(why)
    with local_slurm(tmp_path_factory.mktemp("slurm")) as env:
        yield env


def _env(slurm_env, tmp_path):
    return {**slurm_env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "WANDB_MODE": "disabled", "CFL_LIGHTNING_CACHE": str(tmp_path / "cache")}


def _sweep(env, tmp_path, out, *extra, **kwargs):
    command = [sys.executable, "-m", "cfl_lightning", "sweep", str(tmp_path / "grid.yaml"),
               "--output", str(out), *extra]
    return subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True,
                            **kwargs)


def _run_cancelling_one(env, tmp_path, out, *extra):
    """A waiting cluster sweep whose first started task is cancelled; its stderr."""
    proc = _sweep(env, tmp_path, out, "--executor", "slurm", *extra)
    lines, cancelled = [], None
    for line in proc.stderr:
        lines.append(line)
        match = re.search(r"start \S+ \(SLURM task (\S+)\)", line)
        if match and cancelled is None:
            cancelled = match.group(1)
            subprocess.run(["scancel", cancelled], env=env, check=True)
    assert proc.wait(timeout=900) == 1, "".join(lines)  # the cancelled points failed
    text = "".join(lines)
    assert cancelled is not None and "FAILED" in text, text
    assert "; log: " in text.split("FAILED", 1)[1].splitlines()[0]
    return text


def _results(out: Path) -> dict[str, dict]:
    found: dict[str, list[Path]] = {}
    for path in out.rglob("results.json"):
        point = path.relative_to(out).parts[0]
        if ".attempts" not in path.parts:
            found.setdefault(point, []).append(path)
    assert all(len(paths) == 1 for paths in found.values()), found  # one per point
    return {point: json.loads(paths[0].read_text()) for point, paths in found.items()}


def _stable(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in VOLATILE}


def test_a_grid_on_slurm_equals_the_local_runner_after_a_scancel_and_a_resubmission(
    slurm, tmp_path
):
    (tmp_path / "grid.yaml").write_text(GRID)
    env = _env(slurm, tmp_path)
    started = time.monotonic()
    for extra, name in (((), "plain"), (("--ensemble", "4"), "ensemble")):
        out = tmp_path / f"slurm_{name}"
        _run_cancelling_one(env, tmp_path, out, *extra)
        assert len(_results(out)) < 8
        status = subprocess.run([sys.executable, "-m", "cfl_lightning", "sweep", str(out),
                                 "--status"], cwd=REPO, env=env, capture_output=True, text=True)
        assert re.search(r"8 points: \d done, 0 running, 0 pending, [1-9] failed", status.stdout)
        again = _sweep(env, tmp_path, out, "--executor", "slurm", *extra)
        err = again.stderr.read()
        assert again.wait(timeout=900) == 0, err
        assert "already done" in err and " 0 failed of 8 points" in err
        local = tmp_path / f"local_{name}"
        proc = _sweep(env, tmp_path, local, "--parallel", "2", *extra)
        assert proc.wait(timeout=900) == 0, proc.stderr.read()
        cluster, reference = _results(out), _results(local)
        assert len(cluster) == 8 and cluster.keys() == reference.keys()
        for point in cluster:  # bit-identical numbers, plain and ensemble alike
            assert _stable(cluster[point]) == _stable(reference[point]), point
        if name == "ensemble":
            plain = _results(tmp_path / "slurm_plain")
            for point, result in cluster.items():
                assert math.isclose(result["kl_total"], plain[point]["kl_total"], rel_tol=0.05)
    print(f"SLURM end-to-end: {time.monotonic() - started:.0f} s")


def test_a_preempted_ensemble_task_is_requeued_and_resumes_from_its_checkpoint(slurm, tmp_path):
    """SIGUSR2 (what SLURM sends before a time limit or at a preemption) to a running ensemble
    task: submitit checkpoints and requeues it, and the job resumes after its last epoch."""
    grid = GRID.replace("values: [30, 40]", "value: 30").replace(
        "trainer.max_epochs:\n    value: 2", "trainer.max_epochs:\n    value: 40\n"
        "  early_stopping.patience:\n    value: 100")
    (tmp_path / "grid.yaml").write_text(grid)
    env = _env(slurm, tmp_path)
    out = tmp_path / "out"
    proc = _sweep(env, tmp_path, out, "--executor", "slurm", "--ensemble", "4")
    deadline = time.monotonic() + 600
    while not list(out.glob(".ensembles/*/checkpoints/last.ckpt")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.1)
    record = json.loads(next(out.glob(".slurm/arrays/*.json")).read_text())
    (task,) = record["tasks"]
    subprocess.run(["scancel", "--signal=USR2", task["id"]], env=env, check=True)
    err = proc.stderr.read()
    assert proc.wait(timeout=900) == 0, err
    assert "4 done, 0 skipped (already done), 0 failed of 4 points" in err
    job_log = next(out.glob(".ensembles/*/job.log")).read_text()
    assert "resuming 4 members from" in job_log, job_log[-3000:]
    results = _results(out)
    assert len(results) == 4 and all(r["epochs"] == 40 for r in results.values())


GRAMMAR_GRID = """\
name: grammar
method: grid
parameters:
  seed_everything:
    values: [0, 1]
  data.automaton:
    value: {grammar}
  data.intervention:
    value: exact
  data.event:
    values: ["symbol:x", "rule:E -> E '+' T"]
  data.count:
    value: 40
  data.num_strings:
    value: 30
  data.val_strings:
    value: 10
  data.test_strings:
    value: 10
  trainer.max_epochs:
    value: 2
  model.init_args.param_budget:
    value: 6000
  model.init_args.dropout:
    value: 0.0
command:
  - ${{env}}
  - ${{interpreter}}
  - -m
  - cfl_lightning
  - fit
  - --config
  - configs/parity_starfree.yaml
  - ${{args}}
"""


def test_a_grammar_grid_on_slurm_equals_the_local_runner(slurm, tmp_path):
    """Issue 50: a grammar's grid (a symbol and a rule event) as a SLURM job array, plain and
    under ``--ensemble 2``, gives each point the local runner's results.json."""
    from tests.pcfg_reference import EXPR

    grammar = tmp_path / "expr.pcfg"
    grammar.write_text(EXPR)
    (tmp_path / "grid.yaml").write_text(GRAMMAR_GRID.format(grammar=grammar))
    env = _env(slurm, tmp_path)
    for extra, name in (((), "plain"), (("--ensemble", "2"), "ensemble")):
        out, local = tmp_path / f"slurm_{name}", tmp_path / f"local_{name}"
        proc = _sweep(env, tmp_path, out, "--executor", "slurm", *extra)
        assert proc.wait(timeout=900) == 0, proc.stderr.read()
        proc = _sweep(env, tmp_path, local, *extra)
        assert proc.wait(timeout=900) == 0, proc.stderr.read()
        cluster, reference = _results(out), _results(local)
        assert len(cluster) == 4 and cluster.keys() == reference.keys()
        for point, result in cluster.items():
            assert _stable(result) == _stable(reference[point]), point
            assert result["automaton"]["kind"] == "pcfg" and result["realized_count"] == 40
            assert (result["kl_target"] is None) == result["event"].startswith("rule:")
