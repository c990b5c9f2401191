"""Version 2's P4 check: version 1's 128 causal runs trained again by version 2's code.

    python docs/headline/p4_check.py docs/headline/v2/v1_causal_standin.jsonl \\
        docs/headline/v2/results_p4.jsonl

Written before P4 trained (docs/headline_study.md, "Version 2: plan": "a difference between the
two is reported, and the rerun's values are then used"). Reads two compact result files
(``analyze --export-results``), matches their runs by (model, topology, count of ``a``) and
prints, per model, over the matched runs:

* how many match, and how many are the same to 1e-9 relative (``kl_total``, both measures of
  ``a``): the configuration, corpus and seeds are the same, so identical values mean the code
  trained them identically;
* for ``kl_target_unweighted`` and ``kl_target`` of ``a`` and for ``kl_total``: the median
  and the range of rerun / stand-in, and the mean paired difference (rerun - stand-in) with its
  95% t-interval over the matched runs (runs of one topology at four counts are not
  independent: the interval describes the spread, it is not a test).

Standard library and numpy only; nothing here trains or samples.
"""

from __future__ import annotations

import json
import sys

import numpy as np

T975 = {  # two-sided 95% t quantiles by degrees of freedom (df > 120: normal)
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}
MEASURES = ("kl_target_unweighted", "kl_target", "kl_total")


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (table, conservative)."""
    keys = sorted(k for k in T975 if k <= df)
    return T975[keys[-1]] if df <= 120 else 1.960


def value(record: dict, measure: str) -> float:
    """``measure`` of the run's ``a`` (``kl_total`` is the run's)."""
    if measure == "kl_total":
        return float(record["kl_total"])
    table = record["kl_unweighted" if measure == "kl_target_unweighted" else "kl"]
    return float(table["symbol"]["a"])


def key(record: dict) -> tuple[str, int, int]:
    data = record["config"]["data"]
    return record["model"], int(data["topology_seed"]), int(data["count"])


def load(path: str) -> dict[tuple[str, int, int], dict]:
    out = {}
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            event = record["config"]["data"]["event"]
            if record.get("intervention") == "exact" and event == "symbol:a":
                out[key(record)] = record
    return out


def main(standin_path: str, rerun_path: str) -> None:
    standin, rerun = load(standin_path), load(rerun_path)
    matched = sorted(set(standin) & set(rerun))
    only_standin, only_rerun = len(set(standin) - set(rerun)), len(set(rerun) - set(standin))
    print(f"stand-in {len(standin)} runs, rerun {len(rerun)} runs, matched {len(matched)}; "
          f"stand-in only {only_standin}, rerun only {only_rerun}")
    for model in sorted({k[0] for k in matched}):
        keys = [k for k in matched if k[0] == model]
        same = sum(
            all(np.isclose(value(rerun[k], m), value(standin[k], m), rtol=1e-9, atol=0)
                for m in MEASURES)
            for k in keys
        )
        print(f"\n{model}: {len(keys)} matched runs, {same} the same to 1e-9 relative\n")
        print("| measure | median rerun / stand-in | range "
              "| mean difference (rerun - stand-in) [95% t] |")
        print("|---|---|---|---|")
        for m in MEASURES:
            a = np.array([value(standin[k], m) for k in keys])
            b = np.array([value(rerun[k], m) for k in keys])
            ratio, diff = b / a, b - a
            n = len(keys)
            half = t975(n - 1) * diff.std(ddof=1) / np.sqrt(n) if n > 1 else float("nan")
            print(f"| {m} | {np.median(ratio):.3f} | {ratio.min():.3f}-{ratio.max():.3f} | "
                  f"{diff.mean():+.4f} [{diff.mean() - half:+.4f}, {diff.mean() + half:+.4f}] |")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python docs/headline/p4_check.py STANDIN.jsonl RERUN.jsonl")
    main(sys.argv[1], sys.argv[2])
