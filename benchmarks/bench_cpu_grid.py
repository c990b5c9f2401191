"""Headline-size grids on this CPU, the plain runner against the faster paths.

Usage::

    python benchmarks/bench_cpu_grid.py                        # arms plain, ensemble; once
    python benchmarks/bench_cpu_grid.py --arms ensemble,plain --repeats 2   # other order, twice
    python benchmarks/bench_cpu_grid.py --arms plain,improved --improved "--ensemble 2 --parallel 2"
    python benchmarks/bench_cpu_grid.py --max-epochs 5         # a quick look

The grid (8 runs): {LSTM, transformer} x topologies 15 and 38 of the headline study (random
50-state, 10-symbol automata, weight seed 0) x an exact count of symbol ``a`` of 250 or 1000 in
500 training strings (``configs/random_topology.yaml``), at most ``--max-epochs`` (20) epochs,
early stopping as configured. Each arm is one ``python -m cfl_lightning sweep`` process with a
fresh output folder and corpus cache (so every arm samples its corpora) and
``WANDB_MODE=disabled``:

* ``plain``: ``sweep GRID --parallel 2`` (one process per run, one thread each);
* ``ensemble``: ``sweep GRID --ensemble 8 --parallel 2`` (the ensemble path: one process per
  model class, 4 members each, one Lightning loop, stacked Adam);
* ``improved``: ``sweep GRID`` followed by the flags of ``--improved`` (any other path to try);
* ``other``: the ``ensemble`` arm's flags with the code of another checkout (``--other-root``,
  e.g. ``git worktree add --detach /tmp/old COMMIT``): an A/B of a code change in one script.

Arms are interleaved (``--order``, repeated ``--repeats`` times). Measured per arm: wall time,
CPU time of the arm's whole process tree (``getrusage(RUSAGE_CHILDREN)``), ``uptime`` before
and after. Printed: wall and CPU ratios of each arm to ``plain`` (medians over repeats), the
median ``kl_total`` of each arm over its 8 runs and its ratio to plain's, and the *achieved
fraction of the CPU's matrix-product rate*: the useful FLOPs of the arm's runs (every run's
epochs x (3 x forward FLOPs of its training corpus + forward of its validation corpus) +
forward of its test corpus; real positions only, ``benchmarks/cpu_anchor.py``) over the arm's
CPU time, divided by the float32 ``torch.mm`` rate of a 1024 square on one thread per CPU
second, measured in this script between the arms; and the same by wall time over 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

TOPOLOGIES = (15, 38)
COUNTS = (250, 1000)
#: the ``improved`` arm's default sweep flags (after ``sweep GRID --output DIR``)
IMPROVED = "--ensemble 2 --parallel 2"

GRID = """\
name: cpu_grid_bench
method: grid
parameters:
  model:
    values: [LSTMLanguageModel, TransformerLanguageModel]
  data.topology_seed:
    values: [{topologies}]
  data.weight_seed:
    value: 0
  data.event:
    value: "symbol:a"
  data.intervention:
    value: exact
  data.count:
    values: [{counts}]
  data.num_strings:
    value: 500
  trainer.max_epochs:
    value: {epochs}
command:
  - ${{env}}
  - ${{interpreter}}
  - -m
  - cfl_lightning
  - fit
  - --config
  - {config}
  - ${{args}}
