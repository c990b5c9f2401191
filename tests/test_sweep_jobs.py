"""Ensemble jobs of a sweep (``sweep --ensemble M``): grouping, per-member reports, resume.

The runner side is tested with a fake job module that keeps the job protocol (spec, one stdout
line per member, ``checkpoint_dir/last.ckpt``); the real job is tested end to end when its
module (``cfl_lightning.cli.ensemble_job``) exists.
"""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # before anything imports wandb

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cfl_lightning.__main__ import main
from cfl_lightning.sweep import SweepPoint, jobs, run_name
from tests.helpers import CI_LIMIT_S, survivors, wait_for

REPO = Path(__file__).resolve().parents[1]
FIT = ["${env}", "${interpreter}", "-m", "cfl_lightning", "fit", "${args}"]


def _points(params_list, root):
    return [SweepPoint(p, run_name(p), root / run_name(p)) for p in params_list]


def test_plan_jobs_groups_by_shared_hyperparameters(tmp_path):
    config = {"command": FIT}
    params = [
        {"model": model, "data.count": n, "seed_everything": s}
        for model in ("LSTMLanguageModel", "TransformerLanguageModel")
        for n in (10, 20) for s in range(3)
    ]
    points = _points(params, tmp_path)
    planned, plain = jobs.plan_jobs(config, points, tmp_path, ensemble=4, parallel=1, write=False)
    assert plain == []
    assert sorted(len(j.points) for j in planned) == [3, 3, 3, 3]  # 6 per model, cut to <= 4
    for job in planned:
        assert len({j.params["model"] for j in job.points}) == 1
    planned, _ = jobs.plan_jobs(config, points[:6], tmp_path, ensemble=8, parallel=3, write=False)
    assert sorted(len(j.points) for j in planned) == [2, 2, 2]  # split to keep 3 processes busy
    assert planned[0].command[1:3] == ("-m", jobs.JOB_MODULE)
    assert planned[0].command[-1] == str(planned[0].spec)
    assert not (tmp_path / jobs.ENSEMBLE_DIR).exists()  # write=False writes nothing
    assert jobs.fit_args(["python", "-m", "cfl_lightning", "fit", "--a=1"]) == ["--a=1"]
    other = {"command": ["${env}", "${interpreter}", "train.py", "${args}"]}
    planned, plain = jobs.plan_jobs(other, points, tmp_path, ensemble=4, write=False)
    assert planned == [] and plain == points


def test_plan_jobs_deals_slow_grid_values_across_jobs(tmp_path):
    """Counts vary in blocks in grid order; every job gets a share of each count, so the jobs
    holding the long corpora (large counts) do not all finish last."""
    config = {"command": FIT}
    params = [{"data.count": n, "data.weight_seed": w} for n in (25, 200, 1600) for w in range(4)]
    points = _points(params, tmp_path)
    planned, _ = jobs.plan_jobs(config, points, tmp_path, ensemble=8, parallel=2, write=False)
    assert sorted(len(j.points) for j in planned) == [6, 6]
    for job in planned:
        counts = [p.params["data.count"] for p in job.points]
        assert sorted(counts) == [25, 25, 200, 200, 1600, 1600], counts
    assert sorted(p.name for j in planned for p in j.points) == sorted(p.name for p in points)


def test_spec_follows_the_job_protocol(tmp_path):
    config = {"command": FIT}
    points = _points([{"data.count": n} for n in (1, 2)], tmp_path)
    (job,), _ = jobs.plan_jobs(config, points, tmp_path, ensemble=4)
    spec = json.loads(job.spec.read_text())
    assert spec["checkpoint_dir"] == str(job.checkpoint_dir)
    assert job.checkpoint_dir == job.directory / "checkpoints"
    assert [m["name"] for m in spec["members"]] == [p.name for p in points]
    for member, point in zip(spec["members"], points):
        assert member["args"][-1] == f"--trainer.default_root_dir={point.directory}"
    assert jobs.parse_member_line("done a_1\n") == ("done", "a_1", "")
    assert jobs.parse_member_line("done a_1: /x/results.json") == ("done", "a_1", "")
    assert jobs.parse_member_line("FAILED a_1: SizeError: too big") == (
        "FAILED", "a_1", "SizeError: too big")
    assert jobs.parse_member_line("a_1: not ensembled (x); trained on its own") is None


