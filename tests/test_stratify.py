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
from tests.helpers import CI_LIMIT_S, cli_env, run_cli

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
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=CI_LIMIT_S)
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
        cwd=ROOT, capture_output=True, text=True, timeout=CI_LIMIT_S,
    )
    assert dry.returncode == 0, dry.stderr
    # the printed commands (not the check's own lines: 'checking N point(s) as fit reads them')
    lines = [l for l in (dry.stdout + dry.stderr).splitlines()
             if " fit " in l and "--data.topology_seed=" in l]
    assert len(lines) == 2 * len(chosen)
    assert {l.split("--data.topology_seed=")[1].split()[0] for l in lines} == set(map(str, chosen))
    # the same call again: the same files
    first = out.read_text(), out.with_suffix(".csv").read_text()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=CI_LIMIT_S)
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


BAD_INPUT = [
    (["--edges", "100,50,200"], "increase strictly"),
    (["--edges", "100"], "at least two"),
    (["--edges", "10,x"], "comma-separated numbers"),
    (["--per-bin", "0"], "per-bin must be an integer >= 1"),
    (["--event", "symbol:zz"], "unknown symbol 'zz'"),
    (["--event", "bogus"], "bad event"),
    (["--output", "OUT.csv"], "expected a .yaml path"),
]


def bad_input_argv(tmp_path: Path, args: list[str]) -> list[str]:
    """``stratify`` on a two-topology sweep, with ``args`` (flag, value pairs) overriding valid
    flags (``--output`` is relative to ``tmp_path``)."""
    source = write_sweep(tmp_path / "s.yaml", topologies=2)
    base = {"--event": "symbol:a", "--edges": "20,40", "--per-bin": "2",
            "--output": str(tmp_path / "o.yaml")}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value if flag != "--output" else str(tmp_path / value)
    argv = ["stratify", str(source)]
    for flag, value in base.items():
        argv += [flag, value]
    return argv


def check_one_line(returncode: int, stderr: str, match: str, tmp_path: Path) -> None:
    assert returncode == 2
    assert len(stderr.strip().splitlines()) == 1 and match in stderr, stderr
    assert "Traceback" not in stderr
    assert not (tmp_path / "o.yaml").exists() and not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize("args,match", BAD_INPUT)
def test_bad_input_is_one_line(tmp_path, cache, args, match):
    done = run_cli(*bad_input_argv(tmp_path, args), cwd=ROOT)
    check_one_line(done.returncode, done.stderr, match, tmp_path)


@pytest.mark.slow
def test_bad_input_is_one_line_in_a_process(tmp_path, cache):
    """The whole process (interpreter start, exit status, stderr) for one case of the above."""
    args, match = BAD_INPUT[4]
    cmd = [sys.executable, "-m", "cfl_lightning", *bad_input_argv(tmp_path, args)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=CI_LIMIT_S,
                          env=cli_env() | {"CFL_LIGHTNING_CACHE": str(cache)})
    check_one_line(proc.returncode, proc.stderr, match, tmp_path)


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
    assert subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=CI_LIMIT_S).returncode == 0
    sweep = yaml.safe_load(out.read_text())
    sweep["parameters"]["model"] = {"value": "LSTMLanguageModel"}
    sweep["parameters"]["trainer.max_epochs"] = {"value": 1}
    out.write_text(yaml.safe_dump(sweep))
    runs = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "cfl_lightning", "sweep", str(out), "--output", str(runs),
         "--parallel", "2"], cwd=ROOT, capture_output=True, text=True, timeout=CI_LIMIT_S,
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


# --- pooled events (symbol:*, state:*): bins of (setting, symbol) pairs --------------------------

