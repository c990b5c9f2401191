"""Pushdown sampling cost: exact-count corpora against the unconstrained pushdown sampler.

Three tables, CPU seconds (``time.process_time``, this process only), medians of ``--repeats``:

(a) Dyck-2 (``dyck_pda(2, seed=0)``), event ``symbol:(`` (one opening bracket), 100,000 strings:
    unconstrained sampling against an exact corpus total at the natural count (``round(K E[n])``),
    with the exact run split into count law, split of the total, walk tables and generation.
(b) ``random_pda(10, 10, 3, seed=0)``, event ``symbol:<first symbol>``: a 500-string corpus at
    N = 1,000 exact, count law included (target: at most 10 CPU-seconds).
(c) growth of (b)'s cost in N, in the number of states and in the number of stack symbols.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python benchmarks/bench_pushdown.py [--repeats 3] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from cfl_lightning.automata.pushdown.events import parse_event
from cfl_lightning.automata.pushdown.generators import dyck_pda, random_pda
from cfl_lightning.sampling.counts import split_exact
from cfl_lightning.sampling.pushdown.backend import PushdownEventCounts
from cfl_lightning.sampling.pushdown.unconstrained import sample_unconstrained


def exact_run(pda, event: str, k: int, n: int, seed: int) -> dict[str, float]:
    """One exact corpus from scratch (count source built inside), timed by phase."""
    clock = time.process_time
    t0 = clock()
    counts = PushdownEventCounts(pda, parse_event(event))
    law = counts.law_for_total(k, n)
    t1 = clock()
    budgets = split_exact(law, k, n, torch.Generator().manual_seed(seed + 1))
    t2 = clock()
    counts.walk(int(budgets.max()), False)
    t3 = clock()
    corpus = counts.generate(budgets, torch.Generator().manual_seed(seed))
    t4 = clock()
    assert corpus.total_count == n
    return {
        "law": t1 - t0, "split": t2 - t1, "tables": t3 - t2, "generate": t4 - t3,
        "total": t4 - t0, "window": law.log_pmf.numel(), "budget": int(budgets.max()),
    }  # fmt: skip


def median_runs(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def table_a(k: int, repeats: int) -> None:
    pda = dyck_pda(2, seed=0)
    event = "symbol:("
    n = round(k * pda.expected_occurrences()[event])
    base, runs = [], []
    for rep in range(repeats):
        start = time.process_time()
        sample_unconstrained(pda, k, torch.Generator().manual_seed(rep))
        base.append(time.process_time() - start)
        runs.append(exact_run(pda, event, k, n, rep))
    b, m = statistics.median(base), median_runs(runs)
    print(f"(a) Dyck-2, {event}, K = {k:,}, exact N = {n:,} (natural), medians of {repeats}")
    print("| sampler | CPU s | ratio |")
    print("|---|---|---|")
    print(f"| unconstrained | {b:.3f} | 1.00 |")
    print(f"| exact N, all phases | {m['total']:.3f} | {m['total'] / b:.2f} |")
    for phase in ("law", "split", "tables", "generate"):
        print(f"| - {phase} | {m[phase]:.3f} | {m[phase] / b:.2f} |")
    how = "certified below N" if m["window"] < n + 1 else "complete up to N"
    window, budget = int(m["window"]), int(m["budget"])
    print(f"law window L = {window} ({how}), largest per-string budget {budget}")
    print()


def random_case(q: int, s: int, g: int, k: int, n: int, repeats: int) -> dict[str, float]:
    pda = random_pda(q, s, g, seed=0)
    event = f"symbol:{pda.alphabet[0]}"
    return median_runs([exact_run(pda, event, k, n, rep) for rep in range(repeats)])


def row(label: str, m: dict[str, float]) -> str:
    return (f"| {label} | {m['law']:.3f} | {m['split'] + m['tables']:.3f} | {m['generate']:.3f} "
            f"| {m['total']:.3f} | {int(m['window'])} |")  # fmt: skip


def table_b_c(k: int, n: int, repeats: int, smoke: bool) -> None:
    header = "| case | law s | split + tables s | generate s | total CPU s | law length |"
    print(f"(b) random_pda(10, 10, 3, seed=0), K = {k}, exact N = {n}, medians of {repeats}")
    print(header)
    print("|---|---|---|---|---|---|")
    print(row("Q=10 S=10 G=3", random_case(10, 10, 3, k, n, repeats)))
    print()
    print(f"(c) growth (K = {k}, S = 10), medians of {repeats}")
    print(header)
    print("|---|---|---|---|---|---|")
    sizes = (n // 4, n // 2, n, 2 * n) if not smoke else (n // 2, n)
    for total in sizes:
        print(row(f"N={total} Q=10 G=3", random_case(10, 10, 3, k, total, repeats)))
    for q in (5, 10, 20) if not smoke else (5,):
        print(row(f"N={n} Q={q} G=3", random_case(q, 10, 3, k, n, repeats)))
    for g in (1, 3, 6) if not smoke else (1,):
        print(row(f"N={n} Q=10 G={g}", random_case(10, 10, g, k, n, repeats)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (a few seconds)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, threads {threads}, CPU seconds of this process")
    print()
    table_a(2_000 if args.smoke else 100_000, args.repeats)
    table_b_c(50 if args.smoke else 500, 100 if args.smoke else 1_000, args.repeats, args.smoke)


if __name__ == "__main__":
    main()
