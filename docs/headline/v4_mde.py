"""Version 4's plan numbers from version 3's records: the non-target control and its MDEs.

    python docs/headline/v4_mde.py [docs/headline/v3/results.jsonl]

Per causal run (target ``symbol:a``): the target's per-symbol value and the control, the mean of
the same reading over the symbols not intervened on with at least one test visit (EOS
excluded); per topology the change between two counts of target, control and ``did`` (target
minus control); 95% t-intervals over topologies, the SD, and the minimum detectable effect at
n = 32 (80% power, two-sided 5%, paired t). numpy and scipy only (no cfl_lightning), so it is an
independent recomputation of what ``analyze --control non-target`` reports.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import numpy as np
from scipy import stats

READINGS = {"unweighted": "kl_unweighted", "weighted": "kl"}
STEPS = ((62, 1000), (62, 250), (250, 1000))


def target_and_control(record: dict, reading: str, target: str = "a") -> tuple[float, float]:
    """The run's target value and its non-target control under ``reading``."""
    values = record[READINGS[reading]]["symbol"]
    others = [v for s, v in values.items()
              if s not in (target, "EOS") and record["test_visits"].get(f"symbol:{s}", 0) >= 1]
    return values[target], float(np.mean(others))


def mde(sd: np.ndarray, n: int = 32, power: float = 0.8) -> np.ndarray:
    """Paired t minimum detectable effect at ``n``: (t_0.975 + t_power) sd / sqrt(n)."""
    return (stats.t.ppf(0.975, n - 1) + stats.t.ppf(power, n - 1)) * sd / np.sqrt(n)


def rows(records: list[dict]):
    """(model, reading, step, n, means, half-widths, SDs) with columns target, control, did."""
    for model in sorted({r["model"] for r in records}):
        for reading in READINGS:
            by = defaultdict(dict)
            for r in records:
                if r["intervention"] == "exact" and r["model"] == model:
                    by[r["automaton_id"]][r["count"]] = target_and_control(r, reading)
            for lo, hi in STEPS:
                d = np.array([[v[hi][0] - v[lo][0], v[hi][1] - v[lo][1],
                               (v[hi][0] - v[hi][1]) - (v[lo][0] - v[lo][1])]
                              for v in by.values() if lo in v and hi in v])
                n = len(d)
                sd = d.std(axis=0, ddof=1)
                half = stats.t.ppf(0.975, n - 1) * sd / np.sqrt(n)
                yield model, reading, (lo, hi), n, d.mean(axis=0), half, sd


def main(argv: list[str]) -> int:
    path = argv[0] if argv else "docs/headline/v3/results.jsonl"
    records = [json.loads(line) for line in open(path)]
    print("| model | reading | step | n | target | control | did | SD (t, c, did) | MDE at 32 (t, c, did) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model, reading, (lo, hi), n, m, h, sd in rows(records):
        cells = [f"{m[i]:.3f} [{m[i] - h[i]:.3f}, {m[i] + h[i]:.3f}]" for i in range(3)]
        print(f"| {model.replace('LanguageModel', '')} | {reading} | {hi} - {lo} | {n} | "
              + " | ".join(cells) + f" | {', '.join(f'{v:.3f}' for v in sd)} | "
              + f"{', '.join(f'{v:.3f}' for v in mde(sd))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