def reference_choose_pooled(realized, edges, per_bin, min_settings, seed):
    """The rule of :func:`choose_pooled`, written plainly: every count recomputed from scratch."""
    import numpy as np

    def in_bin(value, i):
        return edges[i] <= value < edges[i + 1]

    bins = range(len(edges) - 1)
    chosen = set()

    def full(i):
        pairs = sum(in_bin(v, i) for j in chosen for v in realized[j].values())
        settings = sum(any(in_bin(v, i) for v in realized[j].values()) for j in chosen)
        return pairs >= per_bin and settings >= min_settings

    available = {i: sum(in_bin(v, i) for r in realized for v in r.values()) for i in bins}
    for i in sorted(bins, key=lambda b: (available[b], b)):
        candidates = [j for j, r in enumerate(realized) if any(in_bin(v, i) for v in r.values())]
        if not candidates:
            continue
        for position in np.random.default_rng([seed, i]).permutation(len(candidates)):
            if full(i):
                break
            chosen.add(candidates[int(position)])
    return [j in chosen for j in range(len(realized))]


def fill_holds(realized, edges, per_bin, min_settings, chosen):
    """Every bin holds K pairs from M chosen settings, or every pair it has (brute force)."""
    for i in range(len(edges) - 1):
        hits = [sum(edges[i] <= v < edges[i + 1] for v in r.values()) for r in realized]
        pairs = sum(h for h, c in zip(hits, chosen) if c)
        settings = sum(1 for h, c in zip(hits, chosen) if c and h)
        if not (pairs >= per_bin and settings >= min_settings) and pairs < sum(hits):
            return False
    return True


def random_realized(rng, settings, events=3, high=60):
    return [{f"symbol:{e}": int(rng.integers(0, high)) for e in "abcde"[:events]}
            for _ in range(settings)]


def test_choose_pooled_against_a_brute_force_reference():
    import itertools

    import numpy as np

    from cfl_lightning.stratify import choose_pooled

    rng = np.random.default_rng(12)
    edges = [5, 15, 30, 50]
    checked = infeasible = 0
    for trial in range(150):
        realized = random_realized(rng, int(rng.integers(1, 9)))
        per_bin, min_settings = int(rng.integers(1, 6)), int(rng.integers(0, 4))
        seed = int(rng.integers(0, 3))
        chosen = choose_pooled(realized, edges, per_bin, min_settings, seed)
        assert chosen == reference_choose_pooled(realized, edges, per_bin, min_settings, seed)
        assert fill_holds(realized, edges, per_bin, min_settings, chosen)
        # exhaustively: feasible subsets exist whenever the chosen one is one of them, and none of
        # them is smaller than the fewest settings any bin alone needs
        feasible = [
            subset for r in range(len(realized) + 1)
            for subset in itertools.combinations(range(len(realized)), r)
            if fill_holds(realized, edges, per_bin, min_settings,
                          [j in subset for j in range(len(realized))])
        ]
        picked = tuple(j for j, c in enumerate(chosen) if c)
        assert picked in feasible
        # the whole set is feasible; the greedy never takes a setting with no pair in any bin
        assert tuple(range(len(realized))) in feasible
        assert all(any(edges[0] <= v < edges[-1] for v in realized[j].values()) for j in picked)
        checked += len(feasible)
        infeasible += 2 ** len(realized) - len(feasible)
    assert checked > 150
    # Negative controls: the fill check rejects subsets (it can fail), and another seed draws
    # another choice somewhere.
    assert infeasible > 100
    assert any(
        choose_pooled(r, edges, 2, 0, 0) != choose_pooled(r, edges, 2, 0, 1)
        for r in (random_realized(rng, 8) for _ in range(50))
    )


