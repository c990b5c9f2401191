"""The headline study's committed plan outputs (`analyze --plan`, both halves) held to an
independent recomputation from the committed records (`docs/headline/recompute_plan.py`: numpy
and scipy, no `cfl_lightning`), every number and verdict to the printed three decimals, so that
the test fails if either side drifts; with negative controls (a perturbed value, the wrong
records) that must fail the comparison.

Adding a version's outputs is one line of :data:`CASES`.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from tests.helpers import REPO, load_script

HEADLINE = REPO / "docs" / "headline"

#: (half, plan, input records, committed `analyze --plan` output), paths below docs/headline/
CASES = [
    ("symbol", "plan_v2_symbol.yaml", ("v2/results.jsonl", "v2/v1_causal_standin.jsonl"),
     "v2/symbol_half_plan_output.md"),
    ("state", "plan_v2_state.yaml", ("v2/results.jsonl", "v2/results_state.jsonl"),
     "v2/state_half_plan_output.md"),
    ("symbol", "plan_v3_symbol.yaml", ("v3/results.jsonl",), "v3/symbol_half_plan_output.md"),
    ("state", "plan_v3_state.yaml", ("v3/results.jsonl", "v3/results_state.jsonl"),
     "v3/state_half_plan_output.md"),
    ("state", "plan_v3_d3.yaml", ("v3/results_d3.jsonl",), "v3/d3_plan_output.md"),
    ("state", "plan_v3_d3.yaml", ("v2/results_state.jsonl", "v3/results_d3.jsonl"),
     "v3/d3_all87_plan_output.md"),
]
NO_INTERVAL = "–"


@functools.lru_cache(maxsize=1)
def recompute():
    """The script, loaded from its file (it is not a package module)."""
    return load_script(HEADLINE / "recompute_plan.py")


@functools.lru_cache(maxsize=None)
def rows_of(plan: str, files: tuple[str, ...]):
    """The recomputation's rows for a plan on the records of ``files`` (both below
    docs/headline/)."""
    module = recompute()
    records = module.read_records([HEADLINE / f for f in files])
    return tuple(module.evaluate(records, module.load_plan(HEADLINE / plan)))


def parse_plan_output(text: str) -> dict[tuple[str, str, str], dict]:
    """Every row of a committed plan output, read by the parser `compare_verdicts.py` uses."""
    return load_script(HEADLINE / "compare_verdicts.py").parse_plan_output(text)


def output_text(output: str) -> str:
    """A committed plan output (below docs/headline/)."""
    return (HEADLINE / output).read_text(encoding="utf-8")


def _fmt(x) -> str:
    if x is None:
        return NO_INTERVAL  # no estimate: the output prints the same dash
    text = f"{x:.3f}"
    return "0.000" if text == "-0.000" else text


def compare(rows, text: str) -> tuple[int, list[str]]:
    """How many printed numbers and verdicts agree, and every disagreement (a row on one side
    only counts as one)."""
    printed = parse_plan_output(text)
    mine = {(r.name, r.model, r.measure): r for r in rows}
    problems = [f"only in the output: {k}" for k in printed.keys() - mine.keys()]
    problems += [f"only recomputed: {k}" for k in mine.keys() - printed.keys()]
    agreed = 0
    for key in printed.keys() & mine.keys():
        want, row = printed[key], mine[key]
        checks = [("verdict", want.get("verdict"), row.verdict or None)]
        if "value" in want:
            interval = (NO_INTERVAL if row.low is None
                        else f"[{_fmt(row.low)}, {_fmt(row.high)}]")
            checks += [("value", want["value"].replace("-0.000", "0.000"), _fmt(row.value)),
                       ("interval", want["interval"], interval),
                       ("n", want["n"], tuple(row.n)), ("pairs", want["pairs"], tuple(row.pairs))]
        for what, expected, got in checks:
            if expected is None:
                continue
            if expected != got:
                problems.append(f"{key} {what}: printed {expected!r}, recomputed {got!r}")
            else:
                agreed += 1 + (what == "interval" and got != NO_INTERVAL)
    return agreed, problems


@pytest.mark.parametrize("half, plan, files, output", CASES,
                         ids=[c[3] for c in CASES])
def test_plan_output_agrees_with_the_independent_recomputation(half, plan, files, output):
    rows = rows_of(plan, files)
    assert all(r.measure and r.model for r in rows)
    agreed, problems = compare(rows, output_text(output))
    assert problems == []
    # the parse saw every table: per measure and model the plan's bins, counts and contrasts,
    # each with a mean (estimate), an interval (two ends, or none), n and pairs; the verdicts
    spec = recompute().load_plan(HEADLINE / plan)
    tables = len({(r.model, r.measure) for r in rows})
    per_table = len(spec["bins"]) - 1 + len(spec["counts"]) + len(spec["contrasts"])
    printed = parse_plan_output(output_text(output))
    assert sum("value" in row for row in printed.values()) == tables * per_table
    assert agreed >= tables * (per_table * 4 + len(spec["contrasts"]) + len(spec["claims"]))
    gaps = [r for r in rows if r.name.startswith("G")]
    assert not gaps or any(r.kind == ("ratio" if half == "state" else "difference") for r in gaps)


def test_negative_control_a_perturbed_value_or_verdict_fails():
    half, plan, files, output = CASES[0]
    rows = list(rows_of(plan, files))
    text = output_text(output)
    i = next(i for i, r in enumerate(rows) if r.name == "count:250")
    moved = rows[:i] + [replace(rows[i], value=rows[i].value + 0.001)] + rows[i + 1:]
    assert len(compare(moved, text)[1]) == 1
    j = next(i for i, r in enumerate(rows) if r.name.startswith("claim:"))
    flipped = rows[:j] + [replace(rows[j], verdict="not resolved")] + rows[j + 1:]
    assert len(compare(flipped, text)[1]) == 1
    assert compare(rows[:-1], text)[1] == [
        f"only in the output: {(rows[-1].name, rows[-1].model, rows[-1].measure)}"]


def test_negative_control_the_wrong_records_or_output_fail():
    # the symbol half with P4's rerun in place of the stand-in: causal counts 125-1000 move
    rerun = rows_of("plan_v2_symbol.yaml", ("v2/results.jsonl", "v2/results_p4.jsonl"))
    assert compare(rerun, output_text(CASES[0][3]))[1] != []
    # the state half's numbers against the symbol half's output
    state = rows_of(CASES[1][1], CASES[1][2])
    assert len(compare(state, output_text(CASES[0][3]))[1]) > 100
