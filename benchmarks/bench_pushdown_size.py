"""Pushdown cost at the paper's automaton size: ``random_pushdown`` with 10 to 50 states.

For ``Q`` in 10, 20, 30, 50 (10 symbols, 3 stack symbols, seed 0) and event ``symbol:a``, a
500-string corpus at the natural count ``N = round(500 E[count])``, exact, count law included.

(a) In-process phases, CPU seconds (``time.process_time``): the generator (``random_pda``: draws,
    termination, expected visits), loading the JSON (validation and the fixed point), the bound on
    one string's count, the count law (certified window ``L``), the walk tables, generation.
(b) The two commands a user types, each as a child process (imports included), CPU seconds
    user + system from ``resource.getrusage(RUSAGE_CHILDREN)``::

        python -m cfl_lightning automaton random_pushdown --states Q --symbols 10 \\
            --stack-symbols 3 --seed 0 --output pda.json
        python -m cfl_lightning sample --automaton pda.json --num-strings 500 --seed 0 \\
            --intervention exact --event symbol:a --count N --output corpus.jsonl

    Target (issue 50, item 6): both together at most 60 CPU-seconds at ``Q = 50``.

Cost laws (``V = G Q^2 + Q`` excursion variables, ``L`` the law's window): the generator and the
load solve the fixed point by structured Newton, ``O(iterations x G^2 Q^3)`` per draw; the law
costs ``O(L^2 G Q^3)`` for the convolutions plus ``O(L x iterations x G^2 Q^3)`` for the
structured solves, and ``O(L G Q^2)`` memory (refused in one line beyond the memory available).

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python benchmarks/bench_pushdown_size.py \\
        [--states 10 20] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import torch

from cfl_lightning.automata.loading import load_automaton
from cfl_lightning.automata.pushdown_events import parse_event
from cfl_lightning.automata.pushdown_generators import random_pda
from cfl_lightning.sampling.counts import split_exact
from cfl_lightning.sampling.pushdown_backend import PushdownEventCounts

K, SYMBOLS, STACK, EVENT = 500, 10, 3, "symbol:a"


def phases(q: int, folder: str, seed: int) -> dict[str, float]:
    """One exact corpus in process, timed by phase (CPU seconds)."""
    clock = time.process_time
    t0 = clock()
    pda = random_pda(q, SYMBOLS, STACK, seed=seed)
    t1 = clock()
    path = os.path.join(folder, f"pda{q}.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(pda.to_dict(), handle)
    t2 = clock()
    pda = load_automaton(path)
    t3 = clock()
    n = round(K * pda.expected_occurrences()[EVENT])
    counts = PushdownEventCounts(pda, parse_event(EVENT))
    bound = counts.max_per_string()
    t4 = clock()
    law = counts.law_for_total(K, n)
    t5 = clock()
    budgets = split_exact(law, K, n, torch.Generator().manual_seed(1))
    counts.walk(int(budgets.max()), False)
    t6 = clock()
    corpus = counts.generate(budgets, torch.Generator().manual_seed(0))
    t7 = clock()
    assert corpus.total_count == n and bound != 0
    return {
        "n": n, "window": law.log_pmf.numel(), "gen": t1 - t0, "load": t3 - t2,
        "bound": t4 - t3, "law": t5 - t4, "tables": t6 - t5, "generate": t7 - t6,
        "exact": t7 - t3,
    }  # fmt: skip


def child_cpu(args: list[str]) -> float:
    """CPU seconds (user + system) of one ``python -m cfl_lightning`` child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "cfl_lightning", *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def commands(q: int, n: int, folder: str, seed: int) -> tuple[float, float]:
    """CPU seconds of the generator command and of the exact ``sample`` command."""
    path = os.path.join(folder, f"cli{q}.json")
    gen = child_cpu(["automaton", "random_pushdown", "--states", str(q), "--symbols",
                     str(SYMBOLS), "--stack-symbols", str(STACK), "--seed", str(seed),
                     "--output", path])  # fmt: skip
    sample = child_cpu(["sample", "--automaton", path, "--num-strings", str(K), "--seed", "0",
                        "--intervention", "exact", "--event", EVENT, "--count", str(n),
                        "--output", os.path.join(folder, f"corpus{q}.jsonl")])  # fmt: skip
    return gen, sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--states", type=int, nargs="+", default=[10, 20, 30, 50])
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    args = parser.parse_args()
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, threads {threads}, CPU seconds (process_time / rusage)")
    print(f"random_pushdown --symbols {SYMBOLS} --stack-symbols {STACK} --seed {args.seed}, "
          f"{EVENT}, K = {K}, exact N = round(K E[count]) (natural)")  # fmt: skip
    print()
    print("| Q | vars | N | window L | generator s | load s | bound s | law s | tables s "
          "| generate s | exact total s | CLI automaton CPU-s | CLI sample CPU-s | CLI both |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for q in args.states:
            r = phases(q, folder, args.seed)
            gen, sample = commands(q, int(r["n"]), folder, args.seed)
            print(f"| {q} | {STACK * q * q + q:,} | {r['n']} | {r['window']} | {r['gen']:.2f} "
                  f"| {r['load']:.2f} | {r['bound']:.2f} | {r['law']:.2f} | {r['tables']:.2f} "
                  f"| {r['generate']:.2f} | {r['exact']:.2f} | {gen:.2f} | {sample:.2f} "
                  f"| {gen + sample:.2f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
