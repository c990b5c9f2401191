"""An independent recomputation of the version 2 re-analysis (the plan addendum, A1-A4) from the
committed records, with numpy and scipy only (no `cfl_lightning` code), as a sceptical reader
would do it:

    python docs/headline/recompute_addendum.py [FILE.jsonl ...]

Reads the given files, by default `docs/headline/v2/results.jsonl` (correlational and version
2's new causal runs) and `results_p4.jsonl` (version 1's causal runs again); version 3's symbol
half is `docs/headline/v3/results.jsonl` alone. Symbol half (every symbol of every
correlational run; the causal runs' `a`), and prints one line per number:
`NAME MODEL MEASURE value low high` (intervals 95%, equivalence lines 90%). The test
`tests/test_headline_study.py` holds `analyze --plan docs/headline/plan_v2_addendum_symbol.yaml`
to these lines (three decimals).
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

HERE = Path(__file__).resolve().parent
FILES = [HERE / "v2" / "results.jsonl", HERE / "v2" / "results_p4.jsonl"]
MEASURES = {"kl_target_unweighted": "kl_unweighted", "kl_target": "kl"}
FACTOR = math.sqrt(2.0)


def read(files=FILES):
    """Correlational pairs ``{(model, measure): [(count, value, automaton)]}`` and causal values
    ``{(model, measure, N): {automaton: value}}`` (plus the re-weighted ``kl_target``)."""
    corr, causal = defaultdict(list), defaultdict(dict)
    for path in files:
        for line in open(path, encoding="utf-8"):
            r = json.loads(line)
            model, auto = r["model"], r["automaton_id"]
            if r["intervention"] == "none":
                for spec, count in r["occurrences"]["count"].items():
                    kind, name = spec.split(":", 1)
                    if kind != "symbol" or not r["test_visits"].get(spec):
                        continue
                    for measure, table in MEASURES.items():
                        value = r[table]["symbol"].get(name)
                        if value is not None:
                            corr[(model, measure)].append((count, value, auto))
            elif r["intervention"] == "exact" and r["event"] == "symbol:a":
                n = r["count"]
                for measure in MEASURES:
                    causal[(model, measure, n)][auto] = r[measure]
                causal[(model, "reweighted", n)][auto] = (
                    r["kl_target_unweighted"] * n / r["num_strings"])
    return corr, causal


def select(pairs, low, high, closed, per_run):
    inside = [(v, a) for c, v, a in pairs if low <= c < high or (closed and c == high)]
    if per_run:
        return np.array([v for v, _ in inside])
    groups = defaultdict(list)
    for v, a in inside:
        groups[a].append(v)
    return np.array([np.mean(v) for v in groups.values()])


def welch(a, b, level=0.95):
    diff = a.mean() - b.mean()
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = stats.t.ppf(0.5 + level / 2, df) * math.sqrt(va + vb)
    return diff, diff - half, diff + half


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    corr, causal = read([Path(f) for f in argv] or FILES)
    out = []
    for model in ("LSTMLanguageModel", "TransformerLanguageModel"):
        for measure in MEASURES:
            pairs = corr[(model, measure)]
            for name, (a, b) in {"C1-run": (200, 100), "C2-run": (200, 566)}.items():
                hi = {200: 283, 100: 141, 566: 800}
                out.append((name, model, measure,
                            *welch(select(pairs, a, hi[a], False, True),
                                   select(pairs, b, hi[b], False, True))))
            for n in (62, 125, 250, 500, 1000):
                c = np.array(list(causal[(model, measure, n)].values()))
                near = select(pairs, n / FACTOR, n * FACTOR, True, False)
                run = select(pairs, n / FACTOR, n * FACTOR, True, True)
                out.append((f"G{n}-run", model, measure, *welch(c, run)))
                if measure == "kl_target_unweighted":
                    value, low, high = welch(c, near, 0.90)
                    out.append((f"E{n}-90", model, measure, value, low, high))
                    out.append((f"E{n}-margin", model, measure, 0.1 * near.mean(),
                                -0.1 * near.mean(), 0.1 * near.mean()))
                else:
                    w = np.array(list(causal[(model, "reweighted", n)].values()))
                    out.append((f"W{n}", model, measure, *welch(w, near)))
    for name, model, measure, value, low, high in out:
        print(f"{name} {model} {measure} {value:.6f} {low:.6f} {high:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
