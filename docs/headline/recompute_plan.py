"""An independent recomputation of every table that `analyze --plan` prints for the headline
study's main plans (both halves), from the committed JSON Lines records, with numpy and scipy
only (no `cfl_lightning` code), as a sceptical reader would do it:

    python docs/headline/recompute_plan.py --half symbol FILE.jsonl [FILE.jsonl ...]
    python docs/headline/recompute_plan.py --half state FILE.jsonl [FILE.jsonl ...] \
        [--plan docs/headline/plan_v3_state.yaml]

Version 2 (the committed plan outputs `docs/headline/v2/*_half_plan_output.md`):

    python docs/headline/recompute_plan.py --half symbol docs/headline/v2/results.jsonl \
        docs/headline/v2/v1_causal_standin.jsonl
    python docs/headline/recompute_plan.py --half state docs/headline/v2/results.jsonl \
        docs/headline/v2/results_state.jsonl

The plan (default `docs/headline/plan_v2_{half}.yaml`; version 3's files have the same
contrasts) is read with PyYAML: its target, measures, min_visits, bin edges, counts, contrasts
and claims. Only the rules below come from the docs (`docs/headline_study.md`, "Version 2:
plan" -> "Analysis plan (pre-registered)"; `docs/analysis.md`, "Plans of pre-registered
contrasts"; `docs/guide/analysis.md`, "The causal-correlational gap"), not from the package:

- Records: one JSON object a line. Per (model, automaton, intervention, event, count, corpus
  size) the repeat with the lowest `kl_total` is kept. Correlational runs are
  `intervention == "none"`; causal runs are `intervention == "exact"` whose `event` is of the
  plan's target kind (`symbol:a` in the symbol half, `state:q1` in the state half).
- Pairs: every `symbol:X` (`state:qK`) key of a correlational run's `occurrences.count` is a pair
  at that realized count (for a state: transitions leaving it), with value
  `kl_unweighted[kind][X]` (`kl_target_unweighted`) or `kl[kind][X]` (`kl_target`); a pair with
  `test_visits[key] < min_visits` (or no value) is left out. A causal run is one pair at its
  `count`, value its top-level `kl_target_unweighted` / `kl_target`, left out when
  `target_test_visits < min_visits`.
- Unit, the automaton (`automaton_id`): a bin's (count's) pairs of one automaton are averaged
  first (cluster means); mean and 95% Student-t interval over those means, n - 1 degrees of
  freedom. Bins are [E_i, E_i+1), named by E_i.
- `bin_difference`: Welch's interval (Welch-Satterthwaite df) of the two bins' cluster means.
  `count_difference`: paired t over the automata present at both counts.
- `gap: N`: the causal automata at N against the cluster means of the correlational pairs with
  count in [N/sqrt2, N*sqrt2] (closed). Symbol half (signed per-symbol values): the difference,
  Welch's interval. State half: the ratio causal mean / correlational mean when every value of
  the half under that measure (both arms, both models, after min_visits) is positive, else
  the difference; the ratio's interval is `exp(log(gap) +- t(df) * sqrt(rc^2 + rr^2))`, rc,
  rr each arm's sem / mean, df Welch-Satterthwaite on those relative variances.
- Fewer than two values on a side: an estimate, no interval (no values on a side: neither).
  Verdicts: `above` (`below`) is reproduced when the interval lies above (below) no effect (0;
  1 for a ratio), not reproduced when it lies on the other side, else (or with no interval) not
  resolved; `nonzero` is reproduced when the interval excludes no effect, else not resolved.
  Claims: `rule: all` (default) reproduced when every contrast is, not reproduced when any is
  not, else not resolved; `rule: any` reproduced when one is, not reproduced when all are not,
  else not resolved.

Output, one line per number (fields separated by single spaces; `nan` for no estimate or interval):

    bin:E MODEL MEASURE mean low high n=AUTOMATA pairs=PAIRS
    count:N MODEL MEASURE mean low high n=AUTOMATA pairs=PAIRS
    CONTRAST MODEL MEASURE estimate low high n=A[/B] pairs=A[/B] kind=difference|ratio VERDICT
    claim:NAME MODEL MEASURE VERDICT

with MODEL the record's `model` (LSTMLanguageModel, TransformerLanguageModel), CONTRAST the
plan's name (C1, C1', D0, G62, ...), spaces in a claim's NAME written as `_` and VERDICT one of
`reproduced`, `not_reproduced`, `not_resolved`. A model with no run about the target prints no
line (as `analyze` prints no table for it). `tests/test_recompute_plan.py` holds these
numbers (to three decimals) and verdicts to the committed plan outputs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from scipy import stats

HERE = Path(__file__).resolve().parent
MODELS = ("LSTMLanguageModel", "TransformerLanguageModel")
#: measure -> the per-event table of a correlational run holding it
TABLES = {"kl_target_unweighted": "kl_unweighted", "kl_target": "kl"}
FACTOR = math.sqrt(2.0)
REPRODUCED, NOT_REPRODUCED, NOT_RESOLVED = "reproduced", "not reproduced", "not resolved"


@dataclass
class Row:
    """One number of the plan's output.

    Attributes:
        name: ``bin:E``, ``count:N``, a contrast's name or ``claim:NAME``.
        model: the record's ``model``.
        measure: ``kl_target_unweighted`` or ``kl_target``.
        value: mean or estimate (None for a claim).
        low: interval's lower end (None where there is none).
        high: interval's upper end.
        n: automata, one entry per side.
        pairs: pairs behind them, one entry per side.
        kind: ``difference`` or ``ratio`` (contrasts only).
        verdict: the verdict (contrasts and claims only).
    """

    name: str
    model: str
    measure: str
    value: float | None = None
    low: float | None = None
    high: float | None = None
    n: tuple = ()
    pairs: tuple = ()
    kind: str = ""
    verdict: str = ""


def read_records(paths) -> list[dict]:
    """Every record of the JSON Lines files, keeping the best repeat (lowest ``kl_total``) per
    (model, automaton, intervention, event, count, corpus size)."""
    best: dict[tuple, dict] = {}
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    continue
                r = json.loads(line)
                key = (r["model"], r["automaton_id"], r["intervention"], r["event"],
                       r["count"], r["num_strings"])
                if key not in best or r["kl_total"] < best[key]["kl_total"]:
                    best[key] = r
    return list(best.values())


def load_plan(path) -> dict:
    """The plan file, parsed (PyYAML)."""
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def collect(records, kind: str, model: str, measure: str, min_visits: int):
    """Correlational pairs ``[(count, value, automaton)]`` and causal values
    ``{count: {automaton: value}}`` of one model and measure, for pooled target ``kind:*``."""
    corr, causal = [], defaultdict(dict)
    for r in records:
        if r["model"] != model:
            continue
        if r["intervention"] == "none":
            for key, count in r["occurrences"]["count"].items():
                prefix, name = key.split(":", 1)
                value = r[TABLES[measure]].get(kind, {}).get(name)
                if prefix != kind or value is None:
                    continue
                if r["test_visits"].get(key, 0) < min_visits:
                    continue
                corr.append((count, value, r["automaton_id"]))
        elif r["intervention"] == "exact" and r["event"].split(":", 1)[0] == kind:
            if r["target_test_visits"] >= min_visits and r[measure] is not None:
                causal[r["count"]][r["automaton_id"]] = r[measure]
    return corr, causal


def clusters(pairs, inside) -> tuple[np.ndarray, int]:
    """Automaton means of the pairs whose count satisfies ``inside``, and how many pairs."""
    groups = defaultdict(list)
    for count, value, automaton in pairs:
        if inside(count):
            groups[automaton].append(value)
    return np.array([np.mean(v) for v in groups.values()]), sum(map(len, groups.values()))


def t_interval(values: np.ndarray, level: float):
    """Mean and Student-t interval (``None`` ends for fewer than two values; no mean for
    none)."""
    mean = float(np.mean(values)) if len(values) else None
    if len(values) < 2:
        return mean, None, None
    half = stats.t.ppf(0.5 + level / 2, len(values) - 1) * stats.sem(values)
    return mean, mean - half, mean + half


def welch(a: np.ndarray, b: np.ndarray, level: float):
    """Difference of means with Welch's interval (no estimate when a side is empty)."""
    if len(a) == 0 or len(b) == 0:
        return None, None, None
    diff = float(a.mean() - b.mean())
    if len(a) < 2 or len(b) < 2:
        return diff, None, None
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = stats.t.ppf(0.5 + level / 2, df) * math.sqrt(va + vb)
    return diff, diff - half, diff + half


