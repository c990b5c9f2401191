"""The evaluated plan as Markdown tables (:func:`format_plan`): per measure and architecture the
bins, the causal counts, the contrasts with their verdicts and the claims, then one verdict
table of every claim under every measure and architecture."""

from __future__ import annotations

import math

from cfl_lightning.analysis.plan import Estimate, PlanResult, direction
from cfl_lightning.analysis.pooling import is_pooled

__all__ = ["format_plan", "number", "interval"]


def number(x: float) -> str:
    """Three decimals, or ``–`` where there is no value."""
    return "–" if not math.isfinite(x) else f"{x:.3f}"


def interval(e: Estimate) -> str:
    """``[low, high]``, or ``–`` without an interval."""
    return "–" if not math.isfinite(e.low) else f"[{number(e.low)}, {number(e.high)}]"


def _label(model: str) -> str:
    return model[: -len("LanguageModel")] if model.endswith("LanguageModel") else model


def _n(e: Estimate, pooled: bool) -> str:
    """``16`` or ``16 vs 6``; with the pairs where the target is pooled."""
    n = str(e.n) if e.n_other is None else f"{e.n} vs {e.n_other}"
    if not pooled:
        return n
    pairs = str(e.pairs) if e.pairs_other is None else f"{e.pairs} vs {e.pairs_other}"
    return f"{n} ({pairs} pairs)"


def _pct(result: PlanResult) -> str:
    """The plan's coverage as a percentage (``95%``)."""
    return f"{100 * result.plan.level:g}%"


_OF = {"target": "", "control": " of the non-target control", "did": " of target - control"}


def _what(contrast, estimate: Estimate) -> str:
    a = contrast.operands
    view = ", per-run view" if contrast.view == "per_run" else ""
    of = _OF[contrast.of]
    if contrast.kind == "bin_difference":
        return f"{contrast.name}: bin {a[0]:g} - bin {a[1]:g}{of}{view}"
    if contrast.kind == "count_difference":
        return f"{contrast.name}: N {a[0]:g} - N {a[1]:g}{of} (paired)"
    weight = ", causal re-weighted by N/K (explains the measure)" if contrast.reweight else ""
    return f"{contrast.name}: gap at N {a[0]:g}{of} ({estimate.kind}{view}{weight})"


def _controls(result: PlanResult, measure: str, model: str, pooled: bool) -> list[str]:
    """The target, its non-target control and did at each causal count (means over automata)."""
    lines = ["", "non-target control (per run: the mean over the run's other events of the "
             "target's kind with a test visit, EOS excluded); did = target - control", "",
             f"| causal count | n | target | control | did | {_pct(result)} interval of did |",
             "|---|---|---|---|---|---|"]
    assert result.controls is not None
    for count in result.plan.counts:
        target = result.counts[(measure, model, count)]
        control, did = result.controls[(measure, model, count)]
        lines.append(f"| {count:g} | {_n(did, pooled)} | {number(target.value)} | "
                     f"{number(control.value)} | {number(did.value)} | {interval(did)} |")
    return lines


def _expected(contrast, estimate: Estimate, level: float) -> str:
    ref = f"{estimate.reference:g}"
    if contrast.expect == "equivalent" and estimate.bounds is not None:
        low, high = estimate.bounds
        inner = estimate.inner or (math.nan, math.nan)
        return (f"{200 * level - 100:g}% [{number(inner[0])}, {number(inner[1])}] inside "
                f"[{number(low)}, {number(high)}] (margin {contrast.margin:g})")
    if contrast.predicts:
        return f"not {ref}; predicted {contrast.predicts}: {direction(estimate, contrast.predicts)}"
    return f"not {ref}" if contrast.expect == "nonzero" else f"{contrast.expect} {ref}"


def _means(result: PlanResult, measure: str, model: str, pooled: bool) -> list[str]:
    plan, lines = result.plan, []
    head = "| {} | n{} | mean | " + _pct(result) + " interval |"
    rule = "|---|---|---|---|"
    for title, keys, table in (
        ("correlational bin", list(zip(plan.bins, plan.bins[1:])), result.bins),
        ("causal count", [(c, None) for c in plan.counts], result.counts),
    ):
        lines += ["", head.format(title, " (automata)" if pooled else ""), rule]
        for low, high in keys:
            e = table[(measure, model, low)]
            name = f"[{low:g}, {high:g})" if high is not None else f"{low:g}"
            lines.append(f"| {name} | {_n(e, pooled)} | {number(e.value)} | {interval(e)} |")
    return lines


def _contrasts(result: PlanResult, measure: str, model: str, pooled: bool) -> list[str]:
    lines = ["", f"| contrast | n | estimate | {_pct(result)} interval | expected | verdict |",
             "|---|---|---|---|---|---|"]
    for c in result.plan.contrasts:
        e = result.contrasts[(measure, model, c.name)]
        verdict = result.contrast_verdicts[(measure, model, c.name)]
        lines.append(f"| {_what(c, e)} | {_n(e, pooled)} | {number(e.value)} | {interval(e)} | "
                     f"{_expected(c, e, result.plan.level)} | {verdict} |")
    return lines


def _per_run(result: PlanResult, measure: str, model: str) -> list[str]:
    """The bins as the paper plots them: every pair weighted equally, mean +- 1 SE."""
    plan, lines = result.plan, ["", "per-run view (secondary: every (run, target) pair weighted "
                                "equally, as the paper plots; mean +- 1 standard error)", "",
                                "| correlational bin | pairs | mean | +- 1 SE |", "|---|---|---|---|"]
    assert result.per_run_bins is not None
    for low, high in zip(plan.bins, plan.bins[1:]):
        mean, sem, n = result.per_run_bins[(measure, model, low)]
        lines.append(f"| [{low:g}, {high:g}) | {n} | {number(mean)} | {number(sem)} |")
    return lines


def format_plan(result: PlanResult) -> str:
    """The plan's tables and verdict as Markdown (one string, ending in a newline)."""
    plan = result.plan
    pooled = is_pooled(plan.target)
    lines = [f"# plan: {plan.name} (target {plan.target}, causal arm {plan.causal})"]
    if pooled:
        lines.append("\nn counts automata (pairs: the (run, event) pairs behind them)")
    for measure in plan.measures:
        lines.append(f"\n## measure: {measure}")
        for model in result.models:
            lines.append(f"\n### {_label(model)}")
            lines += _means(result, measure, model, pooled)
            if result.per_run_bins is not None:
                lines += _per_run(result, measure, model)
            if result.controls is not None:
                lines += _controls(result, measure, model, pooled)
            lines += _contrasts(result, measure, model, pooled)
    if plan.claims:
        models = [_label(m) for m in result.models]
        lines += ["", "## verdict", "", "| claim | contrasts | measure | " + " | ".join(models)
                  + " |", "|---|---|---|" + "---|" * len(models)]
        for claim in plan.claims:
            for measure in plan.measures:
                cells = [result.claim_verdicts.get((measure, m, claim.name), "–")
                         for m in result.models]
                lines.append(f"| {claim.name} | {', '.join(claim.contrasts)} ({claim.rule}) | "
                             f"{measure} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