def test_choose_pooled_fills_several_bins_with_one_setting():
    from cfl_lightning.stratify import choose_pooled

    edges = [0, 10, 20]
    # setting 0 has a pair in each bin and two in the second; bins need 2 pairs
    realized = [{"symbol:a": 5, "symbol:b": 15, "symbol:c": 16}, {"symbol:a": 1, "symbol:b": 2},
                {"symbol:a": 12}, {"symbol:a": 3}]
    for seed in range(5):
        chosen = choose_pooled(realized, edges, 2, 0, seed)
        # bin [10, 20) has 3 pairs (rarer than [0, 10) with 4) and is visited first; whichever of
        # settings 0 and 2 comes first, setting 0 alone fills it
        assert fill_holds(realized, edges, 2, 0, chosen)
        assert sum(chosen) <= 3
    # with min_settings 2, bin [10, 20) needs settings 0 and 2
    for seed in range(5):
        chosen = choose_pooled(realized, edges, 2, 2, seed)
        assert chosen[0] and chosen[2]
    # K larger than what a bin has: every candidate of it is chosen
    assert choose_pooled(realized, edges, 100, 0, 0) == [True, True, True, True]
    # nothing in any bin: nothing chosen
    assert choose_pooled([{"symbol:a": 99}], edges, 1, 0, 0) == [False]


def test_pooled_stratify_measures_every_symbol(tmp_path, cache):
    config = load_sweep(write_sweep(tmp_path / "s.yaml", topologies=4))
    edges = [0, 10, 30, 100, 400]
    result = stratify(config, event="symbol:*", edges=edges, per_bin=3, min_settings=2, cwd=ROOT)
    assert result.pooled and result.min_settings == 2
    first = result.settings[0]
    assert sorted(first.pooled) == [f"symbol:{c}" for c in "abcdefghij"]
    # realized counts equal an independent count of the same corpus, symbol by symbol
    for symbol in "ab":
        assert first.pooled[f"symbol:{symbol}"] == independent_count(
            first.params["data.topology_seed"], symbol=symbol)
    realized = [s.pooled for s in result.settings]
    from cfl_lightning.stratify import choose_pooled

    assert [s.chosen for s in result.settings] == choose_pooled(realized, edges, 3, 2, 0)
    assert fill_holds(realized, edges, 3, 2, [s.chosen for s in result.settings])
    for i, (cand_pairs, cand_settings, pairs, settings) in enumerate(result.pair_counts):
        hits = [sum(edges[i] <= v < edges[i + 1] for v in r.values()) for r in realized]
        assert cand_pairs == sum(hits) and cand_settings == sum(1 for h in hits if h)
        assert pairs == sum(h for h, s in zip(hits, result.settings) if s.chosen)
        assert settings == sum(1 for h, s in zip(hits, result.settings) if s.chosen and h)
    rows = list(csv.DictReader(io_lines(settings_csv(result))))
    assert len(rows) == 4 * 10 and rows[0]["event"] == "symbol:a"
    assert {r["chosen"] for r in rows if r["data.topology_seed"] == str(
        first.params["data.topology_seed"])} == {str(first.chosen).lower()}
    if result.chosen:
        sweep = stratified_sweep(config, result)
        assert sweep["parameters"]["data.topology_seed"] == {
            "values": [s.params["data.topology_seed"] for s in result.chosen]}
        assert "pairs from 2 settings" in sweep["description"]


def io_lines(text):
    import io

    return io.StringIO(text)


def test_single_event_csv_and_sweep_keep_their_format(tmp_path, cache):
    """The pooled mode leaves the single-event output as it was (header, description)."""
    config = load_sweep(write_sweep(tmp_path / "s.yaml", topologies=3))
    result = stratify(config, event="symbol:a", edges=[0, 10_000], per_bin=2, cwd=ROOT)
    assert not result.pooled and result.pair_counts == []
    assert settings_csv(result).splitlines()[0] == "data.topology_seed,realized_count,unit,bin,chosen"
    assert stratified_sweep(config, result)["description"].endswith(
        "stratified on symbol:a (occurrences) in bins [0, 10000), up to 2 per bin (seed 0): "
        "2 of 3 data settings")
    with pytest.raises(StratifyError, match="min-settings applies to a pooled event"):
        stratify(config, event="symbol:a", edges=[0, 10], per_bin=1, min_settings=1, cwd=ROOT)
