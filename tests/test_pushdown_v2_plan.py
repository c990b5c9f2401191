"""The pushdown study's version 2 plan (docs/pushdown_v2.md) says what its scripts computed.

Everything the plan states was fixed before any version 2 run trained: the candidates' order,
the selection of the 20 automata, each token total T (``sweeps/pushdown/v2/draw.py --select``,
its measurements in ``selection.json``), the sweeps and plan files, and the minimum detectable
effects from version 1's records (``docs/pushdown/v2/mde.py``). A changed rule, file or number
must show here.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.helpers import REPO, load_script

V2 = REPO / "sweeps" / "pushdown" / "v2"
PAGE = (REPO / "docs" / "pushdown_v2.md").read_text()
SELECTION = json.loads((V2 / "selection.json").read_text())


@pytest.fixture(scope="module")
def draw():
    return load_script(V2 / "draw.py")


def chosen() -> list[int]:
    return [r["seed"] for r in SELECTION if r["chosen"]]


def test_the_20_are_the_first_candidates_whose_token_corpora_all_exist(draw):
    examined = [r["seed"] for r in SELECTION]
    assert examined == draw.candidates()[: len(examined)]  # in permutation order, none skipped
    for row in SELECTION:
        cells = [k for e in draw.TARGETS for k in row["tokens"][e]["K"]]
        assert row["chosen"] == all(str(k).isdigit() for k in cells), row["seed"]
    assert len(chosen()) == draw.CHOSEN == 20 and SELECTION[-1]["chosen"]  # stopped at the 20th
    assert all(300 <= s < 1000 for s in examined)


def test_each_total_is_the_rule_s(draw):
    """T = 1.2 x the plain arm's top-count corpus, rounded to 100, per automaton and target."""
    for row in SELECTION:
        for event in draw.TARGETS:
            top = row["plain_symbols"][event][-1]
            assert row["tokens"][event]["T"] == int(round(1.2 * top, -2))


def test_the_page_lists_the_selection():
    listed = re.search(r"the 20: \*\*([0-9, \n]+)\*\*", PAGE).group(1)
    assert [int(s) for s in re.split(r"[,\s]+", listed.strip())] == chosen()
    left = re.search(r"left out \(14\): ([0-9, \n]+) \(each", PAGE).group(1)
    assert [int(s) for s in re.split(r"[,\s]+", left.strip())] == [
        r["seed"] for r in SELECTION if not r["chosen"]]
    assert f"{len(SELECTION)} candidates" in PAGE


def test_the_sweeps_train_the_selection_at_the_plan_s_counts_and_totals(draw):
    files = [f"sweeps/pushdown/v2/automata/dyck_{s}.json" for s in chosen()]
    for event, counts in draw.TARGETS.items():
        short = draw.SHORT[event]
        plain = yaml.safe_load((V2 / f"plain_{short}.yaml").read_text())["parameters"]
        assert plain["data.automaton"]["values"] == files
        assert plain["data.event"]["value"] == event
        assert plain["data.count"]["values"] == list(counts)
        assert plain["data.num_strings"]["value"] == 500 and "data.tokens" not in plain
        assert plain["seed_everything"]["values"] == [0, 1]
        by_seed = {r["seed"]: r for r in SELECTION}
        for seed, file in zip(chosen(), files):
            tokens = yaml.safe_load((V2 / "tokens" / f"{short}_{seed}.yaml").read_text())
            p = tokens["parameters"]
            assert p["data.automaton"]["values"] == [file]
            assert p["data.tokens"]["value"] == by_seed[seed]["tokens"][event]["T"]
            assert p["data.count"]["values"] == list(counts) and "data.num_strings" not in p
            assert p["seed_everything"]["values"] == [0, 1]
    assert len(list((V2 / "tokens").glob("*.yaml"))) == 40
    order = (V2 / "run_order.sh").read_text()
    assert re.search(r'SEEDS="([0-9 ]+)"', order).group(1).split() == [str(s) for s in chosen()]


def test_the_automata_files_are_the_generator_s(draw):
    from cfl_lightning.automata import load_automaton

    for seed in chosen():
        got = load_automaton(V2 / "automata" / f"dyck_{seed}.json")
        assert got == draw.automaton(seed), seed
    assert draw.NEUTRAL == 0.2


def test_the_plan_files_name_the_page_s_contrasts():
    from cfl_lightning.analysis.plan import load_plan

    names = {}
    for target, counts in (("pop", [250, 500, 1000]), ("class", [400, 800, 1600])):
        for arm in ("plain", "tokens"):
            plan = load_plan(REPO / "docs" / "pushdown" / "v2" / f"plan_{target}_{arm}.yaml")
            assert plan.repeats == "mean" and plan.control == "non-target"
            assert list(plan.counts) == counts and plan.min_visits == 1
            names[target, arm] = [c.name for c in plan.contrasts]
            primary = plan.contrasts[0]
            assert primary.name in PAGE
    assert names["pop", "plain"][0] == "P1" and names["pop", "tokens"][0] == "P2"
    assert names["class", "plain"][0] == "C1" and names["class", "tokens"][0] == "C2"


def test_the_mde_table_is_what_the_recomputation_gives():
    """The SDs and MDEs of the page from version 1's records (docs/pushdown/v2/mde.py)."""
    mde = load_script(REPO / "docs" / "pushdown" / "v2" / "mde.py")
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        mde.main([str(REPO / "docs" / "pushdown" / "results.jsonl")])
    rows = {}
    for line in out.getvalue().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 7 and cells[0] in mde.TARGETS:
            rows[tuple(cells[:4])] = (float(cells[5]), float(cells[6]))
    for target, model, quantity, unweighted, weighted in (
        ("pop:(", "LSTM", "did", (0.127, 0.084), (0.063, 0.042)),
        ("pop:(", "Transformer", "did", (0.098, 0.065), (0.162, 0.107)),
        ("class:q/(", "LSTM", "did", (0.013, 0.008), (0.123, 0.081)),
        ("class:q/(", "Transformer", "target", (0.044, 0.029), (0.112, 0.074)),
    ):
        for reading, (sd, value) in (("unweighted", unweighted), ("weighted", weighted)):
            got = rows[target, model, reading, quantity]
            assert (round(got[0], 3), round(got[1], 3)) == (sd, value), (target, model, reading)
            assert f"{sd:.3f} | {value:.3f}" in PAGE


