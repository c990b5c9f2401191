"""Exploratory, outside the pre-registered plan: the state half's correlational side without the
initial state ``q0``.

    python docs/headline/state_without_q0.py docs/headline/v2/results.jsonl /tmp/results_no_q0.jsonl
    python -m cfl_lightning analyze /tmp/results_no_q0.jsonl docs/headline/v2/results_state.jsonl \\
        --plan docs/headline/plan_v2_state.yaml

Prints, per bin of the plan (and the gap windows at 500 and 1,000), how many of the correlational
(run, state) pairs are ``q0``'s and the mean unweighted value of ``q0``'s pairs against the other
states' (pair means, a description), then copies the correlational records (``intervention``
none) with ``q0`` removed from every state table (values, unweighted values, occurrences, test
visits); causal records are left out of the copy (the state runs are given separately). Every
string starts in ``q0``, so its count is 354 or more in every run and its per-visit values are
lower than other states' at the same counts; the plan pooled it with the other 49 (as
pre-registered). A description, looked at after the verdict.
"""

from __future__ import annotations

import json
import sys


def drop_q0(record: dict) -> dict:
    for table in ("kl", "kl_unweighted"):
        record.get(table, {}).get("state", {}).pop("q0", None)
    for table in ("count", "strings"):
        record.get("occurrences", {}).get(table, {}).pop("state:q0", None)
    record.get("test_visits", {}).pop("state:q0", None)
    return record


EDGES = [50, 71, 100, 141, 200, 283, 400, 566, 800, 1131, 1600]


def describe(records: list[dict]) -> None:
    """q0's share of each bin's pairs and its mean unweighted value against the other states'."""
    windows = [(f"[{lo}, {hi})", lo, hi - 1e-9) for lo, hi in zip(EDGES, EDGES[1:])]
    windows += [(f"gap window at {n} [{n / 2 ** 0.5:.1f}, {n * 2 ** 0.5:.1f}]", n / 2 ** 0.5,
                 n * 2 ** 0.5) for n in (500, 1000)]
    print("| model | bin | q0 pairs / pairs | mean value, q0 | mean value, other states |")
    print("|---|---|---|---|---|")
    for model in sorted({r["model"] for r in records}):
        for name, lo, hi in windows:
            q0, other = [], []
            for r in (r for r in records if r["model"] == model):
                for state, value in r["kl_unweighted"]["state"].items():
                    count = r["occurrences"]["count"].get(f"state:{state}", 0)
                    if lo <= count <= hi and r["test_visits"].get(f"state:{state}", 0) >= 1:
                        (q0 if state == "q0" else other).append(value)
            mean = lambda v: f"{sum(v) / len(v):.3f}" if v else "-"  # noqa: E731
            print(f"| {model} | {name} | {len(q0)} / {len(q0) + len(other)} | {mean(q0)} | "
                  f"{mean(other)} |")


def main(source: str, target: str) -> None:
    with open(source) as f:
        describe([r for r in map(json.loads, f) if r.get("intervention") in (None, "none")])
    kept = 0
    with open(source) as f, open(target + ".tmp", "w") as out:
        for line in f:
            record = json.loads(line)
            if record.get("intervention") in (None, "none"):
                out.write(json.dumps(drop_q0(record)) + "\n")
                kept += 1
    import os

    os.replace(target + ".tmp", target)
    print(f"wrote {kept} correlational records without q0 to {target}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python docs/headline/state_without_q0.py RESULTS.jsonl OUTPUT.jsonl")
    main(sys.argv[1], sys.argv[2])
