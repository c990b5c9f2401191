"""W&B sweep files (schema, grid sizes, CLI parsing) and the offline grid runner."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # before anything imports wandb

import json
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cfl_lightning import sweep as sw
from tests.helpers import CI_LIMIT_S, exit_status, wait_for

REPO = Path(__file__).resolve().parents[1]
SWEEPS = sorted((REPO / "sweeps").glob("*.yaml"))  # the case studies' paper-size grids
ALL_SWEEPS = sorted((REPO / "sweeps").rglob("*.yaml"))  # also smaller ones in subdirectories
CASES = ("parity_starfree", "random_topology", "fixed_topology")
KINDS = ("causal_exact", "causal_at_least_once", "correlational")
MODELS = {"LSTMLanguageModel", "TransformerLanguageModel"}


def run_main(argv, capsys):
    code = exit_status(argv)
    return code, capsys.readouterr().err


# --------------------------------------------------------------------------- the sweep files


def test_all_case_studies_have_causal_and_correlational_sweeps():
    assert {p.stem for p in SWEEPS} >= {f"{c}_{k}" for c in CASES for k in KINDS}


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_sweep_file_is_a_valid_flat_grid(path):
    text = path.read_text()
    config = sw.load_sweep(path)  # schema, grid, flat names, command
    sweeps = sw.grid._import_sweeps()
    assert sweeps.schema_violations_from_proposed_config(config) == []
    assert config["method"] == "grid" and config["name"] == path.stem
    # the command is a block list (a flow list [...] cannot hold ${...}) running the train CLI
    assert re.search(r"^command:\n  - \$\{env\}\n  - \$\{interpreter\}\n", text, re.M)
    case = path.stem.split("_causal")[0].split("_correlational")[0]
    assert config["command"][2:7] == [
        "-m",
        "cfl_lightning",
        "fit",
        "--config",
        f"configs/{case}.yaml",
    ]
    assert config["command"][-1] == "${args}" and (REPO / "configs" / f"{case}.yaml").is_file()
    params = config["parameters"]
    assert all("parameters" not in spec for spec in params.values())
    assert set(params["model"]["values"]) == MODELS
    # the header comment states the number of runs, and it is right
    stated = re.search(r"^# Runs: .* = ([\d,]+)\.$", text, re.M)
    assert stated, "the header comment must state 'Runs: ... = N.'"
    points = sw.expand_grid(config)
    assert len(points) == sw.grid_size(config) == int(stated.group(1).replace(",", ""))
    assert len({json.dumps(p, sort_keys=True) for p in points}) == len(points)
    assert len({sw.run_name(p) for p in points[:2000]}) == min(len(points), 2000)
    intervention = params["data.intervention"]["value"]
    if path.stem.endswith("correlational"):
        assert intervention == "none" and params["data.count"]["value"] == "null"
        assert "value" in params["data.event"]  # one run records every target's counts
    else:
        assert intervention == ("exact" if path.stem.endswith("exact") else "at_least_once")
        assert len(params["data.count"]["values"]) >= 5
        assert len(params["data.event"]["values"]) >= 2


@pytest.fixture(scope="module")
def train_parser():
    """The training CLI's own parser (``fit``), built once, without instantiating anything."""
    from cfl_lightning.cli import train

    class Parsed(Exception):
        pass

    original = train._cli_class

    def parse_only():
        class ParseOnly(original()):
            def before_instantiate_classes(self):
                raise Parsed(self)

        return ParseOnly

    train._cli_class = parse_only
    try:
        train.build_cli(["fit", "--config", str(REPO / "configs" / "parity_starfree.yaml")])
    except Parsed as parsed:
        return parsed.args[0].parser
    finally:
        train._cli_class = original
    raise AssertionError("the training CLI did not parse")


