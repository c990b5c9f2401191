"""Intervals over automata and the causal/correlational gap: the interval functions against
scipy, and the whole aggregation on synthetic results with known distributions (issue 19)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cfl_lightning.analysis import aggregate as ag
from cfl_lightning.analysis import stats
from tests.helpers import records, result

scipy_stats = pytest.importorskip("scipy.stats")


# --------------------------------------------------------------------------- the functions


@pytest.mark.parametrize("df", [0.5, 1, 1.7, 2, 3, 7, 12.4, 30, 1000])
@pytest.mark.parametrize("p", [0.025, 0.5, 0.9, 0.975, 0.999])
def test_t_quantile_matches_scipy(p, df):
    assert stats.t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-9, abs=1e-12)


def test_t_quantile_limits_and_bad_arguments():
    assert stats.t_quantile(0.975, math.inf) == pytest.approx(1.959963984540054)
    for p, df in ((0.0, 3), (1.0, 3), (0.5, 0), (0.5, -1), (float("nan"), 3)):
        with pytest.raises(ValueError):
            stats.t_quantile(p, df)


def test_t_interval_matches_scipy():
    values = [0.3, 1.2, 0.7, 2.5, 0.9]
    low, high = stats.t_interval(values + [None, float("nan")])  # missing values left out
    ref = scipy_stats.t.interval(
        0.95, len(values) - 1, loc=np.mean(values), scale=scipy_stats.sem(values)
    )
    assert (low, high) == pytest.approx(ref, rel=1e-9)
    assert all(math.isnan(v) for v in stats.t_interval([0.4]))  # n = 1: no interval
    assert all(math.isnan(v) for v in stats.t_interval([]))
    assert stats.t_interval([2.0, 2.0, 2.0]) == (2.0, 2.0)  # no spread: zero width, not NaN


def test_gap_interval_formulas():
    c, r = [1.0, 1.4, 0.8, 1.1], [0.2, 0.35, 0.3]
    gap = stats.gap_interval(c, r, "ratio")
    mc, mr = np.mean(c), np.mean(r)
    rc, rr = scipy_stats.sem(c) / mc, scipy_stats.sem(r) / mr
    df = (rc**2 + rr**2) ** 2 / (rc**4 / 3 + rr**4 / 2)
    half = scipy_stats.t.ppf(0.975, df) * math.hypot(rc, rr)
    assert gap.value == pytest.approx(mc / mr)
    expected = (mc / mr * math.exp(-half), mc / mr * math.exp(half))
    assert (gap.low, gap.high) == pytest.approx(expected)
    assert (gap.n_causal, gap.n_corr, gap.kind) == (4, 3, "ratio") and gap.excludes_no_gap()
    # difference: Welch's interval, as scipy computes it
    diff = stats.gap_interval(c, r, "difference")
    welch = scipy_stats.ttest_ind(c, r, equal_var=False).confidence_interval(0.95)
    assert diff.value == pytest.approx(mc - mr)
    assert (diff.low, diff.high) == pytest.approx((welch.low, welch.high))
    # too few values: an estimate without an interval; an empty arm or a non-positive mean: none
    single = stats.gap_interval(c, [0.3], "ratio")
    assert single.value == pytest.approx(mc / 0.3) and math.isnan(single.low)
    assert not single.excludes_no_gap()
    assert math.isnan(stats.gap_interval(c, [], "ratio").value)
    assert math.isnan(stats.gap_interval(c, [-0.1, 0.05], "ratio").value)
    with pytest.raises(ValueError):
        stats.gap_interval(c, r, "log")


def test_gap_kind_follows_the_quantity():
    assert ag.gap_kind("kl_target_unweighted", "state:odd", [0.1, 0.2]) == "ratio"
    assert ag.gap_kind("kl_target_unweighted", "symbol:a", [0.1, 0.2]) == "difference"
    assert ag.gap_kind("kl_target", "transition:q1:a", [0.1]) == "difference"
    assert ag.gap_kind("kl_total", "symbol:a", [0.1, 0.2]) == "ratio"  # a KL
    assert ag.gap_kind("kl_target_unweighted", "state:odd", [0.1, 0.0]) == "difference"


# --------------------------------------------------------------------------- known truths

SIGMA = 0.5  # lognormal spread of the per-automaton values (coefficient of variation ~0.53)
AUTOMATA = 8  # per causal point, and correlational runs near each count
TARGETS = 24  # the first half with equal arms, the second with correlational values 10x lower


def synthetic_study(seed: int = 20261126):
    """results.json-shaped dicts with known means, and the true causal mean of each target.

    Per target (``state:q0`` .. ``state:q23``, one causal count N): 8 automata, each trained
    twice -- the better repeat (lower kl_total) holds a lognormal value, the worse one a value
    1000x off, so best-of-repeats must come first. Correlational runs: 8 automata whose realized
    counts lie within a factor 1.35 of N, and 4 far outside (N/4 and 4N) whose values are 1000x
    higher, so the gap must use only the runs near N.
    """
    rng = np.random.default_rng(seed)
    items, truth = [], {}
    for t in range(TARGETS):
        event = f"state:q{t}"
        count = int(rng.choice([100, 250, 600]))
        mu = float(rng.uniform(-4.0, -0.5))
        truth[event] = math.exp(mu + SIGMA**2 / 2)
        lower = 10.0 if t >= TARGETS // 2 else 1.0
        for a in range(AUTOMATA):
            value = float(rng.lognormal(mu, SIGMA))
            for seed_, (v, total) in enumerate(((value, 1.0), (value * 1000, 2.0))):
                item = result(
                    automaton=f"{event}/A{a}", event=event, count=count, kl_total=total, seed=seed_
                )
                item["kl_target_unweighted"] = v
                items.append(item)
        near = [(count * float(rng.uniform(0.75, 1.35)), 1.0) for _ in range(AUTOMATA)]
        far = [(count / 4, 1000.0), (count / 4, 1000.0), (count * 4, 1000.0), (count * 4, 1000.0)]
        for c, (realized, scale) in enumerate(near + far):
            item = result(
                automaton=f"{event}/C{c}", intervention="none", event=event, realized=int(realized)
            )
            item["kl_target_unweighted"] = float(rng.lognormal(mu, SIGMA)) / lower * scale
            items.append(item)
    return items, truth


def causal_rows(items, **kwargs):
    rows = ag.aggregate(ag.best_of_repeats(records(items)), **kwargs)
    return {r.target: r for r in rows if r.setting == "causal_exact"}


def coverage(rows, truth, band):
    """How many targets' true mean lies in ``band(row) -> (low, high)``."""
    return sum(band(r)[0] <= truth[t] <= band(r)[1] for t, r in rows.items())


