"""Ensembles against sequential runs: batching methods, whole-run throughput, grid wall time.

Usage::

    python benchmarks/bench_ensemble.py --device cpu --smoke        # seconds: checks it all runs
    python benchmarks/bench_ensemble.py --device cpu                # this machine's tables
    PYTHONPATH=$PWD python3 benchmarks/bench_ensemble.py --device cuda --compile   # on a GPU

Three tables, every number measured in this process on the named device (the whole runs first,
so that ``--time-limit`` keeps the most important rows):

1. **whole runs** with the configs' settings (500 training strings, 200 validation strings,
   at most 128 tokens per batch, 128k parameters, dropout 0.1, Adam 0.01, plateau schedule,
   clipping at 5, early stopping patience 10, best checkpoint, then the test strings' decomposed
   KL), with the corpora sampled once beforehand into a cache that every arm reads (members share
   corpora as the paper's seeds do: 10 seeds per corpus). ``sequential``: a
   Lightning ``Trainer.fit`` of one run (in-process: no process start-up). ``ensemble M``:
   :class:`~cfl_lightning.ensemble.EnsembleTrainer` (batched, on every device here) on M members
   (pacing by width; on CUDA also ``lockstep`` and, with ``--compile``, the compiled autograd cell
   instead of the hand-written recurrence, for comparison). tokens/s counts real training positions (epochs x corpus
   positions, summed over members) per second of wall time, from building the members and
   loading their data to the last member's test; runs/h = 3600 M / wall.
2. **grid estimate**: case study (i) at paper scale, 80 causal weightings x 3 targets x 6 counts
   x 20 models + 200 correlational weightings x 20 models = 32,800 runs of 40 epochs (the
   configs' ``max_epochs``; early stopping only shortens them), half LSTMs and half
   transformers, at the runs/h of the best ensemble measured, its whole wall time (data,
   set-up and testing included) scaled from the epochs it ran to 40: conservative.
3. **methods**: one training step (forward, KL loss, backward, and for the stacked methods
   per-member clipping and Adam) of M members, each on one of its own 128-token batches, in
   lockstep, median real tokens/s over random steps. ``sequential``: the shipped model, member
   after member (cuDNN LSTM on CUDA). ``vmap``: ``torch.func.vmap`` over ``functional_call`` of
   the shipped network on ``[M, B_max, T_max]`` padded batches (for the LSTM this cannot run:
   ``aten::lstm`` has no batching rule, so a hand-written single-model recurrence is vmapped
   instead). ``bmm-padded``: the stacked networks of :mod:`cfl_lightning.ensemble` on the same
   padded batches (``vmap`` and ``bmm-padded`` only up to M = 32: padded activations reach
   gigabytes). ``packed-autograd``: the stacked LSTM on packed rows with autograd through the
   time loop. ``bmm-packed``: the stacked networks on packed rows with the LSTM's hand-written
   backward through time (what the trainer uses).
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np  # noqa: E402
import torch  # noqa: E402

COUNTS = (125, 250, 500, 1000, 2000, 4000)
GRID_RUNS = 80 * 3 * 6 * 20 + 200 * 20
PAPER_EPOCHS = 40  # the configs' max_epochs; early stopping only shortens a run


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


# ---------------------------------------------------------------------------- 1. methods


def padded_batch(dms, local, device):
    """``[M, B_max, T_max]`` naive padding of each member's batch ``local[m]``."""
    from cfl_lightning.data.batching import collate
    from cfl_lightning.ensemble import PackedBatch

    parts = [
        collate(dm.tokenized("train"), dm.batches("train")[b], dm.pfsa.next_symbol_probs().float(),
                dm.pad_id)
        for dm, b in zip(dms, local)
    ]
    rows = max(p["input_ids"].shape[0] for p in parts)
    length = max(p["input_ids"].shape[1] for p in parts)

    def pad(key, value):
        out = []
        for p in parts:
            x = p[key]
            shape = (rows, length) + tuple(x.shape[2:])
            y = torch.full(shape, value, dtype=x.dtype)
            y[: x.shape[0], : x.shape[1]] = x
            out.append(y)
        return torch.stack(out).to(device)

    mask = pad("mask", False)
    m = len(parts)
    position = torch.arange(length, device=device).expand(m, rows, length)
    return PackedBatch(
        input_ids=pad("input_ids", dms[0].pad_id), target_ids=pad("target_ids", dms[0].pad_id),
        target_probs=pad("target_probs", 0.0), states=pad("states", 0), mask=mask,
        position=position, slot=torch.zeros_like(position),
        strings=torch.tensor([p["input_ids"].shape[0] for p in parts], device=device),
    )


