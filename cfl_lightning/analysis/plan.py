"""Pre-registered contrasts: a plan file (YAML) evaluated into a table and a verdict.

A plan names the target, the correlational bins, the causal counts, the contrasts and the claims
they decide, before anything trains; :func:`evaluate_plan` computes every contrast for every
architecture under each measure (by default both readings of the paper's measure: the
unweighted per-target contribution ``kl_target_unweighted`` and the ``p_pi``-weighted
``kl_target``), and :func:`~cfl_lightning.analysis.plan_table.format_plan` writes the tables.
Example (``docs/headline/plan_v1.yaml``)::

    name: headline study, version 1
    target: symbol:a            # or a pooled target: symbol:*
    causal: causal_exact        # the causal arm's setting (default causal_exact; against
                                # causal_at_least_once, bins count strings containing the target)
    measures: [kl_target_unweighted, kl_target]
    min_visits: 1
    bins: [100, 141, 200, 283, 400, 566, 800, 1131, 1600]   # [E_i, E_i+1), named by E_i
    counts: [125, 250, 500, 1000]
    contrasts:
      - {name: C1, bin_difference: [200, 100], expect: above}
      - {name: D1, count_difference: [250, 125], expect: below}
      - {name: G125, gap: 125, expect: nonzero}
    claims:
      - {name: correlational rise, contrasts: [C1]}
      - {name: causal-correlational gap, contrasts: [G125], rule: any}

Contrasts (every interval 95%, over automata; a pooled target's pairs are first reduced to one
mean per automaton, :mod:`cfl_lightning.analysis.pooling`):

* ``bin_difference: [A, B]``: mean of correlational bin A minus bin B (different automata:
  Welch's interval);
* ``count_difference: [A, B]``: causal count A minus count B, paired over the automata trained
  at both (Student-t interval of the paired differences);
* ``gap: N``: the causal mean at N against the correlational runs whose realized count lies in
  [N/sqrt2, N*sqrt2], as ``analyze`` computes it
  (:func:`~cfl_lightning.analysis.aggregate.gap_kind`: a difference for per-symbol and
  per-transition values, else a ratio; Welch / delta method).

Options of a contrast (the re-analysis views, each labelled in the output):

* ``view: per_run`` (bins and gaps): every (run, target) pair weighted equally, as the paper
  plots, instead of one mean per automaton (the default ``view: topology``);
* ``expect: equivalent`` with ``margin: d`` (bin differences and gaps): two one-sided tests at
  5% each -- *equivalent* when the 90% interval lies inside ``+- d`` times the second operand's
  mean (a difference) or inside ``1 +- d`` (a ratio), *not equivalent* when the 95% interval
  excludes "no effect", else *not resolved*;
* ``predicts: above|below`` (gaps): labels a resolved gap *with* the stated prediction (on that
  side of "no gap") or *against* it;
* ``reweight: count`` (gaps, weighted reading ``kl_target`` only): every causal run's value is
  its ``kl_target_unweighted`` times ``N / K`` (the weight a correlational pair at count ``N``
  carries in effect), an explanation of the measure; under other measures the contrast is
  ``n/a``.

* ``of: control`` or ``of: did`` (any contrast; needs the plan-level ``control: non-target``):
  the contrast of the runs' non-target controls, or of ``did`` = target minus control, per run
  (:mod:`cfl_lightning.analysis.control`), instead of the target's values (``of: target``, the
  default); e.g. ``{name: DD, count_difference: [1000, 62], of: did, expect: below}``. Controls
  and did are signed: a gap of them is a difference.

A plan-level ``control: non-target`` (or ``analyze --plan P --control non-target``) gives every
run its non-target control and adds, per measure and architecture, a table of the target, the
control and ``did`` at each causal count (mean over automata, its interval).
A plan-level ``level`` (default 0.95) sets every interval's coverage (``analyze --level``
overrides it: a sensitivity check, the plan's own level being what it pre-registered).
A plan-level ``repeats: mean`` keeps every training seed's run of a corpus (the best of each
seed) instead of the best run of the corpus (``repeats: best``, the default), so that the
per-automaton means average the trainings before any interval over automata.
A plan-level ``per_run_view: true`` adds, per measure and architecture, the bins as the paper
plots them (pairs weighted equally, mean +- 1 standard error).

Decision rule of a contrast (``expect``): ``above`` (``below``) -- *reproduced* when the whole
interval lies above (below) "no effect" (0, or 1 for a ratio), *not reproduced* when it lies on
the other side, *not resolved* when it holds "no effect" or there is no interval; ``nonzero``
-- *reproduced* when it excludes "no effect", else *not resolved*. A claim combines its
contrasts by ``rule``: ``all`` (default: reproduced when every contrast is, not reproduced when
any is not, else not resolved) or ``any`` (reproduced when one is, not reproduced when all are
not, else not resolved).
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cfl_lightning.analysis.control import CONTROLS, OFS, value_of, with_controls
from cfl_lightning.analysis.pooling import cluster_means
from cfl_lightning.analysis.labels import causal_settings, x_kind
from cfl_lightning.analysis.records import METRICS, SETTINGS, RunRecord
from cfl_lightning.analysis.stats import (
    GAP_FACTOR,
    LEVEL,
    gap_interval,
    mean_sem,
    no_gap,
    t_interval,
)
from cfl_lightning.analysis.verdicts import EQUIVALENCE_VERDICTS, combine, decide, direction
from cfl_lightning.errors import CflError

__all__ = [
    "Plan",
    "Contrast",
    "Claim",
    "Estimate",
    "PlanResult",
    "EXPECTATIONS",
    "VERDICTS",
    "load_plan",
    "parse_plan",
    "decide",
    "direction",
    "combine",
    "evaluate_plan",
]

EXPECTATIONS = ("above", "below", "nonzero", "equivalent")
VERDICTS = ("reproduced", "not reproduced", "not resolved")
VIEWS = ("topology", "per_run")
CONTRAST_KINDS = ("bin_difference", "count_difference", "gap")
RULES = ("all", "any")
DEFAULT_MEASURES = ("kl_target_unweighted", "kl_target")


@dataclass(frozen=True)
class Contrast:
    """One pre-registered contrast: ``kind`` (:data:`CONTRAST_KINDS`), its operands (two bins'
    lower edges, two counts, or one count) and the expected direction."""

    name: str
    kind: str
    operands: tuple[float, ...]
    expect: str
    view: str = "topology"
    margin: float | None = None
    predicts: str | None = None
    reweight: bool = False
    of: str = "target"


@dataclass(frozen=True)
class Claim:
    """A claim decided by contrasts under ``rule`` (``all`` or ``any``)."""

    name: str
    contrasts: tuple[str, ...]
    rule: str = "all"


@dataclass(frozen=True)
class Plan:
    """A parsed plan file (see the module docstring)."""

    name: str
    target: str
    causal: str
    measures: tuple[str, ...]
    min_visits: int
    bins: tuple[float, ...]
    counts: tuple[float, ...]
    contrasts: tuple[Contrast, ...]
    claims: tuple[Claim, ...]
    per_run_view: bool = False
    level: float = LEVEL
    control: str | None = None
    repeats: str = "best"


@dataclass(frozen=True)
class Estimate:
    """A mean or a contrast with its 95% interval over automata.

    ``n`` counts automata (``n_other`` the second arm's, for two-sample contrasts), ``pairs``
    the (run, event) pairs behind them; ``reference`` is "no effect" (0, or 1 for a ratio);
    ``kind`` is ``difference``, ``paired`` or ``ratio`` (means: ``mean``).
    """

    value: float
    low: float
    high: float
    n: int
    pairs: int
    n_other: int | None = None
    pairs_other: int | None = None
    kind: str = "mean"
    reference: float = 0.0
    # equivalence contrasts: the 90% interval and the margin's bounds
    inner: tuple[float, float] | None = None
    bounds: tuple[float, float] | None = None


@dataclass(frozen=True)
class PlanResult:
    """The plan evaluated: per ``(measure, model)`` the bins, counts, contrasts, verdicts."""

    plan: Plan
    models: tuple[str, ...]
    bins: dict[tuple[str, str, float], Estimate]
    counts: dict[tuple[str, str, float], Estimate]
    contrasts: dict[tuple[str, str, str], Estimate]
    contrast_verdicts: dict[tuple[str, str, str], str]
    claim_verdicts: dict[tuple[str, str, str], str]
    per_run_bins: dict[tuple[str, str, float], tuple[float, float, int]] | None = None
    # with a control: per (measure, model, count) the controls' and the did's means
    controls: dict[tuple[str, str, float], tuple[Estimate, Estimate]] | None = None


# --------------------------------------------------------------------------- reading


def load_plan(path: str | os.PathLike) -> Plan:
    """Read and check a plan file.

    Raises:
        CflError: the file cannot be read, is not YAML, or a key is missing or wrong (one line
            naming the file and the key).
    """
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as err:
        raise CflError(f"{os.fspath(path)}: cannot read the plan ({err.strerror or err})") from None
    except yaml.YAMLError as err:
        raise CflError(f"{os.fspath(path)}: not YAML ({str(err).splitlines()[0]})") from None
    return parse_plan(data, os.fspath(path))


def _numbers(value: Any, key: str, where: str, size: int | None = None) -> tuple[float, ...]:
    if not isinstance(value, list) or not value or any(
        isinstance(v, bool) or not isinstance(v, (int, float)) for v in value
    ) or (size is not None and len(value) != size):
        need = f"{size} numbers" if size else "a list of numbers"
        raise CflError(f"{where}: {key}: expected {need}, got {value!r}")
    return tuple(float(v) for v in value)


def _contrast(item: Any, plan: Mapping[str, Any], where: str) -> Contrast:
    """One entry of ``contrasts``, its operands checked against the plan's bins and counts."""
    if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
        raise CflError(f"{where}: contrasts: each needs a name, got {item!r}")
    name = item["name"]
    kinds = [k for k in CONTRAST_KINDS if k in item]
    if len(kinds) != 1:
        raise CflError(f"{where}: contrast {name}: give one of {', '.join(CONTRAST_KINDS)}")
    kind = kinds[0]
    if kind == "gap":
        operands = _numbers([item[kind]], f"contrast {name}: gap", where, 1)
    else:
        operands = _numbers(item[kind], f"contrast {name}: {kind}", where, 2)
    allowed = plan["bins"][:-1] if kind == "bin_difference" else plan["counts"]
    for value in operands:
        if value not in allowed:
            what = "a bin's lower edge" if kind == "bin_difference" else "one of the counts"
            raise CflError(f"{where}: contrast {name}: {value:g} is not {what}")
    expect = item.get("expect")
    if expect not in EXPECTATIONS:
        raise CflError(
            f"{where}: contrast {name}: expect must be one of {', '.join(EXPECTATIONS)}, "
            f"got {expect!r}"
        )
    return Contrast(name, kind, operands, expect, **_options(item, kind, expect, where))


def _options(item: Mapping[str, Any], kind: str, expect: str, where: str) -> dict[str, Any]:
    """A contrast's re-analysis options (module docstring), checked."""
    name = item["name"]
    view = item.get("view", "topology")
    if view not in VIEWS or (view == "per_run" and kind == "count_difference"):
        raise CflError(f"{where}: contrast {name}: view must be topology or per_run "
                       f"(per_run: bins and gaps only), got {view!r}")
    margin = item.get("margin")
    if (expect == "equivalent") != (margin is not None):
        raise CflError(f"{where}: contrast {name}: expect: equivalent and margin go together")
    if margin is not None and (isinstance(margin, bool) or not isinstance(margin, (int, float))
                               or not 0 < margin < 1 or kind == "count_difference"):
        raise CflError(f"{where}: contrast {name}: margin: expected a number in (0, 1) on a "
                       f"bin difference or a gap, got {margin!r}")
    predicts = item.get("predicts")
    if predicts not in (None, "above", "below") or (predicts and kind != "gap"):
        raise CflError(f"{where}: contrast {name}: predicts: above or below, on a gap only")
    reweight = item.get("reweight")
    if reweight not in (None, "count") or (reweight and kind != "gap"):
        raise CflError(f"{where}: contrast {name}: reweight: count, on a gap only")
    of = item.get("of", "target")
    if of not in OFS or (reweight and of != "target"):
        raise CflError(f"{where}: contrast {name}: of: expected one of {', '.join(OFS)} "
                       f"(reweight: of the target only), got {of!r}")
    return {"view": view, "margin": None if margin is None else float(margin),
            "predicts": predicts, "reweight": reweight == "count", "of": of}


def _claim(item: Any, names: set[str], where: str) -> Claim:
    if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
        raise CflError(f"{where}: claims: each needs a name, got {item!r}")
    contrasts = item.get("contrasts")
    if not isinstance(contrasts, list) or not contrasts:
        raise CflError(f"{where}: claim {item['name']}: contrasts: expected a list of names")
    unknown = [c for c in contrasts if c not in names]
    if unknown:
        raise CflError(f"{where}: claim {item['name']}: no contrast named {unknown[0]!r}")
    rule = item.get("rule", "all")
    if rule not in RULES:
        raise CflError(f"{where}: claim {item['name']}: rule must be all or any, got {rule!r}")
    return Claim(item["name"], tuple(contrasts), rule)


def parse_plan(data: Any, where: str = "plan") -> Plan:
    """A :class:`Plan` from a plan file's parsed YAML (see :func:`load_plan`)."""
    if not isinstance(data, Mapping):
        raise CflError(f"{where}: expected a mapping of plan keys")
    target = data.get("target")
    if not isinstance(target, str) or ":" not in target:
        raise CflError(f"{where}: target: expected an event such as symbol:a or symbol:*")
    measures = tuple(data.get("measures") or DEFAULT_MEASURES)
    wrong = [m for m in measures if m not in METRICS]
    if wrong:
        raise CflError(f"{where}: measures: {wrong[0]!r} is not one of {', '.join(METRICS)}")
    bins = _numbers(data.get("bins"), "bins", where)
    if len(bins) < 2 or any(not b > a for a, b in zip(bins, bins[1:])):
        raise CflError(f"{where}: bins: expected at least two increasing edges, got {list(bins)}")
    checked = {"bins": bins, "counts": _numbers(data.get("counts"), "counts", where)}
    contrasts = tuple(_contrast(c, checked, where) for c in data.get("contrasts") or [])
    if not contrasts:
        raise CflError(f"{where}: contrasts: expected at least one")
    names = [c.name for c in contrasts]
    if len(set(names)) != len(names):
        raise CflError(f"{where}: contrasts: names must differ")
    causal = data.get("causal", SETTINGS["exact"])
    known = causal_settings()  # the registered kinds that constrain the corpus
    if causal not in known:
        raise CflError(f"{where}: causal: expected {', '.join(known[:-1])} or {known[-1]}, "
                       f"got {causal!r}")
    min_visits = data.get("min_visits", 1)
    if isinstance(min_visits, bool) or not isinstance(min_visits, int) or min_visits < 0:
        raise CflError(f"{where}: min_visits: expected an integer >= 0, got {min_visits!r}")
    control = data.get("control")
    if control is not None and control not in CONTROLS:
        raise CflError(f"{where}: control: expected {' or '.join(CONTROLS)}, got {control!r}")
    repeats = data.get("repeats", "best")
    if repeats not in ("best", "mean"):
        raise CflError(f"{where}: repeats: expected best or mean, got {repeats!r}")
    needs = next((c for c in contrasts if c.of != "target"), None)
    if needs is not None and control is None:
        raise CflError(f"{where}: contrast {needs.name}: of: {needs.of} needs the plan's "
                       f"control: {CONTROLS[0]}")
    return Plan(
        name=str(data.get("name", where)),
        target=target,
        causal=causal,
        measures=measures,
        min_visits=min_visits,
        bins=bins,
        counts=checked["counts"],
        contrasts=contrasts,
        claims=tuple(_claim(c, set(names), where) for c in data.get("claims") or []),
        per_run_view=bool(data.get("per_run_view", False)),
        level=_level(data.get("level", LEVEL), where),
        control=control,
        repeats=repeats,
    )


def _level(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.5 < value < 1:
        raise CflError(f"{where}: level: expected a coverage in (0.5, 1), got {value!r}")
    return float(value)


# --------------------------------------------------------------------------- evaluating


@dataclass(frozen=True)
class _Arms:
    """One model's values under one measure: correlational ``[(x, value, automaton)]``, causal
    ``{count: {automaton: [values]}}`` and, under ``kl_target``, the causal values re-weighted
    by ``N / K`` (``reweighted``, same layout)."""

    corr: list[tuple[float, float, str]]
    causal: dict[float, dict[str, list[float]]]
    reweighted: dict[float, dict[str, list[float]]] = field(default_factory=dict)

    def _pairs(self, low: float, high: float, closed: bool, per_run: bool) -> tuple[list, int]:
        inside = [(v, a) for x, v, a in self.corr if low <= x < high or (closed and x == high)]
        if per_run:
            return [v for v, _ in inside], len(inside)
        return cluster_means([v for v, _ in inside], [a for _, a in inside])

    def bin(self, low: float, high: float, per_run: bool = False) -> tuple[list[float], int]:
        return self._pairs(low, high, False, per_run)

    def near(self, count: float, per_run: bool = False) -> tuple[list[float], int]:
        return self._pairs(count / GAP_FACTOR, count * GAP_FACTOR, True, per_run)

    def at(self, count: float, reweighted: bool = False) -> dict[str, float]:
        """One value per automaton at a causal count (the mean of its pairs)."""
        table = self.reweighted if reweighted else self.causal
        return {a: cluster_means(v, [a] * len(v))[0][0] for a, v in
                table.get(count, {}).items()}


def _arms(
    records: Iterable[RunRecord], measure: str, causal: str, of: str = "target"
) -> dict[str, _Arms]:
    """Per model, the runs' values (``of``: :func:`~cfl_lightning.analysis.control.value_of`); a
    correlational run's x is its realized count, or (for an at-least-once causal arm) its
    realized number of strings containing the target."""
    corr: dict[str, list] = defaultdict(list)
    nested = lambda: defaultdict(lambda: defaultdict(list))  # noqa: E731
    counts: dict[str, dict] = defaultdict(nested)
    reweighted: dict[str, dict] = defaultdict(nested)
    strings = x_kind(causal) == "strings"  # the causal kind counts strings (at_least_once)
    for r in records:
        value = value_of(r, measure, of)
        if value is None:
            continue
        x = r.realized_strings if strings else r.realized_count
        if r.setting == "correlational" and x is not None:
            corr[r.model].append((float(x), value, r.automaton_id))
        elif r.setting == causal and r.count is not None:
            counts[r.model][float(r.count)][r.automaton_id].append(value)
            if (measure == "kl_target" and of == "target" and r.kl_target_unweighted is not None
                    and r.num_strings):
                reweighted[r.model][float(r.count)][r.automaton_id].append(
                    r.kl_target_unweighted * r.count / r.num_strings)
    return {m: _Arms(corr.get(m, []), counts.get(m, {}), reweighted.get(m, {}))
            for m in {*corr, *counts}}


def _mean(values: Sequence[float], pairs: int, level: float) -> Estimate:
    mean, _, n = mean_sem(values)
    return Estimate(mean, *t_interval(values, level), n=n, pairs=pairs)


def _contrast_value(
    arms: _Arms, contrast: Contrast, plan: Plan, kind: str, measure: str
) -> Estimate:
    """One contrast of one model (module docstring)."""
    if contrast.kind == "count_difference":
        first, second = (arms.at(c) for c in contrast.operands)
        paired = [first[a] - second[a] for a in first if a in second]
        mean, _, n = mean_sem(paired)
        return Estimate(mean, *t_interval(paired, plan.level), n=n, pairs=n, kind="paired")
    per_run = contrast.view == "per_run"
    if contrast.kind == "bin_difference":
        edges = dict(zip(plan.bins, plan.bins[1:]))
        (a, pa), (b, pb) = (arms.bin(e, edges[e], per_run) for e in contrast.operands)
        return _two_sample(a, b, "difference", pa, pb, plan.level, contrast.margin)
    count = contrast.operands[0]
    if contrast.reweight and measure != "kl_target":  # n/a: the re-weighting is of kl_target
        return Estimate(math.nan, math.nan, math.nan, 0, 0, kind=kind, reference=no_gap(kind))
    causal = list(arms.at(count, contrast.reweight).values())
    b, pb = arms.near(count, per_run)
    return _two_sample(causal, b, kind, len(causal), pb, plan.level, contrast.margin)


def _two_sample(
    a: list[float], b: list[float], kind: str, pa: int, pb: int, level: float,
    margin: float | None = None,
) -> Estimate:
    """``a`` against ``b`` (independent automata): a difference (Welch) or a ratio (delta
    method) at ``level``; with a ``margin``, also the ``2 level - 1`` interval (two one-sided
    tests, 90% at 95%) and the equivalence bounds."""
    gap = gap_interval(a, b, kind, level)
    estimate = Estimate(gap.value, gap.low, gap.high, gap.n_causal, pa, gap.n_corr, pb,
                        kind=kind, reference=no_gap(kind))
    if margin is None:
        return estimate
    inner = gap_interval(a, b, kind, level=2.0 * level - 1.0)
    if kind == "ratio":
        bounds = (1.0 - margin, 1.0 + margin)
    else:
        level = abs(mean_sem(b)[0])
        bounds = (-margin * level, margin * level)
    return replace(estimate, inner=(inner.low, inner.high), bounds=bounds)


def evaluate_plan(records: Iterable[RunRecord], plan: Plan) -> PlanResult:
    """Every bin, count, contrast and claim of ``plan`` per measure and architecture.

    ``records`` are the runs read (any targets); the best repeat is kept per corpus and the runs
    about the plan's target (pooled: every event of its kind) are used, those whose target the
    test strings visit fewer than ``min_visits`` times left out. With the plan's ``control``,
    each run about a concrete event first gets its non-target control.
    """
    from cfl_lightning.analysis.aggregate import (
        best_of_repeats,
        expand_correlational,
        split_by_visits,
    )
    from cfl_lightning.analysis.pooling import concrete_targets, pool_records
    from cfl_lightning.analysis.report import known_events

    records = list(records)
    events = concrete_targets([plan.target], known_events(records))
    about = expand_correlational(records, events)
    if plan.control is not None:
        about = with_controls(about, plan.min_visits)
    best = pool_records(best_of_repeats(about, plan.repeats), [plan.target])
    best = split_by_visits(best, plan.min_visits).kept
    if not best:
        raise CflError(f"no runs about the plan's target {plan.target}")
    out: dict[str, dict] = {
        k: {} for k in ("bins", "counts", "contrasts", "cv", "claims", "per_run", "controls")
    }
    models = sorted({r.model for r in best})
    ofs = {"target", *(c.of for c in plan.contrasts)}
    if plan.control is not None:
        ofs |= {"control", "did"}
    for measure in plan.measures:
        arms = {of: _arms(best, measure, plan.causal, of) for of in sorted(ofs)}
        for model in arms["target"]:
            of_model = {of: table.get(model, _Arms([], {})) for of, table in arms.items()}
            _evaluate_model(out, plan, measure, model, of_model, best)
    return PlanResult(plan, tuple(models), out["bins"], out["counts"], out["contrasts"],
                      out["cv"], out["claims"], out["per_run"] if plan.per_run_view else None,
                      out["controls"] if plan.control is not None else None)


def _evaluate_model(
    out: dict[str, dict], plan: Plan, measure: str, model: str, arms: dict[str, _Arms],
    best: Sequence[RunRecord],
) -> None:
    """One model's bins, counts, controls, contrasts and claims under ``measure``, into ``out``
    (``arms``: its values per :data:`OFS` entry)."""
    from cfl_lightning.analysis.aggregate import gap_kind

    target = arms["target"]
    for low, high in zip(plan.bins, plan.bins[1:]):
        out["bins"][(measure, model, low)] = _mean(*target.bin(low, high), plan.level)
        if plan.per_run_view:
            out["per_run"][(measure, model, low)] = mean_sem(target.bin(low, high, True)[0])
    for count in plan.counts:
        out["counts"][(measure, model, count)] = _at(target, count, plan.level)
        if plan.control is not None:
            out["controls"][(measure, model, count)] = (
                _at(arms["control"], count, plan.level), _at(arms["did"], count, plan.level))
    kind = gap_kind(measure, plan.target, [getattr(r, measure) for r in best])
    for contrast in plan.contrasts:
        key = (measure, model, contrast.name)
        signed = "difference" if contrast.of != "target" else kind  # controls are signed
        estimate = _contrast_value(arms[contrast.of], contrast, plan, signed, measure)
        out["contrasts"][key] = estimate
        out["cv"][key] = ("n/a" if contrast.reweight and measure != "kl_target"
                          else decide(estimate, contrast.expect))
    for claim in plan.claims:
        verdicts = [out["cv"][(measure, model, c)] for c in claim.contrasts
                    if out["cv"][(measure, model, c)] != "n/a"]
        out["claims"][(measure, model, claim.name)] = (
            combine(verdicts, claim.rule) if verdicts else "n/a")


def _at(arms: _Arms, count: float, level: float) -> Estimate:
    """The mean over automata at a causal count, with the pairs behind it."""
    values = arms.causal.get(count, {})
    return _mean(list(arms.at(count).values()), sum(len(v) for v in values.values()), level)
