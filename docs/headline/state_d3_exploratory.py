"""Exploratory, outside the pre-registered plan: is the state half's D3 (N 1000 - N 500, paired)
tied to how rare ``q1`` is in a topology?

    python docs/headline/state_d3_exploratory.py docs/headline/v2/results_state.jsonl

Per model, unweighted (``kl_target_unweighted``): the 32 topologies split at the median natural
rate of ``q1`` (``kl_target / kl_target_unweighted`` of the N = 1000 run: ``p_pi(q1)``, expected
visits per string), the mean D3 of each half with its 95% t-interval, the Spearman correlation of
D3 with the rate, and the topologies with the largest D3. A description, not a test: it was
looked at after the plan's verdict.
"""

from __future__ import annotations

import json
import sys

import numpy as np

T975_DF15 = 2.131  # two-sided 95% Student t quantile, 15 degrees of freedom (16 topologies)


def ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x)
    out = np.empty(len(x))
    out[order] = np.arange(len(x))
    return out


def main(path: str) -> None:
    runs = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            runs[(r["model"], int(r["config"]["data"]["topology_seed"]), int(r["count"]))] = r
    for model in sorted({k[0] for k in runs}):
        tops = sorted({k[1] for k in runs if k[0] == model})
        d3 = np.array([runs[(model, t, 1000)]["kl_target_unweighted"]
                       - runs[(model, t, 500)]["kl_target_unweighted"] for t in tops])
        rate = np.array([runs[(model, t, 1000)]["kl_target"]
                         / runs[(model, t, 1000)]["kl_target_unweighted"] for t in tops])
        rare = rate < np.median(rate)
        print(f"{model}: D3 mean {d3.mean():+.3f} over {len(tops)} topologies, "
              f"{int((d3 > 0).sum())} positive; median rate of q1 {np.median(rate):.3f}")
        for name, part in (("rarer half", d3[rare]), ("commoner half", d3[~rare])):
            half = T975_DF15 * part.std(ddof=1) / np.sqrt(len(part))
            print(f"  {name} ({len(part)}): {part.mean():+.3f} "
                  f"[{part.mean() - half:+.3f}, {part.mean() + half:+.3f}]")
        rho = np.corrcoef(ranks(d3), ranks(rate))[0, 1]
        print(f"  Spearman(D3, rate) {rho:+.3f}")
        top = np.argsort(-d3)[:4]
        largest = (f"{tops[i]} ({d3[i]:+.3f}, rate {rate[i]:.3f})" for i in top)
        print("  largest D3: " + ", ".join(largest))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/headline/v2/results_state.jsonl")
