"""Aggregation (best-of-repeats, SEM, binning), the `analyze` command, and an offline end-to-end
sweep -> analyze run."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # before anything imports wandb

import csv
import math
import subprocess
import sys
import time
import types

import numpy as np
import pytest

from cfl_lightning.analysis import aggregate as ag
from cfl_lightning.analysis.binning import assign
from tests.helpers import (
    CI_LIMIT_S, REPO, exit_status, records, result, synthetic_runs, write_results,
)


# --------------------------------------------------------------------------- statistics


def test_best_of_repeats_keeps_lowest_total_kl():
    runs = records(
        [
            result(kl_total=0.5, kl_target=0.05, seed=0),
            result(kl_total=0.2, kl_target=0.30, seed=1),  # best total, worse target: still kept
            result(kl_total=None, kl_target=0.01, seed=2),  # no total: never preferred
            result(kl_total=0.1, model="TransformerLanguageModel"),
            result(kl_total=0.1, count=200),
            result(kl_total=0.1, automaton="A1"),
        ]
    )
    best = ag.best_of_repeats(runs)
    assert len(best) == 4
    lstm = next(
        r
        for r in best
        if r.model == "LSTMLanguageModel" and r.count == 100 and r.automaton_id == "A0"
    )
    assert (lstm.kl_total, lstm.kl_target, lstm.seed, lstm.repeats) == (0.2, 0.3, 1, 3)
    only_none = ag.best_of_repeats(records([result(kl_total=None, kl_target=0.4)]))
    assert only_none[0].kl_target == 0.4


def test_mean_sem():
    mean, sem, n = ag.mean_sem([1.0, 2.0, 3.0, 4.0])
    assert (mean, n) == (2.5, 4)
    assert sem == pytest.approx(np.std([1, 2, 3, 4], ddof=1) / 2)
    assert ag.mean_sem([1.0, float("nan"), None, 3.0])[:3:2] == (2.0, 2)
    mean, sem, n = ag.mean_sem([0.7])
    assert mean == 0.7 and math.isnan(sem) and n == 1
    mean, sem, n = ag.mean_sem([])
    assert math.isnan(mean) and n == 0


def test_bin_edges_and_assignment():
    x = np.arange(1, 101, dtype=float)
    edges = ag.bin_edges(x, 4, "quantile")
    assert edges[0] == 1 and edges[-1] == 100 and len(edges) == 5
    counts = np.bincount(assign(x, edges), minlength=4)
    assert counts.tolist() == [25, 25, 25, 25]  # equal-count bins, the max in the last one
    # many ties: duplicate quantile edges are merged
    tied = np.array([5.0] * 50 + [6.0, 7.0])
    assert len(ag.bin_edges(tied, 8, "quantile")) <= 4
    log = ag.bin_edges(np.array([0.0, 1, 10, 100, 1000]), 3, "log")
    assert log[0] == 0 and log[-1] == 1000 and np.allclose(log[1:3], [10, 100])
    assert ag.bin_edges(np.array([3.0, 3.0]), 5).tolist() == [3.0, 3.0]
    assert np.allclose(ag.bin_edges(np.array([0.0, 10]), 2, "linear"), [0, 5, 10])
    with pytest.raises(ValueError):
        ag.bin_edges(np.array([1.0]), 2, "bogus")


def test_aggregate_causal_and_correlational():
    items = []
    for a, (k1, k2) in enumerate([(0.4, 0.1), (0.6, 0.3), (0.5, 0.2)]):  # three automata
        items += [
            result(automaton=f"A{a}", count=100, kl_target=k1),
            result(automaton=f"A{a}", count=300, kl_target=k2),
            result(automaton=f"A{a}", count=300, kl_target=None),  # a repeat without target
        ]
    for a in range(8):  # correlational: one run per automaton at its realized count
        items.append(
            result(
                automaton=f"C{a}",
                intervention="none",
                realized=50 * (a + 1),
                kl_target=0.1 * (a + 1),
            )
        )
    items.append(result(automaton="C9", intervention="none", realized=60, kl_target=float("nan")))
    rows = ag.aggregate(ag.best_of_repeats(records(items)), bins=4, metric="kl_target")
    causal = [r for r in rows if r.setting == "causal_exact"]
    assert [(r.x, r.n) for r in causal] == [(100.0, 3), (300.0, 3)]
    assert causal[0].mean == pytest.approx(0.5)
    assert causal[0].sem == pytest.approx(np.std([0.4, 0.6, 0.5], ddof=1) / math.sqrt(3))
    corr = [r for r in rows if r.setting == "correlational"]
    assert len(corr) == 4 and sum(r.n for r in corr) == 8  # the NaN run is left out
    assert all(r.x_kind == "occurrences" and r.x_min <= r.x <= r.x_max for r in corr)
    assert corr[0].x == pytest.approx(75.0) and corr[0].mean == pytest.approx(0.15)
    unweighted = ag.aggregate(ag.best_of_repeats(records(items)))  # the default
    assert next(r for r in unweighted if r.x == 100).mean == pytest.approx(1.0)
    assert {(r.metric, r.quantity) for r in unweighted} == {
        ("kl_target_unweighted", "per-state contribution")
    }
    assert {r.quantity for r in rows} == {"p_pi-weighted per-state contribution"}


def test_correlational_runs_serve_every_target_and_the_strings_axis():
    occurrences = {
        "count": {"state:odd": 120, "state:even": 40},
        "strings": {"state:odd": 30, "state:even": 12},
    }
    kl = {"state": {"odd": 0.2, "even": 0.7}, "symbol": {"a": 0.1}}
    corr = result(
        intervention="none",
        event="state:odd",
        realized=120,
        strings=30,
        kl_target=0.2,
        occurrences=occurrences,
        kl=kl,
    )
    alo = result(
        intervention="at_least_once", event="state:even", count=20, kl_target=0.5, automaton="B"
    )
    runs = records([corr, alo])
    assert ag.default_targets(runs) == ["state:even"]
    expanded = ag.expand_correlational(runs, ["state:even", "state:odd"])
    even = next(r for r in expanded if r.setting == "correlational" and r.event == "state:even")
    assert (even.realized_count, even.realized_strings, even.kl_target) == (40, 12, 0.7)
    rows = ag.aggregate(ag.best_of_repeats(expanded), targets=["state:even"])
    settings = {(r.setting, r.x_kind, r.x) for r in rows}
    # the correlational curve is drawn on the causal runs' axis only (strings: at least once)
    assert settings == {
        ("causal_at_least_once", "strings", 20.0),
        ("correlational_strings", "strings", 12.0),
    }
    # without causal runs of the target, correlational runs are drawn against occurrences
    rows = ag.aggregate(ag.best_of_repeats(expanded), targets=["state:odd"])
    assert {(r.setting, r.x_kind, r.x) for r in rows} == {("correlational", "occurrences", 120.0)}
    # with exact-count runs of the target too, on both axes
    exact = result(intervention="exact", event="state:even", count=50, kl_target=0.4, automaton="C")
    both = ag.expand_correlational(records([corr, alo, exact]), ["state:even"])
    rows = ag.aggregate(ag.best_of_repeats(both), targets=["state:even"])
    assert {(r.setting, r.x_kind) for r in rows} == {
        ("causal_at_least_once", "strings"),
        ("causal_exact", "occurrences"),
        ("correlational", "occurrences"),
        ("correlational_strings", "strings"),
    }
    # a causal run is only about its own event
    assert ag.for_target(runs[1], "state:odd") is None


def test_record_from_wandb_config_and_summary():
    config = {
        "data.count": "null",
        "data.intervention": "none",
        "model": "TransformerLanguageModel",
        "data": {"event": "state:odd", "num_strings": 500, "weight_seed": 3},
        "realized_count": 812,
        "automaton_id": "abc",
        "occurrences": {"count": {"state:rep": 9}, "strings": {"state:rep": 4}},
    }
    summary = {
        "kl_total": 0.3,
        "kl_target": 0.05,
        "kl_target_unweighted": "NaN",
        "kl/state/rep": 0.01,
        "kl_unweighted/state/rep": 0.02,
        "_step": 5,
    }
    rec = ag.record_from_wandb(config, summary, "e/p/r")
    assert (rec.model, rec.intervention, rec.event, rec.count) == (
        "TransformerLanguageModel",
        "none",
        "state:odd",
        None,
    )
    assert (rec.realized_count, rec.num_strings, rec.automaton_id) == (812, 500, "abc")
    assert (rec.kl_total, rec.kl_target, rec.kl_target_unweighted) == (0.3, 0.05, None)
    rep = ag.for_target(rec, "state:rep")
    assert (rep.realized_count, rep.realized_strings, rep.kl_target, rep.kl_target_unweighted) == (
        9,
        4,
        0.01,
        0.02,
    )
    nested = ag.record_from_wandb(
        {
            "model_class": "LSTMLanguageModel",
            "data": {"intervention": "exact", "event": "symbol:a", "count": 7, "weight_seed": 1},
        },
        {"test/kl_total": 1.0},
        "x",
    )
    assert nested.model == "LSTMLanguageModel" and nested.count == 7 and nested.kl_total == 1.0
    assert nested.automaton_id.startswith("cfg:")


def test_write_table_handles_nan(tmp_path):
    rows = [
        ag.CurveRow(
            "state:odd",
            "M",
            "causal_exact",
            "occurrences",
            500,
            1.0,
            1.0,
            1.0,
            0.5,
            float("nan"),
            1,
        )
    ]
    ag.write_table(rows, tmp_path / "t.csv")
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines[0] == (
        "target,model,setting,x_kind,num_strings,x,x_min,x_max,mean,sem,n,"
        "metric,quantity,excluded_min_visits,no_value,"  # the original columns, in order
        "ci_low,ci_high,x_median,gap,gap_ci_low,gap_ci_high,gap_n,gap_kind,"
        "ci_method,ci_wide"  # which interval, and whether it is too wide to read (issue 42)
    )
    assert lines[1] == (
        "state:odd,M,causal_exact,occurrences,500,1,1,1,0.5,,1,kl_target_unweighted,,0,0,"
        ",,,,,,,,t,false"
    )


# --------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """Two architectures, two targets, causal + correlational, with repeats (221 results; the
    module's tests only read them)."""
    return synthetic_runs(tmp_path_factory.mktemp("synthetic") / "runs")


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def check_png(path, min_bytes=10_000):
    import matplotlib.image

    assert path.stat().st_size > min_bytes
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 300
    assert image.std() > 0.01  # not blank


def test_analyze_figure_and_table(synthetic, tmp_path, capsys):
    out = tmp_path / "fig" / "fig.png"
    code = exit_status(["analyze", str(synthetic), "--output", str(out), "--bins", "5"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "skipped 1 of 221 run(s):" in err and "broken/results.json: not JSON" in err
    check_png(out)
    rows = read_csv(out.with_suffix(".csv"))
    assert {r["target"] for r in rows} == {"state:odd", "state:rep"}
    assert {r["model"] for r in rows} == {"LSTMLanguageModel", "TransformerLanguageModel"}
    causal = [r for r in rows if r["setting"] == "causal_exact"]
    assert sorted({float(r["x"]) for r in causal}) == [100, 200, 400, 800]
    assert all(r["n"] == "5" and float(r["sem"]) > 0 for r in causal)  # best of 2 repeats x 5
    corr = [r for r in rows if r["setting"] == "correlational"]
    for target in ("state:odd", "state:rep"):  # every correlational run serves both targets
        per = [r for r in corr if r["target"] == target and r["model"] == "LSTMLanguageModel"]
        assert len(per) == 5 and sum(int(r["n"]) for r in per) == 30


#: two more runs of the command: one target and another metric as a PDF, log bins and a log x
#: axis as an SVG (the output relative to the test's tmp_path)
OTHER_FORMATS = [
    ["--output", "f.pdf", "--target", "state:rep", "--metric", "kl_total"],
    ["--output", "f.svg", "--binning", "log", "--logx"],
]


def _other_format(synthetic, tmp_path, capsys, flags):
    """``analyze`` on the synthetic runs with ``flags``; succeeds; the figure's path."""
    out = tmp_path / flags[1]
    code = exit_status(["analyze", str(synthetic), "--output", str(out), *flags[2:]])
    err = capsys.readouterr().err
    assert code == 0, err
    if "--target" in flags:
        assert {r["target"] for r in read_csv(out.with_suffix(".csv"))} == {"state:rep"}
    return out


@pytest.mark.parametrize("flags", OTHER_FORMATS)
def test_analyze_other_formats_and_options(synthetic, tmp_path, capsys, monkeypatch, flags):
    """The quick counterpart of :func:`test_analyze_writes_pdf_and_svg`: the same runs, the
    figure built and handed to the writer in the format its suffix names (not rendered)."""
    from cfl_lightning.analysis import plot

    saved = []
    monkeypatch.setattr(plot, "_save", lambda fig, path, fmt, dpi: saved.append((path, fmt)))
    out = _other_format(synthetic, tmp_path, capsys, flags)
    assert saved == [(out, out.suffix[1:])]


@pytest.mark.slow
@pytest.mark.parametrize("flags", OTHER_FORMATS)
def test_analyze_writes_pdf_and_svg(synthetic, tmp_path, capsys, flags):
    out = _other_format(synthetic, tmp_path, capsys, flags)
    if out.suffix == ".pdf":
        assert out.read_bytes()[:4] == b"%PDF"
    else:
        assert "<svg" in out.read_text()[:500]


def test_analyze_bad_input(synthetic, tmp_path, capsys, monkeypatch):
    out = str(tmp_path / "f.png")
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        (["analyze", str(empty), "--output", out], "no results found"),
        (["analyze", str(tmp_path / "nowhere"), "--output", out], "no such directory"),
        (["analyze", str(synthetic), "--output", out, "--target", "state:zz"], "state:zz"),
        (["analyze", str(synthetic), "--output", str(tmp_path / "f.gif")], "must end in"),
        (["analyze", str(synthetic), "--output", out, "--bins", "0"], "--bins"),
        (["analyze", str(synthetic), "--output", out, "--metric", "acc"], "invalid choice"),
    ]
    for argv, message in cases:
        code = exit_status(argv)
        err = capsys.readouterr().err
        last = err.strip().splitlines()[-1]  # after a warning about the broken results.json
        assert code == 2 and message in last and "error:" in last, (argv, err)
        assert not any(line.startswith("Traceback") for line in err.splitlines())
    assert not (tmp_path / "f.png").exists()
    # a W&B sweep path without credentials / with W&B switched off
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    started = time.monotonic()
    code = exit_status(["analyze", "ent/proj/abc123", "--output", out])
    err = capsys.readouterr().err
    assert code == 2 and "no W&B API key" in err and err.count("\n") == 1
    assert time.monotonic() - started < 5
    monkeypatch.setenv("WANDB_MODE", "offline")
    code = exit_status(["analyze", "ent/proj/abc123", "--output", out])
    err = capsys.readouterr().err
    assert code == 2 and "WANDB_MODE=offline" in err and err.count("\n") == 1


def test_analyze_reads_a_wandb_sweep(tmp_path, capsys, monkeypatch):
    """The W&B path through a stand-in for ``wandb.Api`` (no network here)."""

    def run(i, state="finished"):
        config = {
            "model": "LSTMLanguageModel",
            "data.intervention": "exact",
            "data.count": 100 * (1 + i % 2),
            "data.event": "symbol:a",
            "data": {"num_strings": 500},
            "automaton_id": f"A{i // 2}",
        }
        summary = {"kl_total": 1.0, "kl_target_unweighted": 0.1 * (1 + i)}
        return types.SimpleNamespace(
            config=config, summary=summary, state=state, path=["ent", "proj", f"r{i}"]
        )

    class Api:
        def __init__(self, timeout=None):
            pass

        def sweep(self, path):
            if path != "ent/proj/sw1":
                raise ValueError(f"Could not find sweep {path}")
            return types.SimpleNamespace(runs=[run(i) for i in range(6)] + [run(9, "crashed")])

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(Api=Api))
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    out = tmp_path / "w.png"
    code = exit_status(["analyze", "ent/proj/sw1", "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "skipped 1 of 7 run(s):\n" in err and "analyze:   ent/proj/r9: state crashed\n" in err
    rows = read_csv(out.with_suffix(".csv"))
    assert [(r["x"], r["n"]) for r in rows] == [("100", "3"), ("200", "3")]
    code = exit_status(["analyze", "ent/proj/sweeps/sw1", "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    code = exit_status(["analyze", "ent/proj/missing", "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Could not find sweep ent/proj/missing" in err


@pytest.mark.slow
def test_analyze_imports_no_lightning():
    code = (
        "import sys; from cfl_lightning.__main__ import main; "
        "rc = main(['analyze', sys.argv[1], '--output', sys.argv[2]]); "
        "bad = [m for m in ('lightning', 'wandb') if m in sys.modules]; "
        "assert not bad, bad; sys.exit(rc)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "/nonexistent-dir", "/tmp/x.png"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "no such directory" in result.stderr


# --------------------------------------------------------------------------- end to end

TINY = """\
method: grid
parameters:
{grid}
  data.event:
    value: "state:odd"
  data.num_strings:
    value: 100
  data.val_strings:
    value: 40
  data.test_strings:
    value: 100
  data.device:
    value: cpu
  model.init_args.param_budget:
    value: 4000
  trainer.max_epochs:
    value: 1
  trainer.logger:
    value: false
command:
  - ${{env}}
  - ${{interpreter}}
  - -m
  - cfl_lightning
  - fit
  - --config
  - configs/parity_starfree.yaml
  - ${{args}}
"""


def cli(*args, env, cwd=REPO, timeout=CI_LIMIT_S):
    return subprocess.run(
        [sys.executable, "-m", "cfl_lightning", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_offline_sweeps_then_analyze_end_to_end(tmp_path):
    causal = tmp_path / "causal.yaml"
    causal.write_text(
        TINY.format(
            grid=(
                "  model:\n    value: LSTMLanguageModel\n"
                "  data.weight_seed:\n    values: [0, 1]\n"
                "  data.intervention:\n    value: exact\n"
                "  data.count:\n    values: [60, 180]"
            )
        )
    )
    corr = tmp_path / "corr.yaml"
    corr.write_text(
        TINY.format(
            grid=(
                "  model:\n    value: LSTMLanguageModel\n"
                "  data.weight_seed:\n    values: [2, 3]\n"
                "  data.intervention:\n    value: none\n"
                '  data.count:\n    value: "null"'
            )
        )
    )
    env = dict(os.environ, WANDB_MODE="disabled", CFL_LIGHTNING_CACHE=str(tmp_path / "cache"))
    out = tmp_path / "out"
    done = cli("sweep", str(causal), "--output", str(out / "causal"), "--parallel", "2", env=env)
    assert done.returncode == 0, done.stderr
    assert "4 done, 0 skipped (already done), 0 failed of 4 points" in done.stderr
    done = cli("sweep", str(corr), "--output", str(out / "corr"), "--parallel", "2", env=env)
    assert done.returncode == 0, done.stderr
    runs = sorted(p for p in (out / "causal").iterdir() if p.is_dir())  # .sweep.json beside
    assert len(runs) == 4 and all((r / "params.json").is_file() for r in runs)
    assert all(len(list(r.rglob("results.json"))) == 1 for r in runs)
    # resumable: nothing left to do
    again = cli("sweep", str(causal), "--output", str(out / "causal"), env=env)
    assert again.returncode == 0 and "0 done, 4 skipped (already done)" in again.stderr
    fig = tmp_path / "fig.png"
    shown = cli("analyze", str(out), "--output", str(fig), "--bins", "3", env=env)
    assert shown.returncode == 0, shown.stderr
    check_png(fig)
    rows = read_csv(tmp_path / "fig.csv")
    assert {r["target"] for r in rows} == {"state:odd"}
    causal_rows = [r for r in rows if r["setting"] == "causal_exact"]
    assert [float(r["x"]) for r in causal_rows] == [60.0, 180.0]
    assert all(r["n"] == "2" and float(r["mean"]) > 0 for r in causal_rows)
    corr_rows = [r for r in rows if r["setting"] == "correlational"]
    assert 1 <= len(corr_rows) <= 2 and sum(int(r["n"]) for r in corr_rows) == 2


@pytest.mark.slow
def test_plot_many_targets_and_both_axes(tmp_path):
    from cfl_lightning.analysis.plot import plot_curves, target_title

    rows = []
    for t in range(9):
        for setting, kind in (("causal_exact", "occurrences"), ("correlational", "occurrences")):
            for x in (10.0, 20.0, 40.0):
                rows.append(
                    ag.CurveRow(
                        f"state:q{t}",
                        "LSTMLanguageModel",
                        setting,
                        kind,
                        500,
                        x,
                        x,
                        x,
                        1.0 / x,
                        0.01,
                        3,
                    )
                )
    rows.append(
        ag.CurveRow(
            "state:q1",
            "M",
            "causal_at_least_once",
            "strings",
            500,
            5.0,
            5.0,
            5.0,
            -1.0,
            float("nan"),
            1,
        )
    )  # non-positive mean on a log axis
    out = plot_curves(rows, tmp_path / "many.png", metric="kl_total", title="t")
    check_png(out)
    assert target_title("transition:q1:a") == "transition q1 -a->"
    assert target_title("symbol:b") == "symbol b"


def _logx_axes(tmp_path, monkeypatch, xs):
    """The first panel of a --logx figure of one causal curve at counts ``xs`` (drawn)."""
    from cfl_lightning.analysis import plot

    captured = {}
    monkeypatch.setattr(plot, "_save", lambda fig, path, fmt, dpi: captured.setdefault("fig", fig))
    rows = [
        ag.CurveRow("state:odd", "LSTMLanguageModel", "causal_exact", "occurrences", 500,
                    float(x), float(x), float(x), 0.1 / (i + 1), 0.01, 4)
        for i, x in enumerate(xs)
    ]
    plot.plot_curves(rows, tmp_path / "f.png", logx=True)
    captured["fig"].canvas.draw()
    return captured["fig"].axes[0]


@pytest.mark.parametrize("xs,scale", [((50, 200, 800), "log"), ((0, 200, 800), "symlog")])
def test_logx_axis(tmp_path, monkeypatch, xs, scale):
    """--logx: a plain log axis when every count is positive (no negative tick labels)."""
    ax = _logx_axes(tmp_path, monkeypatch, xs)
    assert ax.get_xscale() == scale
    assert ax.get_xlim()[0] >= 0 or scale == "log"


@pytest.mark.parametrize(
    "xs,labels,absent",
    [
        # about a decade and a half: the causal counts, decades plus 2x and 5x, in plain digits;
        # 100 would overlap 125
        (
            (125, 500, 2000, 3700),
            {"125", "200", "500", "1,000", "2,000", "3,700"},
            {"100", "300", "3,000", "4,000"},
        ),
        # three decades: the counts and the decades that do not overlap them (no minor labels)
        (
            (80, 900, 43000),
            {"80", "900", "10,000", "43,000"},
            {"100", "1,000", "200", "500", "5,000", "20,000"},
        ),
    ],
)
def test_logx_tick_labels_do_not_crowd(tmp_path, monkeypatch, xs, labels, absent):
    """--logx labels counts plainly: no 2x10^3 3x10^3 4x10^3 run of overlapping minor labels."""
    ax = _logx_axes(tmp_path, monkeypatch, xs)
    low, high = ax.get_xlim()
    shown = {
        t.label1.get_text()
        for t in ax.xaxis.get_major_ticks() + ax.xaxis.get_minor_ticks()
        if low <= t.get_loc() <= high and t.label1.get_text()
    }
    assert labels <= shown, shown
    assert not shown & absent, shown
    assert not any("times" in text or "^" in text for text in shown), shown


def test_outputs_are_readable_by_others(tmp_path):
    """Atomic writes start from a 0600 temporary file; the result has the usual mode."""
    from cfl_lightning.io import atomic_write_text

    mask = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "x.json", "{}")
    finally:
        os.umask(mask)
    assert (tmp_path / "x.json").stat().st_mode & 0o777 == 0o644


# --------------------------------------------------------------------------- what the paper plots


def test_default_y_axis_is_the_unweighted_contribution(tmp_path, capsys):
    """Weighted and unweighted values unrelated to each other: the CSV shows the unweighted."""
    items = []
    for a in range(3):
        for count, (w, u) in ((100, (0.01, 0.7)), (400, (0.004, 0.2))):
            item = result(automaton=f"A{a}", count=count, kl_target=w)
            item["kl_target_unweighted"] = u + 0.01 * a
            items.append(item)
    write_results(tmp_path / "runs", items)
    out = tmp_path / "f.png"
    code = exit_status(["analyze", str(tmp_path / "runs"), "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    rows = read_csv(out.with_suffix(".csv"))
    assert [(float(r["x"]), float(r["mean"])) for r in rows] == [
        (100.0, pytest.approx(0.71)),
        (400.0, pytest.approx(0.21)),
    ]
    assert {(r["metric"], r["quantity"]) for r in rows} == {
        ("kl_target_unweighted", "per-state contribution")
    }
    assert "y axis: kl_target_unweighted (per-state contribution)" in err
    code = exit_status(
        ["analyze", str(tmp_path / "runs"), "--output", str(out), "--metric", "kl_target"],
    )
    err = capsys.readouterr().err
    assert code == 0, err
    rows = read_csv(out.with_suffix(".csv"))
    assert [float(r["mean"]) for r in rows] == [pytest.approx(0.01), pytest.approx(0.004)]
    assert {r["quantity"] for r in rows} == {"p_pi-weighted per-state contribution"}


def test_negative_symbol_contributions_are_kept_and_drawn(tmp_path, capsys, monkeypatch):
    """Per-symbol contributions are log ratios: negative where the model over-predicts."""
    from cfl_lightning.analysis import plot

    captured = []
    real_save = plot._save

    def save(fig, path, fmt, dpi):
        captured.append(fig)
        real_save(fig, path, fmt, dpi)

    monkeypatch.setattr(plot, "_save", save)
    items = []
    for a in range(3):
        for count, u in ((100, -0.03), (300, -0.01), (900, 0.002)):
            item = result(automaton=f"A{a}", event="symbol:a", count=count, kl_target=0.001)
            item["kl_target_unweighted"] = u * (1 + 0.1 * a)
            items.append(item)
    write_results(tmp_path / "runs", items)
    out = tmp_path / "neg.png"
    code = exit_status(["analyze", str(tmp_path / "runs"), "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "could not be drawn" not in err
    rows = read_csv(out.with_suffix(".csv"))
    assert len(rows) == 3 and sum(float(r["mean"]) < 0 for r in rows) == 2
    assert {r["quantity"] for r in rows} == {"per-symbol contribution"}
    check_png(out)
    ax = captured[-1].axes[0]
    assert ax.get_yscale() in ("linear", "symlog")
    ys = np.concatenate([np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()])
    assert np.isfinite(ys).sum() >= 3 and (ys < 0).sum() >= 2  # the curve's points, zero line aside
    lo, hi = ax.get_ylim()
    assert lo < -0.03 and hi > 0.002  # every point inside the panel
    assert "per-symbol contribution" in ax.get_ylabel()
    assert not [t for t in ax.texts if "no " in t.get_text()]  # no "nothing to show" note


@pytest.mark.parametrize(
    "means,scale",
    [
        ((0.1, 0.01, 0.001), "log"),
        ((-0.03, -0.01, 0.002), "linear"),
        ((-5.0, 0.001, 0.2), "symlog"),
        ((0.0, 0.0), "linear"),
        ((float("nan"), 0.5), "log"),
    ],
)
def test_y_scale_follows_the_data(means, scale):
    from cfl_lightning.analysis.plot import y_scale

    chosen, linthresh = y_scale(means)
    assert chosen == scale
    if scale == "symlog":
        assert linthresh == 0.001


def test_undrawable_points_are_counted(tmp_path):
    from cfl_lightning.analysis.plot import plot_curves, undrawable

    def row(x, mean):
        return ag.CurveRow("symbol:a", "M", "causal_exact", "occurrences", 500, x, x, x, mean,
                           0.0, 2)

    rows = [row(10.0, -0.1), row(20.0, 0.2), row(40.0, float("nan"))]
    assert undrawable(rows) == 1
    assert undrawable(rows[:2]) == 0
    check_png(plot_curves(rows, tmp_path / "u.png"), min_bytes=5_000)


def _visits_runs():
    """Causal and correlational runs about state:odd with known, zero and unknown test visits."""
    items = []
    for a, visits in enumerate((0, 3, 12, 40, None)):
        item = result(automaton=f"A{a}", count=100, kl_target=0.0 if visits == 0 else 0.1)
        item["target_test_visits"] = visits
        if visits == 0:
            item["kl_target_unweighted"] = None  # unknown
        items.append(item)
    for a, visits in enumerate((0, 0, 2, 9, 30, 50)):
        item = result(automaton=f"C{a}", intervention="none", realized=40 + 20 * a, kl_target=0.2)
        item["target_test_visits"] = visits
        items.append(item)
    return items


def test_min_visits_excludes_the_same_way_in_both_arms():
    best = ag.best_of_repeats(records(_visits_runs()))
    split = ag.split_by_visits(best, 5)
    lstm = ("state:odd", "LSTMLanguageModel")
    assert split.excluded == {(*lstm, "causal_exact", 500): 2, (*lstm, "correlational", 500): 3}
    assert split.unknown == {(*lstm, "causal_exact", 500): 1}
    rows = ag.aggregate(best, min_visits=5, bins=2)
    causal = [r for r in rows if r.setting == "causal_exact"]
    assert causal[0].n == 3 and causal[0].excluded_min_visits == 2  # 12, 40 and unknown
    corr = [r for r in rows if r.setting == "correlational"]
    assert sum(r.n for r in corr) == 3 and {r.excluded_min_visits for r in corr} == {3}
    # --min-visits 0 keeps every run, but an unvisited target still has no value (never 0)
    rows = ag.aggregate(best, min_visits=0, metric="kl_target", bins=2)
    causal = [r for r in rows if r.setting == "causal_exact"]
    assert causal[0].n == 4 and causal[0].no_value == 1
    assert causal[0].mean == pytest.approx(0.1)  # the unvisited 0.0 is not averaged in
    corr = [r for r in rows if r.setting == "correlational"]
    assert sum(r.n for r in corr) == 4 and {r.no_value for r in corr} == {2}


def test_analyze_reports_min_visits_exclusions_per_curve(tmp_path, capsys):
    items = _visits_runs()
    trans = result(automaton="A0", model="TransformerLanguageModel", count=100, kl_target=0.3)
    trans["target_test_visits"] = 1
    items.append(trans)
    write_results(tmp_path / "runs", items)
    out = tmp_path / "v.png"
    code = exit_status(
        ["analyze", str(tmp_path / "runs"), "--output", str(out), "--min-visits", "5",
         "--bins", "2"],
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert (
        "--min-visits 5 left out 6 run/target point(s) whose target the test strings visit fewer than 5 "
        "time(s): state:odd LSTM causal_exact 2 of 5, state:odd LSTM correlational 3 of 6, "
        "state:odd Transformer causal_exact 1 of 1" in err
    )
    assert "1 run(s) record no target_test_visits (older results.json): kept" in err
    rows = read_csv(out.with_suffix(".csv"))
    per_curve = {(r["model"], r["setting"]): r["excluded_min_visits"] for r in rows}
    assert per_curve == {
        ("LSTMLanguageModel", "causal_exact"): "2",
        ("LSTMLanguageModel", "correlational"): "3",
    }
    # the default (1) leaves out only the unvisited runs
    code = exit_status(["analyze", str(tmp_path / "runs"), "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 0 and "--min-visits 1 left out 3 run/target point(s)" in err
    code = exit_status(
        ["analyze", str(tmp_path / "runs"), "--output", str(out), "--min-visits", "-1"],
    )
    err = capsys.readouterr().err
    assert code == 2 and "--min-visits must be 0 or more" in err


def test_unvisited_targets_are_unknown_never_zero():
    # older results: a weighted 0.0 beside a null unweighted value marks an unvisited target
    legacy = result(kl_target=0.0)
    legacy["kl_target_unweighted"] = None
    rec = ag.record_from_results(legacy, "old")
    assert (rec.kl_target, rec.kl_target_unweighted, rec.target_test_visits) == (None, None, None)
    # a zero count of test visits makes both unknown, whatever the file says
    zero = result(kl_target=0.0)
    zero["target_test_visits"] = 0
    rec = ag.record_from_results(zero, "new")
    assert (rec.kl_target, rec.kl_target_unweighted, rec.target_test_visits) == (None, None, 0)
    # negative control: a visited target keeps a genuine 0.0
    ok = result(kl_target=0.0)
    ok["kl_target_unweighted"], ok["target_test_visits"] = 0.0, 7
    rec = ag.record_from_results(ok, "ok")
    assert (rec.kl_target, rec.kl_target_unweighted) == (0.0, 0.0)
    # a correlational run re-targeted: per-event visits from test_visits, unknown without it
    corr = result(
        intervention="none",
        event=None,
        realized=10,
        kl={"state": {"odd": 0.1, "even": 0.0}},
        occurrences={"count": {"state:odd": 10, "state:even": 0}, "strings": {}},
    )
    corr["kl_unweighted"] = {"state": {"odd": 0.3, "even": None}}
    corr["test_visits"] = {"state": {"odd": 25, "even": 0}}
    rec = ag.record_from_results(corr, "corr")
    even = ag.for_target(rec, "state:even")
    assert (even.kl_target, even.kl_target_unweighted, even.target_test_visits) == (None, None, 0)
    odd = ag.for_target(rec, "state:odd")
    assert (odd.kl_target, odd.kl_target_unweighted, odd.target_test_visits) == (0.1, 0.3, 25)
    del corr["test_visits"]
    assert ag.for_target(ag.record_from_results(corr, "c"), "state:odd").target_test_visits is None