def log_ratio(a: np.ndarray, b: np.ndarray, level: float):
    """Ratio of means with the delta-method interval on the log ratio (no estimate when a side
    is empty)."""
    if len(a) == 0 or len(b) == 0:
        return None, None, None
    ratio = float(a.mean() / b.mean())
    if len(a) < 2 or len(b) < 2:
        return ratio, None, None
    ra = a.var(ddof=1) / len(a) / a.mean() ** 2
    rb = b.var(ddof=1) / len(b) / b.mean() ** 2
    df = (ra + rb) ** 2 / (ra**2 / (len(a) - 1) + rb**2 / (len(b) - 1))
    half = stats.t.ppf(0.5 + level / 2, df) * math.sqrt(ra + rb)
    return ratio, ratio * math.exp(-half), ratio * math.exp(half)


def paired(a: dict, b: dict, level: float):
    """Mean paired difference ``a - b`` over the automata in both, with its t interval."""
    shared = sorted(set(a) & set(b))
    diffs = np.array([a[k] - b[k] for k in shared])
    return (*t_interval(diffs, level), len(shared))


def verdict(low, high, expect: str, null: float) -> str:
    """A contrast's verdict from its interval (``None`` ends: not resolved)."""
    if low is None or high is None:
        return NOT_RESOLVED
    if expect == "nonzero":
        return REPRODUCED if (low > null or high < null) else NOT_RESOLVED
    if low > null:
        return REPRODUCED if expect == "above" else NOT_REPRODUCED
    if high < null:
        return REPRODUCED if expect == "below" else NOT_REPRODUCED
    return NOT_RESOLVED


