"""What `analyze` reads: JSON Lines in and out (--export-results), results with wrong types, and
local paths that do not exist (never taken for W&B sweeps)."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # before anything imports wandb

import json
from dataclasses import replace
from pathlib import Path

import pytest

from cfl_lightning.analysis import records as rec
from tests.helpers import exit_status, result, synthetic_runs, write_results


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """221 results (two architectures, two targets, causal and correlational, one broken; the
    module's tests only read them)."""
    return synthetic_runs(tmp_path_factory.mktemp("synthetic") / "runs")


def run_both(argv, capsys):
    """Exit status, stdout and stderr of ``main(argv)``."""
    code = exit_status(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err

# --------------------------------------------------------------------------- JSON Lines


def test_exported_results_give_the_same_table(synthetic, tmp_path, capsys, monkeypatch):
    """analyze DIR and analyze EXPORT.jsonl write identical CSVs and gap tables."""
    from cfl_lightning.analysis import plot

    monkeypatch.setattr(plot, "_save", lambda *args: None)  # the figure is not compared: faster
    export = tmp_path / "runs.jsonl"
    for extra in ([], ["--bins", "3", "--metric", "kl_target", "--target", "state:rep"]):
        first, second = tmp_path / "a.png", tmp_path / "b.png"
        code, gaps, err = run_both(
            ["analyze", str(synthetic), "--output", str(first), "--export-results", str(export),
             *extra],
            capsys,
        )
        assert code == 0, err
        assert "exported" in err and "bytes per run" in err
        code, again, err = run_both(
            ["analyze", str(export), "--output", str(second), *extra], capsys
        )
        assert code == 0, err
        assert first.with_suffix(".csv").read_bytes() == second.with_suffix(".csv").read_bytes()
        assert gaps == again and "causal point(s) have such runs" in gaps
        lines = export.read_text().splitlines()
        assert all(json.loads(line)["source"].endswith("results.json") for line in lines)


def test_export_keeps_only_the_targets_kinds_and_stays_small(tmp_path, capsys):
    """A 50-state, 10-symbol automaton's run records ~560 events; the export keeps the targets'
    kinds (the 10 symbols for ``symbol:a``: its non-target control reads the other symbols),
    not the states and transitions."""
    states = [f"q{i}" for i in range(50)]
    symbols = list("abcdefghij")
    specs = [f"state:{q}" for q in states] + [f"symbol:{s}" for s in symbols]
    specs += [f"transition:{q}:{s}" for q in states for s in symbols]
    kinds: dict[str, dict[str, float]] = {}
    for spec in specs:
        kind, _, name = spec.partition(":")
        kinds.setdefault(kind, {})[name] = 0.123456789012345
    config = {
        "seed_everything": 0,
        "trainer": {"max_epochs": 1000, "logger": [{"class_path": "x" * 60}] * 2},
        "data": {"generator": "random", "num_states": 50, "topology_seed": 7, "weight_seed": 0},
        "model": {"class_path": "cfl_lightning.models.LSTMLanguageModel",
                  "init_args": {"param_budget": 128000, "dropout": 0.1}},
    }
    items = []
    for a in range(20):
        item = result(
            automaton=f"T{a:014d}",
            intervention="none",
            event="symbol:a",
            realized=200 + a,
            kl=kinds,
            occurrences={"count": dict.fromkeys(specs, 1234), "strings": dict.fromkeys(specs, 99)},
        )
        item["test_visits"] = {k: dict.fromkeys(v, 4321) for k, v in kinds.items()}
        item["config"] = config
        item["automaton"] = {"states": states, "padding": "y" * 20_000}
        items.append(item)
    for a in range(4):
        items.append(result(automaton=f"T{a:014d}", event="symbol:a", count=250, kl_target=0.2))
    write_results(tmp_path / "runs", items)
    full = sum(len(json.dumps(i)) for i in items)
    export = tmp_path / "e.jsonl"
    code = exit_status(["analyze", str(tmp_path / "runs"), "--export-results", str(export),
                        "--target", "symbol:a"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "exported 24 of 24 run(s) (those about symbol:a)" in err
    size = export.stat().st_size
    assert size / len(items) < 1500, size / len(items)  # ~0.5-1 kB a run; the inputs ~60 kB
    assert size * 40 < full
    line = json.loads(export.read_text().splitlines()[0])
    every = {f"symbol:{s}" for s in symbols}
    assert line["occurrences"] == {"count": dict.fromkeys(every, 1234),
                                   "strings": dict.fromkeys(every, 99)}
    assert line["kl"] == {"symbol": dict.fromkeys(symbols, 0.123456789012345)}  # full precision
    assert line["test_visits"] == dict.fromkeys(every, 4321)
    assert line["config"]["data"]["topology_seed"] == 7 and "trainer" not in line["config"]
    assert line["config"]["model"]["init_args"]["param_budget"] == 128000
    assert "automaton" not in line


def test_record_round_trip_through_json_lines(tmp_path):
    kl = {"state": {"odd": 0.1, "even": 0.0}, "transition": {"odd:a": -0.2}}
    item = result(
        intervention="none",
        realized=40,
        strings=12,
        kl=kl,
        occurrences={"count": {"state:odd": 40, "state:even": 3}, "strings": {"state:odd": 12}},
    )
    item["kl_unweighted"]["state"]["even"] = None  # weighted 0 beside null: unknown
    item["test_visits"] = {"state": {"odd": 25, "even": 0}, "transition": {"odd:a": 9}}
    before = rec.record_from_results(item, "x")
    path = tmp_path / "r.jsonl"
    assert rec.write_jsonl([before, before], path) == 2
    after = rec.load_jsonl(path)
    assert [r.source for r in after] == [f"{path}:1", f"{path}:2"]
    for field in ("occurrences", "target_kl", "test_visits"):
        assert getattr(after[0], field) == getattr(before, field), field
    assert replace(after[0], source="x") == before  # every compared field
    assert after[0].target_kl["state:even"] == (None, None)
    assert after[0].target_kl["transition:odd:a"] == (-0.2, -0.4)


@pytest.mark.parametrize(
    "line,message",
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps(result(count="many")), 'count: expected an integer or null, got "many"'),
        (json.dumps(result(kl_total=[1])), "kl_total: expected a number or null, got [1]"),
        (json.dumps({**result(), "model": None}), "missing model"),
    ],
)
def test_bad_json_lines_name_file_and_line(tmp_path, capsys, line, message):
    good = json.dumps(result())
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{good}\n\n{line}\n{good}\n")
    out = tmp_path / "f.png"
    code = exit_status(["analyze", str(path), "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and f"error: {path}:3: {message}" in err, err
    assert "Traceback" not in err
    assert not out.exists() and not out.with_suffix(".csv").exists()


def test_export_options_are_checked(synthetic, tmp_path, capsys):
    code = exit_status(["analyze", str(synthetic)])
    err = capsys.readouterr().err
    assert code == 2 and "give --output FIGURE, --export-results OUT.jsonl, or both" in err
    code = exit_status(["analyze", str(synthetic), "--export-results", "x.json"])
    err = capsys.readouterr().err
    assert code == 2 and "--export-results must end in .jsonl" in err
    export = tmp_path / "e.jsonl"
    code = exit_status(["analyze", str(synthetic), "--export-results", str(export)])
    err = capsys.readouterr().err
    assert code == 0 and not (tmp_path / "e.csv").exists()
    before = export.read_bytes()
    code = exit_status(["analyze", str(export), "--export-results", str(export)])
    err = capsys.readouterr().err
    assert code == 2 and "is the input file" in err and export.read_bytes() == before


# --------------------------------------------------------------------------- wrong types


def test_results_with_wrong_types_are_skipped_with_a_word(tmp_path, capsys):
    """Issue 22: a results.json with count "many" used to vanish without a message."""
    items = [result(automaton=f"A{a}", count=100, kl_target=0.1 * (a + 1)) for a in range(3)]
    bad_count = result(automaton="B0", count="many")
    bad_kl = result(automaton="B1", intervention="none", kl={"state": {"odd": 0.1}})
    bad_kl["kl"]["state"]["odd"] = "high"
    write_results(tmp_path / "runs", [*items, bad_count, bad_kl])
    out = tmp_path / "f.png"
    code = exit_status(["analyze", str(tmp_path / "runs"), "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "skipped 2 of 5 run(s):" in err
    where = "/csv/version_0/results.json"
    assert f'run003{where}: count: expected an integer or null, got "many"' in err
    assert f'run004{where}: kl.state.odd: expected a number or null, got "high"' in err
    assert out.with_suffix(".csv").read_text().count("\n") == 2  # header and the one causal point


def test_many_skipped_runs_are_counted_beyond_the_first_few(tmp_path, capsys):
    items = [result(automaton=f"A{a}") for a in range(2)] + [
        result(automaton=f"B{a}", num_strings=[a]) for a in range(8)
    ]
    write_results(tmp_path / "runs", items)
    code = exit_status(
        ["analyze", str(tmp_path / "runs"), "--output", str(tmp_path / "f.png")],
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "skipped 8 of 10 run(s):" in err and "... and 3 more" in err
    assert err.count("num_strings: expected an integer or null") == 5


@pytest.mark.parametrize(
    "value,accepted",
    [(100, 100), (100.0, 100), ("100", 100), ("null", None), ("None", None), (None, None),
     ("NaN", None), (100.5, "error"), (True, "error"), ("many", "error"), ({"a": 1}, "error")],
)
def test_count_types(value, accepted):
    item = result()
    item["count"] = value
    if accepted == "error":
        with pytest.raises(rec.CflError, match="src: count: expected an integer or null"):
            rec.record_from_results(item, "src")
    else:
        assert rec.record_from_results(item, "src").count == accepted


def test_a_boolean_seed_is_no_seed():
    """LightningCLI's ``seed_everything: false`` lands in results.json as the seed."""
    item = result()
    item["seed"] = False
    assert rec.record_from_results(item, "src").seed is None


# --------------------------------------------------------------------------- paths


def test_missing_local_paths_are_not_taken_for_wandb_sweeps(tmp_path, capsys, monkeypatch):
    """Issue 22: /no/such/dir has three parts, like ENTITY/PROJECT/ID, but is a local path."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    out = str(tmp_path / "f.png")
    for item in ("/no/such/dir", "/no/such/dir/", "./a/b", "~/a/b", "runs/sweeps/x", "x.jsonl",
                 "e/p/r.jsonl", "e/../r"):
        code = exit_status(["analyze", item, "--output", out])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, (item, err)
        assert f"{item}: no such directory or file" in err and "W&B API" not in err, (item, err)
    # a W&B-shaped path whose first part is not a local directory still goes to W&B
    code = exit_status(["analyze", "ent/proj/abc123", "--output", out])
    err = capsys.readouterr().err
    assert code == 2 and "cannot read W&B sweep ent/proj/abc123" in err
    # an existing file that is not a .jsonl
    Path("notes.txt").write_text("x")
    code = exit_status(["analyze", "notes.txt", "--output", out])
    err = capsys.readouterr().err
    assert code == 2 and "notes.txt: not a directory nor a .jsonl file of results" in err


def test_a_refused_analysis_writes_no_export(tmp_path, capsys):
    """Every check comes before any output: nothing to plot means no .jsonl either."""
    item = result()
    item["target_test_visits"] = 0  # unvisited: no value
    write_results(tmp_path / "runs", [item])
    export, out = tmp_path / "e.jsonl", tmp_path / "f.png"
    code = exit_status(
        ["analyze", str(tmp_path / "runs"), "--output", str(out), "--export-results", str(export)],
    )
    err = capsys.readouterr().err
    assert code == 2 and "nothing to plot" in err
    assert not export.exists() and not out.exists()


# --------------------------------------------------------------------------- the command's body alone


def _parsed(*argv):
    from cfl_lightning.cli.analyze import build_parser

    return build_parser().parse_args([str(a) for a in argv])


def test_analyze_runs_alone_on_parsed_arguments(synthetic, tmp_path, capsys, monkeypatch):
    """``analyze(args)`` is a module-level function: called without ``main``, it writes what the
    command writes (same CSV, same gap table) and raises CflError (no exit) when refused."""
    from cfl_lightning.analysis import plot
    from cfl_lightning.cli.analyze import analyze, check_args
    from cfl_lightning.errors import CflError

    monkeypatch.setattr(plot, "_save", lambda *args: None)
    args = _parsed(synthetic, "--output", tmp_path / "a.png", "--bins", "3")
    assert check_args(args) is None
    assert analyze(args) == 0
    alone = capsys.readouterr().out
    code, gaps, err = run_both(
        ["analyze", str(synthetic), "--output", str(tmp_path / "b.png"), "--bins", "3"], capsys
    )
    assert code == 0, err
    assert alone == gaps and "causal point(s) have such runs" in gaps
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    refused = _parsed(synthetic, "--output", tmp_path / "c.png", "--target", "state:nope")
    with pytest.raises(CflError, match="no runs about target state:nope"):
        analyze(refused)
    assert not (tmp_path / "c.csv").exists()


@pytest.mark.parametrize("extra,problem", [
    ([], "give --output FIGURE, --export-results OUT.jsonl, or both"),
    (["--output", "f.gif"], "--output must end in .png, .pdf or .svg, got 'f.gif'"),
    (["--export-results", "e.json"], "--export-results must end in .jsonl, got 'e.json'"),
    (["--output", "f.png", "--bins", "0"], "--bins must be positive, got 0"),
    (["--output", "f.png", "--edges", "3,1"], "--edges must be at least two strictly increasing"),
    (["--output", "f.png", "--edges", "3"], "--edges must be at least two strictly increasing"),
    (["--output", "f.png", "--columns", "0"], "--columns must be positive, got 0"),
    (["--output", "f.png", "--min-visits", "-1"], "--min-visits must be 0 or more, got -1"),
    (["--output", "F.PDF", "--export-results", "e.jsonl", "--edges", "1,2"], None),
])
def test_check_args_names_the_first_problem(extra, problem):
    from cfl_lightning.cli.analyze import check_args

    found = check_args(_parsed("runs", *extra))
    assert found == problem if problem is None else found.startswith(problem), found