def vmapped_forward(arch, models, layout, params, batch):
    """``vmap`` of one model's forward over the member axis of the padded batch."""
    from torch.func import functional_call, vmap

    from cfl_lightning.ensemble import stacked_network

    if arch == "transformer":
        import copy

        base = copy.deepcopy(models[0].net).to("meta")
        views = {k[len("net."):]: v for k, v in layout.views(params).items()}

        def one(w, ids):
            return torch.log_softmax(functional_call(base, w, (ids,)), dim=-1)

        return vmap(one, randomness="different")(views, batch.input_ids)
    net = stacked_network(models[0])  # a hand-written recurrence, vmapped as a single model
    net.recurrence = "autograd"  # (an autograd.Function would need a vmap rule of its own)

    def one(w, ids, pos, slot):
        w1 = {k: v.unsqueeze(0) for k, v in w.items()}
        return net(w1, ids.unsqueeze(0), pos.unsqueeze(0), slot.unsqueeze(0), True).squeeze(0)

    return vmap(one, randomness="different")(
        layout.views(params), batch.input_ids, batch.position, batch.slot
    )


METHODS = ("sequential", "vmap", "bmm-padded", "packed-autograd", "bmm-packed")


def method_rates(arch, m, dms, models, device, steps, methods):
    from cfl_lightning.ensemble import (
        PackedCorpora, ParameterLayout, StackedAdam, clip_rows_, stacked_network,
    )
    from cfl_lightning.losses import kl_per_position

    dms, models = dms[:m], models[:m]
    layout = ParameterLayout.of(models[0])
    packed = PackedCorpora(
        [d.tokenized("train") for d in dms], [d.batches("train") for d in dms],
        [d.pfsa.next_symbol_probs() for d in dms], dms[0].pad_id, device=device,
    )
    rng = np.random.default_rng(0)
    plan = [[int(rng.integers(packed.num_batches[i])) for i in range(m)] for _ in range(steps + 2)]
    rates: dict[str, float] = {}

    def stacked_step(method):
        net = stacked_network(models[0])
        if method == "packed-autograd":
            if arch != "lstm":
                return float("nan")
            net.recurrence = "autograd"
        params = layout.stack(models).to(device).requires_grad_(True)
        adam = StackedAdam(params.detach(), torch.full((m,), 0.01, dtype=torch.float64))
        out = []
        for k, local in enumerate(plan):
            if method in ("bmm-packed", "packed-autograd"):
                batch = packed.step(np.array([packed.first_batch[i] + b for i, b in enumerate(local)]))
            else:
                batch = padded_batch(dms, local, device)
            sync(device)
            start = time.perf_counter()
            if method == "vmap":
                lp = vmapped_forward(arch, models, layout, params, batch)
            else:
                lp = net(layout.views(params), batch.input_ids, batch.position, batch.slot, True)
            mm, r, length = batch.input_ids.shape
            kl = kl_per_position(
                batch.target_probs.view(mm * r, length, -1).to(lp.dtype),
                lp.reshape(mm * r, length, -1), batch.mask.view(mm * r, length),
            ).view(mm, -1).sum(1)
            (kl / batch.strings.clamp_min(1)).sum().backward()
            clip_rows_(params.grad, 5.0)
            adam.step(params.grad)
            params.grad = None
            sync(device)
            if k >= 2:
                out.append(int(batch.mask.sum()) / (time.perf_counter() - start))
        return statistics.median(out)

    def sequential_step():
        out = []
        net_models = [mod.to(device).train() for mod in models]
        opts = [torch.optim.Adam(mod.parameters(), lr=0.01) for mod in net_models]
        from cfl_lightning.data.batching import collate
        from cfl_lightning.losses import kl_to_automaton_loss

        for k, local in enumerate(plan):
            batches = [
                {key: v.to(device) for key, v in collate(
                    d.tokenized("train"), d.batches("train")[b],
                    d.pfsa.next_symbol_probs().float(), d.pad_id).items()}
                for d, b in zip(dms, local)
            ]
            sync(device)
            start = time.perf_counter()
            for mod, opt, batch in zip(net_models, opts, batches):
                opt.zero_grad(set_to_none=True)
                loss = kl_to_automaton_loss(mod(batch["input_ids"]), batch)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(mod.parameters(), 5.0)
                opt.step()
            sync(device)
            if k >= 2:
                tokens = sum(int(b["mask"].sum()) for b in batches)
                out.append(tokens / (time.perf_counter() - start))
        for mod in net_models:
            mod.cpu()
        return statistics.median(out)

    rates = {name: float("nan") for name in METHODS}
    if "sequential" in methods:
        rates["sequential"] = sequential_step()
    for method in [x for x in methods if x != "sequential"]:
        if method in ("vmap", "bmm-padded") and m > 32:
            continue  # padded [M, B_max, T_max] activations: gigabytes, and far slower anyway
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rates[method] = stacked_step(method)
        except RuntimeError as err:  # e.g. vmap over aten::lstm
            rates[method] = float("nan")
            print(f"  ({arch} M={m} {method}: {str(err).splitlines()[0][:90]})", flush=True)
    return rates


