"""Ensembles against sequential runs: whole runs, the grid estimate, then one training step.

Usage::

    python benchmarks/bench_ensemble.py --smoke                     # CPU, seconds: checks it all runs
    python benchmarks/bench_ensemble.py --device cpu                # this machine's tables
    PYTHONPATH=$PWD python3 benchmarks/bench_ensemble.py --device cuda --max-epochs 10 \\
        --time-limit 170                                            # on a GPU (gpu_check.sh)

Every number is measured in this process on the named device, the whole runs first so that
``--time-limit`` (no new measurement starts after it) keeps the most important rows:

1. **whole runs** with the configs' settings (500 training strings, 200 validation and 500 test
   strings, at most 128 tokens per batch, 128k parameters, dropout 0.1, Adam 0.01, plateau
   schedule, clipping at 5, early stopping patience 10, best weights, then the test strings'
   decomposed KL), corpora sampled once beforehand into a cache that every arm reads (members
   share corpora as the paper's seeds do: 10 seeds per corpus). ``sequential``: a Lightning
   ``Trainer.fit`` + ``test`` of one run, in process. ``ensemble M``: an
   :class:`~cfl_lightning.ensemble.EnsembleLanguageModel` of M members fitted and tested by a
   Lightning ``Trainer`` with the device's default engine and step (CUDA: stacked, CUDA graphs;
   CPU: loop for LSTMs, stacked for transformers), from building the members and loading their
   data to the last member's test; ``ensemble M width`` (CUDA): ticks grouped by width instead
   of the CUDA default, lockstep; ``ensemble M static`` (CUDA): the same without CUDA graphs
   (fixed shapes, eager); ``ensemble M stacked|loop`` (CPU): the other engine. tokens/s counts
   real training positions (epochs x corpus positions, summed over members) per second of wall
   time; runs/h = 3600 M / wall.
2. **grid estimate**: case study (i) at paper scale, 80 causal weightings x 3 targets x 6 counts
   x 20 models + 200 correlational weightings x 20 models = 32,800 runs of 40 epochs, half
   LSTMs and half transformers, at the runs/h of the best ensemble measured, its whole wall time
   scaled from the epochs it ran to 40 (conservative: early stopping only shortens runs).
3. **one training step** (forward, loss, backward, per-member clipping, Adam) of M members, each
   on one of its own 128-token batches, median real tokens/s over random steps.
   ``sequential``: the shipped model, member after member (cuDNN LSTM on CUDA). ``loop``: the
   loop engine (the shipped forward per member, stacked clipping and Adam). ``gather``: the
   stacked network on packed rows of the step's natural shape. ``static``: fixed shapes (all M
   members, the bucketed shape). ``graph`` (CUDA): ``static`` captured once per bucket in a CUDA
   graph and replayed (the first step of each bucket, the capture, is not timed).

At the end: torch custom-op registrations seen while building members and training (the H200
profile of the former trainer spent 25 s in 127 of them).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np  # noqa: E402
import torch  # noqa: E402

COUNTS = (125, 250, 500, 1000, 2000, 4000)
GRID_RUNS = 80 * 3 * 6 * 20 + 200 * 20
PAPER_EPOCHS = 40  # the configs' max_epochs in the paper; early stopping only shortens a run
STEP_METHODS = ("sequential", "loop", "gather", "static", "graph")
REGISTRATIONS: Counter = Counter()


def count_custom_op_registrations() -> None:
    """Count ``torch.library.custom_op`` registrations (and their first caller outside torch)."""
    try:
        from torch._library import custom_ops
    except ImportError:  # pragma: no cover - other torch versions
        return
    original = custom_ops.CustomOpDef._register_to_dispatcher

    def counted(self, *args, **kwargs):
        import traceback

        frames = [f for f in traceback.extract_stack()[:-1] if "/torch/" not in f.filename]
        where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
        REGISTRATIONS[where] += 1
        return original(self, *args, **kwargs)

    custom_ops.CustomOpDef._register_to_dispatcher = counted


def member_config(i: int) -> tuple[int, dict]:
    """Member ``i``: seed ``i % 10`` on corpus ``i // 10`` (a weighting and a count)."""
    corpus = i // 10
    data = dict(
        generator="parity_resampled", weight_seed=corpus % 80, intervention="exact",
        event="state:odd", count=COUNTS[corpus % len(COUNTS)], num_strings=500,
        val_strings=200, test_strings=500, max_tokens=128, seed=0, device="cpu",
    )
    return i % 10, data


