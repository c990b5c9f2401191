"""The pushdown study version 2's plan numbers from version 1's Dyck-2 records.

    python docs/pushdown/v2/mde.py [docs/pushdown/results.jsonl]

Version 1's Dyck-2 causal runs fixed the count of ``(`` (N = 100, 200, 400 in 200 strings, 5
weightings, one training per corpus). In Dyck-2 every ``(`` is closed, so those corpora are also
exact-count corpora of ``pop:(`` (the step emitting ``)``, the transition ``q/(:)``), and their
records hold what version 2 measures: ``pop:(``'s contribution (the transition ``q/(:)``), its
control ``pop:[`` (``q/[:]``), the class ``q/(`` and its control (the mean of ``q/[`` and
``q/-``). Per automaton the change from N = 100 to 400 of target, control and ``did``; the SD
over automata and the minimum detectable effect at n = 20 (80% power, two-sided 5%, paired t:
``(t_.975 + t_.80) SD / sqrt(n)`` with n - 1 degrees of freedom). numpy and scipy only.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import numpy as np
from scipy import stats

READINGS = {"unweighted": "kl_unweighted", "weighted": "kl"}
TARGETS = {  # target entry, control entries (the results' kind, name)
    "pop:(": (("transition", "q/(:)"), [("transition", "q/[:]")]),
    "class:q/(": (("state", "q/("), [("state", "q/["), ("state", "q/-")]),
}
LOW, HIGH, N = 100, 400, 20


def values(record: dict, reading: str, target: str) -> tuple[float, float] | None:
    """The run's target value and control under ``reading`` (None where one is unknown)."""
    (kind, name), others = TARGETS[target]
    table = record[READINGS[reading]]
    own = table[kind].get(name)
    rest = [table[k].get(n) for k, n in others]
    rest = [v for v in rest if v is not None]
    return None if own is None or not rest else (own, float(np.mean(rest)))


def mde(sd: float, n: int = N) -> float:
    """The paired t-test's minimum detectable effect at ``n`` (80% power, two-sided 5%)."""
    df = n - 1
    return (stats.t.ppf(0.975, df) + stats.t.ppf(0.80, df)) * sd / np.sqrt(n)


def main(argv: list[str]) -> int:
    path = argv[0] if argv else "docs/pushdown/results.jsonl"
    runs = [json.loads(line) for line in open(path)]
    dyck = [r for r in runs if r["event"] == "symbol:(" and r["intervention"] == "exact"]
    print(f"{len(dyck)} Dyck-2 causal runs of version 1; change N = {LOW} -> {HIGH}, per "
          f"automaton (n = 5), SD over automata, MDE at n = {N}")
    print("| target | model | reading | quantity | mean change | SD | MDE at n = 20 |")
    print("|---|---|---|---|---|---|---|")
    for target in TARGETS:
        for model in sorted({r["model"] for r in dyck}):
            for reading in READINGS:
                by = defaultdict(dict)
                for r in dyck:
                    got = values(r, reading, target) if r["model"] == model else None
                    if got is not None:
                        by[r["automaton_id"]][r["count"]] = got
                pairs = [(v[HIGH], v[LOW]) for v in by.values() if LOW in v and HIGH in v]
                hi, lo = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
                for i, what in enumerate(("target", "control")):
                    d = hi[:, i] - lo[:, i]
                    print(f"| {target} | {model[:-13]} | {reading} | {what} | {d.mean():+.4f} | "
                          f"{d.std(ddof=1):.4f} | {mde(d.std(ddof=1)):.4f} |")
                d = (hi[:, 0] - hi[:, 1]) - (lo[:, 0] - lo[:, 1])
                print(f"| {target} | {model[:-13]} | {reading} | did | {d.mean():+.4f} | "
                      f"{d.std(ddof=1):.4f} | {mde(d.std(ddof=1)):.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