def combine(verdicts: list[str], rule: str) -> str:
    """A claim's verdict from its contrasts' under ``rule`` (``all`` or ``any``)."""
    if rule == "any":
        if REPRODUCED in verdicts:
            return REPRODUCED
        return NOT_REPRODUCED if all(v == NOT_REPRODUCED for v in verdicts) else NOT_RESOLVED
    if NOT_REPRODUCED in verdicts:
        return NOT_REPRODUCED
    return REPRODUCED if all(v == REPRODUCED for v in verdicts) else NOT_RESOLVED


def bin_rows(corr, edges, model, measure, level) -> list[Row]:
    """One row per correlational bin [E_i, E_i+1)."""
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        means, npairs = clusters(corr, lambda c, lo=lo, hi=hi: lo <= c < hi)
        rows.append(Row(f"bin:{lo}", model, measure, *t_interval(means, level),
                        n=(len(means),), pairs=(npairs,)))
    return rows


def count_rows(causal, counts, model, measure, level) -> list[Row]:
    """One row per causal count."""
    rows = []
    for n in counts:
        values = np.array(list(causal.get(n, {}).values()))
        rows.append(Row(f"count:{n}", model, measure, *t_interval(values, level),
                        n=(len(values),), pairs=(len(values),)))
    return rows