def build(arch: str, i: int, cache: str, smoke: bool):
    import lightning

    from cfl_lightning.data import PFADataModule
    from cfl_lightning.models import LSTMLanguageModel, TransformerLanguageModel

    seed, data = member_config(i)
    if smoke:
        data.update(num_strings=60, val_strings=20, test_strings=20, count=min(data["count"], 150))
    lightning.seed_everything(seed, verbose=False)
    dm = PFADataModule(cache_dir=cache, **data)
    cls = {"lstm": LSTMLanguageModel, "transformer": TransformerLanguageModel}[arch]
    budget = 20_000 if smoke else 128_000
    model = cls(num_symbols=dm.num_symbols, param_budget=budget, dropout=0.1, lr=0.01)
    return model, dm


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def quiet_lightning() -> None:
    """Lightning configures its loggers when imported: silence them afterwards."""
    import lightning  # noqa: F401

    for name in list(logging.root.manager.loggerDict):
        if name.startswith("lightning"):
            logging.getLogger(name).setLevel(logging.ERROR)


def trainer_for(device: torch.device, max_epochs: int, callbacks=(), ensemble: bool = False):
    import lightning

    quiet_lightning()
    options = dict(reload_dataloaders_every_n_epochs=1, num_sanity_val_steps=0,
                   enable_checkpointing=False) if ensemble else dict(gradient_clip_val=5.0)
    return lightning.Trainer(
        max_epochs=max_epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
        accelerator="gpu" if device.type == "cuda" else "cpu", devices=1,
        callbacks=list(callbacks), **options,
    )


# ---------------------------------------------------------------------------- 1. whole runs


def sequential_fit(arch, cache, device, max_epochs, smoke):
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    start = time.perf_counter()
    model, dm = build(arch, 0, cache, smoke)
    with tempfile.TemporaryDirectory() as ckpt:
        trainer = trainer_for(device, max_epochs, [
            EarlyStopping("val/kl_per_string", patience=10),
            ModelCheckpoint(dirpath=ckpt, monitor="val/kl_per_string", save_top_k=1),
        ])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(model, datamodule=dm)
            trainer.test(model, datamodule=dm, ckpt_path="best", verbose=False)
        wall = time.perf_counter() - start
    tokens = trainer.current_epoch * int(dm.tokenized("train").positions.sum())
    return {"wall": wall, "tokens": tokens, "runs": 1, "epochs": trainer.current_epoch, "build": 0}


def ensemble_fit(arch, m, cache, device, max_epochs, smoke, variant):
    from cfl_lightning.ensemble import EnsembleLanguageModel, TrainSettings

    start = time.perf_counter()
    members = [build(arch, i, cache, smoke) for i in range(m)]
    built = time.perf_counter() - start
    models, dms = zip(*members)
    options = {"static": dict(mode="static"), "stacked": dict(engine="stacked"),
               "loop": dict(engine="loop"), "lockstep": dict(pacing="lockstep"),
               "width": dict(pacing="width")}
    module = EnsembleLanguageModel(
        list(models), list(dms), TrainSettings(max_epochs=max_epochs), **options.get(variant, {})
    )
    trainer = trainer_for(device, max_epochs, ensemble=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module)
        trainer.test(module, verbose=False)
    sync(device)
    wall = time.perf_counter() - start
    outcomes = module.outcomes()
    tokens = sum(o.epochs * int(dm.tokenized("train").positions.sum()) for o, dm in zip(outcomes, dms))
    return {"wall": wall, "build": built, "tokens": tokens, "runs": m,
            "epochs": statistics.mean(o.epochs for o in outcomes)}


def whole_runs(args, archs, members, device, cache, started) -> dict[str, float]:
    """Table 1 (and the best 40-epoch runs/h per architecture, for table 2)."""
    print(f"\n1. whole runs (max_epochs {args.max_epochs}, early stopping 10), corpora cached")
    print(f"{'model':<12} {'arm':<22} {'runs':>5} {'epochs':>6} {'build s':>7} {'wall s':>8} "
          f"{'tokens/s':>11} {'runs/h':>9} {'x seq':>7}", flush=True)
    top = max(members)
    plan = [(arch, 0, "sequential") for arch in archs]
    # the largest ensembles first, transformers before LSTMs (whose batched step is slower)
    order = sorted(archs, key=lambda a: a != "transformer")
    plan += [(arch, top, "") for arch in order]
    if device.type == "cuda":  # the default (graphs, lockstep) against by-width ticks, no graphs
        plan += [(arch, top, "width") for arch in order]
        plan += [(arch, top, "static") for arch in order]
    else:
        plan += [(arch, top, "stacked" if arch == "lstm" else "loop") for arch in order]
    plan += [(arch, m, "") for m in sorted(members, reverse=True)[1:] for arch in order]
    best: dict[str, float] = {}
    base: dict[str, float] = {}
    for arch, m, variant in plan:
        if out_of_time(args, started, f"{arch} {variant or 'ensemble'} {m or ''}"):
            continue
        label = "sequential" if variant == "sequential" else f"ensemble {m} {variant}".strip()
        try:
            if variant == "sequential":
                r = sequential_fit(arch, cache, device, args.max_epochs, args.smoke)
                base[arch] = r["tokens"] / r["wall"]
            else:
                r = ensemble_fit(arch, m, cache, device, args.max_epochs, args.smoke, variant)
        except Exception as err:  # noqa: BLE001 - report the row, measure the others
            print(f"{arch:<12} {label:<22} failed: {type(err).__name__}: "
                  f"{str(err).splitlines()[0][:120] if str(err) else ''}", flush=True)
            continue
        scale = max(PAPER_EPOCHS / max(r["epochs"], 1e-9), 1.0)
        best[arch] = max(best.get(arch, 0.0), 3600 * r["runs"] / (r["wall"] * scale))
        rate = r["tokens"] / r["wall"]
        ratio = rate / base[arch] if arch in base else float("nan")
        print(f"{arch:<12} {label:<22} {r['runs']:>5} {r['epochs']:>6.1f} {r['build']:>7.1f} "
              f"{r['wall']:>8.1f} {rate:>11,.0f} {3600 * r['runs'] / r['wall']:>9.0f} "
              f"{ratio:>6.1f}x", flush=True)
    return best


