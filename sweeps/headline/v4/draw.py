"""Version 4's causal topologies and their corpus sizes, computed before any training.

    python sweeps/headline/v4/draw.py            # the 32 topologies
    python sweeps/headline/v4/draw.py --sizes    # and symbols per 500-string corpus (seed 0)
    python sweeps/headline/v4/draw.py --tokens   # arm B: K chosen at T = 5,000 (seed 0)

The 32 are drawn as ``numpy.random.default_rng(4).choice(len(pool), 32, replace=False)`` from
``pool``: the 952 candidate topologies less version 2's and 3's causal 32 and version 3's item-4
55 (docs/headline_v4.md, "Design").
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import yaml

V3 = Path(__file__).resolve().parent.parent / "v3"
COUNTS = (62, 250, 1000)
TOKENS = 10000  # arm B's total of symbols (EOS excluded; 5,000 was infeasible, docs/headline_v4.md)


def topologies() -> list[int]:
    """The 32 causal topologies of version 4."""
    seen: set[int] = set()
    for name in ("causal_symbol.yaml", "d3_state_transformer.yaml"):
        sweep = yaml.safe_load((V3 / name).read_text())
        seen.update(sweep["parameters"]["data.topology_seed"]["values"])
    pool = [t for t in range(952) if t not in seen]
    return sorted(pool[i] for i in np.random.default_rng(4).choice(len(pool), 32, replace=False))


def sizes(topology: int) -> list[int]:
    """Symbols (EOS excluded) of the natural corpus and of the exact corpora at :data:`COUNTS`."""
    from cfl_lightning.automata.generators import random_pfsa
    from cfl_lightning.sampling.sampler import sample_corpus

    pfsa = random_pfsa(50, 10, topology, 0)
    corpora = [sample_corpus(pfsa, 500, seed=0, event="symbol:a")]
    corpora += [sample_corpus(pfsa, 500, seed=0, intervention="exact", event="symbol:a", count=n)
                for n in COUNTS]
    return [int(c.lengths.sum()) for c in corpora]


def token_matched(topology: int) -> list[str]:
    """Arm B's corpora (``data.seed`` 0): ``K (symbols)`` chosen at each count, or the refusal."""
    from cfl_lightning.automata.generators import random_pfsa
    from cfl_lightning.errors import CflError
    from cfl_lightning.sampling.token_matched import sample_token_matched

    pfsa = random_pfsa(50, 10, topology, 0)
    cells = []
    for n in COUNTS:
        try:
            got = sample_token_matched(pfsa, TOKENS, seed=0, event="symbol:a", count=n)
            cells.append(f"{got.num_strings} ({got.total:,})")
        except CflError as err:
            cells.append(f"refused: {str(err)[:60]}")
    return cells


def main(argv: list[str]) -> int:
    chosen = topologies()
    print("topologies:", ", ".join(map(str, chosen)))
    if "--sizes" in argv:
        rows = np.array([sizes(t) for t in chosen])
        print("| topology | natural | N = 62 | N = 250 | N = 1,000 | 1,000 / 62 |")
        print("|---|---|---|---|---|---|")
        for t, row in zip(chosen, rows):
            print(f"| {t} | {' | '.join(f'{v:,}' for v in row)} | {row[3] / row[1]:.2f}x |")
        med = np.median(rows, axis=0)
        ratio = rows[:, 3] / rows[:, 1]
        print(f"medians {', '.join(f'{v:,.0f}' for v in med)}; ratio {ratio.min():.2f}-{ratio.max():.2f}x")
    if "--tokens" in argv:
        print(f"| topology | K (symbols) at N = {' | N = '.join(map(str, COUNTS))} |")
        print("|---|" + "---|" * len(COUNTS))
        for t in chosen:
            print(f"| {t} | {' | '.join(token_matched(t))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
