"""``analyze --split long``: the length split's values (``results.json`` ``long_test``) analysed
in place of the test's; runs without one skipped and named; W&B sweeps refused."""

import json

import pytest

from cfl_lightning.__main__ import main as cli_main
from cfl_lightning.analysis.records import load_jsonl, load_results
from cfl_lightning.errors import CflError

V3 = "docs/headline/v3/results.jsonl"


def _runs(n=6):
    with open(V3) as handle:
        lines = [json.loads(line) for line in handle if line.strip()]
    return [r for r in lines if r.get("kl_total") is not None][:n]


def _scaled(value, scale):
    if isinstance(value, dict):
        return {k: _scaled(v, scale) for k, v in value.items()}
    return None if value is None else value * scale


def _with_long(run, scale):
    """``run`` with a long split whose values are the test's times ``scale`` (distinct)."""
    long = {"min_length": 40, "num_strings": 10, "kl_per_string": 1.0, "kl_per_token": 0.1,
            "ce_per_string": 2.0}
    for key in ("kl_total", "kl_target", "kl_target_unweighted"):
        if run.get(key) is not None:
            long[key] = run[key] * scale
    for key in ("kl", "kl_unweighted"):
        if run.get(key) is not None:
            long[key] = _scaled(run[key], scale)
    for key in ("test_visits", "target_test_visits"):
        if key in run:
            long[key] = run[key]
    return {**run, "long_test": long}


def test_the_long_split_replaces_the_tests_values(tmp_path):
    runs = _runs()
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(_with_long(r, 3.0)) + "\n" for r in runs))
    test = load_jsonl(path)
    long = load_jsonl(path, split="long")
    assert len(test) == len(long) == len(runs)
    for a, b in zip(test, long):
        assert b.kl_total == pytest.approx(3.0 * a.kl_total)
    assert [r.kl_total for r in test] == pytest.approx([r["kl_total"] for r in runs])


def test_runs_without_a_long_split_are_named_not_silently_dropped(tmp_path):
    runs = _runs(4)
    lines = [_with_long(r, 2.0) for r in runs[:2]] + runs[2:]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(CflError, match=r"r.jsonl:3: no long split"):
        load_jsonl(path, split="long")
    problems = []
    assert len(load_jsonl(path, split="long", problems=problems)) == 2
    assert [p.split(": ", 1)[0].rsplit(":", 1)[1] for p in problems] == ["3", "4"]
    for i, run in enumerate(lines):
        (tmp_path / "d" / str(i)).mkdir(parents=True)
        (tmp_path / "d" / str(i) / "results.json").write_text(json.dumps(run))
    records, skipped = load_results(tmp_path / "d", split="long")
    assert len(records) == 2 and len(skipped) == 2
    assert all("no long split" in s for s in skipped)


def test_a_long_split_that_is_no_object_names_its_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({**_runs(1)[0], "long_test": [1, 2]}) + "\n")
    with pytest.raises(CflError, match=r"r.jsonl:1: long_test: expected an object"):
        load_jsonl(path, split="long")


def test_analyze_split_long_end_to_end(tmp_path, capsys):
    runs = _runs()
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(_with_long(r, 5.0)) + "\n" for r in runs))
    out = tmp_path / "long.jsonl"
    code = cli_main(["analyze", str(path), "--split", "long", "--export-results", str(out)])
    assert code == 0, capsys.readouterr().err
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    assert [e["kl_total"] for e in exported] == pytest.approx([5.0 * r["kl_total"] for r in runs])


def test_a_wandb_sweep_has_no_long_split(capsys):
    code = cli_main(["analyze", "ent/proj/abc123", "--split", "long", "--export-results", "x.jsonl"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "test split only" in err[0]
