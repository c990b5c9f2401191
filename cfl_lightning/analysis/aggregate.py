"""Keep the best repeat, build the curves with their intervals, and the causal/correlational gap.

The paper's recipe (section "Case Studies in Three Settings" and appendix "Error bars"), with
intervals over automata (:mod:`cfl_lightning.analysis.stats`):

* per (automaton, architecture, intervention, target, count) keep the repeat with the lowest
  total KL (:func:`best_of_repeats`), so that training-run variance does not confound the
  comparison; the automaton (a weighting or a topology) is then the independent unit;
* **causal** runs (``intervention != "none"``) are grouped by their requested count: one curve
  point per count, its mean over automata with the standard error and a 95% Student-t interval
  (on the log scale for non-negative quantities, :func:`interval_method`);
* **correlational** runs (``intervention == "none"``) are placed at their *realized* count and
  binned (:func:`bin_edges`); each bin gets its own mean, standard error and interval, and its
  median realized count (``x_median``, where log axes place it) beside the mean (``x``);
* the **gap** at each causal point of count N: the causal mean over the mean of the
  correlational runs (same target, architecture, corpus size and x axis) whose realized count
  lies in [N/sqrt2, N*sqrt2], as a ratio, or as a difference for signed quantities, with a 95%
  interval (:func:`~cfl_lightning.analysis.stats.gap_interval`, :func:`gap_kind`).

Reading runs (results.json, W&B, JSON Lines) lives in :mod:`cfl_lightning.analysis.records`,
choosing the runs of each curve in :mod:`~cfl_lightning.analysis.selection`, the bins in
:mod:`~cfl_lightning.analysis.binning` and the names of quantities, settings and axes (from the
kind registries) in :mod:`~cfl_lightning.analysis.labels`; their names are re-exported here. An unconstrained run records every event's realized counts and
decomposed KL (``occurrences``, ``kl``), so one correlational run serves every target
(:func:`expand_correlational`).

Exact-count runs count total occurrences of the target; at-least-once runs count training
strings that contain it. The two have different x axes (``x_kind`` ``"occurrences"`` /
``"strings"``); a correlational curve on the ``"strings"`` axis needs the runs' realized string
counts (``realized_strings``), when the results hold them. Correlational curves are drawn on the
axes of the target's causal runs (both when it has both kinds; on occurrences when it has none).

The y axis defaults to ``kl_target_unweighted``: the paper's per-state / per-transition /
per-symbol contribution (eq. kl-state-main and appendix "Targeted KL Divergence via
Decomposition"), an average over the test positions at which the target is at stake.
``kl_target`` is that contribution times its weight ``p_pi`` (the state's expected visits per
string), which in the correlational arm grows with the realized count and so couples y to x.

A target that the test strings never visit has an *unknown* contribution. Such runs are left
out, never scored 0: a run whose ``target_test_visits`` is below ``min_visits`` is excluded from
its curve (the same rule for causal and correlational runs), a null metric is left out, and in
older results (no ``target_test_visits``) a weighted value of exactly 0 beside a null unweighted
one -- the mark of an unvisited target -- is read as null.
"""

from __future__ import annotations

import csv
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from cfl_lightning.analysis.binning import BINNINGS, assign, bin_edges
from cfl_lightning.analysis.control import CONTROL_METRICS, control_of, did_summary
from cfl_lightning.analysis.labels import gap_kind, interval_method, quantity_name, x_kind
from cfl_lightning.analysis.pooling import cluster_means, is_pooled
from cfl_lightning.analysis.records import (
    METRICS,
    SETTINGS,
    RunRecord,
    load_results,
    load_wandb_sweep,
    record_from_results,
    record_from_wandb,
)
from cfl_lightning.analysis.selection import (
    VisitSplit,
    best_of_repeats,
    corpus_size,
    curve_key,
    default_targets,
    expand_correlational,
    for_target,
    split_by_visits,
)
from cfl_lightning.analysis.stats import (
    GAP_FACTOR,
    gap_interval,
    mean_sem,
    point_interval,
    too_wide,
)
from cfl_lightning.io import atomic_open

#: the x axes of :func:`aggregate`: the count (the setting's own unit) or the training symbols
X_AXES = ("count", "train_tokens")

