"""The README and docs/ link only to files that exist; each reproduction ships both arms."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
REPRODUCTIONS = ["parity_starfree", "random_topology", "fixed_topology"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    missing = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor
        if not (page.parent / target.split("#")[0]).exists():
            missing.append(target)
    assert not missing, f"{page.name} links to missing files: {missing}"


@pytest.mark.parametrize("case", REPRODUCTIONS)
def test_reproduction_docs_ship_both_arms_and_architectures(case):
    """Each case study's doc is linked from the README, and its CSVs hold causal and
    correlational rows for both shipped architectures."""
    doc = REPO / "docs" / f"reproduction_{case}.md"
    assert f"docs/reproduction_{case}.md" in (REPO / "README.md").read_text(encoding="utf-8")
    text = doc.read_text(encoding="utf-8")
    csvs = sorted({m for m in LINK.findall(text) if m.endswith(".csv")})
    assert csvs, f"{doc.name} links no CSV"
    assert any(m.endswith(".png") for m in LINK.findall(text)), f"{doc.name} shows no figure"
    for name in csvs:
        with open(doc.parent / name, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        kinds = {(r["model"], r["setting"].startswith("causal")) for r in rows}
        for model in ("LSTMLanguageModel", "TransformerLanguageModel"):
            assert (model, True) in kinds and (model, False) in kinds, (name, model)
    assert "## Findings" in text


def _load_script(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", REPRODUCTIONS)
def test_reproduction_csv_intervals_are_the_t_intervals_of_their_points(case):
    """The docs quote `ci_low`/`ci_high`, derived from each point's mean, sem and n: they must be
    the 95% t-interval that `analyze` computes (`analysis.stats.t_interval`), and the redraw
    script must read them back unchanged."""
    import math

    from cfl_lightning.analysis.stats import t_interval

    redraw = _load_script(REPO / "docs" / "figures" / "redraw_from_csv.py")
    path = REPO / "docs" / "figures" / f"{case}_repro.csv"
    rows = redraw.read_rows(str(path))
    assert rows
    checked = 0
    for row in rows:
        if row.n < 2:
            assert math.isnan(row.ci_low)
            continue
        # n values with this mean and this standard error, through the interval analyze uses
        spread = row.sem * math.sqrt(row.n)  # the sample standard deviation
        values = [row.mean + spread * z for z in _unit_sample(row.n)]
        low, high = t_interval(values)
        assert row.ci_low == pytest.approx(low, rel=1e-4, abs=1e-9), row
        assert row.ci_high == pytest.approx(high, rel=1e-4, abs=1e-9), row
        checked += 1
    assert checked > 20


def _unit_sample(n: int) -> list[float]:
    """n numbers with mean 0 and sample standard deviation 1."""
    import statistics

    raw = [float(i) for i in range(n)]
    mean, sd = statistics.mean(raw), statistics.stdev(raw)
    return [(x - mean) / sd for x in raw]


def test_headline_study_tables_are_what_the_committed_results_give(capsys):
    """docs/headline_study.md quotes the output of docs/headline/verdict.py on the committed
    results; rerunning it must print exactly that block (a changed analysis function or a
    changed results file shows here)."""
    verdict = _load_script(REPO / "docs" / "headline" / "verdict.py")
    verdict.main([str(REPO / "docs" / "headline" / "results.jsonl")])
    printed = capsys.readouterr().out.strip()
    text = (REPO / "docs" / "headline_study.md").read_text(encoding="utf-8")
    block = text.split("<!-- verdict.py output: begin -->")[1].split("<!-- verdict.py output: end -->")[0]
    assert printed == block.strip()
    assert "| D1: N 250 - N 125 (paired) | 16 |" in printed  # 16 causal topologies per count
