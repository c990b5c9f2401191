"""The headline study's version 4 plan (docs/headline_v4.md) says what its scripts compute.

The plan's numbers were taken before any version 4 run trained: the causal topologies
(``sweeps/headline/v4/draw.py``) and the version 3 estimates, SDs and minimum detectable
effects it is sized by (``docs/headline/v4_mde.py``, an independent recomputation from the
committed records). A changed draw or a changed recomputation must show here.
"""

from __future__ import annotations

import re

import numpy as np

from tests.helpers import REPO, load_script

PLAN = (REPO / "docs" / "headline_v4.md").read_text()


def test_the_plan_lists_the_drawn_topologies():
    draw = load_script(REPO / "sweeps" / "headline" / "v4" / "draw.py")
    listed = re.search(r"item-4 55: \*\*([0-9, \n]+)\*\*", PLAN).group(1)
    assert [int(t) for t in re.split(r"[,\s]+", listed.strip())] == draw.topologies()
    assert len(set(draw.topologies())) == 32


def test_the_plan_tables_are_what_the_recomputation_gives():
    mde = load_script(REPO / "docs" / "headline" / "v4_mde.py")
    import json

    records = [json.loads(line) for line in
               (REPO / "docs" / "headline" / "v3" / "results.jsonl").read_text().splitlines()]
    found = {(m, r, step): (mean, sd, mde.mde(sd))
             for m, r, step, n, mean, half, sd in mde.rows(records) if n == 32}
    lstm, trf = "LSTMLanguageModel", "TransformerLanguageModel"
    # the motivating table: target, control, did from 62 to 1,000
    for model, reading, row in ((lstm, "unweighted", (-0.413, -0.321, -0.092)),
                                (lstm, "weighted", (-0.456, -0.327, -0.129)),
                                (trf, "unweighted", (-0.318, -0.138, -0.180)),
                                (trf, "weighted", (-0.360, -0.145, -0.214))):
        np.testing.assert_allclose(found[model, reading, (62, 1000)][0], row, atol=5e-4)
        assert f"{row[2]:.3f}" in PLAN
    # the MDE table: did's SD and MDE at 32 for Q1 (both readings), Q1a, Q1b
    for model, reading, step, sd, mde_value in (
        (lstm, "unweighted", (62, 1000), 0.152, 0.078), (trf, "unweighted", (62, 1000), 0.113, 0.058),
        (lstm, "weighted", (62, 1000), 0.272, 0.139), (trf, "weighted", (62, 1000), 0.178, 0.091),
        (lstm, "unweighted", (62, 250), 0.119, 0.061), (trf, "unweighted", (250, 1000), 0.081, 0.042),
    ):
        _, sds, mdes = found[model, reading, step]
        assert round(float(sds[2]), 3) == sd and round(float(mdes[2]), 3) == mde_value
        assert f"{sd:.3f}, {mde_value:.3f}" in PLAN


def test_the_sweeps_and_plans_are_the_pages():
    """The committed sweeps train the drawn topologies at the plan's counts, two trainings each,
    arm B at the T the page states; the plan files load and name the page's contrasts."""
    import yaml

    from cfl_lightning.analysis.plan import load_plan

    draw = load_script(REPO / "sweeps" / "headline" / "v4" / "draw.py")
    v4 = REPO / "sweeps" / "headline" / "v4"
    counts = set()
    for name in ("causal_plain_ends", "causal_tokens_ends", "causal_plain_250", "causal_tokens_250"):
        p = yaml.safe_load((v4 / f"{name}.yaml").read_text())["parameters"]
        assert p["data.topology_seed"]["values"] == draw.topologies()
        assert p["seed_everything"]["values"] == [0, 1]
        assert p["data.weight_seed"]["value"] == 0 and p["data.event"]["value"] == "symbol:a"
        got = p["data.count"].get("values") or [p["data.count"]["value"]]
        counts.update(got)
        if "tokens" in name:
            assert p["data.tokens"]["value"] == draw.TOKENS == 10000 and "data.num_strings" not in p
        else:
            assert p["data.num_strings"]["value"] == 500
    assert counts == set(draw.COUNTS)
    assert "T = 10,000" in PLAN
    corr = yaml.safe_load((v4 / "correlational.yaml").read_text())["parameters"]
    assert corr["seed_everything"]["values"] == [0, 1]
    assert len(corr["data.topology_seed"]["values"]) == 55
    plain = load_plan(REPO / "docs" / "headline" / "plan_v4_plain.yaml")
    tokens = load_plan(REPO / "docs" / "headline" / "plan_v4_tokens.yaml")
    assert plain.repeats == tokens.repeats == "mean" and plain.control == tokens.control
    assert [c.name for c in plain.contrasts][:4] == ["Q1", "Q1a", "Q1b", "D"]
    assert [c.name for c in tokens.contrasts][0] == "Q2"


def test_the_plan_file_gives_the_motivating_did_on_version_3():
    """A check of the plan file's arithmetic (not a result of version 4)."""
    from cfl_lightning.analysis.plan import evaluate_plan, load_plan
    from cfl_lightning.analysis.records import load_jsonl

    result = evaluate_plan(load_jsonl(REPO / "docs" / "headline" / "v3" / "results.jsonl"),
                           load_plan(REPO / "docs" / "headline" / "plan_v4_plain.yaml"))
    for model, value in (("LSTMLanguageModel", -0.092), ("TransformerLanguageModel", -0.180)):
        est = result.contrasts[("kl_target_unweighted", model, "Q1")]
        assert round(est.value, 3) == value and est.n == 32