def test_a_job_with_a_checkpoint_keeps_its_members_across_reruns(tmp_path):
    """A job of an earlier run is started again as it was when it holds a checkpoint; without
    one (negative control) its points are grouped anew."""
    config = {"command": FIT}
    points = _points([{"data.count": n} for n in range(4)], tmp_path)
    old = jobs.EnsembleJob(
        (points[0], points[2]),
        tuple({"name": p.name, "args": ["--old"]} for p in (points[0], points[2])),
        tmp_path / jobs.ENSEMBLE_DIR / "old",
    )
    old.write_spec()
    planned, _ = jobs.plan_jobs(config, points, tmp_path, ensemble=8, write=False)
    assert [sorted(p.name for p in j.points) for j in planned] == [sorted(p.name for p in points)]
    old.checkpoint_dir.mkdir()
    (old.checkpoint_dir / "last-1.ckpt.tmp").write_bytes(b"half")  # not a checkpoint yet
    planned, _ = jobs.plan_jobs(config, points, tmp_path, ensemble=8, write=False)
    assert not planned[0].resumed
    (old.checkpoint_dir / "last-1.ckpt").write_bytes(b"ckpt")  # a job of several groups
    planned, _ = jobs.plan_jobs(config, points, tmp_path, ensemble=8, write=False)
    assert planned[0].resumed and planned[0].directory == old.directory
    assert [p.name for p in planned[0].points] == [points[0].name, points[2].name]
    assert [m["args"] for m in planned[0].members] == [["--old"], ["--old"]]
    assert [p.name for p in planned[1].points] == [points[1].name, points[3].name]
    assert not planned[1].resumed
    # a resumed job keeps a member that is done meanwhile (rebuilt from its directory)
    points[2].directory.mkdir(parents=True)
    (points[2].directory / "params.json").write_text(json.dumps(points[2].params))
    (points[2].directory / "results.json").write_text('{"kl_total": 0.1}')
    pending = [points[0], points[1], points[3]]
    planned, _ = jobs.plan_jobs(config, pending, tmp_path, ensemble=8, write=False)
    assert [(p.name, p.done) for p in planned[0].points] == [
        (points[0].name, False), (points[2].name, True)]


# --------------------------------------------------------------------------- the runner side

FAKE_JOB = """\
import json, os, sys, time
spec_path = sys.argv[1]
spec = json.load(open(spec_path))
here = os.path.dirname(os.path.abspath(__file__))
ckpt = os.path.join(spec["checkpoint_dir"], "last.ckpt")
start = json.load(open(ckpt))["epoch"] if os.path.exists(ckpt) else 0
with open(os.path.join(here, "jobs.txt"), "a") as f:
    f.write(json.dumps({"spec": spec, "pid": os.getpid(), "start": start,
                        "names": [m["name"] for m in spec["members"]]}) + "\\n")
members = [(m["name"], dict(a[2:].split("=", 1) for a in m["args"] if a.startswith("--")))
           for m in spec["members"]]
slow = not os.path.exists(os.path.join(here, "fast"))
print("loading", flush=True)
print("some warning on stderr", file=sys.stderr, flush=True)
for epoch in range(start, 4):
    time.sleep(0.5 if slow else 0)
    with open(ckpt + ".tmp", "w") as f:
        json.dump({"epoch": epoch + 1}, f)
    os.replace(ckpt + ".tmp", ckpt)
if any(a.get("data.count") == "refused" for _, a in members):  # the job's CLI refuses it
    print("python -m cfl_lightning: error: --model: class 'my_models.GRULM': No module named "
          "'my_models'", file=sys.stderr)
    print("  (see 'python -m cfl_lightning --help' for the options)", file=sys.stderr)
    sys.exit(2)
if any(a.get("data.count") == "crash" for _, a in members):
    print("done " + members[0][0], flush=True)
    print("RuntimeError: CUDA error: out of memory", file=sys.stderr)
    sys.exit(1)
failed = False
for name, args in members:
    out = os.path.join(args["trainer.default_root_dir"], "csv", "version_0")
    if os.path.exists(os.path.join(out, "results.json")):
        print("done " + name, flush=True)  # never trained or written again
        continue
    if args.get("data.count") == "alone":  # fitted on its own (as a plain LightningModule is)
        print(f"alone {name}: model GRULM is not a LanguageModel", flush=True)
    if args.get("data.count") == "huge":
        print(f"FAILED {name}: SizeError: the corpus needs 80 GB, 2 GB available", flush=True)
        failed = True
        continue
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"kl_total": 0.25, "args": args}, f)
    print("done " + name, flush=True)
sys.exit(1 if failed else 0)
"""


