"""An independent recomputation of the re-analysis views (the plan addendum, A1-A4) from the
committed records, with numpy and scipy only (no `cfl_lightning` code), as a sceptical reader
would do it:

    python docs/headline/recompute_addendum.py [FILE.jsonl ...]
    python docs/headline/recompute_addendum.py --half state FILE.jsonl [FILE.jsonl ...]

Reads the given files, by default `docs/headline/v2/results.jsonl` (correlational and version
2's new causal runs) and `results_p4.jsonl` (version 1's causal runs again); version 3's symbol
half is `docs/headline/v3/results.jsonl` alone. Symbol half (default): every symbol of every
correlational run against the causal runs' `a`; state half (`--half state`, files such as
`v2/results.jsonl v2/results_state.jsonl`): every state against the causal runs' `q1`. Prints
one line per number: `NAME MODEL MEASURE value low high` (intervals 95%, equivalence lines 90%).
`tests/test_plan_views.py` holds `analyze --plan docs/headline/plan_v*_addendum_*.yaml` to these
lines (three decimals).

The rules, from `docs/analysis.md` ("Plans of pre-registered contrasts") and
`docs/guide/analysis.md` ("The causal-correlational gap"), not from the package: a gap is the
causal values at N against the correlational pairs with count in [N/sqrt2, N sqrt2], one mean
per automaton (per pair in the per-run view, `-run`); it is a difference (Welch) unless every
value of the half under that measure (both arms, both models, after `min_visits: 1`) is
positive (per-state values; per-symbol values are signed, always a difference), then a ratio
of means with the delta-method interval on the log ratio (Welch-Satterthwaite df on the
relative variances; the interval functions are `recompute_plan.py`'s). Equivalence (`E`,
unweighted): the 90% interval against +-0.1 x the correlational mean (a difference) or 1 +- 0.1
(a ratio). Re-weighted (`W`, weighted): each causal run's `kl_target_unweighted x N / K`, K its
corpus size, under the weighted measure's gap kind.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # loaded from its file (the tests), not run as a script
    sys.path.insert(0, str(HERE))
from recompute_plan import log_ratio, welch  # noqa: E402  the same intervals, written once
FILES = [HERE / "v2" / "results.jsonl", HERE / "v2" / "results_p4.jsonl"]
MEASURES = {"kl_target_unweighted": "kl_unweighted", "kl_target": "kl"}
FACTOR = math.sqrt(2.0)


TARGET = {"symbol": "symbol:a", "state": "state:q1"}


def read(files=FILES, half: str = "symbol"):
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
                    if kind != half or not r["test_visits"].get(spec):
                        continue
                    for measure, table in MEASURES.items():
                        value = r[table][half].get(name)
                        if value is not None:
                            corr[(model, measure)].append((count, value, auto))
            elif r["intervention"] == "exact" and r["event"] == TARGET[half]:
                if r.get("target_test_visits", 1) < 1:
                    continue
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


def ratio_kind(corr, causal, half: str) -> dict[str, bool]:
    """Per measure, whether the gaps are ratios: per-state values when every value of the half
    under that measure (both arms, both models) is positive; per-symbol values are signed."""
    def values(measure):
        for (_, meas), pairs in corr.items():
            if meas == measure:
                yield from (v for _, v, _ in pairs)
        for (_, meas, _), by_automaton in causal.items():
            if meas == measure:
                yield from by_automaton.values()

    return {m: half == "state" and all(v > 0 for v in values(m)) for m in MEASURES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", choices=sorted(TARGET), default="symbol")
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args(argv)
    half = args.half
    corr, causal = read(args.files or FILES, half)
    ratio = ratio_kind(corr, causal, half)
    out = []
    for model in ("LSTMLanguageModel", "TransformerLanguageModel"):
        for measure in MEASURES:
            gap = log_ratio if ratio[measure] else welch
            pairs = corr[(model, measure)]
            for name, (a, b) in {"C1-run": (200, 100), "C2-run": (200, 566)}.items():
                hi = {200: 283, 100: 141, 566: 800}
                out.append((name, model, measure,
                            *welch(select(pairs, a, hi[a], False, True),
                                   select(pairs, b, hi[b], False, True), 0.95)))
            for n in (62, 125, 250, 500, 1000):
                c = np.array(list(causal[(model, measure, n)].values()))
                near = select(pairs, n / FACTOR, n * FACTOR, True, False)
                run = select(pairs, n / FACTOR, n * FACTOR, True, True)
                out.append((f"G{n}-run", model, measure, *gap(c, run, 0.95)))
                if measure == "kl_target_unweighted":
                    value, low, high = gap(c, near, 0.90)
                    out.append((f"E{n}-90", model, measure, value, low, high))
                    if ratio[measure]:
                        out.append((f"E{n}-margin", model, measure, 0.1, 0.9, 1.1))
                    else:
                        out.append((f"E{n}-margin", model, measure, 0.1 * near.mean(),
                                    -0.1 * near.mean(), 0.1 * near.mean()))
                else:
                    w = np.array(list(causal[(model, "reweighted", n)].values()))
                    out.append((f"W{n}", model, measure, *gap(w, near, 0.95)))
    for name, model, measure, value, low, high in out:
        print(f"{name} {model} {measure} {value:.6f} {low:.6f} {high:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