# ---------------------------------------------------------------------------- 3. one step


def step_rates(arch, m, dms, models, device, steps, methods) -> dict[str, float]:
    """Median real tokens/s of one training step of ``m`` members, per method."""
    from cfl_lightning.data.batching import collate
    from cfl_lightning.ensemble import PackedCorpora, ParameterLayout, StackedAdam, stacked_network
    from cfl_lightning.ensemble.data import EnsembleData
    from cfl_lightning.ensemble.engines import LoopEngine
    from cfl_lightning.ensemble.step import TrainStep
    from cfl_lightning.losses import kl_to_automaton_loss

    dms, models = dms[:m], models[:m]
    layout = ParameterLayout.of(models[0])
    packed = PackedCorpora(
        [d.tokenized("train") for d in dms], [d.batches("train") for d in dms],
        [d.pfsa.next_symbol_probs() for d in dms], dms[0].pad_id, device=device,
    )
    rng = np.random.default_rng(0)
    plan = [np.array([packed.first_batch[i] + int(rng.integers(packed.num_batches[i]))
                      for i in range(m)]) for _ in range(steps + 2)]
    tokens = [int(packed.step(ids).mask.sum()) for ids in plan]

    def timed(step) -> float:
        out = []
        for k, ids in enumerate(plan):
            sync(device)
            start = time.perf_counter()
            step(ids)
            sync(device)
            if k >= 2:  # the first steps warm up (and capture graphs)
                out.append(tokens[k] / (time.perf_counter() - start))
        return statistics.median(out)

    def stacked(mode):
        param = torch.nn.Parameter(layout.stack(models).to(device))
        adam = StackedAdam(param, torch.full((m,), 0.01, dtype=torch.float64))
        step = TrainStep(stacked_network(models[0]), layout, param, adam, packed, "kl", 5.0, mode)
        if mode == "graph":  # capture each bucket once, untimed
            for ids in plan:
                step(ids)
        return timed(step)

    def loop():
        param = torch.nn.Parameter(layout.stack(models).to(device))
        adam = StackedAdam(param, torch.full((m,), 0.01, dtype=torch.float64))
        engine = LoopEngine(models[0], layout, EnsembleData(list(dms)), param, "kl", 5.0)
        return timed(lambda ids: engine.train(ids, None, False, adam))

    def sequential():
        mods = [mod.to(device).train() for mod in models]
        opts = [torch.optim.Adam(mod.parameters(), lr=0.01) for mod in mods]
        batches = {}
        for ids in plan:
            for i, g in enumerate(ids):
                d = dms[i]
                batches[(i, int(g))] = {k: v.to(device) for k, v in collate(
                    d.tokenized("train"), d.batches("train")[int(g) - packed.first_batch[i]],
                    d.pfsa.next_symbol_probs().float(), d.pad_id).items()}

        def step(ids):
            for i, (mod, opt) in enumerate(zip(mods, opts)):
                batch = batches[(i, int(ids[i]))]
                opt.zero_grad(set_to_none=True)
                kl_to_automaton_loss(mod(batch["input_ids"]), batch).backward()
                torch.nn.utils.clip_grad_norm_(mod.parameters(), 5.0)
                opt.step()

        rate = timed(step)
        for mod in mods:
            mod.cpu()
        return rate

    rates = {name: float("nan") for name in STEP_METHODS}
    for method in methods:
        if method == "graph" and device.type != "cuda":
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rates[method] = (sequential() if method == "sequential" else loop()
                                 if method == "loop" else stacked(method))
        except RuntimeError as err:
            print(f"  ({arch} M={m} {method}: {str(err).splitlines()[0][:100]})", flush=True)
    return rates