def _sample_points(points, config, rng):
    """A few grid points plus points covering every distinct value of every parameter."""
    chosen = [points[0], points[-1], *rng.sample(points, min(3, len(points)))]
    varying = {k: v["values"] for k, v in config["parameters"].items() if "values" in v}
    ranges = {
        k: [v["min"], v["max"]]
        for k, v in config["parameters"].items()
        if v.get("distribution") == "int_uniform"
    }
    columns = {**varying, **ranges}
    width = max((len(v) for v in columns.values()), default=0)
    for i in range(width):
        point = dict(points[0])
        for key, values in columns.items():
            point[key] = values[i % len(values)]
        chosen.append(point)
    return chosen


@pytest.mark.parametrize(
    "path",
    # the quick lane parses the reduced exact-count sweeps; the others are slow (1.5-4 s each)
    [p if p.parent.name == "repro" and p.stem.endswith("causal_exact")
     else pytest.param(p, marks=pytest.mark.slow) for p in ALL_SWEEPS],
    ids=[str(p.relative_to(REPO / "sweeps")) for p in ALL_SWEEPS],
)
def test_sweep_points_parse_with_the_train_cli(path, train_parser, monkeypatch):
    from cfl_lightning.data import PFADataModule

    monkeypatch.chdir(REPO)
    config = sw.load_sweep(path)
    points = sw.expand_grid(config)
    for params in _sample_points(points, config, random.Random(path.stem)):
        command = sw.build_command(config, params, interpreter="python", run_dir="/tmp/run")
        assert command[:4] == ["/usr/bin/env", "python", "-m", "cfl_lightning"]
        try:
            parsed = train_parser.parse_args(command[4:])
        except SystemExit:
            pytest.fail(f"{path.name}: the train CLI rejects {command[4:]}")
        fit = parsed.fit
        assert fit.model.class_path.endswith(params["model"])
        assert fit.model.init_args.param_budget == 128_000  # kept across --model=...
        assert fit.trainer.default_root_dir == "/tmp/run"
        for key, value in params.items():
            if key.startswith("data."):
                expected = None if value == "null" else value
                assert fit.data[key[5:]] == expected, key
        if "seed_everything" in params:
            assert fit.seed_everything == params["seed_everything"]
        # the data module checks event names and count bounds against the automaton
        data = fit.data.as_dict()
        data["cache_dir"] = "none"
        PFADataModule(**data)


def test_random_topology_targets_are_feasible_for_every_topology():
    """The causal random-topology sweeps target symbol:a and state:q1 in 97 topologies."""
    from cfl_lightning.automata import Event, random_pfsa
    from cfl_lightning.sampling.feasibility import max_occurrences

    config = sw.load_sweep(REPO / "sweeps" / "random_topology_causal_exact.yaml")
    seeds = config["parameters"]["data.topology_seed"]
    for topology in range(seeds["min"], seeds["max"] + 1):
        pfsa = random_pfsa(50, 10, topology, 0)
        for spec in config["parameters"]["data.event"]["values"]:
            event = Event.parse(spec)
            assert max_occurrences(pfsa, event.function(pfsa)) is None, (topology, spec)


# --------------------------------------------------------------------------- macros and names


def test_format_args_matches_wandb_agent():
    from wandb.sdk.launch.sweeps.utils import create_sweep_command_args

    params = {"data.count": 3, "data.event": "state:odd", "flag": False, "on": True, "x": None}
    ours = sw.format_args(params)
    theirs = create_sweep_command_args({"args": {k: {"value": v} for k, v in params.items()}})
    for key, value in ours.items():
        assert value == theirs[key], key


