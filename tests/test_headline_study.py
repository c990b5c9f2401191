"""docs/headline_study.md: the weighted tables are what the committed results give, and version
2's sweeps are the design the doc states (before anything of it trains)."""

from __future__ import annotations

import csv

from cfl_lightning.sweep import iter_grid, load_sweep
from cfl_lightning.sweep.naming import point_hash

from tests.helpers import REPO, load_script

V2 = REPO / "sweeps" / "headline" / "v2"
V1_CAUSAL = [15, 38, 70, 165, 253, 289, 477, 479, 576, 597, 614, 694, 769, 797, 865, 923]


def _block(text: str, name: str) -> str:
    return text.split(f"<!-- {name} output: begin -->")[1].split(f"<!-- {name} output: end -->")[0]


def test_weighted_tables_are_what_the_committed_results_give(capsys):
    module = _script("verdict_weighted")
    module.main([str(REPO / "docs" / "headline" / "results.jsonl")])
    printed = capsys.readouterr().out.strip()
    text = (REPO / "docs" / "headline_study.md").read_text(encoding="utf-8")
    assert printed == _block(text, "verdict_weighted.py").strip()
    # negative control: the weighted block is not the unweighted one
    assert printed != _block(text, "verdict.py").strip()
    assert "| C1: bin 200 - bin 100 | 16 vs 6 | 0.159 | [0.093, 0.224] | above 0 |" in printed


def _hashes(name: str) -> set[str]:
    return {point_hash(p) for p in iter_grid(load_sweep(V2 / name))}


def test_v2_causal_priority_parts_cover_the_arm_exactly_once():
    whole = _hashes("causal_symbol.yaml")
    parts = [_hashes(n) for n in ("p2_causal_symbol_new.yaml", "p2_causal_symbol_v1_n62.yaml",
                                  "p4_causal_symbol_v1_repeat.yaml")]
    assert len(whole) == 320 and sum(map(len, parts)) == 320 and set().union(*parts) == whole
    # version 1's causal runs are version 2's points (same parameters, same run directories)
    v1 = {point_hash(p) for p in iter_grid(load_sweep(REPO / "sweeps/headline/causal_exact.yaml"))}
    assert v1 == parts[2]
    state = list(iter_grid(load_sweep(V2 / "p3_causal_state.yaml")))
    assert len(state) == 320 and {p["data.event"] for p in state} == {"state:q1"}
    topologies = sorted({p["data.topology_seed"] for p in iter_grid(load_sweep(V2 / "causal_symbol.yaml"))})
    assert len(topologies) == 32 and set(V1_CAUSAL) <= set(topologies)


def test_v2_new_topologies_follow_the_stated_draw():
    import numpy as np

    rest = [t for t in range(952) if t not in V1_CAUSAL]
    new = sorted(rest[i] for i in np.random.default_rng(1).choice(len(rest), 16, replace=False))
    points = iter_grid(load_sweep(V2 / "p2_causal_symbol_new.yaml"))
    assert sorted({p["data.topology_seed"] for p in points}) == new


def test_v2_correlational_sweep_is_its_csv_choice():
    rows = list(csv.DictReader((V2 / "correlational.csv").open()))
    assert len(rows) == 952 * 10
    chosen = sorted({int(r["data.topology_seed"]) for r in rows if r["chosen"] == "true"})
    sweep = load_sweep(V2 / "correlational.yaml")
    assert sorted(sweep["parameters"]["data.topology_seed"]["values"]) == chosen
    assert len(chosen) == 75 and len(list(iter_grid(sweep))) == 150
    # every bin holds 40 pairs from 30 topologies, or every pair the 952 have in it
    edges = [50, 71, 100, 141, 200, 283, 400, 566, 800, 1131, 1600]
    for lo, hi in zip(edges, edges[1:]):
        inside = [r for r in rows if lo <= int(r["realized_count"]) < hi]
        picked = [r for r in inside if r["chosen"] == "true"]
        full = len(picked) >= 40 and len({r["data.topology_seed"] for r in picked}) >= 30
        assert full or len(picked) == len(inside), (lo, hi)


