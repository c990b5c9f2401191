"""docs/headline/d3_samples.py (a description of the transformer's state D3 in two samples)
held to the committed plan outputs of the same records: each sample's D3 is the plan's D3 on
that file, and the two samples together are the plan's D3 on all 87."""

from __future__ import annotations

import contextlib
import io

import pytest

from tests.helpers import REPO, load_script

HEADLINE = REPO / "docs" / "headline"
FILES = [str(HEADLINE / "v2" / "results_state.jsonl"), str(HEADLINE / "v3" / "results_d3.jsonl")]


def _plan_d3(output: str, measure: str) -> str:
    """The transformer's D3 row of a committed plan output: 'estimate [low, high]'."""
    rows = load_script(HEADLINE / "compare_verdicts.py").parse_plan_output(
        (HEADLINE / output).read_text(encoding="utf-8"))
    row = rows[("D3", "TransformerLanguageModel", measure)]
    low, high = row["interval"].strip("[]").split(", ")
    return f"{float(row['value']):+.3f} [{float(low):+.3f}, {float(high):+.3f}]"


@pytest.fixture(scope="module")
def printed() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert load_script(HEADLINE / "d3_samples.py").main(FILES) == 0
    return out.getvalue()


@pytest.mark.parametrize("measure", ["kl_target_unweighted", "kl_target"])
def test_each_sample_and_both_are_the_plan_outputs_d3(printed, measure):
    section = printed.split(f"\n{measure}\n", 1)[1].split("first - second", 1)[0]
    lines = {line.split(" | ")[0].strip("| "): line for line in section.splitlines()
             if line.startswith("| ") and " | " in line}
    assert f"| 55 | {_plan_d3('v3/d3_plan_output.md', measure)} |" in lines[FILES[1]]
    assert f"| 87 | {_plan_d3('v3/d3_all87_plan_output.md', measure)} |" in lines["both"]
    # version 2's 32 alone: its committed state-half output's D3
    assert f"| 32 | {_plan_d3('v2/state_half_plan_output.md', measure)} |" in lines[FILES[0]]


def test_a_file_without_the_runs_is_refused(capsys):
    module = load_script(HEADLINE / "d3_samples.py")
    assert module.main([FILES[0], str(HEADLINE / "v3" / "results.jsonl")]) == 2
    assert "no transformer state:q1 runs" in capsys.readouterr().err