# ---------------------------------------------------------------------------- 2. fit


def quiet_lightning() -> None:
    """Lightning configures its loggers when imported: silence them afterwards."""
    import lightning  # noqa: F401

    for name in list(logging.root.manager.loggerDict):
        if name.startswith("lightning"):
            logging.getLogger(name).setLevel(logging.ERROR)


def sequential_fit(arch, cache, device, max_epochs, smoke):
    import lightning

    quiet_lightning()
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    model, dm = build(arch, 0, cache, smoke)
    with tempfile.TemporaryDirectory() as ckpt:
        trainer = lightning.Trainer(
            max_epochs=max_epochs, gradient_clip_val=5.0, logger=False, enable_progress_bar=False,
            enable_model_summary=False, accelerator="gpu" if device.type == "cuda" else "cpu",
            devices=1, num_sanity_val_steps=2,
            callbacks=[EarlyStopping("val/kl_per_string", patience=10),
                       ModelCheckpoint(dirpath=ckpt, monitor="val/kl_per_string", save_top_k=1)],
        )
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(model, datamodule=dm)
            trainer.test(model, datamodule=dm, ckpt_path="best", verbose=False)
        wall = time.perf_counter() - start
    tokens = trainer.current_epoch * int(dm.tokenized("train").positions.sum())
    return {"wall": wall, "tokens": tokens, "runs": 1, "epochs": trainer.current_epoch}


def ensemble_fit(arch, m, cache, device, max_epochs, smoke, variant):
    from cfl_lightning.ensemble import EnsembleTrainer, TrainSettings
    from cfl_lightning.ensemble.evaluate import test_members

    start = time.perf_counter()
    members = [build(arch, i, cache, smoke) for i in range(m)]
    built = time.perf_counter() - start
    models, dms = zip(*members)
    options = {"compile": dict(recurrence="compiled"), "lockstep": dict(pacing="lockstep")}
    trainer = EnsembleTrainer(
        list(models), list(dms), TrainSettings(max_epochs=max_epochs), device=device,
        **options.get(variant, {}),
    )
    start = time.perf_counter()
    outcomes = trainer.fit()
    test_members(trainer, outcomes)
    sync(device)
    wall = time.perf_counter() - start
    tokens = sum(o.epochs * int(dm.tokenized("train").positions.sum()) for o, dm in zip(outcomes, dms))
    return {
        "wall": wall + built, "build": built, "tokens": tokens, "runs": m,
        "epochs": statistics.mean(o.epochs for o in outcomes),
    }


