"""An 8-point sweep run by the plain runner and by ensembles, back to back; and a killed job resumed.

Usage::

    python benchmarks/bench_ensemble_sweep.py                     # configs/parity_starfree.yaml
    python benchmarks/bench_ensemble_sweep.py --max-epochs 10     # shorter runs
    python benchmarks/bench_ensemble_sweep.py --resume            # kill an ensemble job at 60%

The grid: parity + star-free (``configs/parity_starfree.yaml``), exact-count interventions with
two counts x four seeds (``seed_everything`` 0..3). Arm ``plain``:
``python -m cfl_lightning sweep GRID --output A --parallel 2``; arm ``ensemble``:
``python -m cfl_lightning sweep GRID --output B --ensemble 8 --parallel 2``. Each arm gets a
fresh corpus cache (so both sample their corpora) and ``WANDB_MODE=disabled`` unless set. The
arms run one after the other (the machine may be shared: compare them, not absolute times).
Printed: wall time of each arm and their ratio, the results.json files found, whether their
key sets agree, and the median ``kl_total`` of each arm.

``--resume``: one ensemble job (``python -m cfl_lightning.cli.ensemble_job``) of four members
(counts 500 and 1500 x seeds 0 and 1, 30 epochs without early stopping) run uninterrupted, then
again with a ``checkpoint_dir``, killed (SIGKILL) at ``--kill-at`` (0.6) of the uninterrupted
wall time and rerun; then uninterrupted once more (the machine may be shared). Printed: the
rerun's wall time over the uninterrupted one's (the mean of both), whether the rerun resumed,
and the number of valid ``results.json`` per member (must be exactly one each, 30 epochs).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

GRID = """\
name: ensemble_bench
method: grid
parameters:
  data.count:
    values: [{counts}]
  seed_everything:
    values: [0, 1, 2, 3]
{extra}command:
  - ${{env}}
  - ${{interpreter}}
  - -m
  - cfl_lightning
  - fit
  - --config
  - {config}
  - ${{args}}
