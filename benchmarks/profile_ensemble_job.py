"""One ensemble job of the CPU grid, in this process, with its CPU time split by phase.

Usage::

    python benchmarks/profile_ensemble_job.py                       # LSTM, 4 members, 20 epochs
    python benchmarks/profile_ensemble_job.py --model Transformer --engine loop --repeats 3
    python benchmarks/profile_ensemble_job.py --model Transformer --pacing lockstep,width
    python benchmarks/profile_ensemble_job.py --model LSTM,Transformer --only t15c250,t38c1000

The job is the one ``sweep --ensemble 8 --parallel 2`` starts for one model class of
``benchmarks/bench_cpu_grid.py``'s grid: topologies 15 and 38 x exact counts 250 and 1000 of
``a``, 500 strings, ``--epochs`` epochs (early stopping as configured), trained by
:func:`cfl_lightning.cli.ensemble_job.run_job` (the job's own code) on one thread. Each
configuration (``--engine`` x ``--pacing``) runs ``--repeats`` times, interleaved, each in a
fresh output folder. Printed per run: CPU seconds (``time.process_time``) of the job and of
its phases (member builds, training ticks, the engine's per-member backward where it has one,
the loss, Adam, clipping, validation, test), wall seconds, the load, and every member's
``kl_total``; then the median job CPU time per configuration.

A phase is timed by wrapping the function that does it, so the phases nest (``trainer.fit``
holds the training ticks, which hold the loss and Adam) and the wrappers add a few
microseconds a call. Imports are not in the job's time (they are printed once).
"""

from __future__ import annotations

import argparse
import collections
import functools
import io
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = (15, 38)
COUNTS = (250, 1000)


def members(model: str, epochs: int, out: Path, only: str = "") -> list[tuple[str, list[str]]]:
    """The job's ``(name, fit arguments)``, as the sweep runner writes them in its spec.

    ``model`` may name several classes (``LSTM,Transformer``: a job holding both, as the runner
    plans it when every job runs at once); ``only`` keeps the members whose ``t{topology}
    c{count}`` tag is in its comma-separated list (e.g. ``t15c250,t38c1000``).
    """
    found = []
    keep = {tag for tag in only.split(",") if tag}
    for cls, topology, count in itertools.product(model.split(","), TOPOLOGIES, COUNTS):
        if keep and f"t{topology}c{count}" not in keep:
            continue
        name = f"n{count}_t{topology}_{cls}"
        found.append((name, [
            "--config", str(ROOT / "configs" / "random_topology.yaml"),
            f"--data.count={count}", "--data.event=symbol:a", "--data.intervention=exact",
            "--data.num_strings=500", f"--data.topology_seed={topology}",
            "--data.weight_seed=0", f"--model={cls}LanguageModel", "--seed_everything=0",
            f"--trainer.max_epochs={epochs}", f"--trainer.default_root_dir={out / name}",
        ]))
    return found


ACC: collections.Counter = collections.Counter()
ORDER: list[str] = []  # the phases in the order instrument() names them


def wrap(owner: object, attr: str, key: str) -> None:
    """Accumulate the CPU time of ``owner.attr`` calls under ``key``."""
    if not hasattr(owner, attr):
        return
    inner = getattr(owner, attr)
    ORDER.append(key)

    @functools.wraps(inner)
    def timed(*args, **kwargs):
        start = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            ACC[key] += time.process_time() - start

    setattr(owner, attr, timed)


def instrument() -> None:
    import lightning.pytorch as pl
    import torch

    import cfl_lightning.cli.ensemble_job as job
    from cfl_lightning.ensemble import engines, optim
    from cfl_lightning.ensemble.module import EnsembleLanguageModel as Module

    wrap(job, "build_member", "member builds")
    wrap(pl.Trainer, "fit", "trainer.fit")
    wrap(Module, "training_step", "  training ticks")
    wrap(engines.LoopEngine, "_backward", "    loop: per-member forward+backward")
    wrap(engines.StackedEngine, "train", "    stacked: packed step")
    wrap(engines, "training_loss", "      loss (loop engine)")
    wrap(optim.StackedAdam, "update", "    Adam")
    wrap(engines, "clip_rows_", "    clipping (loop engine)")
    wrap(torch.autograd, "grad", "    autograd.grad (stacked)")
    wrap(Module, "validation_step", "  validation")
    wrap(pl.Trainer, "test", "trainer.test")


def load() -> str:
    """The 1-minute load average."""
    return f"{os.getloadavg()[0]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", default="LSTM",
                        help="LSTM, Transformer, or both (LSTM,Transformer: a mixed job)")
    parser.add_argument("--only", default="",
                        help="keep these members, e.g. t15c250,t38c1000 (default: all four)")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--engine", default="auto", help="comma-separated: auto, loop, stacked")
    parser.add_argument("--pacing", default="auto", help="comma-separated: auto, width, lockstep")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "disabled")
    start = time.process_time()
    import torch

    torch.set_num_threads(1)
    from cfl_lightning.cli.ensemble_job import run_job
    from cfl_lightning.cli.train import quiet_noise
    from cfl_lightning.ensemble.module import EnsembleLanguageModel

    quiet_noise()
    instrument()
    print(f"imports: {time.process_time() - start:.2f} CPU-s; torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs", flush=True)
    pacing_of = EnsembleLanguageModel._pacing
    configs = [(e, p) for e in args.engine.split(",") for p in args.pacing.split(",")]
    totals: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for repeat in range(args.repeats):
        for engine, pacing in configs:
            EnsembleLanguageModel._pacing = (  # type: ignore[method-assign]
                pacing_of if pacing == "auto" else (lambda self, p=pacing: p)
            )
            ACC.clear()
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp)
                before, wall, cpu = load(), time.time(), time.process_time()
                job = members(args.model, args.epochs, out, args.only)
                status = run_job(job, None, engine=engine, stream=io.StringIO())
                cpu, wall = time.process_time() - cpu, time.time() - wall
                failed = [n for n, why in status.items() if why is not None]
                kls = []
                for name, _ in job:
                    found = sorted((out / name).rglob("results.json"))
                    kls.append(json.loads(found[0].read_text())["kl_total"] if found else None)
            totals[(engine, pacing)].append(cpu)
            print(f"\n{args.model} engine={engine} pacing={pacing} repeat {repeat + 1}: job "
                  f"{cpu:.2f} CPU-s, {wall:.1f} s wall, load {before} -> {load()}"
                  + (f", FAILED {failed}" if failed else ""))
            for key in (k for k in ORDER if k in ACC):
                print(f"  {key:40s} {ACC[key]:7.2f}")
            print("  kl_total " + " ".join("-" if k is None else f"{k:.4f}" for k in kls),
                  flush=True)
    print("\nmedian job CPU-s:")
    for (engine, pacing), values in totals.items():
        print(f"  engine={engine} pacing={pacing}: {statistics.median(values):.2f} "
              f"({', '.join(f'{v:.1f}' for v in values)})")


if __name__ == "__main__":
    main()
