"""The headline study's contrasts, fixed before the correlational arm was trained.

    python docs/headline/verdict.py docs/headline/results.jsonl

The same contrasts are now a plan file evaluated by the product, under both measures (the
unweighted and the p_pi-weighted contribution), with a verdict per claim:

    python -m cfl_lightning analyze docs/headline/results.jsonl --plan docs/headline/plan_v1.yaml

tests/test_analysis_plan.py holds that evaluation to this script's numbers. This script stays
only because docs/headline_study.md quotes its output verbatim (tests/test_docs.py checks the
quote); once the doc quotes ``analyze --plan`` instead, it can go.

Reads the study's compact results (``analyze --export-results``), keeps the best repeat per
corpus (there is one), and prints, per architecture, the per-bin / per-count means of the
per-symbol contribution of ``a`` (``kl_target_unweighted``, nats per visit) with 95% intervals,
then the contrasts of docs/headline_study.md:

* correlational (independent topologies in different bins: Welch's interval of a difference):
  C1 rise  = bin [200, 283) - bin [100, 141);   C1' = bin [200, 283) - bin [141, 200)
  C2 fall  = bin [200, 283) - bin [566, 800);   C2' = bin [200, 283) - bin [1131, 1600)
* causal (the same 16 topologies at every count: a paired interval over topologies):
  D1 = N 250 - N 125;  D2 = N 500 - N 250;  D3 = N 1000 - N 500

and, beside them, the causal/correlational gap at each count as `analyze` computes it: causal
mean minus the mean of the correlational runs whose realized count lies in [N/sqrt2, N*sqrt2]
(a difference, with Welch's 95% interval: the per-symbol contribution is a signed quantity, so
`analyze` gives no ratio for it; `analysis.stats.gap_interval`).
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict

from cfl_lightning.analysis.aggregate import best_of_repeats, gap_kind
from cfl_lightning.analysis.records import load_jsonl
from cfl_lightning.analysis.stats import GAP_FACTOR, gap_interval, mean_sem, t_interval

EDGES = [100, 141, 200, 283, 400, 566, 800, 1131, 1600]
COUNTS = [125, 250, 500, 1000]
TARGET, METRIC = "symbol:a", "kl_target_unweighted"
CORRELATIONAL = {"C1": (200, 100), "C1'": (200, 141), "C2": (200, 566), "C2'": (200, 1131)}
CAUSAL = {"D1": (250, 125), "D2": (500, 250), "D3": (1000, 500)}


def fmt(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{x:.3f}"


def interval(low: float, high: float) -> str:
    return "–" if not math.isfinite(low) else f"[{fmt(low)}, {fmt(high)}]"


def sign(low: float, high: float) -> str:
    if not math.isfinite(low):
        return "no interval"
    return "above 0" if low > 0 else "below 0" if high < 0 else "holds 0"


def main(paths: list[str]) -> None:
    records = best_of_repeats([r for p in paths for r in load_jsonl(p)])
    records = [r for r in records if r.event == TARGET and getattr(r, METRIC) is not None]
    bins: dict = defaultdict(list)  # (model, lower edge) -> values
    runs: dict = defaultdict(list)  # model -> [(realized count, value)] of correlational runs
    causal: dict = defaultdict(dict)  # (model, count) -> {automaton: value}
    for r in records:
        value = getattr(r, METRIC)
        if r.setting == "correlational" and r.realized_count is not None:
            runs[r.model].append((r.realized_count, value))
            for lo, hi in zip(EDGES, EDGES[1:]):
                if lo <= r.realized_count < hi:
                    bins[(r.model, lo)].append(value)
        elif r.setting == "causal_exact":
            causal[(r.model, r.count)][r.automaton_id] = value
    for model in sorted({k[0] for k in list(bins) + list(causal)}):
        print(f"\n### {model.replace('LanguageModel', '')}\n")
        print("| correlational bin | n | mean | 95% interval |\n|---|---|---|---|")
        for lo, hi in zip(EDGES, EDGES[1:]):
            values = bins.get((model, lo), [])
            mean, _, n = mean_sem(values)
            print(f"| [{lo}, {hi}) | {n} | {fmt(mean)} | {interval(*t_interval(values))} |")
        print("\n| causal count | n | mean | 95% interval |\n|---|---|---|---|")
        for count in COUNTS:
            values = list(causal.get((model, count), {}).values())
            mean, _, n = mean_sem(values)
            print(f"| {count} | {n} | {fmt(mean)} | {interval(*t_interval(values))} |")
        print("\n| contrast | n | difference | 95% interval | interval |\n|---|---|---|---|---|")
        for name, (a, b) in CORRELATIONAL.items():
            gap = gap_interval(bins.get((model, a), []), bins.get((model, b), []), "difference")
            n = f"{gap.n_causal} vs {gap.n_corr}"
            print(f"| {name}: bin {a} - bin {b} | {n} | {fmt(gap.value)} | "
                  f"{interval(gap.low, gap.high)} | {sign(gap.low, gap.high)} |")
        for name, (a, b) in CAUSAL.items():
            first, second = causal.get((model, a), {}), causal.get((model, b), {})
            paired = [first[k] - second[k] for k in first if k in second]
            mean, _, n = mean_sem(paired)
            low, high = t_interval(paired)
            print(f"| {name}: N {a} - N {b} (paired) | {n} | {fmt(mean)} | "
                  f"{interval(low, high)} | {sign(low, high)} |")
        kind = gap_kind(METRIC, TARGET)
        print(f"\n| causal count | gap: causal vs correlational ({kind}) | 95% interval | "
              "correlational runs in [N/sqrt2, N*sqrt2] | interval |\n|---|---|---|---|---|")
        for count in COUNTS:
            near = [v for x, v in runs[model] if count / GAP_FACTOR <= x <= count * GAP_FACTOR]
            gap = gap_interval(list(causal.get((model, count), {}).values()), near, kind)
            none = 1.0 if kind == "ratio" else 0.0
            where = "no interval" if not math.isfinite(gap.low) else (
                f"above {none:g}" if gap.low > none else
                f"below {none:g}" if gap.high < none else f"holds {none:g}")
            print(f"| {count} | {fmt(gap.value)} | {interval(gap.low, gap.high)} | "
                  f"{gap.n_corr} | {where} |")


if __name__ == "__main__":
    main(sys.argv[1:] or ["docs/headline/results.jsonl"])