__all__ = [
    "RunRecord",
    "CurveRow",
    "METRICS",
    "DEFAULT_METRIC",
    "SETTINGS",
    "BINNINGS",
    "record_from_results",
    "record_from_wandb",
    "load_results",
    "load_wandb_sweep",
    "best_of_repeats",
    "for_target",
    "expand_correlational",
    "default_targets",
    "bin_edges",
    "mean_sem",
    "curve_key",
    "VisitSplit",
    "split_by_visits",
    "quantity_name",
    "gap_kind",
    "interval_method",
    "aggregate",
    "X_AXES",
    "table_columns",
    "write_table",
]

# the paper's per-state / per-transition / per-symbol contribution (unweighted)
DEFAULT_METRIC = "kl_target_unweighted"
_NAN = math.nan


@dataclass(frozen=True)
class CurveRow:
    """One plotted point: a count (causal) or a bin (correlational) of one curve.

    The first fifteen fields are the CSV's original columns, in order; the interval, the median
    x and the gap columns follow them. Gap fields are empty (NaN / None) on correlational rows
    and on causal rows without correlational runs near their count.
    """

    target: str
    model: str
    setting: str
    x_kind: str
    num_strings: int | None
    x: float
    x_min: float
    x_max: float
    mean: float
    sem: float
    n: int
    # which value is plotted: the results key and the paper's name for it
    metric: str = DEFAULT_METRIC
    quantity: str = ""
    # runs of this curve (all its points) left out: below --min-visits, and without a value
    excluded_min_visits: int = 0
    no_value: int = 0
    # 95% interval of the mean over automata (NaN for n < 2), by ``ci_method``
    # (:func:`interval_method`): Student-t on the log scale for non-negative quantities
    ci_low: float = _NAN
    ci_high: float = _NAN
    # the median x of the point's runs (a causal point: its count)
    x_median: float = _NAN
    # causal / correlational gap at this causal point (see the module docstring)
    gap: float = _NAN
    gap_ci_low: float = _NAN
    gap_ci_high: float = _NAN
    gap_n: int | None = None
    gap_kind: str | None = None
    # (run, event) pairs behind the point and behind the gap's correlational arm: equal to n and
    # gap_n for a single target; a pooled target (``symbol:*``) has several pairs per automaton,
    # and n / gap_n count automata (:mod:`cfl_lightning.analysis.pooling`)
    pairs: int = 0
    gap_pairs: int | None = None
    # how ci_low/ci_high were computed ("log-t" or "t"), and whether the interval is too wide to
    # read (:func:`cfl_lightning.analysis.stats.too_wide`)
    ci_method: str = "t"
    ci_wide: bool = False
    # with a non-target control (``analyze --control non-target``,
    # :mod:`cfl_lightning.analysis.control`): the mean over automata of the runs' controls, the
    # target-minus-control difference ``did`` with its 95% t-interval, and the automata behind
    # it (None: no control asked for)
    control: float = _NAN
    did: float = _NAN
    did_ci_low: float = _NAN
    did_ci_high: float = _NAN
    did_n: int | None = None
    # the independent unit of every interval: "automaton", or "seed" (training seeds of one
    # automaton: ``analyze --unit seed``; such intervals do not generalize over automata)
    unit: str = "automaton"


def _metric(record: RunRecord, metric: str) -> float | None:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
    return getattr(record, metric)


def _near(
    pairs: Iterable[tuple[float, float, str, float | None]], count: float
) -> list[tuple[float, str]]:
    """(value, automaton) of the correlational pairs whose x lies in [count/GAP_FACTOR,
    count*GAP_FACTOR]."""
    low, high = count / GAP_FACTOR, count * GAP_FACTOR
    return [(value, cluster) for x, value, cluster, _ in pairs if low <= x <= high]


def _clustered(items: Sequence[tuple]) -> tuple[list[float], int]:
    """(value, automaton, ...) items -> one mean per automaton, and the number of items."""
    return cluster_means([i[0] for i in items], [i[1] for i in items])


