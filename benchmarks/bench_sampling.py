"""Sampler benchmark: constrained vs unconstrained, preprocessing, rejection baseline.

Setting (issue 2): the 50-state, 10-symbol random automaton (topology seed 0, weight seed 0),
an exact-count intervention on one state (``q9``, ~0.57 natural occurrences per string) with
N = 3x its natural expected count. Prints markdown tables of medians and ratios, every ratio
against a baseline measured in the same run.

Usage::

    python benchmarks/bench_sampling.py [--repeats 5] [--device cpu] [--skip-rejection]
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

import torch

from cfl_lightning.automata import Event, random_pfsa
from cfl_lightning.sampling import sample_corpus
from cfl_lightning.sampling.counts import CountLaw, split_exact
from cfl_lightning.semiring import backward_fast

STATE = "q9"


def median_time(fn, repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def whole_process(args: list[str], repeats: int) -> float:
    def run() -> None:
        subprocess.run(
            [sys.executable, "-m", "cfl_lightning", "sample", *args],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    return median_time(run, repeats, warmup=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--skip-rejection", action="store_true")
    args = parser.parse_args()
    pfsa = random_pfsa(50, 10, topology_seed=0, weight_seed=0)
    event = Event.parse(f"state:{STATE}")
    fn = event.function(pfsa)
    mu = event.expected_count(pfsa)
    print(f"automaton: random 50 states x 10 symbols (seeds 0/0); event {event}; "
          f"natural count {mu:.4f}/string; device {args.device}; torch threads "
          f"{torch.get_num_threads()}; medians of {args.repeats}\n")

    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "a.json")
    pfsa.to_json(path)
    out = os.path.join(tmp, "out.jsonl")

    print("| K | N | unconstrained in-proc (s) | exact in-proc (s) | ratio "
          "| unconstrained process (s) | exact process (s) | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for k in (2_000, 100_000):
        n = round(3 * mu * k)
        t_u = median_time(lambda: sample_corpus(pfsa, k, seed=0, device=args.device), args.repeats)
        t_c = median_time(
            lambda: sample_corpus(
                pfsa, k, seed=0, intervention="exact", event=event, count=n, device=args.device
            ),
            args.repeats,
        )
        base = ["--automaton", path, "--num-strings", str(k), "--seed", "0", "--output", out,
                "--device", args.device]
        p_u = whole_process(base, args.repeats)
        p_c = whole_process(
            base + ["--intervention", "exact", "--event", str(event), "--count", str(n)],
            args.repeats,
        )
        with open(out) as handle:
            total = sum(json.loads(line)["count"] for line in handle)
        assert total == n, (total, n)
        print(f"| {k:,} | {n:,} | {t_u:.3f} | {t_c:.3f} | {t_c / t_u:.2f}x "
              f"| {p_u:.2f} | {p_c:.2f} | {p_c / p_u:.2f}x |")

    print("\nPreprocessing (backward bins 0..N by the fast route; per-string count split for "
          "K = N / (3 x natural))\n")
    print("| N | backward bins (s) | count split (s) | K |")
    print("|---|---|---|---|")
    gen = torch.Generator().manual_seed(0)
    for n in (1_000, 10_000, 100_000):
        t_b = median_time(lambda: backward_fast(pfsa, fn, n + 1), args.repeats)
        law = CountLaw(backward_fast(pfsa, fn, n + 1).log_column(pfsa.initial))
        k = max(1, round(n / (3 * mu)))
        t_s = median_time(lambda: split_exact(law, k, n, gen), args.repeats)
        print(f"| {n:,} | {t_b:.3f} | {t_s:.3f} | {k:,} |")

    print("\nExtreme targets (K = 2,000): exact totals, no NaN/inf\n")
    print("| N | time (s) | total | finite |")
    print("|---|---|---|---|")
    for n in (0, round(20 * mu * 2000)):
        start = time.perf_counter()
        corpus = sample_corpus(
            pfsa, 2000, seed=0, intervention="exact", event=event, count=n, device=args.device
        )
        elapsed = time.perf_counter() - start
        bins = backward_fast(pfsa, fn, max(n, 1) + 1)
        finite = bool(torch.isfinite(bins.values).all()) and not bool(
            torch.isnan(bins.log_scale).any()
        )
        print(f"| {n:,} | {elapsed:.3f} | {corpus.total_count:,} | {finite} |")

    if args.skip_rejection:
        return
    k = 2_000
    law = CountLaw(backward_fast(pfsa, fn, 200).log_column(pfsa.initial))
    probs = law.log_pmf.exp()
    j = torch.arange(probs.numel(), dtype=torch.float64)
    var = float((probs * j**2).sum() - (probs * j).sum() ** 2)
    n = round(mu * k + 2 * math.sqrt(k * var))
    print(f"\nRejection baseline at 2 standard deviations (K = {k:,}, N = {n:,}; natural mean "
          f"{mu * k:.0f}, sd {math.sqrt(k * var):.1f})\n")
    print("| method | median time (s) | ratio |")
    print("|---|---|---|")
    reps = max(1, min(args.repeats, 3))
    seeds = iter(range(1000))
    t_b = median_time(
        lambda: sample_corpus(pfsa, k, seed=next(seeds), intervention="exact", event=event,
                              count=n, device=args.device),
        reps,
        warmup=0,
    )
    t_r = median_time(
        lambda: sample_corpus(pfsa, k, seed=next(seeds), intervention="exact", event=event,
                              count=n, method="rejection", max_tries=100_000, device=args.device),
        reps,
        warmup=0,
    )
    print(f"| binning | {t_b:.3f} | 1.00x |")
    print(f"| rejection | {t_r:.3f} | {t_r / t_b:.1f}x |")


if __name__ == "__main__":
    main()