# ---------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks that it runs")
    parser.add_argument("--members", default=None, help="ensemble sizes (default 1,8,32,128)")
    parser.add_argument("--method-members", default=None, help="sizes of the methods table")
    parser.add_argument("--max-epochs", type=int, default=None, help="(default 40, smoke 2)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per method")
    parser.add_argument("--archs", default="lstm,transformer")
    parser.add_argument(
        "--compile", action="store_true", help="CUDA: also fit the LSTM with a compiled cell"
    )
    parser.add_argument("--methods", default=",".join(METHODS), help="columns of table 1")
    parser.add_argument("--skip-methods", action="store_true")
    parser.add_argument(
        "--time-limit", type=float, default=None,
        help="start no new measurement after this many seconds (prints what it has)",
    )
    parser.add_argument("--skip-fit", action="store_true")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    smoke = args.smoke
    members = [int(x) for x in (args.members or ("1,4" if smoke else "1,8,32,128")).split(",")]
    method_members = [
        int(x) for x in (args.method_members or ("1,4" if smoke else "1,8,32,128")).split(",")
    ]
    max_epochs = args.max_epochs or (2 if smoke else 40)
    steps = args.steps or (3 if smoke else 20)
    archs = args.archs.split(",")
    methods = args.methods.split(",")
    started = time.perf_counter()

    def out_of_time(what: str) -> bool:
        if args.time_limit is None or time.perf_counter() - started < args.time_limit:
            return False
        print(f"  (time limit {args.time_limit:.0f} s reached: skipping {what})", flush=True)
        return True

    name = torch.cuda.get_device_name(0) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} thread(s)"
    print(f"device: {name}; torch {torch.__version__}; smoke={smoke}", flush=True)
    with tempfile.TemporaryDirectory(prefix="cfl_bench_ens_") as tmp:
        cache = str(Path(tmp) / "cache")
        if not args.skip_fit:
            # every corpus sampled once, untimed: all arms then read theirs from the cache
            for arch in archs[:1]:
                for i in range(max(members)):
                    dm = build(arch, i, cache, smoke)[1]
                    dm.prepare_data()
            print(f"\n1. whole runs (max_epochs {max_epochs}, early stopping 10), corpora cached")
            print(f"{'model':<12} {'arm':<16} {'runs':>5} {'epochs':>6} {'wall s':>8} "
                  f"{'tokens/s':>11} {'runs/h':>9} {'x seq':>7}", flush=True)
            best: dict[str, float] = {}
            base: dict[str, float] = {}
            top = max(members)
            # most important rows first (--time-limit): the baselines, the ensembles from the
            # largest down, then (CUDA) the recurrence and pacing variants of the largest
            plan = [(arch, 0, "sequential") for arch in archs]
            plan += [(arch, m, "") for m in sorted(members, reverse=True) for arch in archs]
            if device.type == "cuda":
                if args.compile and "lstm" in archs:
                    plan.append(("lstm", top, "compile"))
                plan += [(arch, top, "lockstep") for arch in archs]
            for arch, m, variant in plan:
                if out_of_time(f"{arch} {variant or 'ensemble'} {m or ''}"):
                    continue
                label = "sequential" if variant == "sequential" else (
                    f"ensemble {m}" + (f" {variant}" if variant else "")
                )
                try:
                    if variant == "sequential":
                        r = sequential_fit(arch, cache, device, max_epochs, smoke)
                        base[arch] = r["tokens"] / r["wall"]
                    else:
                        r = ensemble_fit(arch, m, cache, device, max_epochs, smoke, variant)
                except Exception as err:  # noqa: BLE001 - report the row, measure the others
                    print(f"{arch:<12} {label:<16} failed: {type(err).__name__}: "
                          f"{str(err).splitlines()[0][:120] if str(err) else ''}", flush=True)
                    continue
                if variant in ("", "compile"):  # runs/h of 40-epoch runs (conservative)
                    scale = max(PAPER_EPOCHS / max(r["epochs"], 1e-9), 1.0)
                    rph40 = 3600 * r["runs"] / (r["wall"] * scale)
                    best[arch] = max(best.get(arch, 0.0), rph40)
                rate = r["tokens"] / r["wall"]
                ratio = rate / base[arch] if arch in base else float("nan")
                print(f"{arch:<12} {label:<16} {r['runs']:>5} {r['epochs']:>6.1f} "
                      f"{r['wall']:>8.1f} {rate:>11,.0f} {3600 * r['runs'] / r['wall']:>9.0f} "
                      f"{ratio:>6.1f}x", flush=True)
            if set(best) == {"lstm", "transformer"}:
                hours = (GRID_RUNS / 2) / best["lstm"] + (GRID_RUNS / 2) / best["transformer"]
                print(f"\n2. case study (i) at paper scale: {GRID_RUNS:,} runs (half LSTM, half "
                      f"transformer) of {PAPER_EPOCHS} epochs at {best['lstm']:,.0f} and "
                      f"{best['transformer']:,.0f} runs/h (the best ensemble's, its whole wall "
                      f"time scaled to {PAPER_EPOCHS} epochs): {hours:.2f} h on this device"
                      + (" (smoke sizes: not an estimate)" if smoke else ""))
        if not args.skip_methods:
            print(f"\n3. one training step, M members, median real tokens/s over {steps} steps")
            print(f"{'model':<12} {'M':>4} " + " ".join(f"{x:>15}" for x in METHODS)
                  + f" {'packed/seq':>10}", flush=True)
            for arch in archs:
                top = max(method_members)
                pool = [build(arch, i, cache, smoke) for i in range(top)]
                models, dms = [p[0] for p in pool], [p[1] for p in pool]
                for dm in dms:
                    dm.setup("fit")
                for m in method_members:
                    if out_of_time(f"{arch} M={m}"):
                        continue
                    r = method_rates(arch, m, dms, models, device, steps, methods)
                    print(f"{arch:<12} {m:>4} " + " ".join(f"{r[x]:>15,.0f}" for x in METHODS)
                          + f" {r['bmm-packed'] / r['sequential']:>9.1f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
