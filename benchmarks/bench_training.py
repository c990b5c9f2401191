"""Training throughput of the language models, and wall time of the configs' default runs.

Usage::

    python benchmarks/bench_training.py                 # throughput table (about a minute)
    python benchmarks/bench_training.py --configs       # + one full default run per config (slow)
    python benchmarks/bench_training.py --steps 100 --threads 1 --budget 128000

Throughput: one optimizer step (forward, KL loss, backward, gradient clipping at 5, Adam) on the
training batches of a 500-string corpus (at most 128 tokens per batch, as in the configs), timed
per step after a warm-up; reported as the median over steps of real tokens (symbols + EOS) per
second, and the median milliseconds per step. Run with one thread per process, as on a shared
machine (``--threads``).

Config runs: ``python -m cfl_lightning fit --config configs/NAME.yaml`` in a fresh temporary
directory (fresh corpus cache, so sampling is included; W&B follows the environment, offline when
nothing is configured), timing the whole process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def throughput(arch: str, data_kwargs: dict, budget: int, steps: int, warmup: int) -> dict:
    import torch

    from cfl_lightning.data import PFADataModule
    from cfl_lightning.models import LSTMLanguageModel, TransformerLanguageModel

    cls = {"lstm": LSTMLanguageModel, "transformer": TransformerLanguageModel}[arch]
    dm = PFADataModule(
        cache_dir="none", device="cpu", num_strings=500, max_tokens=128, **data_kwargs
    )
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    model = cls(num_symbols=dm.num_symbols, param_budget=budget)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    rates, times = [], []
    for i in range(warmup + steps):
        batch = batches[i % len(batches)]
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = model.training_step(batch, i)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        elapsed = time.perf_counter() - start
        if i >= warmup:
            times.append(elapsed)
            rates.append(int(batch["mask"].sum()) / elapsed)
    return {
        "arch": arch,
        "symbols": dm.num_symbols,
        "params": model.num_parameters,
        "ms_per_step": 1000 * statistics.median(times),
        "tokens_per_s": statistics.median(rates),
        "tokens_per_batch": statistics.mean(int(b["mask"].sum()) for b in batches),
        "train_tokens": sum(int(b["mask"].sum()) for b in batches),
    }


def config_run(path: Path, environ: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="cfl_bench_") as tmp:
        env = dict(environ, CFL_LIGHTNING_CACHE=str(Path(tmp) / "cache"), OMP_NUM_THREADS="1")
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "cfl_lightning", "fit", f"--config={path}"],
            cwd=tmp, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
        )
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            return {"config": path.name, "wall_s": wall, "error": proc.stderr.strip()[-500:]}
        line = [x for x in proc.stdout.splitlines() if x.startswith("results: ")][-1]
        results = json.loads((Path(tmp) / line.split(": ", 1)[1]).read_text())
        return {
            "config": path.name,
            "model": results["model"],
            "wall_s": wall,
            "train_time_s": results["train_time_s"],
            "epochs": results["epochs"],
            "kl_total": results["kl_total"],
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="timed steps per model")
    parser.add_argument("--warmup", type=int, default=5, help="untimed warm-up steps")
    parser.add_argument("--budget", type=int, default=128_000, help="parameter budget")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--configs", action="store_true", help="also time each config's default run"
    )
    args = parser.parse_args(argv)
    environ = dict(os.environ)  # the config runs see the caller's W&B settings
    os.environ.setdefault("WANDB_MODE", "disabled")  # no W&B in this process

    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cases = [
        ("parity + star-free", {"generator": "parity_resampled", "weight_seed": 1}),
        ("random 50x10", {"generator": "random", "num_states": 50, "num_symbols": 10}),
    ]
    print(f"training throughput, {args.threads} thread(s), budget {args.budget:,} parameters, "
          f"median over {args.steps} steps (torch {torch.__version__})")
    print(f"{'automaton':<20} {'model':<12} {'|S|':>3} {'params':>8} {'tok/batch':>9} "
          f"{'ms/step':>8} {'tokens/s':>9} {'s/epoch':>8}")
    for name, data_kwargs in cases:
        for arch in ("lstm", "transformer"):
            r = throughput(arch, data_kwargs, args.budget, args.steps, args.warmup)
            epoch = r["train_tokens"] / r["tokens_per_s"]
            print(f"{name:<20} {arch:<12} {r['symbols']:>3} {r['params']:>8,} "
                  f"{r['tokens_per_batch']:>9.0f} {r['ms_per_step']:>8.2f} "
                  f"{r['tokens_per_s']:>9,.0f} {epoch:>8.2f}", flush=True)
    if args.configs:
        print("\ndefault runs (python -m cfl_lightning fit --config ..., fresh cache, 1 thread)")
        print(f"{'config':<24} {'model':<26} {'epochs':>6} {'train s':>8} {'wall s':>8} "
              f"{'kl_total':>9}")
        for path in sorted((ROOT / "configs").glob("*.yaml")):
            r = config_run(path, environ)
            if "error" in r:
                print(f"{r['config']:<24} FAILED after {r['wall_s']:.1f}s: {r['error']}")
                continue
            print(f"{r['config']:<24} {r['model']:<26} {r['epochs']:>6} {r['train_time_s']:>8.1f} "
                  f"{r['wall_s']:>8.1f} {r['kl_total']:>9.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
