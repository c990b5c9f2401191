"""CPU time of the exact next-symbol laws (``PCFG.position_laws``) of 1,000 sampled strings of
a random 10-nonterminal, 40-rule grammar tuned to expected length 30 (issue 50's size target:
30 CPU-s). Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_pcfg_laws.py``.

Measured 2026-11-29 on the project's 2-core CPU machine (shared, load ~2.5): mean length 28.8,
median 11, max 562; all 1,000 strings 45 CPU-s; the 979 strings of at most 200 symbols 9.5
CPU-s, the 933 of at most 100 symbols 2.4 CPU-s: the O(n^3) inside pass of the longest strings
dominates.
"""
import time

import numpy as np
import torch

from cfl_lightning.automata.pcfg import check_grammar, expected_length, parse_grammar
from cfl_lightning.automata.pcfg.automaton import PCFG
from cfl_lightning.sampling.pcfg import generate_strings

def grammar(x: float, seed: int = 0):
    """Ten nonterminals, four rules each; ``x``: the weight of ``N -> 't' N'``."""
    rng = np.random.default_rng(seed)
    T = "abcde"
    lines = []
    for i in range(10):
        j, k, l = rng.integers(0, 10, 3)
        t = rng.choice(list(T), 4)
        rec = 0.05 * rng.uniform(0.5, 1.0)  # weight of the two-nonterminal rule
        one = 0.1
        lin = x
        end = 1 - rec - one - lin
        lines.append(f"N{i} -> '{t[0]}' [{end!r}] | '{t[1]}' N{j} [{lin!r}] "
                     f"| N{k} N{l} [{rec!r}] | '{t[2]}' N{j} '{t[3]}' [{one!r}]")
    return parse_grammar("\n".join(lines) + "\n")

def main() -> None:
    """Tune the grammar, sample 1,000 strings, time the laws (all, then short strings only)."""
    lo, hi = 0.0, 0.85
    for _ in range(40):  # bisect the linear-recursion weight to E[length] = 30
        mid = (lo + hi) / 2
        g = grammar(mid)
        try:
            check_grammar(g)
            length = expected_length(g)
        except Exception:
            length = float("inf")
        lo, hi = (mid, hi) if length < 30 else (lo, mid)
    g = grammar(lo)
    print("rules", len(g.rules), "nonterminals", g.num_nonterminals, "E[len]", expected_length(g))
    a = PCFG(g)
    c = generate_strings(g, 1000, seed=0)
    lens = c.lengths
    print(f"mean length {float(lens.float().mean()):.1f}, max {int(lens.max())}, "
          f"median {float(lens.float().median()):.0f}")
    nf = a.normal_form
    print("normal form nonterminals", nf.num_nonterminals, "binary rules", nf.weight.numel())
    c0 = time.process_time()
    laws = a.position_laws(c.tokens, c.offsets)
    print(f"all 1,000 strings: CPU {time.process_time() - c0:.1f} s")
    ones = torch.ones(laws.shape[0], dtype=torch.float64)
    print("rows sum to 1:", bool(torch.allclose(laws.sum(-1), ones)))
    for cut in (100, 200):
        keep = (lens <= cut).nonzero().flatten().tolist()
        toks = torch.cat([torch.tensor(c.string(k), dtype=torch.long) for k in keep])
        offs = torch.tensor([0] + np.cumsum([int(lens[k]) for k in keep]).tolist())
        c0 = time.process_time()
        a.position_laws(toks, offs)
        print(f"strings <= {cut} ({len(keep)}, {int(lens[keep].sum())} symbols): "
              f"CPU {time.process_time() - c0:.1f} s")


if __name__ == "__main__":
    main()
