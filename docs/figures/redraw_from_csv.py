"""Redraw a reproduction figure from its curve-point CSV alone, with `analyze`'s own plotting.

    python docs/figures/redraw_from_csv.py docs/figures/fixed_topology_repro.csv \
        docs/figures/fixed_topology_repro.png --logx --columns 4 --title "..."

For the reduced reproductions whose per-run results were not kept: their CSVs hold each curve
point's `mean`, `sem`, `n`, `x`, `x_min`, `x_max` (and `ci_low`/`ci_high`, the 95% t-interval
`mean ± t(0.975, n-1) * sem`, recomputed here when absent). The figure is drawn by
`cfl_lightning.analysis.plot.plot_curves`, as `analyze` draws it: 95% intervals, n beside each
point, hollow markers for n < 3, correlational bins with their x extent and ticks at the causal
counts. One difference: `analyze` places a correlational bin at the median x of its runs on log
axes; the medians are not in these CSVs, so a bin is placed at the geometric midpoint of its
range, sqrt(x_min * x_max). Gap columns are not recomputed (they need per-run x values).
"""

from __future__ import annotations

import argparse
import csv
import math

from scipy import stats

from cfl_lightning.analysis.aggregate import CurveRow
from cfl_lightning.analysis.plot import plot_curves


def _float(text: str) -> float:
    return float(text) if text not in ("", None) else math.nan


def read_rows(path: str) -> list[CurveRow]:
    """The CSV's curve points as ``CurveRow`` values (intervals recomputed when absent)."""
    rows = []
    with open(path, newline="") as handle:
        for r in csv.DictReader(handle):
            n, mean, sem = int(r["n"]), _float(r["mean"]), _float(r["sem"])
            low, high = _float(r.get("ci_low", "")), _float(r.get("ci_high", ""))
            if not math.isfinite(low) and n > 1 and math.isfinite(sem):
                half = stats.t.ppf(0.975, n - 1) * sem
                low, high = mean - half, mean + half
            x_min, x_max = _float(r["x_min"]), _float(r["x_max"])
            causal = r["setting"].startswith("causal")
            middle = math.sqrt(x_min * x_max) if not causal and x_min > 0 else math.nan
            rows.append(CurveRow(
                target=r["target"], model=r["model"], setting=r["setting"],
                x_kind=r["x_kind"], num_strings=int(r["num_strings"]) if r["num_strings"] else None,
                x=_float(r["x"]), x_min=x_min, x_max=x_max, mean=mean, sem=sem, n=n,
                metric=r["metric"], quantity=r["quantity"],
                excluded_min_visits=int(r["excluded_min_visits"] or 0),
                no_value=int(r["no_value"] or 0), ci_low=low, ci_high=high,
                x_median=_float(r["x"]) if causal else middle,
            ))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("output")
    parser.add_argument("--title")
    parser.add_argument("--logx", action="store_true")
    parser.add_argument("--columns", type=int, default=4)
    args = parser.parse_args(argv)
    rows = read_rows(args.csv)
    plot_curves(rows, args.output, metric=rows[0].metric, title=args.title, logx=args.logx,
                columns=args.columns)
    print(f"{args.output}: {len(rows)} curve points from {args.csv}")


if __name__ == "__main__":
    main()