def gap_verdicts(rows):
    """(equal-arm gap intervals holding 1, 10x-lower targets with a gap interval above 1)."""
    equal = [rows[f"state:q{t}"] for t in range(TARGETS // 2)]
    lower = [rows[f"state:q{t}"] for t in range(TARGETS // 2, TARGETS)]
    holds = sum(r.gap_ci_low <= 1.0 <= r.gap_ci_high for r in equal)
    above = sum(r.gap_ci_low > 1.0 for r in lower)
    return holds, above


def test_intervals_and_gaps_on_known_distributions():
    items, truth = synthetic_study()
    rows = causal_rows(items)
    assert sorted(rows) == sorted(truth)
    assert {r.n for r in rows.values()} == {AUTOMATA}  # repeats reduced first
    assert {(r.gap_n, r.gap_kind) for r in rows.values()} == {(AUTOMATA, "ratio")}  # window
    covered = coverage(rows, truth, lambda r: (r.ci_low, r.ci_high))
    assert covered >= 20, covered
    holds, above = gap_verdicts(rows)
    assert holds >= 10 and above >= 11, (holds, above)


def test_negative_control_standard_error_bands_undercover():
    """The coverage criterion bites: +-1 SE (what the figures drew before) misses it."""
    items, truth = synthetic_study()
    rows = causal_rows(items)
    covered = coverage(rows, truth, lambda r: (r.mean - r.sem, r.mean + r.sem))
    assert covered < 20, covered


def test_negative_control_too_narrow_mean_interval(monkeypatch):
    """An interval that is too narrow (+-1 SE in place of the t interval) fails the criterion
    through the same aggregation."""
    items, truth = synthetic_study()

    def se_band(values, method, level=stats.LEVEL):
        mean, sem, _ = stats.mean_sem(values)
        return mean - sem, mean + sem

    monkeypatch.setattr(ag, "point_interval", se_band)
    rows = causal_rows(items)
    assert coverage(rows, truth, lambda r: (r.ci_low, r.ci_high)) < 20


def test_negative_control_gap_without_the_window(monkeypatch):
    """Correlational runs far from N (1000x higher here) must stay out of the gap."""
    items, _ = synthetic_study()
    monkeypatch.setattr(ag, "GAP_FACTOR", 8.0)
    rows = causal_rows(items)
    assert {r.gap_n for r in rows.values()} == {AUTOMATA + 4}
    holds, above = gap_verdicts(rows)
    assert holds < 10 and above < 11, (holds, above)


def test_signed_quantities_get_a_difference():
    """Per-symbol contributions can be negative: the gap is a difference with Welch's interval."""
    rng = np.random.default_rng(3)
    items = []
    for a in range(6):
        item = result(automaton=f"A{a}", event="symbol:a", count=200)
        item["kl_target_unweighted"] = float(rng.normal(-0.02, 0.01))
        items.append(item)
    for c in range(6):
        item = result(
            automaton=f"C{c}", intervention="none", event="symbol:a", realized=190 + 5 * c
        )
        item["kl_target_unweighted"] = float(rng.normal(0.05, 0.01))
        items.append(item)
    (row,) = causal_rows(items).values()
    causal = [i["kl_target_unweighted"] for i in items[:6]]
    corr = [i["kl_target_unweighted"] for i in items[6:]]
    assert row.gap_kind == "difference" and row.gap_n == 6
    assert row.gap == pytest.approx(np.mean(causal) - np.mean(corr))
    welch = scipy_stats.ttest_ind(causal, corr, equal_var=False).confidence_interval(0.95)
    assert (row.gap_ci_low, row.gap_ci_high) == pytest.approx((welch.low, welch.high))
    assert row.gap_ci_high < 0  # the causal values are lower: the interval excludes 0


def test_no_correlational_runs_near_the_count_leaves_the_gap_empty():
    items = [result(automaton=f"A{a}", count=100, kl_target=0.1 + 0.01 * a) for a in range(3)]
    items += [result(automaton="C0", intervention="none", realized=1000, kl_target=0.05)]
    (row,) = causal_rows(items).values()
    assert row.gap_n is None and row.gap_kind is None and math.isnan(row.gap)
    assert row.ci_low < row.mean < row.ci_high and row.x_median == 100


def test_explicit_edges_bin_exactly_and_drop_runs_outside():
    """``edges`` (a stratified design's bins): [E_i, E_i+1) exactly; runs outside are left out."""
    xs = [90, 100, 120, 140, 141, 199, 200, 250, 400]  # 90 and 400 lie outside [100, 400)
    runs = records(
        [
            result(automaton=f"A{i}", intervention="none", count=None, realized=x, kl_target=x / 1000)
            for i, x in enumerate(xs)
        ]
    )
    rows = ag.aggregate(ag.best_of_repeats(runs), edges=[100, 141, 200, 400], metric="kl_target")
    got = [(r.x_min, r.x_max, r.n) for r in rows]
    assert got == [(100, 141, 3), (141, 200, 2), (200, 400, 2)]
    assert rows[1].mean == pytest.approx((141 + 199) / 2 / 1000)
    # Negative control: without edges the same runs fall into other bins, and none is dropped.
    default = ag.aggregate(ag.best_of_repeats(runs), bins=3, metric="kl_target")
    assert sum(r.n for r in default) == len(xs)
    assert [(r.x_min, r.x_max) for r in default] != [(a, b) for a, b, _ in got]


# --------------------------------------------------------------------------- range (issue 42)


def test_log_t_interval_stays_above_zero_where_the_t_interval_does_not():
    """Two automata with a large spread: the plain t-interval of a KL runs below zero (issue 42,
    item 1); the log-scale one is ``mean * exp(-+ t * sem / mean)``, positive around the mean."""
    values = [0.004, 0.06]
    assert stats.t_interval(values)[0] < 0  # negative control: the range is not respected
    low, high = stats.log_t_interval(values)
    mean, sem = np.mean(values), scipy_stats.sem(values)
    half = scipy_stats.t.ppf(0.975, 1) * sem / mean
    assert (low, high) == pytest.approx((mean * math.exp(-half), mean * math.exp(half)))
    assert 0 < low < mean < high
    assert stats.too_wide("log-t", low, high, 2)  # spans far more than 10x: too wide to read
    narrow = stats.log_t_interval([0.05, 0.055, 0.052])
    assert 0 < narrow[0] < narrow[1] and not stats.too_wide("log-t", *narrow, 3)
    # no interval: n < 2 or a mean that is not positive (an estimate can fall below zero)
    assert all(math.isnan(v) for v in stats.log_t_interval([0.4]))
    assert all(math.isnan(v) for v in stats.log_t_interval([-0.002, 0.001]))
    assert stats.too_wide("log-t", math.nan, math.nan, 2)
    assert not stats.too_wide("log-t", math.nan, math.nan, 1)  # n = 1 is hollow, not wide
    assert not stats.too_wide("t", -5.0, 5.0, 2)  # a signed quantity's t-interval is drawn whole
    with pytest.raises(ValueError):
        stats.point_interval(values, "bootstrap")


def test_curve_intervals_of_non_negative_quantities_respect_the_range():
    """``aggregate``: a per-state contribution with n = 2 automata gets a log-t interval above
    zero, marked too wide; a per-symbol contribution (signed) keeps the plain t-interval."""
    items = []
    for event in ("state:odd", "symbol:a"):
        for a, value in enumerate((0.002, 0.03)):
            items.append(result(automaton=f"A{a}", event=event, count=100, kl_target=value))
    rows = {r.target: r for r in ag.aggregate(ag.best_of_repeats(records(items)))}
    state, symbol = rows["state:odd"], rows["symbol:a"]
    assert state.ci_method == "log-t" and 0 < state.ci_low < state.mean < state.ci_high
    assert state.ci_wide
    assert symbol.ci_method == "t" and symbol.ci_low < 0 and not symbol.ci_wide
    assert (symbol.ci_low, symbol.ci_high) == pytest.approx(stats.t_interval([0.004, 0.06]))
    assert ag.interval_method("kl_total", "symbol:a") == "log-t"  # a KL, whatever the target
