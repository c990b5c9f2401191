"""The sampler's time estimates (cfl_lightning.sampling.estimates) beside measured CPU time.

Prints a table: automaton, request, estimated CPU seconds, measured CPU seconds (median of
``--repeats`` runs in this process, one thread), their ratio. The estimate's job is to tell a
runaway request (minutes to days) from an ordinary one (seconds) before any work: within a
factor of a few is enough; the refusal threshold (estimates.FAR x the unconstrained cost, and
60 s) leaves that margin. A second table does the same for a grammar corpus's exact laws
(estimated from the drawn lengths before they are computed, ``cfl_lightning.automata.pcfg.cost``).
Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_estimates.py [--laws-only]``.
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


def law_cases():
    """The exact laws of bench_pcfg_laws.py's grammar corpus (1,000 strings, E[length] 30):
    all of it, the strings of at most 100 and 200 symbols, the longest string alone."""
    from bench_pcfg_laws import tuned_grammar

    from cfl_lightning.automata.pcfg.automaton import PCFG
    from cfl_lightning.sampling.pcfg import generate_strings

    g = tuned_grammar()
    corpus = generate_strings(g, 1000, seed=0)
    lengths = corpus.lengths
    longest = int(torch.argmax(lengths))
    for name, keep in (("all 1,000 strings", lengths >= 0), ("strings <= 100", lengths <= 100),
                       ("strings <= 200", lengths <= 200),
                       (f"the longest ({int(lengths[longest])})",
                        torch.arange(len(lengths)) == longest)):
        chosen = keep.nonzero().flatten().tolist()
        tokens = torch.cat([torch.tensor(corpus.string(k), dtype=torch.long) for k in chosen])
        sizes = lengths[chosen]
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
        yield name, PCFG(g), tokens, offsets


def law_rows(repeats: int) -> None:
    """A grammar's exact laws (``PCFG.position_laws``): the estimate made before them
    (``PCFG.law_cost``, from the corpus's lengths) beside their measured CPU time."""
    print()
    print("| grammar laws (bench_pcfg_laws.py) | strings | estimated CPU-s | measured CPU-s "
          "| ratio | estimated peak |")
    print("|---|---|---|---|---|---|")
    for name, pcfg, tokens, offsets in law_cases():
        cost = pcfg.law_cost(offsets[1:] - offsets[:-1])
        times = []
        for _ in range(repeats):
            start = time.process_time()
            pcfg.position_laws(tokens, offsets)
            times.append(time.process_time() - start)
        got = statistics.median(times)
        print(f"| {name} | {cost.strings} | {cost.seconds:.2f} | {got:.2f} | "
              f"{cost.seconds / max(got, 1e-9):.2f} | {cost.peak_bytes / 2**20:.0f} MB |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--laws-only", action="store_true", help="only the grammar laws' table")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.laws_only:
        law_rows(args.repeats)
        return
    print("| automaton | K | intervention | estimated CPU-s | measured CPU-s | ratio |")
    print("|---|---|---|---|---|---|")
    for name, automaton, k, kind, event, count in cases():
        spec = Intervention.create(kind, event, count) if kind != "none" else Intervention()
        est = estimate_request(automaton, CorpusRequest(k, spec)).seconds
        got = measure(automaton, k, kind, event, count, args.repeats)
        what = "none" if kind == "none" else f"{kind} {count} {event}"
        print(f"| {name} | {k} | {what} | {est:.2f} | {got:.2f} | {est / max(got, 1e-9):.2f} |")
    law_rows(args.repeats)


if __name__ == "__main__":
    main()