def test_build_command_macros(tmp_path, monkeypatch):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "c.yaml").write_text("{}")
    (tmp_path / "prog.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MY_FLAG", "--verbose")
    config = {
        "program": "prog.py",
        "command": [
            "${env}",
            "${interpreter}",
            "${program}",
            "${envvar:MY_FLAG}",
            "--config",
            "configs/c.yaml",
            "${args}",
        ],
    }
    params = {"a.b": 1, "model": "LSTMLanguageModel", "path": "configs/c.yaml"}
    plain = sw.build_command(config, params, interpreter="python")
    assert plain == [
        "/usr/bin/env",
        "python",
        "prog.py",
        "--verbose",
        "--config",
        "configs/c.yaml",
        "--a.b=1",
        "--model=LSTMLanguageModel",
        "--path=configs/c.yaml",
    ]
    moved = sw.build_command(config, params, run_dir=tmp_path / "r", absolute_from=tmp_path)
    assert moved[1] == sys.executable
    assert moved[2] == str(tmp_path / "prog.py")
    assert moved[5] == str(tmp_path / "configs" / "c.yaml")
    assert moved[-2] == f"--path={tmp_path / 'configs' / 'c.yaml'}"
    assert moved[-1] == f"--trainer.default_root_dir={tmp_path / 'r'}"
    with pytest.raises(sw.SweepError, match="unknown command macro"):
        sw.build_command({"command": ["${nope}"]}, params)


def test_run_names_are_stable_readable_and_unique():
    a = {
        "data.count": 500,
        "data.event": "state:odd",
        "data.weight_seed": 3,
        "model": "LSTMLanguageModel",
        "seed_everything": 0,
    }
    name = sw.run_name(a, ["data.count", "data.event", "data.weight_seed", "model"])
    assert name.startswith("n500_state-odd_w3_LSTM_") and name == sw.run_name(dict(a), list(a)[:4])
    assert name.endswith(sw.point_hash(a)) and re.fullmatch(r"[A-Za-z0-9_.+-]+", name)
    b = dict(a, seed_everything=1)
    assert sw.run_name(b, ["data.count"]) != sw.run_name(a, ["data.count"])


# --------------------------------------------------------------------------- the runner

FAKE = """\
import json, os, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
root = args["trainer.default_root_dir"]
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.txt"), "a") as f:
    f.write(json.dumps({"args": args, "cwd": os.getcwd(), "pid": os.getpid(),
                        "env": {k: os.environ.get(k) for k in
                                ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CFL_LIGHTNING_THREADS",
                                 "WANDB_MODE")}}) + "\\n")
print("training", args.get("x"))
if args.get("sleep"):
    time.sleep(float(args["sleep"]))
if args.get("x") == "2":
    print("boom", file=sys.stderr)
    sys.exit(3)
if args.get("x") == "7":  # fit's refusal: its one line, then a hint
    print("python -m cfl_lightning fit: error: --model: class 'my_models.GRULM': No module "
          "named 'my_models'", file=sys.stderr)
    print("  (see 'python -m cfl_lightning fit --help' for the options)", file=sys.stderr)
    sys.exit(2)
os.makedirs(os.path.join(root, "logs", "version_0"), exist_ok=True)
with open(os.path.join(root, "logs", "version_0", "results.json"), "w") as f:
    json.dump(dict(args, kl_total=0.5), f)
"""


def fake_sweep(tmp_path, values=(1, 2, 3), extra=""):
    (tmp_path / "fake.py").write_text(FAKE)
    path = tmp_path / "fake.yaml"
    path.write_text(
        f"method: grid\nprogram: fake.py\nparameters:\n  x:\n    values: {list(values)}\n"
        f"  y:\n    value: a\n{extra}command:\n  - ${{env}}\n  - ${{interpreter}}\n"
        "  - ${program}\n  - ${args}\n"
    )
    return path


