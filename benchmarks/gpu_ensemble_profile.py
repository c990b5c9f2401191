"""Where an ensemble's whole run spends its time, and the CUDA-graph fallback shown on a device.

Two parts, each printed as a table (run on the GPU through ``benchmarks/gpu_check.sh ensemble``):

1. ``--profile``: one :class:`~cfl_lightning.ensemble.EnsembleLanguageModel` of M members
   (default 128 LSTMs, the bench's member configs, corpora cached beforehand) fitted and tested
   by a Lightning ``Trainer`` under cProfile; prints the wall time per phase (build, fit, test)
   and the functions with the largest own and cumulative time. The phases' device work is
   synchronized before each clock read.
2. ``--fallback``: the same ensemble (small) with its captured step made uncapturable on purpose
   (a host read inside the step, which CUDA refuses during a capture). The run must warn once
   (``RuntimeWarning: CUDA graph capture failed ...``), keep training eagerly and end with finite
   losses; prints the warnings seen and the members' final validation values.

Usage::

    PYTHONPATH=$PWD python benchmarks/gpu_ensemble_profile.py --device cuda --profile --fallback
    PYTHONPATH=$PWD python benchmarks/gpu_ensemble_profile.py --smoke --profile   # CPU, seconds
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("WANDB_MODE", "disabled")

import torch  # noqa: E402

import bench_ensemble as bench  # noqa: E402


def _members(arch: str, m: int, cache: str, smoke: bool):
    pairs = [bench.build(arch, i, cache, smoke) for i in range(m)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def profile(arch: str, m: int, epochs: int, device: torch.device, cache: str, smoke: bool,
            top: int, out: Path | None) -> None:
    from cfl_lightning.ensemble import EnsembleLanguageModel, TrainSettings

    clock = {}
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    models, dms = _members(arch, m, cache, smoke)
    module = EnsembleLanguageModel(models, dms, TrainSettings(max_epochs=epochs))
    clock["build members"] = time.perf_counter() - start
    import lightning

    seen = {}

    class Engine(lightning.Callback):  # the engine trained with (teardown moves it to the CPU)
        def on_train_end(self, trainer, pl_module):
            seen["engine"] = pl_module.engine()

    trainer = bench.trainer_for(device, epochs, [Engine()], ensemble=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        trainer.fit(module)
        bench.sync(device)
        clock["fit"] = time.perf_counter() - t
        t = time.perf_counter()
        trainer.test(module, verbose=False)
        bench.sync(device)
        clock["test"] = time.perf_counter() - t
    prof.disable()
    wall = time.perf_counter() - start
    outcomes = module.outcomes()
    tokens = sum(o.epochs * int(dm.tokenized("train").positions.sum())
                 for o, dm in zip(outcomes, dms))
    engine = seen["engine"]
    step = getattr(engine, "step", None)
    print(f"\nprofile: {arch} ensemble {m}, {epochs} epochs on {device}: wall {wall:.1f} s, "
          f"{tokens / wall:,.0f} training tokens/s; engine {type(engine).__name__}, mode "
          f"{getattr(step, 'mode', '-')}, graphs captured {getattr(step, 'captures', '-')}")
    for name, sec in clock.items():
        print(f"  {name:<14} {sec:8.2f} s")
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(top)
        text = buf.getvalue()
        body = text[text.find("   ncalls"):]
        print(f"\n  top {top} by {key}:\n{body}")
    if out is not None:
        prof.dump_stats(str(out / f"profile_{arch}_{m}.pstats"))


def fallback(arch: str, m: int, epochs: int, device: torch.device, cache: str, smoke: bool) -> int:
    from cfl_lightning.ensemble import EnsembleLanguageModel, TrainSettings
    from cfl_lightning.ensemble import step as step_module

    original = step_module.loss_sums
    calls = [0]

    def uncapturable(*args, **kwargs):
        calls[0] += 1
        sums = original(*args, **kwargs)  # [M] per-member loss sums
        float(sums.sum())  # a host read: refused while a CUDA stream is capturing
        return sums

    step_module.loss_sums = uncapturable
    try:
        models, dms = _members(arch, m, cache, smoke)
        module = EnsembleLanguageModel(models, dms, TrainSettings(max_epochs=epochs))
        import lightning

        engines = {}

        class Engine(lightning.Callback):  # the engine trained with (teardown moves it)
            def on_train_end(self, trainer, pl_module):
                engines["engine"] = pl_module.engine()

        trainer = bench.trainer_for(device, epochs, [Engine()], ensemble=True)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            trainer.fit(module)
        step = getattr(engines["engine"], "step", None)
        ours = [w for w in seen if "CUDA graph capture failed" in str(w.message)]
        print(f"\nfallback: {arch} ensemble {m}, {epochs} epochs on {device}: mode now "
              f"{getattr(step, 'mode', '-')}, capture warnings {len(ours)}, "
              f"wrapped loss_sums called {calls[0]} times")
        for w in ours:
            print(f"  {w.category.__name__}: {str(w.message)[:300]}")
        finals = [o.best_val_loss for o in module.outcomes()]
        print(f"  members' best validation KL per string: {[None if x is None else round(float(x), 4) for x in finals]}")
        ok = all(x is not None and torch.isfinite(torch.tensor(float(x))) for x in finals)
        print(f"  trained with finite values after the fallback: {ok}")
        return 0 if ok and (device.type != "cuda" or len(ours) == 1) else 1
    finally:
        step_module.loss_sums = original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--fallback", action="store_true")
    parser.add_argument("--arch", default="lstm")
    parser.add_argument("--members", type=int, default=None, help="(default 128, smoke 4)")
    parser.add_argument("--epochs", type=int, default=None, help="(default 3, smoke 2)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", default=os.environ.get("OUT"))
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    m = args.members or (4 if args.smoke else 128)
    epochs = args.epochs or (2 if args.smoke else 3)
    out = Path(args.out) if args.out else None
    bench.count_custom_op_registrations()
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "CPU"
    print(f"device: {name}; torch {torch.__version__}", flush=True)
    code = 0
    with tempfile.TemporaryDirectory(prefix="cfl_gpu_prof_") as tmp:
        cache = str(Path(tmp) / "cache")
        for i in range(m):
            bench.build(args.arch, i, cache, args.smoke)[1].prepare_data()
        if args.profile:
            profile(args.arch, m, epochs, device, cache, args.smoke, args.top, out)
        if args.fallback:
            code = fallback(args.arch, min(m, 8), 2, device, cache, args.smoke)
    total = sum(bench.REGISTRATIONS.values())
    print(f"\ncustom-op registrations: {total} {bench.REGISTRATIONS.most_common(3)}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
