"""The prepared GPU check's scripts still run (their CPU smoke modes).

A GPU session has 15 minutes of device time; a script that went stale since the last one (the
capture-fallback benchmark once unpacked a return value that had changed) costs a rerun there.
Here each script's ``--smoke`` runs on the CPU in a real process, as the device runs it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> str:
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_capture_fallback_script_wraps_the_step_and_trains():
    out = _run(
        "benchmarks/gpu_ensemble_profile.py", "--smoke", "--fallback", "--arch", "transformer",
    )
    calls = re.search(r"wrapped loss_sums called (\d+) times", out)
    assert calls is not None, out
    assert int(calls.group(1)) > 0, out  # the CPU's stacked step went through the wrapper
    assert "trained with finite values after the fallback: True" in out


@pytest.mark.slow
def test_ensemble_bench_smoke_prints_its_tables():
    out = _run("benchmarks/bench_ensemble.py", "--smoke", "--skip-steps")
    assert "1. whole runs" in out and "2. case study (i)" in out
    for arch in ("lstm", "transformer"):
        assert re.search(arch + r"\s+ensemble \d+\s", out), out
