"""The sampler's time estimates (cfl_lightning.sampling.estimates) beside measured CPU time.

Prints a table: automaton, request, estimated CPU seconds, measured CPU seconds (median of
``--repeats`` runs in this process, one thread), their ratio. The estimate's job is to tell a
runaway request (minutes to days) from an ordinary one (seconds) before any work: within a
factor of a few is enough; the refusal threshold (estimates.FAR x the unconstrained cost, and
60 s) leaves that margin. Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_estimates.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from cfl_lightning.automata import load_automaton, parity_starfree_pfsa
from cfl_lightning.sampling import Intervention, sample_corpus
from cfl_lightning.sampling.estimates import CorpusRequest, estimate_request

DEPTH = Path(__file__).resolve().parents[1] / "tests" / "data" / "depth.json"


def cases():
    depth = load_automaton(json.loads(DEPTH.read_text()))
    parity = parity_starfree_pfsa()
    for k, n in ((50, 100), (50, 1_000), (50, 10_000), (500, 2_000)):
        yield "depth (pushdown)", depth, k, "exact", "push:D3", n
    yield "depth (pushdown)", depth, 500, "none", None, None
    event = f"symbol:{parity.alphabet[0]}"
    for k, n in ((500, 500), (500, 5_000), (5_000, 50_000)):
        yield "parity (PFSA)", parity, k, "exact", event, n
    yield "parity (PFSA)", parity, 5_000, "none", None, None


def measure(automaton, k, kind, event, count, repeats):
    times = []
    for seed in range(repeats):
        start = time.process_time()
        sample_corpus(automaton, k, seed=seed, intervention=kind, event=event, count=count)
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| automaton | K | intervention | estimated CPU-s | measured CPU-s | ratio |")
    print("|---|---|---|---|---|---|")
    for name, automaton, k, kind, event, count in cases():
        spec = Intervention.create(kind, event, count) if kind != "none" else Intervention()
        est = estimate_request(automaton, CorpusRequest(k, spec)).seconds
        got = measure(automaton, k, kind, event, count, args.repeats)
        what = "none" if kind == "none" else f"{kind} {count} {event}"
        print(f"| {name} | {k} | {what} | {est:.2f} | {got:.2f} | {est / max(got, 1e-9):.2f} |")


if __name__ == "__main__":
    main()
