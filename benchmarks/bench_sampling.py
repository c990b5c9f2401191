"""Sampler benchmark: exact-count vs unconstrained corpora in one process, and preprocessing.

Setting: 50-state, 10-symbol random automata (``--automata``: topology/weight seeds; the default
``0/0`` is the one the engine was tuned on, ``5/5`` a held-out one), an exact-count intervention
on state ``q9`` with N = 3x its natural expected count. Every ratio is against a baseline
measured in the same process, the two interleaved repeat by repeat; medians; the exact total is
checked. One torch thread unless ``--threads`` says otherwise.

Usage::

    python benchmarks/bench_sampling.py [--repeats 7] [--device cpu|cuda] [--automata 0/0,5/5]
        [--process] [--skip-rejection] [--smoke] [--corpora-only]

``--process`` adds whole-process times (``python -m cfl_lightning sample``); ``--smoke`` shrinks
every size (a quick check that the script runs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import torch

from cfl_lightning.automata import Event, random_pfsa
from cfl_lightning.sampling import sample_corpus

STATE = "q9"


def sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], device: str) -> tuple[float, object]:
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - start, out


def paired_medians(
    fns: list[Callable[[], object]], repeats: int, device: str, warmup: int = 1
) -> tuple[list[float], list[object]]:
    """Medians of several functions run in turn, repeat by repeat (same load for each)."""
    outs: list[object] = [None] * len(fns)
    for _ in range(warmup):
        for i, fn in enumerate(fns):
            outs[i] = fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            elapsed, outs[i] = timed(fn, device)
            times[i].append(elapsed)
    return [statistics.median(t) for t in times], outs


def automaton(spec: str):
    topology, weights = (int(x) for x in spec.split("/"))
    pfsa = random_pfsa(50, 10, topology_seed=topology, weight_seed=weights)
    event = Event.parse(f"state:{STATE}")
    return pfsa, event, event.expected_count(pfsa)


def corpus_table(specs: list[str], sizes: list[int], repeats: int, device: str) -> None:
    """Exact vs unconstrained corpora in process (the issue's headline measure)."""
    print("| automaton | K | N | unconstrained (s) | exact (s) | ratio | tokens exact/unc. "
          "| total exact |")
    print("|---|---|---|---|---|---|---|---|")
    for spec in specs:
        pfsa, event, mu = automaton(spec)
        for k in sizes:
            n = round(3 * mu * k)
            (t_u, t_c), (free, exact) = paired_medians(
                [
                    lambda: sample_corpus(pfsa, k, seed=0, device=device),
                    lambda: sample_corpus(
                        pfsa, k, seed=0, intervention="exact", event=event, count=n, device=device
                    ),
                ],
                repeats,
                device,
            )
            ok = exact.total_count == n and len(exact) == k
            tokens = exact.tokens.numel() / max(free.tokens.numel(), 1)
            print(f"| {spec} | {k:,} | {n:,} | {t_u:.4f} | {t_c:.4f} | {t_c / t_u:.2f}x "
                  f"| {tokens:.2f}x | {'yes' if ok else 'NO'} |")
            if not ok:
                raise SystemExit(f"exact total missed: {exact.total_count} != {n}")


def breakdown_table(spec: str, sizes: list[int], repeats: int, device: str) -> None:
    """Where the exact sampler's time goes (each stage alone, medians)."""
    from cfl_lightning.sampling.counts import split_exact
    from cfl_lightning.sampling.law import CountSource, law_for_total
    from cfl_lightning.sampling.paths import lifted_chain
    from cfl_lightning.semiring import backward_fast

    pfsa, event, mu = automaton(spec)
    pfsa = pfsa.to(device)
    fn = event.function(pfsa)
    print("| K | N | law (s) | law length | split (s) | max budget | walk bins (s) "
          "| lifted table (s) | old route: bins 0..N (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k in sizes:
        n = round(3 * mu * k)
        source = CountSource(pfsa, fn)
        gen = torch.Generator(device=device).manual_seed(0)
        law = law_for_total(pfsa, fn, k, n, source)
        budgets = split_exact(law, k, n, gen)
        top = int(budgets.max())
        bins = source.bins(top + 1)
        (t_law, t_split, t_bins, t_chain, t_old), _ = paired_medians(
            [
                lambda: law_for_total(pfsa, fn, k, n, CountSource(pfsa, fn)),
                lambda: split_exact(law, k, n, gen),
                lambda: source.bins(top + 1),
                lambda: lifted_chain(pfsa, fn, bins),
                lambda: backward_fast(pfsa, fn, n + 1),
            ],
            repeats,
            device,
        )
        print(f"| {k:,} | {n:,} | {t_law:.4f} | {law.log_pmf.numel():,} | {t_split:.4f} | {top} "
              f"| {t_bins:.4f} | {t_chain:.4f} | {t_old:.3f} |")


def extreme_table(spec: str, k: int, device: str) -> None:
    pfsa, event, mu = automaton(spec)
    print("| K | N | x natural | time (s) | total | exact |")
    print("|---|---|---|---|---|---|")
    for factor in (0, 20, 100):
        n = round(factor * mu * k)
        elapsed, corpus = timed(
            lambda: sample_corpus(
                pfsa, k, seed=0, intervention="exact", event=event, count=n, device=device
            ),
            device,
        )
        print(f"| {k:,} | {n:,} | {factor} | {elapsed:.3f} | {corpus.total_count:,} "
              f"| {corpus.total_count == n} |")


def process_table(spec: str, sizes: list[int], repeats: int, device: str) -> None:
    pfsa, event, mu = automaton(spec)
    tmp = tempfile.mkdtemp()
    path, out = os.path.join(tmp, "a.json"), os.path.join(tmp, "out.jsonl")
    pfsa.to_json(path)

    def run(extra: list[str]) -> Callable[[], None]:
        return lambda: subprocess.run(
            [sys.executable, "-m", "cfl_lightning", "sample", "--automaton", path,
             "--num-strings", str(k), "--seed", "0", "--output", out, "--device", device, *extra],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    print("| K | N | unconstrained process (s) | exact process (s) | ratio |")
    print("|---|---|---|---|---|")
    for k in sizes:
        n = round(3 * mu * k)
        exact = ["--intervention", "exact", "--event", str(event), "--count", str(n)]
        (p_u, p_c), _ = paired_medians([run([]), run(exact)], repeats, device, warmup=0)
        with open(out) as handle:
            total = sum(json.loads(line)["count"] for line in handle)
        assert total == n, (total, n)
        print(f"| {k:,} | {n:,} | {p_u:.2f} | {p_c:.2f} | {p_c / p_u:.2f}x |")


def rejection_table(spec: str, repeats: int, device: str) -> None:
    from cfl_lightning.sampling.law import law_for_total

    pfsa, event, mu = automaton(spec)
    k = 2_000
    law = law_for_total(pfsa, event.function(pfsa), 1, 199)
    probs = law.log_pmf.exp()
    j = torch.arange(probs.numel(), dtype=torch.float64)
    sd = math.sqrt(k * float((probs * j**2).sum() - (probs * j).sum() ** 2))
    n = round(mu * k + 2 * sd)
    print(f"Rejection baseline at 2 standard deviations (K = {k:,}, N = {n:,}; natural mean "
          f"{mu * k:.0f}, sd {sd:.1f})\n")
    seeds = iter(range(10_000))
    kw = dict(intervention="exact", event=event, count=n, device=device)
    (t_b, t_r), _ = paired_medians(
        [
            lambda: sample_corpus(pfsa, k, seed=next(seeds), **kw),
            lambda: sample_corpus(pfsa, k, seed=next(seeds), method="rejection",
                                  max_tries=100_000, **kw),
        ],
        max(1, min(repeats, 3)),
        device,
        warmup=0,
    )
    print("| method | median time (s) | ratio |")
    print("|---|---|---|")
    print(f"| binning | {t_b:.3f} | 1.00x |")
    print(f"| rejection | {t_r:.3f} | {t_r / t_b:.1f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--automata", default="0/0,5/5", help="topology/weight seeds, a,b,...")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--process", action="store_true", help="add whole-process times")
    parser.add_argument("--skip-rejection", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check the script runs")
    parser.add_argument("--corpora-only", action="store_true",
                        help="only the first table (runs against older versions of the package)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    specs = args.automata.split(",")
    sizes = [200, 2_000] if args.smoke else [2_000, 100_000]
    repeats = 2 if args.smoke else args.repeats
    name = torch.cuda.get_device_name() if torch.device(args.device).type == "cuda" else "cpu"
    print(f"automata: random 50 states x 10 symbols, seeds {', '.join(specs)} (last: held out); "
          f"event state:{STATE}, N = 3x natural; device {args.device} ({name}); torch "
          f"{torch.__version__}, {torch.get_num_threads()} thread(s); medians of {repeats}\n")
    corpus_table(specs, sizes, repeats, args.device)
    if args.corpora_only:
        return
    for spec in specs:
        print(f"\nExact sampler stages on {spec} (each alone)\n")
        breakdown_table(spec, sizes, repeats, args.device)
    print(f"\nExtreme targets on {specs[-1]}: exact totals\n")
    extreme_table(specs[-1], sizes[0], args.device)
    if args.process:
        print(f"\nWhole process on {specs[-1]}\n")
        process_table(specs[-1], sizes, repeats, args.device)
    if not args.skip_rejection:
        print()
        rejection_table(specs[-1], repeats, args.device)


if __name__ == "__main__":
    main()