def _ensemble_sweep(tmp_path, counts, seeds=(0, 1)):
    (tmp_path / "fake_job.py").write_text(FAKE_JOB)
    path = tmp_path / "grid.yaml"
    path.write_text(
        "method: grid\nparameters:\n"
        f"  data.count:\n    values: {json.dumps(list(counts))}\n"
        f"  seed_everything:\n    values: {json.dumps(list(seeds))}\n"
        "command:\n" + "".join(f"  - {c}\n" for c in FIT)
    )
    return path


def _jobs_started(tmp_path):
    path = tmp_path / "jobs.txt"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _results(out):
    return sorted(out.rglob("results.json"))


def _run(argv, capsys):
    code = main(argv)
    return code, capsys.readouterr().err


def test_a_failed_member_is_reported_alone_with_its_reason(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(jobs, "JOB_MODULE", "fake_job")
    (tmp_path / "fast").touch()
    path, out = _ensemble_sweep(tmp_path, [1, 2, "huge", 3], seeds=[0]), tmp_path / "out"
    code, err = _run(["sweep", str(path), "--output", str(out), "--ensemble", "4"], capsys)
    assert code == 1, err
    assert "3 done, 0 skipped (already done), 1 failed of 4 points" in err
    (failed,) = [line for line in err.splitlines() if "FAILED" in line]
    assert "nhuge_" in failed and "SizeError: the corpus needs 80 GB" in failed
    log = Path(failed.split("; log: ")[1])
    assert log.read_text().splitlines()[-1] == (
        "# FAILED: SizeError: the corpus needs 80 GB, 2 GB available")
    assert len(_results(out)) == 3
    (job,) = _jobs_started(tmp_path)
    assert len(job["names"]) == 4  # one job of four members
    # its checkpoint stays (a member is not done): the rerun resumes the same job
    code, err = _run(["sweep", str(path), "--output", str(out), "--ensemble", "2"], capsys)
    assert code == 1 and "0 done, 3 skipped (already done), 1 failed of 4 points" in err
    again = _jobs_started(tmp_path)[1]
    assert again["names"] == job["names"] and again["start"] == 4


def test_a_crashed_job_gives_each_unreported_member_its_own_error_line(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(jobs, "JOB_MODULE", "fake_job")
    (tmp_path / "fast").touch()
    path, out = _ensemble_sweep(tmp_path, ["crash"]), tmp_path / "out"
    code, err = _run(["sweep", str(path), "--output", str(out), "--ensemble", "4"], capsys)
    assert code == 1 and "0 done, 0 skipped (already done), 2 failed of 2 points" in err
    lines = [line for line in err.splitlines() if "FAILED" in line]
    assert len(lines) == 2
    # the member the job called done wrote no results.json: failed, and says so
    assert sum("finished, but no results.json" in line for line in lines) == 1
    other = next(line for line in lines if "without a line" in line)
    assert "exit 1" in other and "RuntimeError: CUDA error: out of memory" in other
    log = Path(other.split("; log: ")[1]).read_text()
    assert log.startswith("# trained in ensemble job ") and "RuntimeError: CUDA error" in log


def test_a_job_that_dies_on_its_arguments_gives_the_cause_not_the_help_hint(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(jobs, "JOB_MODULE", "fake_job")
    (tmp_path / "fast").touch()
    path, out = _ensemble_sweep(tmp_path, ["refused"]), tmp_path / "out"
    code, err = _run(["sweep", str(path), "--output", str(out), "--ensemble", "4"], capsys)
    assert code == 1, err
    lines = [line for line in err.splitlines() if "FAILED" in line]
    cause = "--model: class 'my_models.GRULM': No module named 'my_models'"
    assert len(lines) == 2 and all(f"its last error: {cause}); log: " in x for x in lines), err
    assert not any("--help" in line for line in lines)
    assert main(["sweep", str(out), "--status"]) == 0
    status = capsys.readouterr().out
    assert status.count(cause) == 2, status


def test_members_fitted_on_their_own_are_said_once_on_the_sweeps_output(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(jobs, "JOB_MODULE", "fake_job")
    (tmp_path / "fast").touch()
    path, out = _ensemble_sweep(tmp_path, ["alone"], seeds=[0, 1, 2]), tmp_path / "out"
    code, err = _run(["sweep", str(path), "--output", str(out), "--ensemble", "4"], capsys)
    assert code == 0 and "3 done" in err, err
    notes = [line for line in err.splitlines() if line.startswith("not ensembled: ")]
    assert len(notes) == 1, err  # once, not once per point
    assert notes[0].startswith("not ensembled: model GRULM is not a LanguageModel; such points "
                               "are trained one by one by the ordinary fit (first: ")
    assert jobs.parse_alone_line("done x") is None
    assert jobs.parse_member_line("alone x_1: why") is None  # never read as done or FAILED


FAKE_CHECK = """\
import json, os, sys
points = json.load(sys.stdin)
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "checked.txt"), "a") as f:
    f.write(json.dumps([p["name"] for p in points]) + "\\n")
for point in points:
    if "--model=my_models.GRULM" in point["args"]:
        print(f"bad {point['name']}: --model: class 'my_models.GRULM': No module named "
              "'my_models'")
"""


@pytest.mark.parametrize("ensemble", [[], ["--ensemble", "4"]], ids=["plain", "ensemble"])
def test_a_dry_run_checks_each_point_and_names_the_bad_ones(
    tmp_path, capsys, monkeypatch, ensemble
):
    from cfl_lightning.sweep import check

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(check, "CHECK_MODULE", "fake_check")
    (tmp_path / "fake_check.py").write_text(FAKE_CHECK)
    path = tmp_path / "grid.yaml"
    path.write_text(
        "method: grid\nparameters:\n  model:\n    values: [LSTMLanguageModel, my_models.GRULM]\n"
        "  seed_everything:\n    values: [0, 1, 2]\n"
        "command:\n" + "".join(f"  - {c}\n" for c in FIT)
    )
    out = tmp_path / "out"
    code, err = _run(["sweep", str(path), "--output", str(out), "--dry-run", *ensemble], capsys)
    assert code == 2, err
    bad = [line for line in err.splitlines() if line.startswith("bad point ")]
    assert len(bad) == 3 and all("GRULM_s" in line and line.endswith(
        ": --model: class 'my_models.GRULM': No module named 'my_models'") for line in bad), err
    assert "3 of 6 point(s) would stop before training" in err
    (checked,) = [json.loads(x) for x in (tmp_path / "checked.txt").read_text().splitlines()]
    assert len(checked) == 2  # one per setting: the seeds are not checked again
    assert not out.exists()
    # negative controls: --no-check prints only; a grid of good points passes
    code, err = _run(["sweep", str(path), "--output", str(out), "--dry-run", "--no-check"],
                     capsys)
    assert code == 0 and "bad point" not in err and len((tmp_path / "checked.txt")
                                                         .read_text().splitlines()) == 1
    path.write_text(path.read_text().replace(", my_models.GRULM", ""))
    code, err = _run(["sweep", str(path), "--output", str(out), "--dry-run", *ensemble], capsys)
    assert code == 0 and "all 3 point(s) pass fit's checks" in err, err


@pytest.mark.slow  # the training CLI's parser, in process (seconds)
def test_the_checker_reads_each_point_as_fit_does(tmp_path):
    from cfl_lightning.cli.check_points import check_point

    config = str(REPO / "configs" / "parity_starfree.yaml")
    root = f"--trainer.default_root_dir={tmp_path / 'run'}"
    seen: dict = {}
    assert check_point(["--config", config, root], seen) is None
    assert check_point(["--config", config, "--model=my_models.GRULM", root], seen) == (
        "--model: class 'my_models.GRULM': No module named 'my_models'")
    assert "--data.num_string" in check_point(["--config", config, "--data.num_string=5", root],
                                              seen)
    assert "unknown state 'nosuch'" in check_point(
        ["--config", config, "--data.event=state:nosuch", root], seen)
    assert "intervention is 'none'" in check_point(
        ["--config", config, "--data.intervention=none", root], seen)
    assert "expected int" in check_point(["--config", config, "--trainer.max_epochs=x", root],
                                         seen)
    assert not (tmp_path / "run").exists()  # nothing written


@pytest.mark.slow  # a runner process of its own (its imports take seconds on a loaded CPU)
def test_killed_ensemble_sweep_resumes_its_jobs_from_their_checkpoints(
    tmp_path, capsys, monkeypatch
):
    """SIGKILL the runner during a job: the job dies with it; the rerun starts the same job
    (same members, same checkpoint_dir), which continues from its checkpoint; one results.json
    per point; the finished job's checkpoints are removed."""
    path, out = _ensemble_sweep(tmp_path, [1, 2]), tmp_path / "out"
    code = (
        "import sys; from cfl_lightning.sweep import jobs; jobs.JOB_MODULE = 'fake_job'; "
        "from cfl_lightning.__main__ import main; sys.exit(main(sys.argv[1:]))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "sweep", str(path), "--output", str(out),
         "--ensemble", "2", "--parallel", "2"],
        cwd=tmp_path, stderr=subprocess.PIPE, text=True,
    )
    ckpts = lambda: list(out.glob(".ensembles/*/checkpoints/last.ckpt"))  # noqa: E731
    wait_for(lambda: len(ckpts()) == 2, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = _jobs_started(tmp_path)
    assert len(first) == 2 and survivors([j["pid"] for j in first]) == []
    assert _results(out) == []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(jobs, "JOB_MODULE", "fake_job")
    (tmp_path / "fast").touch()
    code, err = _run(["sweep", str(path), "--output", str(out), "--ensemble", "4"], capsys)
    assert code == 0, err
    assert "4 to run; 2 ensemble job(s) resume from their checkpoints" in err
    again = _jobs_started(tmp_path)[2:]
    assert sorted(j["names"] for j in again) == sorted(j["names"] for j in first)
    assert all(j["start"] >= 1 for j in again)  # continued from a checkpoint
    for job in again:
        match = next(j for j in first if j["names"] == job["names"])
        assert job["spec"] == match["spec"]  # same spec, same checkpoint_dir
    assert len(_results(out)) == 4
    assert all(len(_results(p)) == 1 for p in out.iterdir() if p.name.startswith("n"))
    assert ckpts() == [] and len(list(out.glob(".ensembles/*/spec.json"))) == 2


@pytest.mark.slow
def test_real_ensemble_job_reports_an_impossible_member_alone(tmp_path):
    """The ensemble job itself (issue 22): one member whose corpus the size check refuses."""
    pytest.importorskip("cfl_lightning.cli.ensemble_job")
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "name: t\nmethod: grid\nparameters:\n"
        "  data.num_strings:\n    values: [30, 100000000000]\n"
        "  seed_everything:\n    values: [0, 1]\n"
        "  data.count:\n    value: 60\n"
        "  data.val_strings:\n    value: 10\n  data.test_strings:\n    value: 10\n"
        "  trainer.max_epochs:\n    value: 2\n  model.init_args.param_budget:\n    value: 6000\n"
        "command:\n  - ${env}\n  - ${interpreter}\n  - -m\n  - cfl_lightning\n  - fit\n"
        "  - --config\n  - configs/parity_starfree.yaml\n  - ${args}\n"
    )
    env = dict(os.environ, WANDB_MODE="disabled", CFL_LIGHTNING_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "cfl_lightning", "sweep", str(grid), "--output",
         str(tmp_path / "out"), "--ensemble", "8"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=CI_LIMIT_S,
    )
    assert proc.returncode == 1, proc.stderr
    assert "2 done, 0 skipped (already done), 2 failed of 4 points" in proc.stderr
    failed = [line for line in proc.stderr.splitlines() if "FAILED" in line]
    assert len(failed) == 2 and all("K100000000000" in line for line in failed)
    for line in failed:
        log = Path(line.split("; log: ")[1]).read_text().splitlines()
        assert log[-1].startswith("# FAILED: ") and "SizeError" in log[-1]
    found = sorted((tmp_path / "out").rglob("results.json"))
    assert len(found) == 2
    assert {json.loads(f.read_text())["num_strings"] for f in found} == {30}


@pytest.mark.slow  # two real fits in process (seconds each)
def test_real_job_fits_a_plain_lightningmodule_alone_in_one_version_and_names_a_bad_class(
    tmp_path, capsys
):
    """A plain LightningModule (as the README's GRULM) is fitted on its own: the job says so on
    stdout, and its only version folder holds results.json (none with only hparams.yaml); a
    member whose class does not import fails alone, naming the module."""
    import io

    from cfl_lightning.cli.ensemble_job import run_job
    from tests.helpers import tiny_args

    out = io.StringIO()
    status = run_job([("bag", tiny_args(tmp_path / "bag", "--model=tests.cli_models.Bag")),
                      ("bad", tiny_args(tmp_path / "bad", "--model=my_models.GRULM"))],
                     stream=out)
    lines = out.getvalue().splitlines()
    assert status == {"bad": "--model: class 'my_models.GRULM': No module named 'my_models'",
                      "bag": None}, lines
    assert lines == ["alone bag: model Bag is not a LanguageModel",
                     f"FAILED bad: {status['bad']}", "done bag"]
    versions = sorted(p for p in (tmp_path / "bag").rglob("version_*") if p.is_dir())
    assert [v.name for v in versions] == ["version_0"], versions
    assert (versions[0] / "results.json").is_file()

