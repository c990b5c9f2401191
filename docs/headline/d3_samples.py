"""Descriptive, after item 4's verdict and outside its plan: the transformer's state D3 in the two
samples of weight-seed-0 topologies that measured it.

    python docs/headline/d3_samples.py docs/headline/v2/results_state.jsonl \\
        docs/headline/v3/results_d3.jsonl

D3 is N 1000 - N 500 of ``state:q1`` (exactly N transitions leaving ``q1``), paired per
topology. Per measure (``kl_target_unweighted``, ``kl_target``) and per file (version 2's 32
causal topologies; item 4's 55 new ones), for the transformer: the mean D3 with its 95%
t-interval over topologies, the median, how many topologies have D3 below 0; then the difference
of the two samples' means with Welch's 95% interval (the samples share no topology), and, per
sample, Spearman's correlation of D3 with ``q1``'s natural rate (``kl_target /
kl_target_unweighted`` of the N = 1000 run: expected visits per string). The intervals are
``recompute_plan.py``'s. A description, not a test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # loaded from its file (the tests), not run as a script
    sys.path.insert(0, str(HERE))
from recompute_plan import t_interval, welch  # noqa: E402  the same intervals, written once

MODEL = "TransformerLanguageModel"
MEASURES = ("kl_target_unweighted", "kl_target")


def d3_of(path: str) -> dict[int, dict[str, float]]:
    """``{topology: {measure: D3, "rate": q1's natural rate}}`` of the transformer's exact
    ``state:q1`` runs at N = 500 and 1,000 in one compact results file."""
    runs: dict[tuple[int, int], dict] = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if (r["model"] == MODEL and r.get("intervention") == "exact"
                    and r["event"] == "state:q1" and r["count"] in (500, 1000)):
                runs[(int(r["config"]["data"]["topology_seed"]), int(r["count"]))] = r
    out = {}
    for t in sorted({t for t, n in runs if (t, 500) in runs and (t, 1000) in runs}):
        top = runs[(t, 1000)]
        out[t] = {m: top[m] - runs[(t, 500)][m] for m in MEASURES}
        out[t]["rate"] = top["kl_target"] / top["kl_target_unweighted"]
    return out


def fmt(estimate, low, high) -> str:
    return f"{estimate:+.3f} [{low:+.3f}, {high:+.3f}]"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: d3_samples.py FIRST.jsonl SECOND.jsonl", file=sys.stderr)
        return 2
    samples = [d3_of(p) for p in argv]
    for path, sample in zip(argv, samples):
        if not sample:
            print(f"d3_samples.py: {path}: no transformer state:q1 runs at both 500 and 1000",
                  file=sys.stderr)
            return 2
    for measure in MEASURES:
        print(f"\n{measure}\n")
        print("| sample | n (topologies) | mean D3 [95%] | median | below 0 | Spearman(D3, rate) |")
        print("|---|---|---|---|---|---|")
        arrays = []
        for path, sample in zip(argv, samples):
            d3 = np.array([v[measure] for v in sample.values()])
            rate = np.array([v["rate"] for v in sample.values()])
            arrays.append(d3)
            rho = stats.spearmanr(d3, rate)[0]
            print(f"| {path} | {len(d3)} | {fmt(*t_interval(d3, 0.95))} | {np.median(d3):+.3f} "
                  f"| {int((d3 < 0).sum())} | {rho:+.2f} |")
        both = np.concatenate(arrays)
        print(f"| both | {len(both)} | {fmt(*t_interval(both, 0.95))} | {np.median(both):+.3f} "
              f"| {int((both < 0).sum())} | |")
        print(f"\nfirst - second (Welch, 95%): {fmt(*welch(arrays[0], arrays[1], 0.95))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
