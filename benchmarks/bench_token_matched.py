"""Token-matched sampling (``--tokens``) against the plain exact sampler, in one process.

Setting: 50-state, 10-symbol random automata (``--automata``, topology/weight seeds; ``0/0`` as
in ``bench_sampling.py``, ``5/5`` held out), an exact count of symbol ``a`` at 0.5x, 1x and 2x its
natural count in 100,000 strings, and the target ``T`` = the natural total of 100,000 strings
(``K x E[length]``). The token-matched sampler chooses ``K`` (a pilot, then whole corpora until
one lies within 1% of ``T``); the baseline is the plain exact sampler
(:func:`~cfl_lightning.sampling.sample_corpus`) at that same ``K`` and ``N``. The two run in
turn, seed by seed (seeds ``0 .. repeats-1``, the same for both), after one warm-up each;
medians; ``tries`` is the corpora drawn per seed (median and most). Target: at most 3x.

Dyck rows (``--dyck``): Dyck-2 with a neutral symbol (weight seed ``S``, neutral probability 0.2,
as in the pushdown study version 2), ``N`` pops of ``(`` in ``T`` symbols, where the corpus total
is U-shaped in ``K``: 520 at T = 6,300 (near the bottom of the totals 1,000 pops reach) and 880
at T = 11,000 (above the bottom: a K on each side).

Usage::

    python benchmarks/bench_token_matched.py [--repeats 5] [--strings 100000]
        [--automata 0/0,5/5] [--dyck 520:1000:6300,880:1000:11000] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from cfl_lightning.automata import Event, random_pfsa
from cfl_lightning.errors import CflError
from cfl_lightning.sampling import sample_corpus
from cfl_lightning.sampling.token_matched import sample_token_matched, token_window

EVENT = "symbol:a"
FACTORS = (0.5, 1.0, 2.0)


def row(spec: str, factor: float, strings: int, repeats: int) -> str:
    """A random PFSA's row: ``factor`` x the natural count in the natural total."""
    topology, weights = (int(x) for x in spec.split("/"))
    pfsa = random_pfsa(50, 10, topology_seed=topology, weight_seed=weights)
    tokens = round(strings * pfsa.expected_length())
    n = round(factor * strings * Event.parse(EVENT).expected_count(pfsa))
    return measure(f"{spec} | {factor:g}x", pfsa, EVENT, n, tokens, repeats)


def dyck_row(spec: str, repeats: int) -> str:
    """A Dyck row, ``S:N:T``: ``N`` pops of ``(`` in ``T`` symbols of weight seed ``S``."""
    from cfl_lightning.automata import dyck_pda

    seed, n, tokens = (int(x) for x in spec.split(":"))
    pda = dyck_pda(k=2, seed=seed, neutral_prob=0.2)
    return measure(f"Dyck {seed} | pop:(", pda, "pop:(", n, tokens, repeats)


def measure(label: str, automaton, event: str, n: int, tokens: int, repeats: int) -> str:
    """Token-matched against plain exact at the chosen K, seed by seed; one table row."""
    lo, hi = token_window(tokens)

    def matched(seed: int):
        return sample_token_matched(automaton, tokens, seed=seed, intervention="exact",
                                    event=event, count=n)

    def plain(seed: int, k: int):
        return sample_corpus(automaton, k, seed=seed, intervention="exact", event=event, count=n)

    try:
        first = matched(10_000)  # warm-up
    except CflError as err:  # an unreachable window: refused or bounded, said in one line
        return f"| {label} | {n:,} | {tokens:,} | refused: {err} | | | | |"
    plain(10_000, first.num_strings)
    times_m, times_p, tries, ks = [], [], [], []
    for seed in range(repeats):
        start = time.perf_counter()
        result = matched(seed)
        times_m.append(time.perf_counter() - start)
        assert result.corpus.total_count == n and lo <= result.total <= hi
        start = time.perf_counter()
        corpus = plain(seed, result.num_strings)
        times_p.append(time.perf_counter() - start)
        assert corpus.total_count == n
        tries.append(result.tries)
        ks.append(result.num_strings)
    m, p = statistics.median(times_m), statistics.median(times_p)
    return (f"| {label} | {n:,} | {tokens:,} | {min(ks):,}-{max(ks):,} | "
            f"{statistics.median(tries):g} / {max(tries)} | {p:.3f} | {m:.3f} | {m / p:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--strings", type=int, default=100_000)
    parser.add_argument("--automata", default="0/0,5/5")
    parser.add_argument("--dyck", default="520:1000:6300,880:1000:11000",
                        help="Dyck rows S:N:T, comma-separated ('' for none)")
    parser.add_argument("--smoke", action="store_true", help="2,000 strings, 2 repeats")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    strings, repeats = (2_000, 2) if args.smoke else (args.strings, args.repeats)
    print(f"event {EVENT}; T = natural total of {strings:,} strings; torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s); medians of {repeats} seeds")
    print()
    print("| automaton | N | count | T | K chosen | tries (median / most) | exact at K (s) "
          "| token-matched (s) | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for spec in args.automata.split(","):
        for factor in FACTORS:
            print(row(spec, factor, strings, repeats), flush=True)
    for spec in filter(None, args.dyck.split(",")):
        print(dyck_row(spec, repeats), flush=True)


if __name__ == "__main__":
    main()