@pytest.mark.slow  # draws one automaton's nine corpora, a few seconds
def test_one_automaton_s_row_is_what_the_sampler_gives_now(draw):
    """Automaton 918's plain sizes, drawn again as fit draws them (data.seed 0), are the
    recorded ones. Its token K were chosen by the sampler of the study's commit (00712b4, the
    one every run trains with); the chooser changed after it (docs/pushdown_v2.md, "The corpus
    law"): it must still admit all six token corpora, with K within 15% of the recorded."""
    row = next(r for r in SELECTION if r["seed"] == 918)
    sizes = draw.plain_sizes(918)
    assert sizes == row["plain_symbols"]
    tokens = draw.token_arm(918, sizes)
    for target, (t, ks) in tokens.items():
        assert t == row["tokens"][target]["T"]
        for now, then in zip(ks, row["tokens"][target]["K"], strict=True):
            assert now.isdigit() and abs(int(now) / int(then) - 1) <= 0.15, (target, now, then)


def _study_like_records(target: str, arm: str, counts) -> tuple[list, dict]:
    """Results shaped like the study's runs (20 automata x 3 counts x 2 models x 2 trainings),
    with known values: per automaton ``a`` and training ``s``, the target falls with the count
    and the control less; returns the records and the reference ``{automaton: {count: (target,
    control)}}`` averaged over the trainings (unweighted reading, one model)."""
    import numpy as np

    from cfl_lightning.analysis.records import record_from_results

    rng = np.random.default_rng(48)
    kind, _, name = target.partition(":")
    records, reference = [], {}
    for a in range(20):
        base, other = rng.uniform(0.2, 0.6, size=2)
        for i, count in enumerate(counts):
            pairs = []
            for model in ("LSTMLanguageModel", "TransformerLanguageModel"):
                for s in (0, 1):
                    t = base - 0.05 * i + rng.normal(0, 0.02)
                    c = other - 0.02 * i + rng.normal(0, 0.02)
                    if kind == "pop":
                        maps, visits = {"pop": {"(": t, "[": c}}, {"pop:(": 9, "pop:[": 9}
                    else:  # class:q/( under its state entry; control the mean of q/[ and q/-
                        maps = {"state": {"q/(": t, "q/[": c - 0.01, "q/-": c + 0.01}}
                        visits = {"state:q/(": 9, "state:q/[": 9, "state:q/-": 9}
                    data = {"model": model, "intervention": "exact", "event": target,
                            "count": count, "realized_count": count,
                            "num_strings": 500 if arm == "plain" else 3000 - 700 * i,
                            "seed": s, "automaton_id": f"{a:016x}", "kl_total": 1.0,
                            "kl_target": t / 2, "kl_target_unweighted": t,
                            "target_test_visits": 9,
                            "kl": {k: {n: v / 2 for n, v in m.items()} for k, m in maps.items()},
                            "kl_unweighted": maps, "test_visits": visits,
                            "config": {"seed_everything": s, "data": {
                                "event": target, "count": count,
                                **({"tokens": 6000} if arm == "tokens" else {"num_strings": 500})}}}
                    records.append(record_from_results(data, f"r{len(records)}"))
                    if model == "LSTMLanguageModel":
                        pairs.append((t, c))
            reference.setdefault(a, {})[count] = tuple(np.mean(pairs, axis=0))
    return records, reference


@pytest.mark.parametrize("target,short,arm,counts", [
    ("pop:(", "pop", "tokens", (250, 500, 1000)), ("class:q/(", "class", "plain", (400, 800, 1600)),
])
def test_the_plan_files_evaluate_records_shaped_like_the_study_s(target, short, arm, counts):
    """The plans read such records as the page says: the two trainings averaged per automaton,
    the control from the other pops (or classes), paired over 20 automata; the primary
    contrast equals a numpy/scipy recomputation (synthetic values, not results)."""
    import numpy as np
    from scipy import stats

    from cfl_lightning.analysis.plan import evaluate_plan, load_plan

    records, ref = _study_like_records(target, arm, counts)
    plan = load_plan(REPO / "docs" / "pushdown" / "v2" / f"plan_{short}_{arm}.yaml")
    result = evaluate_plan(records, plan)
    low, top = counts[0], counts[-1]
    if arm == "tokens":  # P2 / C2: the target's change
        diffs = np.array([ref[a][top][0] - ref[a][low][0] for a in ref])
    else:  # P1 / C1: did's change
        diffs = np.array([(ref[a][top][0] - ref[a][top][1]) - (ref[a][low][0] - ref[a][low][1])
                          for a in ref])
    half = stats.t.ppf(0.975, 19) * diffs.std(ddof=1) / np.sqrt(20)
    name = plan.contrasts[0].name
    est = result.contrasts[("kl_target_unweighted", "LSTMLanguageModel", name)]
    assert est.n == 20
    assert (est.value, est.low, est.high) == pytest.approx(
        (diffs.mean(), diffs.mean() - half, diffs.mean() + half), abs=1e-9)
    assert result.contrast_verdicts[("kl_target_unweighted", "LSTMLanguageModel", name)] in (
        "reproduced", "not resolved", "contradicted")