def calls(tmp_path):
    path = tmp_path / "calls.txt"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_runner_runs_points_reports_failures_and_resumes(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    path = fake_sweep(tmp_path)
    out = tmp_path / "out"
    code, err = run_main(["sweep", str(path), "--output", str(out), "--parallel", "2"], capsys)
    assert code == 1, err
    failed = [line for line in err.splitlines() if "FAILED" in line]
    assert len(failed) == 1 and "x-2_" in failed[0] and "(exit 3: boom)" in failed[0]
    assert failed[0].endswith("run.log")
    log = Path(failed[0].split("log: ")[1])
    assert "boom" in log.read_text() and log.read_text().startswith("# /usr/bin/env ")
    assert log.read_text().splitlines()[-1] == "# FAILED: exit 3: boom"  # its own error line
    assert "2 done, 0 skipped (already done), 1 failed of 3 points" in err
    first = calls(tmp_path)
    assert len(first) == 3
    for call in first:
        run_dir = Path(call["args"]["trainer.default_root_dir"])
        assert run_dir.parent == out and Path(call["cwd"]) == run_dir
        assert json.loads((run_dir / "params.json").read_text()) == {
            "x": int(call["args"]["x"]),
            "y": "a",
        }
        assert call["env"] == {
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "CFL_LIGHTNING_THREADS": "1",
            "WANDB_MODE": "offline",
        }
    # second run: the two done points are skipped, only the failed one runs again
    monkeypatch.setenv("WANDB_MODE", "disabled")
    code, err = run_main(["sweep", str(path), "--output", str(out)], capsys)
    assert code == 1 and "0 done, 2 skipped (already done), 1 failed of 3 points" in err
    again = calls(tmp_path)[3:]
    assert [c["args"]["x"] for c in again] == ["2"]
    assert again[0]["env"]["WANDB_MODE"] == "disabled"  # a user's WANDB_MODE is kept
    points = sorted(p.name.split("_")[0] for p in out.iterdir() if p.is_dir())
    assert points == ["x-1", "x-2", "x-3"]
    failed_dir = next(out.glob("x-2_*"))  # its first attempt was set aside, not overwritten
    assert "boom" in (failed_dir / ".attempts" / "1" / "run.log").read_text()


def test_a_failed_point_and_its_status_carry_the_cause_not_the_help_hint(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    path, out = fake_sweep(tmp_path, values=(1, 7)), tmp_path / "out"
    code, err = run_main(["sweep", str(path), "--output", str(out)], capsys)
    assert code == 1, err
    (failed,) = [line for line in err.splitlines() if "FAILED" in line]
    cause = "--model: class 'my_models.GRULM': No module named 'my_models'"
    assert f"(exit 2: {cause}); log: " in failed, failed
    code = exit_status(["sweep", str(out), "--status"])
    status = capsys.readouterr().out
    assert code == 0 and f"failed {failed.split()[2]}: exit 2: {cause}; log: " in status, status


def test_the_error_line_of_a_log(tmp_path):
    from cfl_lightning.sweep.logfile import error_line

    log = tmp_path / "run.log"
    log.write_text("# cmd\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
                   "ModuleNotFoundError: No module named 'my_models'\nepoch 3 done\n# guard\n")
    assert error_line(log) == "ModuleNotFoundError: No module named 'my_models'"
    log.write_text("loading\nsome warning\n")  # no error stated: the last line, as before
    assert error_line(log) == "some warning"
    log.write_text("prog: error: bad\n  (see 'prog --help' for the options)\n")
    assert error_line(log) == "bad"
    assert error_line(tmp_path / "none.log") == ""


def test_runner_limit_and_dry_run(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = fake_sweep(tmp_path, values=(1, 3, 4, 5))
    out = tmp_path / "out"
    code, err = run_main(["sweep", str(path), "--output", str(out), "--dry-run"], capsys)
    assert code == 0 and not out.exists() and not calls(tmp_path)
    assert "4 points, 0 already done, 4 to run" in err
    assert err.count("--trainer.default_root_dir=") == 4
    code, err = run_main(["sweep", str(path), "--output", str(out), "--limit", "3"], capsys)
    assert code == 0 and "3 done" in err and "1 not run" in err
    code, err = run_main(["sweep", str(path), "--output", str(out), "--limit", "3"], capsys)
    assert code == 0 and "1 done, 3 skipped" in err
    assert len(calls(tmp_path)) == 4


@pytest.mark.slow
def test_runner_interrupt_terminates_children(tmp_path):
    path = fake_sweep(tmp_path, values=(1, 3), extra="  sleep:\n    value: 60\n")
    env = dict(os.environ)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cfl_lightning",
            "sweep",
            str(path),
            "--output",
            str(tmp_path / "out"),
            "--parallel",
            "2",
        ],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: len(calls(tmp_path)) == 2, proc)  # both runs started (progress, not time)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=CI_LIMIT_S)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "2 not run" in err
    for call in calls(tmp_path):
        with pytest.raises(ProcessLookupError):
            os.kill(call["pid"], 0)


BAD_SWEEPS = [
    ("missing", None, "no such sweep file"),
    ("invalid.yaml", "method: grid\nparameters: {a: [1,\n", "invalid YAML (line"),
    ("random.yaml", "method: random\nparameters:\n  a:\n    values: [1]\n", "only 'method: grid'"),
    (
        "nested.yaml",
        "method: grid\nparameters:\n  data:\n    parameters:\n      count:\n        values: [1]\n",
        "flat dotted names",
    ),
    ("schema.yaml", "method: grid\nparameters:\n  a:\n    valuez: [1]\n", "not a valid W&B sweep"),
    (
        "uniform.yaml",
        "method: grid\nparameters:\n  a:\n    distribution: uniform\n    min: 0\n    max: 1\n",
        "no discrete values",
    ),
    ("list.yaml", "- 1\n- 2\n", "expected a mapping"),
]


@pytest.mark.parametrize("name,text,message", BAD_SWEEPS, ids=[b[0] for b in BAD_SWEEPS])
def test_bad_sweep_files_give_one_line_errors(tmp_path, capsys, name, text, message):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    code, err = run_main(["sweep", str(path), "--output", str(tmp_path / "out")], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("python -m cfl_lightning sweep: error:")
    assert message in err


def test_bad_arguments_exit_2(tmp_path, capsys):
    code, err = run_main(["sweep", "x.yaml"], capsys)
    assert code == 2 and "--output" in err and err.count("\n") == 1
    code, err = run_main(["sweep", "x.yaml", "--output", "o", "--parallel", "0"], capsys)
    assert code == 2 and "positive integer" in err


@pytest.mark.parametrize("text,value", [("1", 1), ("12", 12), ("0", None), ("-3", None),
                                        ("x", None), ("1.5", None)])
def test_positive_type_is_shared_by_sweep_and_stratify(text, value):
    """One ``positive_type`` (cli/common.py) for every positive count of both commands."""
    import argparse

    from cfl_lightning.cli import common, stratify, sweep

    if value is None:
        with pytest.raises(argparse.ArgumentTypeError, match="expected a positive integer"):
            common.positive_type(text)
    else:
        assert common.positive_type(text) == value
    for command, options in ((sweep, {"--parallel", "--limit", "--threads", "--max-points",
                                       "--ensemble"}),
                             (stratify, {"--parallel", "--max-points"})):
        types = {a.option_strings[0]: a.type for a in command.build_parser()._actions
                 if a.option_strings}
        assert {o for o, t in types.items() if t is common.positive_type} >= options


@pytest.mark.slow
def test_sweep_command_imports_no_lightning_or_wandb():
    code = (
        "import sys; from cfl_lightning.__main__ import main; "
        "rc = main(['sweep', 'sweeps/parity_starfree_causal_exact.yaml', '--output', "
        "'/nonexistent/x', '--dry-run', '--no-check', '--limit', '1']); "
        "assert rc == 0, rc; "
        "bad = [m for m in ('lightning', 'wandb', 'matplotlib') if m in sys.modules]; "
        "assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
