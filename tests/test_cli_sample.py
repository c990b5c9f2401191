"""The `sample` and `automaton` commands: outputs, bad input, atomic writes, import hygiene."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import PARITY_JSON, exit_status, run_cli


@pytest.fixture
def parity_file(tmp_path):
    path = tmp_path / "parity.json"
    path.write_text(json.dumps(PARITY_JSON))
    return path


def run(argv, capsys):
    code = exit_status(argv)
    return code, capsys.readouterr().err


def test_sample_exact_writes_jsonl(parity_file, tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    code, err = run(
        ["sample", "--automaton", str(parity_file), "--num-strings", "200", "--seed", "0",
         "--output", str(out), "--intervention", "exact", "--event", "state:odd", "--count", "900",
         "--device", "cpu"],
        capsys,
    )
    assert code == 0, err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 200
    assert sum(line["count"] for line in lines) == 900
    assert all(set(line["symbols"]) <= {"a", "b"} for line in lines)


def test_automaton_commands(tmp_path, capsys):
    out = tmp_path / "r.json"
    code, _ = run(["automaton", "random", "--states", "7", "--symbols", "3", "--output", str(out)], capsys)
    assert code == 0 and len(json.loads(out.read_text())["states"]) == 7
    code, _ = run(["automaton", "parity", "--weight-seed", "2", "--output", str(out)], capsys)
    assert code == 0 and json.loads(out.read_text())["final"] == {"odd": 0.1, "rep": 0.1}


BAD = [
    (["--automaton", "{missing}"], "no such file"),
    (["--event", "state:nowhere", "--intervention", "exact", "--count", "3"], "unknown state"),
    (["--event", "state:odd", "--intervention", "exact", "--count", "-2"], "non-negative"),
    (["--event", "state:init", "--intervention", "exact", "--count", "50"], "impossible"),
    (["--event", "state:odd", "--intervention", "at_least_once", "--count", "11"], "exceeds"),
    (["--event", "oops", "--intervention", "exact", "--count", "1"], "bad event"),
    (["--intervention", "exact", "--count", "1"], "needs an event"),
    (["--num-strings", "0"], "positive"),
    (["--intervention", "bogus"], "invalid choice"),
]


@pytest.mark.parametrize("extra,match", BAD)
def test_bad_input_one_line_and_nothing_written(parity_file, tmp_path, capsys, extra, match):
    out = tmp_path / "out.jsonl"
    out.write_text("keep me\n")
    args = {"--automaton": str(parity_file), "--num-strings": "10", "--seed": "0",
            "--output": str(out), "--device": "cpu"}
    for i in range(0, len(extra), 2):
        value = extra[i + 1].replace("{missing}", str(tmp_path / "missing.json"))
        args[extra[i]] = value
    argv = ["sample"] + [x for kv in args.items() for x in kv]
    code, err = run(argv, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and match in lines[0] and "Traceback" not in err
    assert out.read_text() == "keep me\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.jsonl")]


@pytest.mark.parametrize(
    "mutation,match",
    [
        (lambda d: d["transitions"].append(dict(d["transitions"][0])), "nondeterminism"),
        (lambda d: d["final"].update(odd=0.5), "'odd'"),
        (lambda d: d["transitions"][0].update(weight=float("inf")), "invalid weight"),
    ],
)
def test_invalid_automaton_file(tmp_path, capsys, mutation, match):
    data = json.loads(json.dumps(PARITY_JSON))
    mutation(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    code, err = run(
        ["sample", "--automaton", str(path), "--num-strings", "3", "--seed", "0",
         "--output", str(tmp_path / "o.jsonl")],
        capsys,
    )
    assert code == 2 and match in err and "bad.json" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.jsonl").exists()


def test_missing_automaton_is_one_line_in_process(tmp_path):
    """The quick counterpart of the whole-process check below: exit 2, one line on stderr naming
    the file, nothing on stdout, no traceback, nothing written."""
    bad = run_cli("sample", "--automaton", tmp_path / "x.json", "--num-strings", "3", "--seed", "0",
                  "--output", tmp_path / "o.jsonl")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad
    assert "x.json" in bad.stderr and "Traceback" not in bad.stderr and bad.stdout == ""
    assert not (tmp_path / "o.jsonl").exists()
    ok = run_cli("sample", "--automaton", tmp_path / "x.json", "--help")  # negative control
    assert ok.returncode == 0 and "--num-strings" in ok.stdout and ok.stderr == ""


@pytest.mark.slow
def test_whole_process_no_traceback_and_no_lightning(parity_file, tmp_path):
    """A real process: one-line error, and `sample` never imports lightning or wandb."""
    bad = subprocess.run(
        [sys.executable, "-m", "cfl_lightning", "sample", "--automaton", str(tmp_path / "x.json"),
         "--num-strings", "3", "--seed", "0", "--output", str(tmp_path / "o.jsonl")],
        capture_output=True, text=True,
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "Traceback" not in bad.stderr
    probe = (
        "import sys; from cfl_lightning.__main__ import main; "
        f"code = main(['sample', '--automaton', {str(parity_file)!r}, '--num-strings', '5', "
        f"'--seed', '1', '--output', {str(tmp_path / 'p.jsonl')!r}, '--device', 'cpu']); "
        "assert code == 0; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('lightning', 'wandb', "
        "'pytorch_lightning', 'torchmetrics')]; print(bad); assert not bad"
    )
    ok = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