"""


def run_arm(grid: Path, output: Path, extra: list[str], env: dict[str, str]) -> dict:
    cache = output.parent / f"{output.name}_cache"
    arm_env = dict(env, CFL_LIGHTNING_CACHE=str(cache))
    command = [sys.executable, "-m", "cfl_lightning", "sweep", str(grid), "--output", str(output),
               "--parallel", "2", *extra]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=arm_env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    files = sorted(output.rglob("results.json"))
    results = [json.loads(f.read_text()) for f in files]
    return {
        "wall": wall, "code": proc.returncode, "stderr": proc.stderr[-2000:], "results": results,
    }


def job_members(root: Path, epochs: int) -> list[dict]:
    config = ROOT / "configs" / "parity_starfree.yaml"
    return [
        {"name": f"c{count}_s{seed}", "args": [
            "--config", str(config), f"--seed_everything={seed}", f"--data.count={count}",
            f"--trainer.max_epochs={epochs}", "--early_stopping.patience=1000",
            f"--trainer.default_root_dir={root / f'c{count}_s{seed}'}"]}
        for count in (500, 1500) for seed in (0, 1)
    ]


def run_job(root: Path, env: dict, epochs: int, checkpoint: Path | None,
            kill_after: float | None = None) -> tuple[float, subprocess.CompletedProcess | None]:
    spec = root.parent / f"{root.name}.json"
    spec.write_text(json.dumps({"members": job_members(root, epochs),
                                "checkpoint_dir": None if checkpoint is None else str(checkpoint)}))
    command = [sys.executable, "-m", "cfl_lightning.cli.ensemble_job", str(spec)]
    start = time.perf_counter()
    if kill_after is None:
        proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        return time.perf_counter() - start, proc
    child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        child.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    return time.perf_counter() - start, None


def resume_main(args: argparse.Namespace, env: dict) -> int:
    from cfl_lightning.results import has_results

    epochs = args.max_epochs or 30
    print(f"4-member ensemble job, {epochs} epochs (no early stopping), killed at "
          f"{args.kill_at:.0%} and rerun; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="cfl_bench_resume_") as tmp:
        tmp = Path(tmp)
        arm = lambda name: dict(env, CFL_LIGHTNING_CACHE=str(tmp / f"{name}_cache"))  # noqa: E731
        first, proc = run_job(tmp / "whole1", arm("whole1"), epochs, None)
        print(f"uninterrupted        {first:7.1f} s  exit {proc.returncode}", flush=True)
        killed, _ = run_job(tmp / "killed", arm("killed"), epochs, tmp / "ckpt",
                            kill_after=args.kill_at * first)
        left = sorted(p.name for p in (tmp / "ckpt").glob("*.ckpt"))
        print(f"killed after         {killed:7.1f} s  checkpoint left: {left}", flush=True)
        rerun, proc = run_job(tmp / "killed", arm("killed"), epochs, tmp / "ckpt")
        resumed = [line for line in proc.stderr.splitlines() if line.startswith("resuming")]
        print(f"rerun                {rerun:7.1f} s  exit {proc.returncode}; "
              f"{resumed[0] if resumed else 'did NOT resume'}", flush=True)
        second, _ = run_job(tmp / "whole2", arm("whole2"), epochs, None)
        print(f"uninterrupted again  {second:7.1f} s", flush=True)
        base = (first + second) / 2
        print(f"rerun / uninterrupted: {rerun / base:.2f} (target <= 0.8, goal <= 0.5); "
              f"killed + rerun / uninterrupted: {(killed + rerun) / base:.2f}")
        for member in job_members(tmp / "killed", epochs):
            files = sorted(Path(member["args"][-1].split("=", 1)[1]).rglob("results.json"))
            valid = [f for f in files if has_results(f)]
            ep = [json.loads(f.read_text())["epochs"] for f in valid]
            print(f"  {member['name']}: {len(files)} results.json, {len(valid)} valid, epochs {ep}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="500,1500", help="the two exact counts")
    parser.add_argument("--max-epochs", type=int, default=None, help="override trainer.max_epochs")
    parser.add_argument("--ensemble", type=int, default=8)
    parser.add_argument(
        "--order", default="plain,ensemble", help="which arm runs first (plain,ensemble or "
        "ensemble,plain): on a shared machine, run both orders"
    )
    parser.add_argument("--resume", action="store_true", help="the killed-job measurement")
    parser.add_argument("--kill-at", type=float, default=0.6, help="with --resume (default 0.6)")
    args = parser.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.setdefault("WANDB_MODE", "disabled")
    if args.resume:
        sys.path.insert(0, str(ROOT))
        return resume_main(args, env)
    extra = ""
    if args.max_epochs is not None:
        extra = f"  trainer.max_epochs:\n    value: {args.max_epochs}\n"
    with tempfile.TemporaryDirectory(prefix="cfl_bench_sweep_") as tmp:
        tmp = Path(tmp)
        grid = tmp / "grid.yaml"
        grid.write_text(GRID.format(
            counts=", ".join(args.counts.split(",")), extra=extra,
            config=ROOT / "configs" / "parity_starfree.yaml",
        ))
        print(f"8-point grid (counts {args.counts} x seeds 0..3), parity + star-free, "
              f"max_epochs {args.max_epochs or 'from the config'}; "
              f"{os.cpu_count()} CPUs, WANDB_MODE={env['WANDB_MODE']}", flush=True)
        arms = {}
        flags_of = {"plain": [], "ensemble": ["--ensemble", str(args.ensemble)]}
        for name in args.order.split(","):
            flags = flags_of[name]
            arms[name] = run_arm(grid, tmp / name, flags, env)
            r = arms[name]
            print(f"{name:<9} --parallel 2 {' '.join(flags):<12} wall {r['wall']:7.1f} s  "
                  f"exit {r['code']}  results.json {len(r['results'])}", flush=True)
            if r["code"] != 0:
                print(r["stderr"], flush=True)
        plain, ens = arms["plain"], arms["ensemble"]
        keys_plain = {tuple(r) for r in plain["results"]}
        keys_ens = {tuple(r) for r in ens["results"]}
        print(f"wall ensemble / plain: {ens['wall'] / plain['wall']:.2f}")
        print(f"same results.json keys: {keys_plain == keys_ens and len(keys_plain) == 1}")

        def median_kl(results: list[dict]) -> float:
            values = [r["kl_total"] for r in results if r.get("kl_total") is not None]
            return statistics.median(values) if values else float("nan")

        mp, me = median_kl(plain["results"]), median_kl(ens["results"])
        print(f"median kl_total: plain {mp:.5f}, ensemble {me:.5f} (ratio {me / mp:.2f})")
        by_point = {}
        for arm, data in arms.items():
            for r in data["results"]:
                point = (r["count"], r["seed"])
                by_point.setdefault(point, {})[arm] = r["kl_total"]
        print(f"{'count':>6} {'seed':>4} {'plain kl':>10} {'ensemble kl':>12} "
              f"{'plain ep':>8} {'ens ep':>6}")
        epochs = {arm: {(r['count'], r['seed']): r['epochs'] for r in d['results']}
                  for arm, d in arms.items()}
        for point in sorted(by_point):
            kl = by_point[point]
            print(f"{point[0]:>6} {point[1]:>4} {kl.get('plain', float('nan')):>10.5f} "
                  f"{kl.get('ensemble', float('nan')):>12.5f} "
                  f"{epochs['plain'].get(point, 0):>8} {epochs['ensemble'].get(point, 0):>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
