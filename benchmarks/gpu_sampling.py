"""GPU sampler table: exact vs unconstrained at K = 1,000,000, stages, launches, data setup.

Prints (medians after a warm-up, every ratio against a baseline run in the same process):

1. exact-count vs unconstrained corpora at K = 1,000,000 (N = 3x natural, state ``q9``) on the
   50x10 random automata ``0/0`` and ``5/5`` (held out), with the exact total checked;
2. the exact sampler's stages at that size: streamed count law, count split on the device (and
   on the CPU for comparison), walk bins, lifted table, the walk, and the old route (backward
   bins 0..N for every state, blocks of 256 as before and of 4096 now);
3. kernel launches of one exact corpus (CUDA kernels by the profiler; on a CPU, dispatched
   operators);
4. ``PFADataModule.setup("fit")`` at K = 100,000 with ``device="cuda"`` vs ``device="cpu"``.

Usage (run from the repository root)::

    PYTHONPATH=$PWD python benchmarks/gpu_sampling.py --device cuda
    PYTHONPATH=$PWD python benchmarks/gpu_sampling.py --device cpu --smoke   # quick check
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_sampling import automaton, paired_medians  # noqa: E402

from cfl_lightning.sampling import sample_corpus  # noqa: E402
from cfl_lightning.sampling.counts import split_exact  # noqa: E402
from cfl_lightning.sampling.law import CountSource, law_for_total  # noqa: E402
from cfl_lightning.sampling.paths import lifted_chain, sample_paths  # noqa: E402
from cfl_lightning.semiring import backward_fast  # noqa: E402


def corpora(specs: list[str], k: int, repeats: int, device: str) -> None:
    print("| automaton | K | N | unconstrained (s) | exact (s) | ratio | total exact |")
    print("|---|---|---|---|---|---|---|")
    for spec in specs:
        pfsa, event, mu = automaton(spec)
        n = round(3 * mu * k)
        (t_u, t_c), (_, exact) = paired_medians(
            [
                lambda: sample_corpus(pfsa, k, seed=0, device=device),
                lambda: sample_corpus(
                    pfsa, k, seed=0, intervention="exact", event=event, count=n, device=device
                ),
            ],
            repeats,
            device,
        )
        ok = exact.total_count == n
        print(f"| {spec} | {k:,} | {n:,} | {t_u:.4f} | {t_c:.4f} | {t_c / t_u:.2f}x "
              f"| {'yes' if ok else 'NO'} |")


def stages(spec: str, k: int, repeats: int, device: str) -> None:
    pfsa, event, mu = automaton(spec)
    pfsa = pfsa.to(device)
    fn = event.function(pfsa)
    n = round(3 * mu * k)
    source = CountSource(pfsa, fn)
    law = law_for_total(pfsa, fn, k, n, source)
    gen = torch.Generator(device=device).manual_seed(0)
    cpu_gen = torch.Generator().manual_seed(0)
    budgets = split_exact(law, k, n, gen)
    top = int(budgets.max())
    bins = source.bins(top + 1)
    paths_gen = torch.Generator(device=device).manual_seed(1)
    names = ["count law (streamed)", "count split on the device", "count split on the CPU",
             "walk bins 0..max budget", "lifted table", "conditioned walk",
             "unconstrained walk (baseline)"]
    times, _ = paired_medians(
        [
            lambda: law_for_total(pfsa, fn, k, n, CountSource(pfsa, fn)),
            lambda: split_exact(law, k, n, gen),
            lambda: split_exact(law, k, n, cpu_gen),
            lambda: source.bins(top + 1),
            lambda: lifted_chain(pfsa, fn, bins),
            lambda: sample_paths(pfsa, k, paths_gen, event_fn=fn, budgets=budgets, bins=bins),
            lambda: sample_paths(pfsa, k, paths_gen),
        ],
        repeats,
        device,
    )
    print(f"Stages on {spec}, K = {k:,}, N = {n:,} (law length {law.log_pmf.numel():,}, "
          f"largest budget {top})\n")
    print("| stage | median (s) |")
    print("|---|---|")
    for name, t in zip(names, times):
        print(f"| {name} | {t:.4f} |")
    old, _ = paired_medians(
        [lambda: backward_fast(pfsa, fn, n + 1, block=256),
         lambda: backward_fast(pfsa, fn, n + 1, block=4096)],
        max(1, min(repeats, 3)),
        device,
    )
    blocks = (-(-n // 256), 12 + -(-n // 4096))
    print(f"| old route: bins 0..N for every state, blocks of 256 ({blocks[0]:,} products) "
          f"| {old[0]:.4f} |")
    print(f"| same, blocks of 4096 ({blocks[1]:,} products) | {old[1]:.4f} |")


def launches(spec: str, k: int, device: str) -> None:
    pfsa, event, mu = automaton(spec)
    n = round(3 * mu * k)
    run = lambda: sample_corpus(  # noqa: E731
        pfsa, k, seed=0, intervention="exact", event=event, count=n, device=device
    )
    run()
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.device(device).type == "cuda"
    activity = ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        run()
        if cuda:
            torch.cuda.synchronize()
    if cuda:
        count = sum(1 for e in prof.events() if e.device_type.name == "CUDA")
        what = "CUDA kernels and copies"
    else:
        count = sum(
            1 for e in prof.events() if e.name.startswith("aten::") and e.cpu_parent is None
        )
        what = "top-level dispatched operators (each one launch or more on a GPU)"
    print(f"One exact corpus on {spec} (K = {k:,}, N = {n:,}): {count:,} {what}")


def datamodule(k: int, repeats: int, device: str) -> None:
    from cfl_lightning.data import PFADataModule

    pfsa, event, mu = automaton("0/0")
    n = round(3 * mu * k)

    def setup(where: str):
        def go():
            dm = PFADataModule(
                generator="random", num_states=50, num_symbols=10, topology_seed=0,
                weight_seed=0, intervention="exact", event=str(event), count=n,
                num_strings=k, val_strings=2_000, test_strings=0, max_tokens=4096,
                cache_dir="none", device=where,
            )
            dm.setup("fit")
            return dm

        return go

    wheres = [device, "cpu"] if torch.device(device).type != "cpu" else ["cpu"]
    times, outs = paired_medians([setup(w) for w in wheres], repeats, device)
    print(f"PFADataModule.setup('fit'), exact on 0/0, K = {k:,}, N = {n:,} (+2,000 val)\n")
    print("| device | median (s) | realized count |")
    print("|---|---|---|")
    for where, t, dm in zip(wheres, times, outs):
        print(f"| {where} | {t:.4f} | {dm.realized_count:,} |")
    if len(times) == 2:
        print(f"\n{wheres[0]} / cpu: {times[0] / times[1]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check the script runs")
    args = parser.parse_args()
    device = args.device
    if torch.device(device).type == "cuda":
        name = torch.cuda.get_device_name()
        torch.backends.cuda.matmul.allow_tf32 = False
    else:
        name = "cpu"
    big, setup_k = (20_000, 5_000) if args.smoke else (1_000_000, 100_000)
    repeats = 2 if args.smoke else args.repeats
    print(f"device {device} ({name}); torch {torch.__version__}; {torch.get_num_threads()} CPU "
          f"threads; medians of {repeats} after a warm-up\n")
    corpora(["0/0", "5/5"], big, repeats, device)
    print()
    stages("0/0", big, repeats, device)
    print()
    try:
        launches("0/0", big, device)
    except Exception as error:  # the profiler is a diagnostic: never lose the other tables
        print(f"launch count unavailable: {type(error).__name__}: {error}")
    print()
    datamodule(setup_k, repeats, device)


if __name__ == "__main__":
    main()
