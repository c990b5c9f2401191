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