def aggregate(
    records: Iterable[RunRecord],
    *,
    metric: str = DEFAULT_METRIC,
    bins: int = 8,
    binning: str = "quantile",
    targets: Sequence[str] | None = None,
    min_visits: int = 1,
    edges: Sequence[float] | None = None,
    control: bool = False,
    unit: str = "automaton",
    x: str = "count",
) -> list[CurveRow]:
    """The curve points: causal per count, correlational per realized-count bin.

    With ``x="train_tokens"`` (:data:`X_AXES`) the x axis is the training corpus's symbols
    (results.json ``train_tokens``): each causal point (still one per count) sits at its runs'
    mean ``train_tokens`` and spans their range, the correlational runs are binned on theirs,
    runs without it are left out (counted as without a value) and no gap is computed (the gap
    compares counts). Token-matched runs (``data.tokens``) form one curve per setting, whatever
    K each chose (their rows' ``num_strings`` is None), on either axis.

    ``records`` should already be reduced with :func:`best_of_repeats`. Runs whose target the
    test strings visit fewer than ``min_visits`` times (:func:`split_by_visits`), runs without a
    finite ``metric`` (unknown, never 0) and correlational runs without a realized count are
    left out; each row says how many runs of its curve were left out for the first two reasons.
    Every row gets a 95% interval of its mean; every causal row with correlational runs near
    its count (same target, model, corpus size and x axis) gets the gap (module docstring).
    With ``edges`` (increasing), correlational runs are binned on ``[E_i, E_{i+1})`` exactly
    (e.g. the bins of a stratified design, :mod:`cfl_lightning.stratify`) and runs outside
    ``[E_0, E_k)`` are left out of the correlational curves; otherwise ``bins`` bins are placed by
    ``binning``. With ``control``, every row also gets the non-target control and ``did``
    (:mod:`cfl_lightning.analysis.control`; the records carry their controls,
    :func:`~cfl_lightning.analysis.control.with_controls`). ``unit`` names the independent unit
    that the records' ``automaton_id`` stands for (``"automaton"``, or ``"seed"``: training seeds
    of one automaton, :func:`~cfl_lightning.analysis.selection.seed_units`).
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
    if control and metric not in CONTROL_METRICS:
        raise ValueError(f"a non-target control exists for {CONTROL_METRICS}, not {metric!r}")
    if x not in X_AXES:
        raise ValueError(f"unknown x axis {x!r}; expected one of {X_AXES}")
    records = [
        r for r in records if r.event is not None and (targets is None or r.event in targets)
    ]
    split = split_by_visits(records, min_visits)
    missing: dict[tuple, int] = defaultdict(int)
    usable = []
    for r in split.kept:
        if _metric(r, metric) is None or (x == "train_tokens" and r.train_tokens is None):
            missing[curve_key(r)] += 1
        else:
            usable.append(r)
    points = _Points.of(usable, metric, control, x)
    rows_of = _RowMaker(
        metric, split.excluded, dict(missing), control, unit, "" if x == "count" else x
    )
    rows = _causal_rows(points, rows_of) + _binned_rows(points, rows_of, bins, binning, edges)
    rows.sort(key=lambda r: (r.target, r.model, r.setting, r.num_strings or 0, r.x))
    return rows


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class _Points:
    """The usable runs' values, read into the curves they feed.

    ``causal``: ``(event, model, setting, num_strings, count) -> [(value, automaton, control)]``;
    ``corr``: ``(event, model, "correlational" | "correlational_strings", num_strings) -> [(x,
    value, automaton, control)]`` (x: the realized count, or the realized strings on the strings
    axis; control: the run's non-target control, None where none was asked for or exists);
    ``kinds``: each event's :func:`gap_kind` over all its values. The automaton is the cluster
    of a pooled target's pairs.
    """

    causal: dict[tuple, list[tuple[float, str, float | None]]]
    corr: dict[tuple, list[tuple[float, float, str, float | None]]]
    kinds: dict[str, str]
    # with ``x="train_tokens"``: each causal point's runs' train_tokens (else empty)
    tokens: dict[tuple, list[int]] = field(default_factory=dict)

    @classmethod
    def of(
        cls, usable: Sequence[RunRecord], metric: str, control: bool = False, x: str = "count"
    ) -> _Points:
        """Read the runs, each with a value of ``metric``.

        A correlational run goes on the occurrences axis where causal runs of its target are
        drawn on it, or where no causal run of the target is given (a correlational-only
        analysis); on the strings axis where the target has at-least-once runs.
        """
        causal: dict[tuple, list[tuple[float, str, float | None]]] = defaultdict(list)
        corr: dict[tuple, list[tuple[float, float, str, float | None]]] = defaultdict(list)
        alo_events = {  # targets with causal runs on the strings axis (at_least_once)
            r.event
            for r in usable
            if r.setting != "correlational" and x_kind(r.setting) == "strings"
        }
        causal_events = {r.event for r in usable if r.setting != "correlational"}
        occurrence_events = {
            r.event
            for r in usable
            if r.setting != "correlational"
            and x_kind(r.setting) == "occurrences"
        }
        values_of: dict[str, list[float]] = defaultdict(list)
        tokens: dict[tuple, list[int]] = defaultdict(list)
        for r in usable:
            value = _metric(r, metric)
            other = control_of(r, metric) if control else None
            values_of[r.event].append(value)
            if r.setting == "correlational":
                on_occurrences = r.event in occurrence_events or r.event not in causal_events
                if x == "train_tokens":
                    corr[(r.event, r.model, "correlational", r.num_strings)].append(
                        (r.train_tokens, value, r.automaton_id, other)
                    )
                    continue
                if r.realized_count is not None and on_occurrences:
                    corr[(r.event, r.model, "correlational", r.num_strings)].append(
                        (r.realized_count, value, r.automaton_id, other)
                    )
                if r.realized_strings is not None and r.event in alo_events:
                    corr[(r.event, r.model, "correlational_strings", r.num_strings)].append(
                        (r.realized_strings, value, r.automaton_id, other)
                    )
            elif r.count is not None:
                key = (r.event, r.model, r.setting, corpus_size(r), r.count)
                causal[key].append((value, r.automaton_id, other))
                if x == "train_tokens":
                    tokens[key].append(r.train_tokens)
        kinds = {event: gap_kind(metric, event, values) for event, values in values_of.items()}
        return cls(dict(causal), dict(corr), kinds, dict(tokens))


# --------------------------------------------------------------------------- binning


def _causal_rows(points: _Points, rows_of: _RowMaker) -> list[CurveRow]:
    """One row per causal count, with the gap to the correlational runs near it."""
    rows = []
    for (event, model, setting, k, count), values in points.causal.items():
        axis = "correlational_strings" if x_kind(setting) == "strings" else "correlational"
        causal, pairs = _clustered(values)
        gap = None
        did = [(v, c, a) for v, a, c in values]
        spent = points.tokens.get((event, model, setting, k, count))
        if spent:  # the train_tokens axis: at the runs' mean, spanning their range; no gap
            where = np.asarray(spent, dtype=float)
            x, lo, hi, median = where.mean(), where.min(), where.max(), np.median(where)
            rows.append(rows_of(event, model, setting, k, float(x), float(lo), float(hi),
                                (causal, pairs), float(median), None, did))
            continue
        near = _near(points.corr.get((event, model, axis, k), ()), count)
        if near:
            corr, near_pairs = _clustered(near)
            gap = (gap_interval(causal, corr, points.kinds[event]), near_pairs)
        x = float(count)
        rows.append(rows_of(event, model, setting, k, x, x, x, (causal, pairs), x, gap, did))
    return rows


def _binned_rows(
    points: _Points,
    rows_of: _RowMaker,
    bins: int,
    binning: str,
    edges: Sequence[float] | None,
) -> list[CurveRow]:
    """One row per non-empty bin of each correlational curve: at the bin's mean x, spanning
    its edges, with its median x (see :func:`aggregate` for ``edges``)."""
    rows = []
    for (event, model, setting, k), pairs in points.corr.items():
        x = np.array([p[0] for p in pairs], dtype=float)
        y = np.array([p[1] for p in pairs], dtype=float)
        cluster = np.array([p[2] for p in pairs], dtype=object)
        controls = [p[3] for p in pairs]
        bounds = bin_edges(x, bins, binning) if edges is None else np.asarray(edges, float)
        index = assign(x, bounds)
        inside = (x >= bounds[0]) & (x < bounds[-1]) if edges is not None else True
        for b in range(len(bounds) - 1):
            members = (index == b) & inside
            if not members.any():
                continue
            rows.append(
                rows_of(
                    event,
                    model,
                    setting,
                    k,
                    float(x[members].mean()),
                    float(bounds[b]),
                    float(bounds[b + 1]),
                    cluster_means(y[members].tolist(), cluster[members].tolist()),
                    float(np.median(x[members])),
                    did=[(y[i], controls[i], cluster[i]) for i in np.flatnonzero(members)],
                )
            )
    return rows


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class _RowMaker:
    """Builds a :class:`CurveRow` from a point's values: mean, SEM, 95% interval, the gap, and
    the curve's counts of runs left out (``excluded`` below --min-visits, ``no_value``), per
    :func:`curve_key`."""

    metric: str
    excluded: dict[tuple, int]
    no_value: dict[tuple, int]
    control: bool = False
    unit: str = "automaton"
    axis: str = ""  # the x axis when not the setting's own (``train_tokens``)

    def __call__(
        self,
        event: str,
        model: str,
        setting: str,
        k: int | None,
        x: float,
        lo: float,
        hi: float,
        clustered: tuple[Sequence[float], int],
        x_median: float,
        gap: Any = None,
        did: Sequence[tuple[float, float | None, str]] = (),
    ) -> CurveRow:
        """The row of one point from ``(its automata's values, its pairs)``; ``gap`` is
        ``(a gap_interval result, the correlational pairs)`` or None; ``did``: the point's
        ``(value, control, automaton)`` pairs (read where a control was asked for)."""
        key = (event, model, "correlational" if setting.startswith("correlational") else setting, k)
        values, pairs = clustered
        method = interval_method(self.metric, event)
        low, high = point_interval(values, method)
        mean, sem, n = mean_sem(values)
        gaps: dict[str, Any] = {}
        if gap is not None:
            gap, gap_pairs = gap
            gaps = dict(
                gap=gap.value,
                gap_ci_low=gap.low,
                gap_ci_high=gap.high,
                gap_n=gap.n_corr,
                gap_kind=gap.kind,
                gap_pairs=gap_pairs,
            )
        if self.control:
            summary = did_summary(did)
            gaps.update(control=summary.control, did=summary.did, did_ci_low=summary.low,
                        did_ci_high=summary.high, did_n=summary.n)
        return CurveRow(
            event,
            model,
            setting,
            self.axis or x_kind(setting),
            k,
            x,
            lo,
            hi,
            mean,
            sem,
            n,
            metric=self.metric,
            quantity=quantity_name(self.metric, event),
            excluded_min_visits=self.excluded.get(key, 0),
            no_value=self.no_value.get(key, 0),
            ci_low=low,
            ci_high=high,
            x_median=x_median,
            pairs=pairs,
            ci_method=method,
            ci_wide=too_wide(method, low, high, n),
            unit=self.unit,
            **gaps,
        )


POOLED_COLUMNS = ("pairs", "gap_pairs")  # written only where a row is about a pooled target
# written only where a control was asked for (``did_n`` not None)
CONTROL_COLUMNS = ("control", "did", "did_ci_low", "did_ci_high", "did_n")
UNIT_COLUMNS = ("unit",)  # written only where the unit is not the automaton


def table_columns(rows: Sequence[CurveRow]) -> list[str]:
    """The CSV's columns: every :class:`CurveRow` field, less ``pairs``/``gap_pairs`` unless a
    row is about a pooled target (for a single target they equal ``n``/``gap_n``), less the
    control's columns without a control, and less ``unit`` where every interval is over
    automata."""
    left_out = set()
    if not any(is_pooled(r.target) for r in rows):
        left_out.update(POOLED_COLUMNS)
    if all(r.did_n is None for r in rows):
        left_out.update(CONTROL_COLUMNS)
    if all(r.unit == "automaton" for r in rows):
        left_out.update(UNIT_COLUMNS)
    return [f.name for f in fields(CurveRow) if f.name not in left_out]


def write_table(rows: Sequence[CurveRow], path: str | os.PathLike) -> None:
    """Write the curve points as CSV (atomically); NaN is written as an empty cell."""
    names = table_columns(rows)

    def cell(value: Any) -> Any:
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float):
            return f"{value:.6g}"
        return value

    with atomic_open(path, "w") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(names)
        for row in rows:
            writer.writerow([cell(getattr(row, name)) for name in names])
