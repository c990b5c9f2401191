"""``stratify``: bins, determinism, the written sweep (dry run), realized counts and bad input.

Realized counts are checked against an independent count: the data module built directly from
keyword arguments (not from the sweep's command line), its training corpus walked symbol by
symbol.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cfl_lightning.sweep import iter_grid, load_sweep
from cfl_lightning.stratify import (
    StratifyError,
    choose,
    data_settings,
    settings_csv,
    stratified_sweep,
    stratify,
)

ROOT = Path(__file__).resolve().parents[1]
EDGES = [20, 40, 60, 80, 100, 150]


def write_sweep(path: Path, topologies: int = 12, extra: dict | None = None) -> Path:
    """A correlational sweep of small random automata (12 states, 100 strings), two models."""
    params = {
        "model": {"values": ["LSTMLanguageModel", "TransformerLanguageModel"]},
        "data.topology_seed": {"distribution": "int_uniform", "min": 0, "max": topologies - 1},
        "data.num_states": {"value": 12},
        "data.weight_seed": {"value": 0},
        "data.event": {"value": "symbol:a"},
        "data.intervention": {"value": "none"},
        "data.count": {"value": "null"},
        "data.num_strings": {"value": 100},
    }
    params.update(extra or {})
    config = {
        "name": "corr_small",
        "project": "cfl_lightning",
        "method": "grid",
        "metric": {"name": "kl_total", "goal": "minimize"},
        "parameters": params,
        "command": ["${env}", "${interpreter}", "-m", "cfl_lightning", "fit", "--config",
                    str(ROOT / "configs" / "random_topology.yaml"), "${args}"],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CFL_LIGHTNING_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def independent_count(topology_seed: int, num_strings: int = 100, symbol: str = "a") -> int:
    """Occurrences of ``symbol`` in the training corpus, from a directly built data module."""
    from cfl_lightning.data import PFADataModule

    dm = PFADataModule(
        generator="random", num_states=12, num_symbols=10, topology_seed=topology_seed,
        weight_seed=0, num_strings=num_strings, val_strings=200, test_strings=500,
        max_tokens=128, seed=0, device="auto",
    )
    index = dm.pfsa.alphabet.index(symbol)
    return sum(s.count(index) for s in dm.corpus("train").to_lists())


def test_choose_is_a_seeded_subset():
    assert choose(3, 5, 0, 0) == [0, 1, 2]
    picked = choose(40, 5, 7, 2)
    assert len(picked) == len(set(picked)) == 5 and picked == sorted(picked)
    assert picked == choose(40, 5, 7, 2)
    # Negative controls: another seed or another bin draws another subset.
    assert picked != choose(40, 5, 8, 2) and picked != choose(40, 5, 7, 3)


def test_bins_counts_and_determinism(tmp_path, cache):
    config = load_sweep(write_sweep(tmp_path / "s.yaml"))
    result = stratify(config, event="symbol:a", edges=EDGES, per_bin=2, seed=0, cwd=ROOT)
    assert len(result.settings) == 12 and result.varying == ["data.topology_seed"]
    assert all(s.points == 2 for s in result.settings)  # two models share each corpus
    for i, (candidates, chosen) in enumerate(result.counts):
        inside = [s for s in result.settings if s.bin == i]
        assert len(inside) == candidates
        assert sum(s.chosen for s in inside) == chosen == min(2, candidates)
        assert all(EDGES[i] <= s.realized < EDGES[i + 1] for s in inside)
    assert not any(s.chosen for s in result.settings if s.bin is None)
    for s in result.settings:
        assert (s.bin is None) == (not EDGES[0] <= s.realized < EDGES[-1])
    # realized counts equal an independent count of the same corpora
    for s in result.settings[:4]:
        assert s.realized == independent_count(s.params["data.topology_seed"])
    again = stratify(config, event="symbol:a", edges=EDGES, per_bin=2, seed=0, cwd=ROOT)
    assert [s.chosen for s in again.settings] == [s.chosen for s in result.settings]
    assert settings_csv(again) == settings_csv(result)


def test_strings_units_count_strings_not_occurrences(tmp_path, cache):
    config = load_sweep(write_sweep(tmp_path / "s.yaml", topologies=3))
    occ = stratify(config, event="symbol:a", edges=[0, 10_000], per_bin=1, cwd=ROOT)
    strings = stratify(
        config, event="symbol:a", edges=[0, 10_000], per_bin=1, units="strings", cwd=ROOT
    )
    for a, b in zip(occ.settings, strings.settings):
        assert 0 < b.realized <= min(a.realized, 100)
    assert any(b.realized < a.realized for a, b in zip(occ.settings, strings.settings))


@pytest.mark.slow
def test_written_sweep_runs_exactly_the_chosen_points(tmp_path, cache):
    source = write_sweep(tmp_path / "s.yaml")
    out = tmp_path / "out" / "strat.yaml"
    cmd = [sys.executable, "-m", "cfl_lightning", "stratify", str(source), "--event", "symbol:a",
           "--edges", ",".join(map(str, EDGES)), "--per-bin", "2", "--output", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "candidates" in proc.stdout and "total:" in proc.stdout
    rows = list(csv.DictReader(out.with_suffix(".csv").open()))
    assert [r["data.topology_seed"] for r in rows] == [str(i) for i in range(12)]
    chosen = [int(r["data.topology_seed"]) for r in rows if r["chosen"] == "true"]
    assert all(r["bin"] for r in rows if r["chosen"] == "true")
    sweep = load_sweep(out)  # a valid W&B grid sweep
    assert sweep["name"] == "corr_small_stratified"
    assert sweep["parameters"]["data.topology_seed"] == {"values": chosen}
    points = list(iter_grid(sweep))
    assert len(points) == 2 * len(chosen)
    assert {(p["model"], p["data.topology_seed"]) for p in points} == {
        (m, t) for m in ("LSTMLanguageModel", "TransformerLanguageModel") for t in chosen
    }
    dry = subprocess.run(
        [sys.executable, "-m", "cfl_lightning", "sweep", str(out), "--output",
         str(tmp_path / "runs"), "--dry-run"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert dry.returncode == 0, dry.stderr
    lines = [l for l in (dry.stdout + dry.stderr).splitlines() if " fit " in l]
    assert len(lines) == 2 * len(chosen)
    assert {l.split("--data.topology_seed=")[1].split()[0] for l in lines} == set(map(str, chosen))
    # the same call again: the same files
    first = out.read_text(), out.with_suffix(".csv").read_text()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and (out.read_text(), out.with_suffix(".csv").read_text()) == first


def test_several_varying_data_parameters_become_one_mapping(tmp_path, cache):
    config = load_sweep(write_sweep(
        tmp_path / "s.yaml", topologies=3, extra={"data.num_strings": {"values": [100, 200]}}
    ))
    settings, varying = data_settings(config, ROOT)
    assert len(settings) == 6 and sorted(varying) == ["data.num_strings", "data.topology_seed"]
    result = stratify(config, event="symbol:a", edges=[0, 100, 10_000], per_bin=2, cwd=ROOT)
    sweep = stratified_sweep(config, result)
    assert "data.topology_seed" not in sweep["parameters"]
    values = sweep["parameters"]["data"]["values"]
    assert values == [
        {"topology_seed": s.params["data.topology_seed"], "num_strings": s.params["data.num_strings"]}
        for s in result.chosen
    ]
    # the written mapping reaches the data module as the settings it stands for
    from cfl_lightning.stratify import fit_arguments, realized_value

    for point in iter_grid(sweep):
        if point["model"] != "LSTMLanguageModel":
            continue
        value, _ = realized_value(fit_arguments(sweep, point, ROOT), "symbol:a", "occurrences")
        match = [s for s in result.chosen if s.params["data.topology_seed"] == point["data"]
                 ["topology_seed"] and s.params["data.num_strings"] == point["data"]["num_strings"]]
        assert value == match[0].realized


@pytest.mark.parametrize(
    "args,match",
    [
        (["--edges", "100,50,200"], "increase strictly"),  # the quick lane's case
        *(pytest.param(args, match, marks=pytest.mark.slow) for args, match in [  # subprocesses
            (["--edges", "100"], "at least two"),
            (["--edges", "10,x"], "comma-separated numbers"),
            (["--per-bin", "0"], "per-bin must be an integer >= 1"),
            (["--event", "symbol:zz"], "unknown symbol 'zz'"),
            (["--event", "bogus"], "bad event"),
            (["--output", "OUT.csv"], "expected a .yaml path"),
        ]),
    ],
)
def test_bad_input_is_one_line(tmp_path, cache, args, match):
    source = write_sweep(tmp_path / "s.yaml", topologies=2)
    base = {"--event": "symbol:a", "--edges": "20,40", "--per-bin": "2",
            "--output": str(tmp_path / "o.yaml")}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value if flag != "--output" else str(tmp_path / value)
    cmd = [sys.executable, "-m", "cfl_lightning", "stratify", str(source)]
    for flag, value in base.items():
        cmd += [flag, value]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and match in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "o.yaml").exists() and not (tmp_path / "o.csv").exists()


def test_a_causal_sweep_is_refused(tmp_path, cache):
    source = write_sweep(tmp_path / "s.yaml", topologies=2, extra={
        "data.intervention": {"value": "exact"}, "data.count": {"value": 30}})
    with pytest.raises(StratifyError, match="not correlational: its data.intervention is 'exact'"):
        stratify(load_sweep(source), event="symbol:a", edges=[0, 50], per_bin=1, cwd=ROOT)


def test_no_setting_in_the_bins_is_refused(tmp_path, cache):
    config = load_sweep(write_sweep(tmp_path / "s.yaml", topologies=2))
    result = stratify(config, event="symbol:a", edges=[100_000, 200_000], per_bin=1, cwd=ROOT)
    with pytest.raises(StratifyError, match="no data setting"):
        stratified_sweep(config, result)


@pytest.mark.slow
def test_chosen_runs_report_the_same_realized_count(tmp_path, cache):
    """Two chosen points trained (one epoch): results.json's realized count is the CSV's."""
    source = write_sweep(tmp_path / "s.yaml", topologies=6)
    out = tmp_path / "strat.yaml"
    cmd = [sys.executable, "-m", "cfl_lightning", "stratify", str(source), "--event", "symbol:a",
           "--edges", "0,10000", "--per-bin", "2", "--output", str(out)]
    assert subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=600).returncode == 0
    sweep = yaml.safe_load(out.read_text())
    sweep["parameters"]["model"] = {"value": "LSTMLanguageModel"}
    sweep["parameters"]["trainer.max_epochs"] = {"value": 1}
    out.write_text(yaml.safe_dump(sweep))
    runs = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "cfl_lightning", "sweep", str(out), "--output", str(runs),
         "--parallel", "2"], cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    expected = {
        int(r["data.topology_seed"]): int(r["realized_count"])
        for r in csv.DictReader(out.with_suffix(".csv").open()) if r["chosen"] == "true"
    }
    found = {}
    for path in runs.rglob("results.json"):
        results = json.loads(path.read_text())
        found[results["config"]["data"]["topology_seed"]] = results["occurrences"]["count"]["symbol:a"]
        assert results["realized_count"] == found[results["config"]["data"]["topology_seed"]]
    assert found == expected and len(found) == 2
