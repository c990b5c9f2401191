"""Which exact counts the v2 causal topologies admit (500-string corpora), before any training.

    python sweeps/headline/v2/check_counts.py [WEIGHT_SEED]

(``WEIGHT_SEED`` defaults to 0, version 2's weightings; version 3's replication uses 1.)

For each topology of the v2 causal arm and each target (``symbol:a``; ``state:q1`` for the
state-level half), the per-string count law's support near 0 (its minimum ``low`` and lattice
``period``, from the law on 0..255) and the most occurrences one string can hold (None:
unbounded). A total ``N`` over ``K = 500`` strings is possible when ``N >= K * low``,
``(N - K * low) % period == 0`` and ``N <= K * high``. The sampler checks the same when a run
starts and refuses an impossible count with one line. Prints one row per topology and target
and the counts that are impossible; exit 1 when any is.
"""

from __future__ import annotations

import sys

import numpy as np

from cfl_lightning.automata import Event
from cfl_lightning.automata.generators import random_pfsa
from cfl_lightning.sampling.feasibility import max_occurrences
from cfl_lightning.sampling.law import CountSource
from cfl_lightning.sampling.counts import CountLaw

V1 = [15, 38, 70, 165, 253, 289, 477, 479, 576, 597, 614, 694, 769, 797, 865, 923]
REST = [t for t in range(952) if t not in V1]
NEW = sorted(REST[i] for i in np.random.default_rng(1).choice(len(REST), 16, replace=False))
COUNTS = [62, 125, 250, 500, 1000]
TARGETS = ["symbol:a", "state:q1"]
K = 500


def main(weight_seed: int = 0) -> int:
    print("new topologies:", NEW, "weight seed:", weight_seed)
    bad = 0
    for topology in V1 + NEW:
        pfsa = random_pfsa(50, 10, topology, weight_seed)
        for target in TARGETS:
            fn = Event.parse(target).function(pfsa)
            law = CountLaw(CountSource(pfsa, fn).law(256)[0])
            high = max_occurrences(pfsa, fn)
            impossible = [
                n for n in COUNTS
                if n < K * law.low or (n - K * law.low) % law.period
                or (high is not None and n > K * high)
            ]
            bad += len(impossible)
            print(f"{topology:4d} {target:9s} low {law.low} period {law.period} "
                  f"high {high} mean/string {law.mean():.2f} impossible {impossible}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
