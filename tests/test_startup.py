"""Start-up: what each command imports before it can answer, and ``sweep``'s progress lines.

Timings live in ``benchmarks/bench_startup.py`` and docs/startup.md; here only what can fail
whatever the load: which heavy packages a command's ``--help`` and usage errors import (in a
fresh process: the point is the process's imports), and the lines the sweep runner prints.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cfl_lightning.__main__ import main

ROOT = Path(__file__).resolve().parents[1]

# The command's arguments reach the probe as the process's own arguments (``python -c PROBE
# ARG...``), never pasted into its source: an earlier probe pasted ``'analyze', '--help'`` after
# a ``*`` so that every case unpacked its first argument into characters and ran the unknown
# command ``a``, which imports nothing (issue 37). ``RAN`` records the command that ran.
PROBE = """
import runpy, sys
sys.argv = ["cfl_lightning", *sys.argv[1:]]
print("RAN", sys.argv[1:], file=sys.stderr)
try:
    runpy.run_module("cfl_lightning", run_name="__main__")
except SystemExit:
    pass
heavy = ("torch", "lightning", "wandb", "matplotlib", "scipy", "jsonargparse")
print("IMPORTED", sorted(h for h in heavy if h in sys.modules), file=sys.stderr)
"""


def imported(*args: str) -> tuple[int, set[str], str]:
    """Run ``python -m cfl_lightning ARGS`` in a fresh process; the heavy packages it imported."""
    env = {**os.environ, "WANDB_MODE": "disabled"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, cwd=ROOT,
    )
    assert f"RAN {list(args)!r}" in proc.stderr, proc.stderr[-2000:]
    assert "unknown command" not in proc.stderr, proc.stderr[-2000:]
    match = re.search(r"IMPORTED (\[.*\])", proc.stderr)
    assert match, proc.stderr[-2000:]
    return proc.returncode, set(eval(match.group(1))), proc.stderr  # noqa: S307 (our own list)


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("sweep", "--help"),
        ("sweep", "sweeps/parity_starfree_causal_exact.yaml"),  # --output missing
        ("stratify", "--help"),
        ("stratify", "--bogus"),
        ("analyze", "--help"),
        ("analyze", "--bogus"),
        ("draw", "--help"),
        ("draw", "--bogus"),
    ],
    ids=["main-help", "sweep-help", "sweep-usage", "stratify-help", "stratify-usage",
         "analyze-help", "analyze-usage", "draw-help", "draw-usage"],
)
def test_light_commands_answer_without_torch(args):
    """``--help`` and usage errors of the commands that train nothing import no torch, no
    Lightning, no wandb, no matplotlib, no scipy."""
    _, heavy, err = imported(*args)
    assert not heavy, (args, heavy)


@pytest.mark.parametrize("args", [("sample", "--help"), ("automaton", "--help")])
def test_core_commands_import_only_torch(args):
    _, heavy, _ = imported(*args)
    assert heavy <= {"torch"}, heavy


def test_probe_sees_a_heavy_import_and_the_command_it_ran():
    """Negative control for the probe: ``sample --help`` imports torch (the sampler is torch
    code), so a probe that reports nothing for it is broken, and the help it prints is
    ``sample``'s own."""
    code, heavy, err = imported("sample", "--help")
    assert code == 0 and "torch" in heavy, (code, heavy, err[-2000:])


# ------------------------------------------------------------------- sweep progress lines

FAKE = """
import json, os, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
root = args["trainer.default_root_dir"]
time.sleep(float(args.get("sleep", 0)))
if args.get("x") == "2":
    sys.exit(3)
os.makedirs(os.path.join(root, "logs"), exist_ok=True)
with open(os.path.join(root, "logs", "results.json"), "w") as f:
    json.dump({"kl_total": 0.5}, f)
"""


def test_sweep_prints_a_line_per_point_as_it_starts_with_elapsed_and_eta(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    (tmp_path / "fake.py").write_text(FAKE)
    sweep = tmp_path / "fake.yaml"
    sweep.write_text(
        "method: grid\nprogram: fake.py\nparameters:\n  x:\n    values: [1, 2, 3]\n"
        "  sleep:\n    value: 0.2\ncommand:\n  - ${env}\n  - ${interpreter}\n  - ${program}\n"
        "  - ${args}\n"
    )
    code = main(["sweep", str(sweep), "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1, err  # x=2 fails
    lines = err.splitlines()
    starts = [line for line in lines if re.match(r"\[\d/3\] start ", line)]
    assert len(starts) == 3, err
    # the first point starts before anything has finished: elapsed only, no ETA yet
    assert re.fullmatch(r"\[1/3\] start x-1_\w+ \(elapsed 0:00:0\d\)", starts[0]), starts[0]
    # later points start after one has finished: elapsed and an estimate of the time left
    for line in starts[1:]:
        assert re.search(r"\(elapsed \d:\d\d:\d\d, ETA \d:\d\d:\d\d\)$", line), line
    done = [line for line in lines if "] done " in line]
    assert len(done) == 2 and all(re.search(r"\(\d+\.\d s; elapsed .*, ETA .*\)$", d) for d in done)
    # each start line comes before its point's own result line
    for name in ("x-1", "x-3"):
        start = next(i for i, line in enumerate(lines) if f"start {name}_" in line)
        end = next(i for i, line in enumerate(lines) if f"done {name}_" in line)
        assert start < end
    failed = [line for line in lines if "FAILED" in line]
    assert len(failed) == 1 and failed[0].endswith("run.log") and "(exit 3" in failed[0]
    # the last point's ETA is 0: nothing is left after it
    assert done[-1].endswith("ETA 0:00:00)")
    summary = json.dumps(err)
    assert "2 done, 0 skipped (already done), 1 failed of 3 points" in summary


# ------------------------------------------------------------------- pytest's exit

EXIT_PROBE = """
import atexit, os

def _wrote():
    with open(os.environ["ATEXIT_MARK"], "w") as handle:
        handle.write("ran")

atexit.register(_wrote)

def test_one():
    assert os.environ["OUTCOME"] == "pass"
"""


@pytest.mark.parametrize("outcome, status", [("pass", 0), ("fail", 1)])
def test_fast_exit_plugin_keeps_status_and_atexit_handlers(tmp_path, outcome, status):
    """``tests.fast_exit`` skips only the interpreter's teardown: pytest's exit status and every
    atexit handler (registered by the tests too) are kept."""
    (tmp_path / "test_probe.py").write_text(EXIT_PROBE)
    mark = tmp_path / "mark.txt"
    env = {**os.environ, "ATEXIT_MARK": str(mark), "OUTCOME": outcome}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("CFL_LIGHTNING_SLOW_EXIT", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.fast_exit", "-q", "-p", "no:cacheprovider",
         f"--rootdir={tmp_path}", str(tmp_path / "test_probe.py")],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )
    assert proc.returncode == status, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert mark.read_text() == "ran"
    assert ("1 passed" if status == 0 else "1 failed") in proc.stdout  # the summary is flushed
