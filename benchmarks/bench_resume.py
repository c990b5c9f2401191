"""Resume after a crash: a sweep killed (SIGKILL) at 60% of its uninterrupted time, then rerun.

Usage::

    python benchmarks/bench_resume.py                  # 4 points, --ensemble 4, 30 epochs
    python benchmarks/bench_resume.py --smoke          # tiny corpora, 6 epochs (the machinery)
    python benchmarks/bench_resume.py --plain          # the plain runner (one process per point)

The grid: parity + star-free (``configs/parity_starfree.yaml``), exact counts 500 and 1500 x
``seed_everything`` 0 and 1, ``trainer.max_epochs`` 30 and early stopping out of reach, so
every point trains exactly 30 epochs. Arm ``uninterrupted``: ``python -m cfl_lightning sweep GRID
--output A --ensemble 4`` from scratch, wall time T. Arm ``killed``: the same into B, SIGKILLed
(the runner only: its runs must stop by themselves) after ``--at`` x T, then rerun; wall time R
of the rerun. Each arm gets a fresh corpus cache (the rerun reuses what the killed run cached,
as a real rerun would) and ``WANDB_MODE=disabled`` unless set. Printed: T, R, R / T (issue 21:
at most 0.8, goal 0.5), processes of the killed run still alive 15 s after the kill, and per
point: the number of results.json files, whether each is valid (parses, finite kl_total) and
its epochs. Exit status 1 when a point does not end with exactly one valid results.json.

The ensemble arm needs the ensemble job (``cfl_lightning.cli.ensemble_job``, with checkpoints);
``--job-module`` runs another module with the same protocol.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SMOKE = {
    "data.num_strings": 60, "data.val_strings": 20, "data.test_strings": 20,
    "model.init_args.param_budget": 8000,
}


def grid_yaml(counts: list[int], epochs: int, smoke: bool) -> str:
    """The 4-point sweep: counts x seeds 0, 1, ``epochs`` epochs, early stopping out of reach."""
    import yaml

    fixed = {"trainer.max_epochs": epochs, "early_stopping.patience": 100_000}
    fixed.update(SMOKE if smoke else {})
    parameters = {"data.count": {"values": counts}, "seed_everything": {"values": [0, 1]}}
    parameters.update({name: {"value": value} for name, value in fixed.items()})
    config = str(ROOT / "configs" / "parity_starfree.yaml")
    fit = ["${env}", "${interpreter}", "-m", "cfl_lightning", "fit", "--config", config, "${args}"]
    sweep = {"name": "resume_bench", "method": "grid", "parameters": parameters, "command": fit}
    return yaml.safe_dump(sweep, default_flow_style=False, sort_keys=False)


def sweep_command(grid: Path, output: Path, flags: list[str], job_module: str | None) -> list[str]:
    args = ["sweep", str(grid), "--output", str(output), *flags]
    if job_module is None:
        return [sys.executable, "-m", "cfl_lightning", *args]
    code = (
        "import sys; from cfl_lightning.sweep import jobs; "
        f"jobs.JOB_MODULE = {job_module!r}; "
        "from cfl_lightning.__main__ import main; sys.exit(main(sys.argv[1:]))"
    )
    return [sys.executable, "-c", code, *args]


def survivors(marker: str) -> list[int]:
    """Pids of living processes whose command line mentions ``marker`` (this machine's /proc)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmdline = handle.read().decode("utf-8", "replace")
            with open(f"/proc/{name}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[-1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def check_points(output: Path) -> tuple[bool, list[str]]:
    """One row per point: results.json files, valid, epochs; and whether all are right."""
    ok, rows = True, []
    for point in sorted(p for p in output.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = sorted(point.rglob("results.json"))
        valid, epochs = [], []
        for path in files:
            try:
                data = json.loads(path.read_text())
                value = data["kl_total"]
                good = isinstance(value, (int, float)) and math.isfinite(value)
            except (OSError, ValueError, KeyError, TypeError):
                data, good = {}, False
            valid.append(good)
            epochs.append(data.get("epochs"))
        ok = ok and len(files) == 1 and all(valid)
        rows.append(f"  {point.name:<40} results.json {len(files)}  valid {valid}  epochs {epochs}")
    return ok, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=None, help="trainer.max_epochs (30; smoke 6)")
    parser.add_argument("--at", type=float, default=0.6, help="kill after this share of T")
    parser.add_argument("--counts", default="500,1500", help="the exact counts (x seeds 0, 1)")
    parser.add_argument("--smoke", action="store_true", help="tiny corpora and models, 6 epochs")
    parser.add_argument("--plain", action="store_true", help="the plain runner, --parallel 2")
    parser.add_argument("--job-module", default=None, help="run this ensemble job module")
    args = parser.parse_args(argv)
    epochs = args.epochs or (6 if args.smoke else 30)
    flags = ["--parallel", "2"] if args.plain else ["--ensemble", "4"]
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    env.setdefault("WANDB_MODE", "disabled")
    with tempfile.TemporaryDirectory(prefix="cfl_bench_resume_") as tmp:
        tmp = Path(tmp)
        grid = tmp / "grid.yaml"
        grid.write_text(grid_yaml([int(c) for c in args.counts.split(",")], epochs, args.smoke))
        print(f"4 points (counts {args.counts} x seeds 0, 1), {epochs} epochs, "
              f"{' '.join(flags)}{' (smoke)' if args.smoke else ''}; {os.cpu_count()} CPUs, "
              f"WANDB_MODE={env['WANDB_MODE']}", flush=True)

        def run(output: Path, cache: str) -> tuple[float, subprocess.CompletedProcess]:
            command = sweep_command(grid, output, flags, args.job_module)
            start = time.perf_counter()
            proc = subprocess.run(command, cwd=ROOT, env=dict(env, CFL_LIGHTNING_CACHE=cache),
                                  capture_output=True, text=True)
            return time.perf_counter() - start, proc

        full, proc = run(tmp / "uninterrupted", str(tmp / "cache_a"))
        print(f"uninterrupted: {full:7.1f} s, exit {proc.returncode}", flush=True)
        if proc.returncode != 0:
            print(proc.stderr[-3000:])
        killed = tmp / "killed"
        command = sweep_command(grid, killed, flags, args.job_module)
        runner = subprocess.Popen(
            command, cwd=ROOT, env=dict(env, CFL_LIGHTNING_CACHE=str(tmp / "cache_b")),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        time.sleep(args.at * full)
        runner.send_signal(signal.SIGKILL)
        runner.wait()
        done_before = len(list(killed.rglob("results.json")))
        time.sleep(15)
        alive = survivors(str(killed))
        print(f"killed after {args.at * full:.1f} s with {done_before} results.json; "
              f"its processes alive 15 s later: {len(alive)}", flush=True)
        rerun, proc = run(killed, str(tmp / "cache_b"))
        print(f"rerun:         {rerun:7.1f} s, exit {proc.returncode} "
              f"({proc.stderr.splitlines()[0] if proc.stderr else ''})", flush=True)
        if proc.returncode != 0:
            print(proc.stderr[-3000:])
        print(f"rerun / uninterrupted: {rerun / full:.2f} (target <= 0.8, goal <= 0.5)")
        ok = True
        for name in ("uninterrupted", "killed"):
            good, rows = check_points(tmp / name)
            ok = ok and good
            print(f"{name}: one valid results.json per point: {good}")
            print("\n".join(rows))
    return 0 if ok and not alive else 1


if __name__ == "__main__":
    sys.exit(main())