"""


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def run_arm(name: str, flags: list[str], grid: Path, work: Path, env: dict,
            root: Path = ROOT) -> dict:
    output = work / f"{name}_{time.monotonic_ns()}"
    arm_env = dict(env, CFL_LIGHTNING_CACHE=str(output) + "_cache")
    if root != ROOT:  # another checkout's code (``--other-root``)
        arm_env["PYTHONPATH"] = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "cfl_lightning", "sweep", str(grid), "--output", str(output),
               *flags]
    load = uptime()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=root, env=arm_env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    runs = []
    for path in sorted(output.rglob("results.json")):
        r = json.loads(path.read_text())
        runs.append({k: r.get(k) for k in ("model", "count", "kl_total", "epochs", "stopped_early")}
                    | {"topology_seed": r["config"]["data"]["topology_seed"]})
    return {"arm": name, "wall": wall, "cpu": cpu, "code": proc.returncode, "runs": runs,
            "load": load, "load_after": uptime(), "stderr": proc.stderr[-1500:]}


def point_flops(model: str, topology: int, count: int, epochs: int, cache: dict) -> float:
    """Useful FLOPs of one run that trained ``epochs`` epochs (see the module docstring)."""
    from cpu_anchor import net_dims, useful_flops

    from cfl_lightning.data import PFADataModule
    from cfl_lightning.models import LSTMLanguageModel, TransformerLanguageModel

    key = (topology, count)
    if key not in cache:
        dm = PFADataModule(generator="random", num_states=50, num_symbols=10,
                           topology_seed=topology, weight_seed=0, intervention="exact",
                           event="symbol:a", count=count, num_strings=500, val_strings=200,
                           test_strings=500, max_tokens=128, seed=0)
        cache[key] = {s: dm.tokenized(s).positions for s in ("train", "val", "test")}
    if model not in cache:
        cls = LSTMLanguageModel if model == "LSTMLanguageModel" else TransformerLanguageModel
        cache[model] = net_dims(cls(num_symbols=10, param_budget=128_000))
    pos, dims = cache[key], cache[model]
    per_epoch = 3 * useful_flops(dims, pos["train"]) + useful_flops(dims, pos["val"])
    return epochs * per_epoch + useful_flops(dims, pos["test"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arms", default="plain,ensemble",
                        help="comma-separated arms in order (plain, ensemble, improved, other); "
                        "ratios are to plain (or to the first arm without plain)")
    parser.add_argument("--improved", default=IMPROVED, help=f"sweep flags (default: {IMPROVED!r})")
    parser.add_argument("--other-root", type=Path, default=None,
                        help="another checkout (e.g. a git worktree of an older commit): arm "
                        "'other' runs the ensemble flags with that checkout's code")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--max-epochs", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help="keep the outputs (printed)")
    args = parser.parse_args()
    import torch

    from cpu_anchor import mm_rate

    torch.set_num_threads(1)
    flags_other = ["--ensemble", "8", "--parallel", "2"]
    flags = {"plain": ["--parallel", "2"], "ensemble": ["--ensemble", "8", "--parallel", "2"],
             "improved": shlex.split(args.improved), "other": flags_other}
    arms = args.arms.split(",")
    env = dict(os.environ, WANDB_MODE=os.environ.get("WANDB_MODE", "disabled"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    work = Path(tempfile.mkdtemp(prefix="cfl_cpu_grid_"))
    grid = work / "grid.yaml"
    grid.write_text(GRID.format(
        topologies=", ".join(map(str, TOPOLOGIES)), counts=", ".join(map(str, COUNTS)),
        epochs=args.max_epochs, config=ROOT / "configs" / "random_topology.yaml"))
    print(f"# arms {arms} x {args.repeats} repeat(s)"
          + (f"; improved = sweep {args.improved}" if "improved" in arms else ""))
    results: dict[str, list[dict]] = {a: [] for a in arms}
    rates = []
    for rep in range(args.repeats):
        for arm in arms:
            rates.append(mm_rate(1024, 1024, 1024)["gflops_cpu"])
            root = args.other_root.resolve() if arm == "other" else ROOT
            out = run_arm(arm, flags[arm], grid, work, env, root)
            results[arm].append(out)
            print(f"# rep {rep} {arm}: wall {out['wall']:.1f}s cpu {out['cpu']:.1f}s exit "
                  f"{out['code']} runs {len(out['runs'])} | before: {out['load']} | after: "
                  f"{out['load_after']}", flush=True)
            if out["code"] or len(out["runs"]) != 8:
                print(out["stderr"])
    rate = statistics.median(rates)
    med = statistics.median
    cache: dict = {}
    base = "plain" if "plain" in arms else arms[0]
    base_wall = med(r["wall"] for r in results[base])
    base_cpu = med(r["cpu"] for r in results[base])
    base_kl = med(x["kl_total"] for r in results[base] for x in r["runs"])
    print(f"\ntorch.mm 1024 square, 1 thread: {rate:.1f} GFLOP/s per CPU-second (median of "
          f"{len(rates)})\n")
    print(f"| arm | wall s | CPU s | wall / {base} | CPU / {base} | median kl_total | "
          f"kl / {base} | epochs (sum) | GFLOP | fraction of mm rate (CPU) | (wall, 2 cores) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for arm in arms:
        rs = results[arm]
        wall, cpu = med(r["wall"] for r in rs), med(r["cpu"] for r in rs)
        kl = med(x["kl_total"] for r in rs for x in r["runs"])
        flops = med(sum(point_flops(x["model"], x["topology_seed"], x["count"], x["epochs"], cache)
                        for x in r["runs"]) for r in rs)
        epochs = med(sum(x["epochs"] for x in r["runs"]) for r in rs)
        print(f"| {arm} | {wall:.1f} | {cpu:.1f} | {wall / base_wall:.2f} | {cpu / base_cpu:.2f} | "
              f"{kl:.4g} | {kl / base_kl:.2f} | {epochs:.0f} | {flops / 1e9:.0f} | "
              f"{flops / cpu / 1e9 / rate:.4f} | {flops / (2 * wall) / 1e9 / rate:.4f} |")
    print("\nper run (first repeat): model topology count -> kl_total (epochs)")
    for arm in arms:
        for x in sorted(results[arm][0]["runs"], key=lambda x: (x["model"], x["topology_seed"],
                                                                 x["count"])):
            print(f"  {arm:9s} {x['model'][:4]} t{x['topology_seed']} c{x['count']}: "
                  f"{x['kl_total']:.4g} ({x['epochs']})")
    if args.keep:
        print(f"outputs kept in {work}")
    else:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
