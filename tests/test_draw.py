"""The `draw` command: graphviz rendering of automata in the style of the paper's Figure 1."""

from __future__ import annotations

import json
import shutil

import pytest

from cfl_lightning.analysis import draw
from cfl_lightning.automata import parity_starfree_pfsa, random_pfsa
from tests.helpers import exit_status

needs_dot = pytest.mark.skipif(
    shutil.which("dot") is None, reason="graphviz's dot is not installed (apt-get install graphviz)"
)


def run_main(argv, capsys):
    code = exit_status(argv)
    return code, capsys.readouterr().err


@pytest.fixture
def parity_file(tmp_path):
    path = tmp_path / "parity.json"
    parity_starfree_pfsa(0.3).to_json(path)
    return path


@pytest.mark.parametrize(
    "weight,text",
    [
        (0.45, "0.45"),
        (0.5, "0.5"),
        (1.0, "1"),
        (0.7000001, "0.7"),
        (0.004, "0.004"),
        (0.00012, "0.0001"),
        (0.0, "0"),
        (0.333333, "0.33"),
    ],
)
def test_format_weight(weight, text):
    assert draw.format_weight(weight) == text


def test_graph_follows_figure_1(parity_file):
    source = draw.automaton_graph(parity_file).source
    assert 's_odd [label="odd/0.1" shape=doublecircle]' in source
    assert 's_rep [label="rep/0.1" shape=doublecircle]' in source
    assert "s_even [label=even]" in source and "s_init [label=init]" in source
    assert "__start__ -> s_init" in source  # the initial arrow
    assert 's_init -> s_rep [label="a/0.3"' in source
    assert 's_init -> s_odd [label="b/0.7"' in source
    assert (
        's_odd -> s_odd [label="a/0.45"' in source and 's_odd -> s_even [label="b/0.45"' in source
    )
    assert 's_rep -> s_rep [label="a/0.9"' in source
    three = draw.automaton_graph(parity_file, digits=3).source
    assert "a/0.45" in three


def test_parallel_transitions_share_one_edge():
    data = {
        "alphabet": ["a", "b"],
        "states": ["p", "q"],
        "initial": "p",
        "final": {"q": 1.0},
        "transitions": [
            {"source": "p", "symbol": "a", "target": "q", "weight": 0.25},
            {"source": "p", "symbol": "b", "target": "q", "weight": 0.75},
        ],
    }
    source = draw.automaton_graph(data).source
    assert source.count("s_p -> s_q") == 1 and 'label="a/0.25\nb/0.75"' in source


@needs_dot
@pytest.mark.parametrize("fmt,magic", [("png", b"\x89PNG"), ("svg", b"<"), ("pdf", b"%PDF")])
def test_draw_command_renders(parity_file, tmp_path, capsys, fmt, magic):
    out = tmp_path / f"parity.{fmt}"
    code, err = run_main(["draw", str(parity_file), "--output", str(out)], capsys)
    assert code == 0, err
    data = out.read_bytes()
    assert data.startswith(magic) and len(data) > 1000
    if fmt == "svg":
        text = data.decode()
        assert "<svg" in text and "odd/0.1" in text and "b/0.45" in text


@needs_dot
def test_draw_png_is_an_image_and_results_json_works(tmp_path, capsys):
    import matplotlib.image

    results = tmp_path / "results.json"
    results.write_text(json.dumps({"automaton": random_pfsa(6, 3, 1, 2).to_dict(), "kl_total": 1}))
    out = tmp_path / "a.png"
    code, err = run_main(
        ["draw", str(results), "--output", str(out), "--rankdir", "TB", "--title", "topology 1"],
        capsys,
    )
    assert code == 0, err
    image = matplotlib.image.imread(out)
    assert image.shape[0] > 100 and image.shape[1] > 100
    # --format for an output without a known extension
    code, err = run_main(
        ["draw", str(results), "--output", str(tmp_path / "a.out"), "--format", "svg"], capsys
    )
    assert code == 0 and (tmp_path / "a.out").read_text().lstrip().startswith("<")


def test_draw_bad_input(parity_file, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"states": [}')
    invalid = tmp_path / "invalid.json"
    invalid.write_text(
        json.dumps({"alphabet": ["a"], "states": ["p"], "initial": "zz", "transitions": []})
    )
    out = str(tmp_path / "x.png")
    cases = [
        (["draw", str(tmp_path / "missing.json"), "--output", out], "no such file"),
        (["draw", str(bad), "--output", out], "not valid JSON"),
        (["draw", str(invalid), "--output", out], "zz"),
        (["draw", str(parity_file), "--output", str(tmp_path / "x.gif")], "cannot tell the format"),
        (["draw", str(parity_file), "--output", out, "--format", "pdf"], "does not match"),
        (["draw", str(parity_file)], "--output"),
    ]
    for argv, message in cases:
        code, err = run_main(argv, capsys)
        assert code == 2 and message in err and err.count("\n") == 1, (argv, err)
        assert err.startswith("python -m cfl_lightning draw: error:")
    assert not (tmp_path / "x.png").exists()


def test_missing_dot_is_a_one_line_error(parity_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(draw.shutil, "which", lambda name: None)
    code, err = run_main(["draw", str(parity_file), "--output", str(tmp_path / "x.png")], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "`dot` program was not found" in err and "apt-get install graphviz" in err
    assert not (tmp_path / "x.png").exists()


def test_large_automata_drop_edge_labels_and_use_a_force_layout():
    """Above 12 states: sfdp and no edge labels (widths show weights); the paper's small
    automaton keeps dot and its labels; both choices can be forced."""
    data = random_pfsa(50, 10, 0, 0).to_dict()
    source = draw.automaton_graph(data).source
    assert "layout=sfdp" in source and "label=\"" not in source.split("->", 1)[1]
    assert "penwidth=" in source and "__start__" not in source
    assert 's_q0 [penwidth=3]' in source  # the initial state, in bold
    forced = draw.automaton_graph(data, engine="dot", edge_labels="all").source
    assert "layout=" not in forced and "a/" in forced and "__start__ -> s_q0" in forced
    small = draw.automaton_graph(parity_starfree_pfsa(0.3).to_dict()).source
    assert "layout=" not in small and 'label="a/0.3"' in small
    assert "penwidth" not in draw.automaton_graph(
        parity_starfree_pfsa(0.3).to_dict(), edge_labels="none").source.split("->", 1)[0]


@needs_dot
@pytest.mark.parametrize("states", [40, 50])
def test_large_automaton_renders_to_a_reasonably_sized_png(tmp_path, capsys, states):
    """Before: a 40-state automaton gave a 5,809 x 7,570 PNG with unreadable labels."""
    import matplotlib.image

    path = tmp_path / "a.json"
    random_pfsa(states, 10, 1, 0).to_json(path)
    out = tmp_path / "a.png"
    code, err = run_main(["draw", str(path), "--output", str(out)], capsys)
    assert code == 0, err
    height, width = matplotlib.image.imread(out).shape[:2]
    assert 400 < width <= 1600 and 400 < height <= 1600, (width, height)


def test_draw_rejects_unknown_engine_and_labels(parity_file, tmp_path, capsys):
    for flag in (["--engine", "twopi"], ["--edge-labels", "some"]):
        code, err = run_main(["draw", str(parity_file), "--output", str(tmp_path / "x.png"),
                              *flag], capsys)
        assert code == 2 and flag[0] in err and err.count("\n") == 1
    with pytest.raises(draw.CflError, match="engine"):
        draw.automaton_graph(parity_file, engine="twopi")
