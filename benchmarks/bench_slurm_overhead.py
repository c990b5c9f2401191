"""What ``sweep --executor slurm`` costs the submitting process: a 1,000-point grid of dry tasks.

Usage (as root, with Debian's slurm-wlm and munge installed; starts its own one-node cluster on
localhost, tests/slurm_cluster.py)::

    python benchmarks/bench_slurm_overhead.py                     # 1,000 points
    python benchmarks/bench_slurm_overhead.py --points 100 --cpus 8

A dry task only writes its point's ``results.json`` (a few lines of Python, no torch), so what is
measured is the runner: planning the grid, preparing each point (``params.json``), submitit's
pickles and ``sbatch`` of one array, and following the array (one ``squeue`` every 2 s, a line per
point) until every point is reported. The submitter runs in this process
(:func:`cfl_lightning.sweep.cluster.run_slurm_sweep`); its CPU time is ``getrusage`` of this
process plus its children (``sbatch``, ``squeue``) over each phase. Target (issue 39): at most
60 s of submitter CPU for 1,000 points. ``--cpus`` declares that many CPUs on the node (tasks
mostly wait, so the node can run more of them than it has cores). Printed: one table of phases.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DRY = """\
import json, os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
out = os.path.join(args["trainer.default_root_dir"], "csv", "version_0")
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump({"kl_total": 0.0, "x": args["x"]}, f)
"""


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--cpus", type=int, default=8, help="CPUs declared for the node")
    args = parser.parse_args()
    from tests.slurm_cluster import cannot_start, local_slurm

    why = cannot_start()
    if why is not None:
        print(f"cannot start a local SLURM: {why}")
        return 2
    from cfl_lightning.sweep import load_sweep
    from cfl_lightning.sweep.cluster import run_slurm_sweep
    from cfl_lightning.sweep.scheduler import load_scheduler

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "dry.py").write_text(DRY)
        (tmp / "grid.yaml").write_text(
            "method: grid\nparameters:\n  x:\n"
            f"    values: {json.dumps(list(range(args.points)))}\n"
            f"command:\n  - ${{env}}\n  - ${{interpreter}}\n  - {tmp / 'dry.py'}\n  - ${{args}}\n"
        )
        with local_slurm(tmp / "cluster", cpus=args.cpus) as env:
            os.environ.update(env)
            config = load_sweep(tmp / "grid.yaml")
            settings = load_scheduler(overrides={"array_parallelism": 1000})
            log = io.StringIO()
            cpu0, wall0 = _cpu(), time.monotonic()
            summary = run_slurm_sweep(config, tmp / "out", settings, wait=False, stream=log)
            cpu1, wall1 = _cpu(), time.monotonic()
            # the same array followed as the waiting command does: rerunning with wait would
            # refuse (the array is active), so follow the recorded tasks directly
            from cfl_lightning.sweep.cluster import follow

            summary = follow(tmp / "out", summary, stream=log)
            cpu2, wall2 = _cpu(), time.monotonic()
        lines = log.getvalue().splitlines()
        done = sum(1 for line in lines if "] done " in line)
        rows = [
            ("plan, prepare, submit", cpu1 - cpu0, wall1 - wall0),
            ("follow until all reported", cpu2 - cpu1, wall2 - wall1),
            ("total", cpu2 - cpu0, wall2 - wall0),
        ]
        print(f"{args.points} dry points, one SLURM array on a local one-node cluster "
              f"({args.cpus} CPUs declared; {os.cpu_count()} cores here)")
        print(f"{'phase':<28}{'submitter CPU s':>17}{'wall s':>10}")
        for name, cpu, wall in rows:
            print(f"{name:<28}{cpu:>17.2f}{wall:>10.1f}")
        print(f"points reported done: {done} of {args.points}; failed: {len(summary.failed)}; "
              f"target: <= 60 s submitter CPU -> {'met' if cpu2 - cpu0 <= 60 else 'MISSED'}")
    return 0 if done == args.points else 1


if __name__ == "__main__":
    sys.exit(main())
