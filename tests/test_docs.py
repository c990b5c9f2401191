"""The README and docs/ link only to files that exist; each reproduction ships both arms."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from tests.helpers import load_script

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
REPRODUCTIONS = ["parity_starfree", "random_topology", "fixed_topology"]

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?", re.M)
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=[\"']([^\"']+)[\"']", re.I)


def _prose(text: str) -> list[str]:
    """The page's lines outside fenced code blocks (code is neither heading nor link)."""
    lines, fence = [], None
    for line in text.splitlines():
        match = _FENCE.match(line)
        if match and (fence is None or match.group(1) == fence):
            fence = match.group(1) if fence is None else None
            continue
        if fence is None:
            lines.append(line)
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: the rendered text (links to their text, no code or emphasis
    marks) lower-cased, punctuation other than ``-`` and ``_`` dropped, spaces as ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every ``#anchor`` a page offers: its headings' slugs (repeats get ``-1``, ``-2``, ...)
    and explicit ``<a name=...>`` / ``id=`` anchors."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _prose(text):
        match = _HEADING.match(line)
        if match:
            slug = _slug(match.group(1))
            found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
        found.update(_HTML_ANCHOR.findall(line))
    return found


def links(text: str) -> list[str]:
    """The targets of the page's inline and reference links and images, outside code."""
    prose = re.sub(r"`[^`\n]*`", "", "\n".join(_prose(text)))
    return LINK.findall(prose) + _REFERENCE_LINK.findall(prose)


def broken_links(page: Path) -> list[str]:
    """The page's relative links whose file, or whose ``#anchor`` in a Markdown file, is missing."""
    from urllib.parse import unquote

    broken = []
    for target in links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
            continue  # a URL (http:, mailto:, ...)
        path, _, anchor = target.partition("#")
        file = (page.parent / unquote(path)).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and file.is_file():
            if unquote(anchor).lower() not in anchors(file.read_text(encoding="utf-8")):
                broken.append(target)
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page):
    """Every relative link in README.md, CHANGELOG.md and docs/**/*.md names an existing file,
    and an ``#anchor`` into a Markdown page names one of its headings."""
    assert page.exists(), page
    missing = broken_links(page)
    assert not missing, f"{page.relative_to(REPO)} has broken links: {missing}"


def test_link_check_catches_missing_files_and_anchors(tmp_path):
    """Negative control: the check reports a missing file and a missing anchor, and accepts
    the anchors GitHub makes of headings with code, punctuation and repeats."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "other.md").write_text(
        "# Decomposed KL (`DecomposedKL`)\n\n## Stratified designs: `python -m x stratify`\n"
        "## results.json\n## results.json\n```bash\n# not a heading\n```\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](sub/other.md) [ok](sub/other.md#decomposed-kl-decomposedkl) "
        "[ok](sub/other.md#stratified-designs-python--m-x-stratify) [ok](sub/other.md#resultsjson-1) "
        "[ok](#own-heading) [url](https://example.org/x.md) `[code](nowhere.md)`\n\n# Own heading\n\n"
        "[gone](sub/missing.md) [bad anchor](sub/other.md#not-a-heading) "
        "[code heading](sub/other.md#not-a-heading-either) [bad own](#nowhere)\n\n"
        "```\n[in code](nowhere.md)\n```\n")
    assert broken_links(page) == [
        "sub/missing.md", "sub/other.md#not-a-heading", "sub/other.md#not-a-heading-either",
        "#nowhere"]


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


@pytest.mark.parametrize("case", REPRODUCTIONS)
def test_reproduction_csv_intervals_are_the_t_intervals_of_their_points(case):
    """The docs quote `ci_low`/`ci_high`, derived from each point's mean, sem and n: they must be
    the 95% t-interval that `analyze` computes (`analysis.stats.t_interval`), and the redraw
    script must read them back unchanged."""
    import math

    from cfl_lightning.analysis.stats import t_interval

    redraw = load_script(REPO / "docs" / "figures" / "redraw_from_csv.py")
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
    verdict = load_script(REPO / "docs" / "headline" / "verdict.py")
    verdict.main([str(REPO / "docs" / "headline" / "results.jsonl")])
    printed = capsys.readouterr().out.strip()
    text = (REPO / "docs" / "headline_study.md").read_text(encoding="utf-8")
    block = text.split("<!-- verdict.py output: begin -->")[1].split("<!-- verdict.py output: end -->")[0]
    assert printed == block.strip()
    assert "| D1: N 250 - N 125 (paired) | 16 |" in printed  # 16 causal topologies per count


def _readme_section(heading: str) -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    return readme.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_readme_data_module_example_runs(tmp_path, monkeypatch, capsys):
    """The README's short PFADataModule example, run as written (in process): it samples the
    intervened corpus and prints a batch's shapes and the exact count."""
    code = re.findall(r"```python\n(.*?)```", _readme_section(
        "Using `PFADataModule` in your own Lightning project"), re.S)[0]
    monkeypatch.setenv("CFL_LIGHTNING_CACHE", "none")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_example"})  # noqa: S102
    shapes, counts = capsys.readouterr().out.strip().splitlines()[-2:]
    assert shapes.startswith("torch.Size([") and ", 3])" in shapes  # |S| + 1 = 3 (a, b, EOS)
    assert counts.split()[0] == "1200"
    assert list(tmp_path.iterdir()) == []  # the example writes nothing


def test_readme_states_the_public_interfaces():
    """The README's Public interfaces section names every results.json key the writer produces,
    every batch key and DecomposedKL's update signature (the interfaces users depend on)."""
    import inspect

    from cfl_lightning.metrics import DecomposedKL
    from cfl_lightning.results import RESULT_KEYS  # the writer writes exactly these (``ordered``)

    section = _readme_section("Public interfaces")
    keys = list(RESULT_KEYS)
    assert "kl_target_unweighted" in keys and "count_unit" in keys
    for key in keys:
        assert f"`{key}`" in section, key
    for key in ("input_ids", "target_ids", "target_probs", "states", "mask", "weights"):
        assert f"`{key}`" in section, key
    params = list(inspect.signature(DecomposedKL.update).parameters)
    assert f"DecomposedKL.update({', '.join(params[1:-1])}, {params[-1]}=None)" in section


def test_reference_says_when_kl_target_is_negative_and_the_metric_agrees():
    """Issue 42, item 6: a negative ``kl_target`` (-0.0011 for a well-fitted model) surprised a
    user reading results.json. The reference says when: symbol and transition events, where the
    model over-predicts the symbol; never for states or ``kl_total``. The metric agrees."""
    import torch

    from cfl_lightning import parity_starfree_pfsa
    from cfl_lightning.metrics import DecomposedKL

    text = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    section = text.split("## results.json", 1)[1].split("\n## ", 1)[0]
    assert "can be **negative**" in section and "`symbol:` or `transition:` event" in section
    assert "`kl_total` are averages of per-position KLs and never negative" in section
    # a uniform model over {a, b, EOS}: EOS gets 1/3 where the automaton gives it 0.1
    automaton = parity_starfree_pfsa(0.3)
    metric = DecomposedKL(automaton)
    states = torch.tensor([[0, 1, 2, 1, 1], [0, 3, 3, 3, 3]])
    log_probs = torch.full((2, 5, 3), 1 / 3).log()
    metric.update(log_probs, states, torch.ones(2, 5, dtype=torch.bool))
    out = metric.compute()
    assert out["symbol_unweighted"][2] < 0  # EOS over-predicted: negative, as documented
    assert (out["state_unweighted"][torch.isfinite(out["state_unweighted"])] >= 0).all()
    assert out["total"] >= 0