def contrast_row(c, corr, causal, edges, ratio, model, measure, level) -> Row:
    """One contrast of the plan: ``bin_difference``, ``count_difference`` or ``gap``."""
    if "bin_difference" in c:
        sides = []
        for lo in c["bin_difference"]:
            hi = edges[edges.index(lo) + 1]
            sides.append(clusters(corr, lambda x, lo=lo, hi=hi: lo <= x < hi))
        (a, pa), (b, pb) = sides
        value, low, high = welch(a, b, level)
        row = Row(c["name"], model, measure, value, low, high, (len(a), len(b)), (pa, pb),
                  "difference")
    elif "count_difference" in c:
        first, second = (causal.get(n, {}) for n in c["count_difference"])
        value, low, high, shared = paired(first, second, level)
        row = Row(c["name"], model, measure, value, low, high, (shared,), (shared,),
                  "difference")
    else:
        n = c["gap"]
        cvals = np.array(list(causal.get(n, {}).values()))
        near, npairs = clusters(corr, lambda x: n / FACTOR <= x <= n * FACTOR)
        kind = "ratio" if ratio else "difference"
        value, low, high = (log_ratio if ratio else welch)(cvals, near, level)
        row = Row(c["name"], model, measure, value, low, high, (len(cvals), len(near)),
                  (len(cvals), npairs), kind)
    row.verdict = verdict(row.low, row.high, c["expect"], 1.0 if row.kind == "ratio" else 0.0)
    return row


def evaluate(records, plan: dict, level: float = 0.95) -> list[Row]:
    """Every number and verdict of ``plan`` on ``records``: per measure and model, the bins,
    the causal counts, the contrasts; then one row per claim, measure and model."""
    kind = plan["target"].split(":", 1)[0]
    edges = list(plan["bins"])
    rows, claims = [], []
    for measure in plan.get("measures", list(TABLES)):
        arms = {m: collect(records, kind, m, measure, plan.get("min_visits", 0)) for m in MODELS}
        values = [v for corr, causal in arms.values() for v in
                  [x for _, x, _ in corr] + [x for d in causal.values() for x in d.values()]]
        ratio = kind == "state" and all(v > 0 for v in values)
        # a model with no run about the target prints nothing, as `analyze` prints no table
        for model in (m for m in MODELS if any(arms[m])):
            corr, causal = arms[model]
            rows += bin_rows(corr, edges, model, measure, level)
            rows += count_rows(causal, plan["counts"], model, measure, level)
            found = {}
            for c in plan["contrasts"]:
                found[c["name"]] = contrast_row(c, corr, causal, edges, ratio, model, measure,
                                                level)
                rows.append(found[c["name"]])
            for claim in plan.get("claims", []):
                verdicts = [found[name].verdict for name in claim["contrasts"]]
                claims.append(Row(f"claim:{claim['name']}", model, measure,
                                  verdict=combine(verdicts, claim.get("rule", "all"))))
    return rows + claims


def format_row(row: Row) -> str:
    """The row as one output line (see the module docstring)."""
    head = f"{row.name.replace(' ', '_')} {row.model} {row.measure}"
    if row.name.startswith("claim:"):
        return f"{head} {row.verdict.replace(' ', '_')}"

    def number(x):
        return "nan" if x is None else f"{x:.6f}"

    line = (f"{head} {number(row.value)} {number(row.low)} {number(row.high)} "
            f"n={'/'.join(map(str, row.n))} pairs={'/'.join(map(str, row.pairs))}")
    if row.kind:
        line += f" kind={row.kind} {row.verdict.replace(' ', '_')}"
    return line


def main(argv=None) -> int:
    """Command line: ``--half symbol|state [--plan PLAN.yaml] FILE.jsonl...``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--half", choices=("symbol", "state"), required=True)
    parser.add_argument("--plan", help="plan file (default docs/headline/plan_v2_HALF.yaml)")
    parser.add_argument("--level", type=float, default=None,
                        help="interval coverage (default: the plan's level, else 0.95)")
    parser.add_argument("files", nargs="+", help="JSON Lines records")
    args = parser.parse_args(argv)
    plan = load_plan(args.plan or HERE / f"plan_v2_{args.half}.yaml")
    if plan["target"] != f"{args.half}:*":
        parser.error(f"the plan's target is {plan['target']}, not {args.half}:*")
    level = args.level or plan.get("level", 0.95)
    for row in evaluate(read_records(args.files), plan, level):
        print(format_row(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
