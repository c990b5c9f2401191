"""The ``pcfg`` automaton kind (issue 50): one registration, loading (a ``*.pcfg`` text file and
the JSON form), unconstrained sampling through the CLI and ``draw``, one-line refusals of what is
not implemented yet (events, interventions, position classes), and the data module's exact
per-position targets against the independent reference (``tests/pcfg_reference.py``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from cfl_lightning.automata import Automaton, load_automaton
from cfl_lightning.automata.pcfg import normal_form
from cfl_lightning.errors import CflError, EventError, PFSAError
from cfl_lightning.kinds import automaton_kind
from cfl_lightning.sampling import backend_for
from tests.helpers import run_cli
from tests.pcfg_reference import prefix_and_string_probability, reference_laws
from tests.test_pcfg import BAD, DYCK, EXPR, UNITS


@pytest.fixture
def expr_file(tmp_path):
    path = tmp_path / "expr.pcfg"
    path.write_text(EXPR)
    return path


def test_one_registration_without_position_classes():
    kind = automaton_kind("pcfg")
    assert kind.position_classes is False and kind.backend is not None and kind.events == {}


def test_text_file_and_json_give_the_same_grammar(expr_file, tmp_path):
    a = load_automaton(expr_file)
    assert a.kind == "pcfg" and a.alphabet == ("+", "*", "(", ")", "x", "y")
    assert a.source == str(expr_file)
    json_path = tmp_path / "expr.json"
    a.to_json(json_path)
    assert json.loads(json_path.read_text())["kind"] == "pcfg"
    assert load_automaton(json_path) == a == load_automaton(a.to_dict())
    for name in ("kind", "alphabet", "source", "num_symbols", "eos", "device", "to",
                 "annotate", "expected_length", "to_dict", "validate", "event_table"):
        assert hasattr(a, name), name
    assert isinstance(a, Automaton)


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_files_get_one_line_with_the_line_number(case, tmp_path):
    text, message = BAD[case]
    path = tmp_path / "x.pcfg"
    path.write_text(text)
    with pytest.raises(PFSAError) as info:
        load_automaton(path)
    assert message in str(info.value) and "\n" not in str(info.value)
    result = run_cli("sample", "--automaton", path, "--num-strings", "5", "--seed", "0",
                     "--output", tmp_path / "o.jsonl")
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o.jsonl").exists()


def test_bad_json_entry_names_the_rule(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"kind": "pcfg", "rules": ["S -> 'a' [1.0]", "oops"]}))
    with pytest.raises(PFSAError, match=r"g.json: rules\[1\]: cannot read"):
        load_automaton(path)


def test_sample_cli_writes_strings_of_the_grammar(expr_file, tmp_path):
    out = tmp_path / "out.jsonl"
    result = run_cli("sample", "--automaton", expr_file, "--num-strings", "100", "--seed", "0",
                     "--output", out)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line)["symbols"] for line in out.read_text().splitlines()]
    assert len(lines) == 100
    g = load_automaton(expr_file).grammar
    for symbols in lines[:20]:
        w = tuple(g.alphabet.index(s) for s in symbols)
        assert prefix_and_string_probability(g, w)[1] > 0
    again = tmp_path / "again.jsonl"
    run_cli("sample", "--automaton", expr_file, "--num-strings", "100", "--seed", "0",
            "--output", again)
    assert again.read_text() == out.read_text()  # seeded


@pytest.mark.parametrize("flags", [
    ("--event", "state:E"),
    ("--intervention", "exact", "--event", "symbol:x", "--count", "5"),
    ("--intervention", "at_least_once", "--event", "symbol:x", "--count", "3"),
])
def test_events_and_interventions_are_refused_in_one_line(expr_file, tmp_path, flags):
    result = run_cli("sample", "--automaton", expr_file, "--num-strings", "10", "--seed", "0",
                     "--output", tmp_path / "o.jsonl", *flags)
    assert result.returncode == 2
    assert "interventions on pcfg are not implemented yet" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_backend_and_class_tables_refuse_in_one_line(expr_file):
    a = load_automaton(expr_file)
    with pytest.raises(EventError, match="not implemented yet"):
        backend_for(a).event_counts("symbol:x")
    with pytest.raises(CflError, match="no position classes"):
        a.class_probs()