def one_step(args, archs, method_members, device, cache, started) -> None:
    steps = args.steps
    methods = [x for x in args.methods.split(",") if x]
    print(f"\n3. one training step, M members, median real tokens/s over {steps} steps")
    print(f"{'model':<12} {'M':>4} " + " ".join(f"{x:>12}" for x in STEP_METHODS)
          + f" {'best/seq':>9}", flush=True)
    for arch in archs:
        top = max(method_members)
        pool = [build(arch, i, cache, args.smoke) for i in range(top)]
        models, dms = [p[0] for p in pool], [p[1] for p in pool]
        for dm in dms:
            dm.setup("fit")
        for m in method_members:
            if out_of_time(args, started, f"{arch} M={m} steps", limit=args.step_time_limit):
                continue
            r = step_rates(arch, m, dms, models, device, steps, methods)
            finite = [v for k, v in r.items() if k != "sequential" and np.isfinite(v)]
            best = max(finite) / r["sequential"] if finite and np.isfinite(r["sequential"]) else float("nan")
            print(f"{arch:<12} {m:>4} " + " ".join(f"{r[x]:>12,.0f}" for x in STEP_METHODS)
                  + f" {best:>8.1f}x", flush=True)


# ---------------------------------------------------------------------------- main


def out_of_time(args, started: float, what: str, limit: float | None = None) -> bool:
    limit = args.time_limit if limit is None else limit
    if limit is None or time.perf_counter() - started < limit:
        return False
    print(f"  (time limit {limit:.0f} s reached: skipping {what})", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU: checks it runs")
    parser.add_argument("--members", default=None, help="ensemble sizes (default 8,32,128)")
    parser.add_argument("--method-members", default=None, help="sizes of table 3 (default 1,32,128)")
    parser.add_argument("--max-epochs", type=int, default=None, help="(default 10, smoke 2)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per method (default 10)")
    parser.add_argument("--archs", default="lstm,transformer")
    parser.add_argument("--methods", default=",".join(STEP_METHODS), help="columns of table 3")
    parser.add_argument("--skip-steps", action="store_true", help="no table 3")
    parser.add_argument("--skip-fit", action="store_true", help="no tables 1 and 2")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="start no whole run after this many seconds (prints what it has)")
    parser.add_argument("--step-time-limit", type=float, default=None,
                        help="start no step measurement after this many seconds")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if args.smoke and device.type == "cuda":
        parser.error("--smoke is a CPU check")
    if device.type == "cpu":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    members = [int(x) for x in (args.members or ("1,4" if args.smoke else "8,32,128")).split(",")]
    method_members = [int(x) for x in (
        args.method_members or ("1,4" if args.smoke else "1,32,128")).split(",")]
    args.max_epochs = args.max_epochs or (2 if args.smoke else 10)
    args.steps = args.steps or (3 if args.smoke else 10)
    archs = args.archs.split(",")
    count_custom_op_registrations()
    started = time.perf_counter()
    name = (torch.cuda.get_device_name(0) if device.type == "cuda"
            else f"CPU, {torch.get_num_threads()} thread(s)")
    load = f"; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs" if hasattr(os, "getloadavg") else ""
    print(f"device: {name}; torch {torch.__version__}; smoke={args.smoke}{load}", flush=True)
    with tempfile.TemporaryDirectory(prefix="cfl_bench_ens_") as tmp:
        cache = str(Path(tmp) / "cache")
        for i in range(max(members + method_members)):  # every corpus sampled once, untimed
            build(archs[0], i, cache, args.smoke)[1].prepare_data()
        if not args.skip_fit:
            best = whole_runs(args, archs, members, device, cache, started)
            if set(best) == {"lstm", "transformer"}:
                hours = (GRID_RUNS / 2) / best["lstm"] + (GRID_RUNS / 2) / best["transformer"]
                print(f"\n2. case study (i) at paper scale: {GRID_RUNS:,} runs (half LSTM, half "
                      f"transformer) of {PAPER_EPOCHS} epochs at {best['lstm']:,.0f} and "
                      f"{best['transformer']:,.0f} runs/h (the best ensemble's, its whole wall "
                      f"time scaled to {PAPER_EPOCHS} epochs): {hours:.2f} h on this device"
                      + (" (smoke sizes: not an estimate)" if args.smoke else ""), flush=True)
        if not args.skip_steps:
            one_step(args, archs, method_members, device, cache, started)
    total = sum(REGISTRATIONS.values())
    where = ", ".join(f"{k} x{v}" for k, v in REGISTRATIONS.most_common(3)) or "-"
    print(f"\ntorch custom-op registrations while measuring: {total} ({where})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
