"""``analyze --x train_tokens``: the training corpus's symbols on the x axis, and token-matched
runs (``data.tokens``, a K chosen per run) on one curve; against a recomputation by hand."""

from __future__ import annotations

import csv
import json
import statistics

import pytest

from cfl_lightning.analysis.aggregate import aggregate
from cfl_lightning.analysis.records import RunRecord, record_from_results, record_to_results
from cfl_lightning.cli.analyze import main as analyze_main


def run(automaton: int, count: int | None, tokens: int | None, value: float,
        train: int, k: int, intervention: str = "exact") -> RunRecord:
    """A run of automaton ``automaton``; ``tokens`` the token target (None: a plain run)."""
    return RunRecord(
        source=f"r{automaton}-{count}-{tokens}", model="lstm", intervention=intervention,
        event="symbol:a", count=count, realized_count=count if count else 5 * automaton + 3,
        num_strings=k, automaton_id=f"a{automaton}", kl_total=1.0, kl_target=value,
        kl_target_unweighted=value, target_test_visits=10, train_tokens=train, tokens=tokens,
        config={"data": {"tokens": tokens}} if tokens else None,
    )


def runs() -> list[RunRecord]:
    out = []
    for a in range(4):  # token-matched at T = 1000: K differs per automaton
        out.append(run(a, 40, 1000, 0.1 * (a + 1), 995 + 3 * a, 300 + 7 * a))
        out.append(run(a, 80, 1000, 0.05 * (a + 1), 1001 + a, 200 + 5 * a))
        out.append(run(a, 40, None, 0.2 * (a + 1), 1500 + 100 * a, 500))  # plain, K = 500
        out.append(run(a, None, None, 0.3, 900 + 50 * a, 500, "none"))  # correlational
    return out


def test_causal_points_sit_at_their_runs_mean_train_tokens():
    rows = aggregate(runs(), x="train_tokens", bins=1)
    causal = {(r.setting, r.num_strings, r.mean): r for r in rows if r.setting != "correlational"}
    assert len(causal) == 3  # token-matched N = 40, 80 (one curve, K ignored); plain N = 40
    matched = [r for r in rows if r.num_strings is None]
    assert len(matched) == 2 and all(r.x_kind == "train_tokens" for r in rows)
    for count, trains, values in [
        (40, [995 + 3 * a for a in range(4)], [0.1 * (a + 1) for a in range(4)]),
        (80, [1001 + a for a in range(4)], [0.05 * (a + 1) for a in range(4)]),
    ]:
        (row,) = [r for r in matched if r.mean == pytest.approx(statistics.mean(values))]
        assert row.n == 4 and row.gap_kind is None
        assert (row.x, row.x_min, row.x_max) == pytest.approx(
            (statistics.mean(trains), min(trains), max(trains)))
        assert row.x_median == pytest.approx(statistics.median(trains))
    (plain,) = [r for r in rows if r.num_strings == 500 and r.setting != "correlational"]
    assert plain.x == pytest.approx(statistics.mean(1500 + 100 * a for a in range(4)))
    (corr,) = [r for r in rows if r.setting == "correlational"]
    assert corr.x == pytest.approx(statistics.mean(900 + 50 * a for a in range(4)))


def test_the_count_axis_keeps_counts_and_puts_token_matched_runs_on_one_curve():
    rows = aggregate(runs(), bins=1)
    matched = sorted((r.x, r.n) for r in rows if r.num_strings is None)
    assert matched == [(40.0, 4), (80.0, 4)]
    assert all(r.x_kind == "occurrences" for r in rows)


def test_runs_without_train_tokens_are_left_out_and_counted():
    old = [run(a, 40, None, 0.1, 0, 500) for a in range(3)]
    old = [RunRecord(**{**r.__dict__, "train_tokens": None}) for r in old]
    rows = aggregate(old + runs(), x="train_tokens", bins=1)
    (plain,) = [r for r in rows if r.num_strings == 500 and r.setting != "correlational"]
    assert plain.n == 4 and plain.no_value == 3
    with pytest.raises(ValueError, match="unknown x axis"):
        aggregate(runs(), x="tokens")


def test_the_token_target_round_trips_through_results():
    record = runs()[0]
    again = record_from_results({**record_to_results(record)}, "r")
    assert again.tokens == 1000 and again.train_tokens == record.train_tokens


def test_analyze_x_train_tokens_writes_the_csv(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(record_to_results(r)) + "\n" for r in runs()))
    figure = tmp_path / "fig.png"
    assert analyze_main([str(path), "--x", "train_tokens", "--bins", "1", "--output",
                         str(figure)]) == 0
    with open(figure.with_suffix(".csv")) as handle:
        table = list(csv.DictReader(handle))
    xs = sorted(round(float(r["x"]), 3) for r in table)
    want = sorted([statistics.mean(995 + 3 * a for a in range(4)),
                   statistics.mean(1001 + a for a in range(4)),
                   statistics.mean(1500 + 100 * a for a in range(4)),
                   statistics.mean(900 + 50 * a for a in range(4))])
    assert xs == pytest.approx(want) and {r["x_kind"] for r in table} == {"train_tokens"}
    with pytest.raises(SystemExit) as info:
        analyze_main([str(path), "--x", "tokens", "--output", str(figure)])
    assert info.value.code == 2