def test_p4_check_finds_a_changed_run_and_only_that(tmp_path, capsys):
    """docs/headline/p4_check.py (fixed before P4 trained): the stand-in against itself is the
    same everywhere; a copy with one transformer run's values x 1.1 is reported as 63 of 64."""
    import json

    check = _script("p4_check")
    standin = REPO / "docs/headline/v2/v1_causal_standin.jsonl"
    lines = standin.read_text().splitlines()
    changed = []
    for i, line in enumerate(lines):
        record = json.loads(line)
        if i == next(j for j, raw in enumerate(lines) if '"TransformerLanguageModel"' in raw):
            record["kl_total"] *= 1.1
            record["kl"]["symbol"]["a"] *= 1.1
            record["kl_unweighted"]["symbol"]["a"] *= 1.1
        changed.append(json.dumps(record))
    rerun = tmp_path / "rerun.jsonl"
    rerun.write_text("\n".join(changed) + "\n")
    check.main(str(standin), str(standin))
    same = capsys.readouterr().out
    assert "matched 128" in same and same.count("64 the same to 1e-9 relative") == 2
    check.main(str(standin), str(rerun))
    out = capsys.readouterr().out
    assert "LSTMLanguageModel: 64 matched runs, 64 the same" in out
    assert "TransformerLanguageModel: 64 matched runs, 63 the same" in out
    assert "1.000-1.100" in out


def _script(name: str):
    return load_script(REPO / "docs" / "headline" / f"{name}.py")


def test_state_half_exploratory_numbers_are_what_the_scripts_print(tmp_path, capsys):
    """The doc's two looks outside the plan (D3 by q1's rate; q0's share of the bins, and the
    copy without q0) print the numbers the doc quotes, from the committed results."""
    text = " ".join((REPO / "docs" / "headline_study.md").read_text(encoding="utf-8").split())
    _script("state_d3_exploratory").main(str(REPO / "docs/headline/v2/results_state.jsonl"))
    out = capsys.readouterr().out
    assert "rarer half (16): +0.118 [-0.046, +0.281]" in out
    assert "commoner half (16): +0.012 [-0.064, +0.087]" in out
    assert "Spearman(D3, rate) -0.203" in out
    assert "+0.118 [-0.046, 0.281]" in text and "-0.20" in text
    copy = tmp_path / "no_q0.jsonl"
    _script("state_without_q0").main(str(REPO / "docs/headline/v2/results.jsonl"), str(copy))
    out = capsys.readouterr().out
    assert "| TransformerLanguageModel | gap window at 500 [353.6, 707.1] | 66 / 211 | 0.100 | 0.487 |" in out
    assert "| TransformerLanguageModel | [400, 566) | 24 / 92 | 0.104 | 0.492 |" in out
    assert "66 of 211" in text and "0.104 against 0.492" in text
    import json

    records = [json.loads(line) for line in copy.read_text().splitlines()]
    assert len(records) == 150 and all("q0" not in r["kl"]["state"] for r in records)
    assert all("q1" in r["kl"]["state"] for r in records)  # only q0 is dropped


def test_v3_d3_topologies_follow_the_stated_draw_and_the_results_cover_them():
    import json

    import numpy as np

    c32 = {p["data.topology_seed"] for p in iter_grid(load_sweep(V2 / "causal_symbol.yaml"))}
    rest = [t for t in range(952) if t not in c32]
    new = sorted(rest[i] for i in np.random.default_rng(2).choice(920, 55, replace=False))
    points = list(iter_grid(load_sweep(REPO / "sweeps/headline/v3/d3_state_transformer.yaml")))
    assert len(rest) == 920 and sorted({p["data.topology_seed"] for p in points}) == new
    # the committed records are the sweep's 110 points: every topology at both counts, seed 0
    with open(REPO / "docs/headline/v3/results_d3.jsonl", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    runs = {(r["config"]["data"]["topology_seed"], r["count"]) for r in records}
    assert len(records) == len(runs) == 110
    assert runs == {(p["data.topology_seed"], p["data.count"]) for p in points}
    assert {(r["model"], r["event"], r["realized_count"] == r["count"],
             r["config"]["data"]["weight_seed"]) for r in records} == {
        ("TransformerLanguageModel", "state:q1", True, 0)}
