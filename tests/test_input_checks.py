"""Issue 51 (items 5 and 11): automaton files and cheap mistakes refused early, in one line.

* A file without ``"kind"`` that has pushdown fields is told to add ``"kind": "pushdown"``.
* Unknown keys are named, with where they are (the top level or which transition), for both
  kinds; ``null`` and list values are described in JSON's words, never as ``None``.
* The ``sample`` command checks its flags and the event's names against the file's declared
  names before the automaton is built (a pushdown automaton's fixed point is the slow step), and
  a fixed point too large for memory is refused before it is solved.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from cfl_lightning.automata import load_automaton
from cfl_lightning.automata.declared import Declared, check_event_names, load_cost
from cfl_lightning.automata.events import Event
from cfl_lightning.errors import EventError, PDAError, PFSAError, SizeError
from tests.helpers import PARITY_JSON, run_cli

#: Dyck-1 with the depth in the stack symbol (D1..D4, D4 repeating): ``push:D3`` opens a third
#: level, ~0.57 times per string (issue 51's ``depth.json``: natural count ~28.5 in 50 strings)
DEPTH = json.loads((Path(__file__).parent / "data" / "depth.json").read_text())


def _write(tmp_path, data, name="a.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _sample(path, *extra):
    return run_cli(
        "sample", "--automaton", path, "--num-strings", "5", "--seed", "0", "--device", "cpu",
        "--output", path.parent / "out.jsonl", *extra,
    )


def _one_line(result, *needles):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_the_depth_automaton_loads():
    pda = load_automaton(DEPTH)
    assert pda.kind == "pushdown" and pda.expected_occurrences()["push:D3"] == pytest.approx(
        0.569, abs=1e-3
    )


# ---------------------------------------------------------------- the missing kind
def test_a_pushdown_file_without_kind_is_told_to_add_it(tmp_path):
    data = {k: v for k, v in DEPTH.items() if k != "kind"}
    result = _sample(_write(tmp_path, data))
    _one_line(result, "a.json", '"kind": "pushdown"', "'stack_alphabet'")
    assert not (tmp_path / "out.jsonl").exists()


def test_transitions_with_push_fields_alone_are_enough_for_the_hint():
    data = copy.deepcopy(PARITY_JSON)
    data["transitions"][0]["pop"] = True
    with pytest.raises(PFSAError, match='add "kind": "pushdown"'):
        load_automaton(data, where="x.json")


# ---------------------------------------------------------------- unknown keys
def test_a_pushdown_typo_pops_is_named_with_its_transition(tmp_path):
    data = copy.deepcopy(DEPTH)
    arc = data["transitions"][2]
    arc["pops"] = arc.pop("pop")
    line = _one_line(_sample(_write(tmp_path, data)), "unknown key 'pops'", "transitions[2]")
    assert "did you mean 'pop'?" in line and "top 'D1'" in line


def test_an_unknown_top_level_key_is_named_for_both_kinds():
    pda = {**DEPTH, "stack_alphabets": DEPTH["stack_alphabet"]}
    with pytest.raises(PDAError, match="unknown key 'stack_alphabets' in the top level"):
        load_automaton(pda)
    pfsa = {**PARITY_JSON, "finals": {"odd": 0.1}}
    with pytest.raises(PFSAError, match="unknown key 'finals' in the top level .*'final'"):
        load_automaton(pfsa)


def test_a_pfsa_transition_key_typo_is_named_with_its_transition():
    data = copy.deepcopy(PARITY_JSON)
    data["transitions"][3]["wieght"] = 0.1
    with pytest.raises(PFSAError) as err:
        load_automaton(data, where="p.json")
    assert str(err.value).startswith("p.json: unknown key 'wieght' in transition 'odd' --b-->")
    assert "(transitions[3])" in str(err.value)


# ---------------------------------------------------------------- null and lists
@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("symbol", None, "'symbol' must be a name (a string), got null"),
        ("source", ["q"], "'source' must be a name (a string), got a list"),
        ("push", None, None),  # null push: no push (keep), a valid spelling
        ("top", ["D1"], "'top' must be a name (a string), got a list"),
        ("pop", None, "'pop' must be true or false, got null"),
    ],
)
def test_pushdown_null_and_list_values_are_described_in_json_words(key, value, expected):
    data = copy.deepcopy(DEPTH)
    data["transitions"][1][key] = value
    if expected is None:
        assert load_automaton(data).action[0, 0, 0] == -1  # KEEP
        return
    with pytest.raises(PDAError) as err:
        load_automaton(data)
    message = str(err.value)
    assert expected in message and "None" not in message


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: d["transitions"][0].update(symbol=None), "must be a name (a string), got null"),
        (lambda d: d.update(initial=None), "'initial' must be a name (a string), got null"),
        (lambda d: d.update(states=None), "'states' must be a list of strings, got null"),
        (lambda d: d["transitions"][0].update(weight=None), "must be a number, got null"),
    ],
)
def test_pfsa_null_values_are_described_in_json_words(edit, expected):
    data = copy.deepcopy(PARITY_JSON)
    edit(data)
    with pytest.raises(PFSAError) as err:
        load_automaton(data)
    assert expected in str(err.value) and "None" not in str(err.value)


# ---------------------------------------------------------------- before the fixed point
@pytest.fixture
def built(monkeypatch):
    """Count the pushdown automata built (their fixed point solved) by the loader."""
    from cfl_lightning.automata.pushdown import PushdownAutomaton

    calls = []
    factory = PushdownAutomaton.from_dict  # the pushdown kind's registered loader

    def counting(data, **kwargs):
        calls.append(1)
        return factory(data, **kwargs)

    monkeypatch.setattr(PushdownAutomaton, "from_dict", staticmethod(counting))
    return calls


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--event", "symbol:s0"], "unknown symbol 's0'"),
        (["--event", "push:X9", "--intervention", "exact", "--count", "3"],
         "unknown stack symbol 'X9'"),
        (["--event", "state:nowhere"], "unknown state 'nowhere'"),
        (["--event", "transition:q:(", "--intervention", "exact", "--count", "1"],
         "unknown class 'q'"),
        (["--intervention", "exact", "--event", "symbol:("], "needs a count"),
        (["--count", "3", "--event", "symbol:("], "omit --count"),
        (["--num-strings", "0"], "num_strings must be a positive integer"),
    ],
)
def test_names_and_flags_are_refused_before_the_automaton_is_built(tmp_path, built, flags, needle):
    result = _sample(_write(tmp_path, DEPTH), *flags)
    _one_line(result, needle)
    assert built == []


def test_negative_control_a_good_event_builds_the_automaton_once(tmp_path, built):
    result = _sample(_write(tmp_path, DEPTH), "--event", "push:D3")
    assert result.returncode == 0, result.stderr
    assert built == [1]


def test_event_names_against_declared_names_match_the_tables_messages():
    pfsa = Declared("pfsa", ("a", "b"), ("x", "y"))
    check_event_names(pfsa, Event.parse("transition:a:x"))
    with pytest.raises(EventError, match=r"^event symbol:z: unknown symbol 'z'$"):
        check_event_names(pfsa, Event.parse("symbol:z"))
    pda = Declared("pushdown", ("q",), ("(", ")"), ("D1",))
    check_event_names(pda, Event.parse("transition:q/D1:("))
    check_event_names(pda, Event.parse("transition:q/-:("))
    with pytest.raises(EventError, match="unknown class 'q/D2'"):
        check_event_names(pda, Event.parse("transition:q/D2:("))


def test_a_fixed_point_too_large_for_memory_is_refused_before_it_is_solved(
    tmp_path, built, monkeypatch
):
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "16M")
    states = [f"q{i}" for i in range(40)]
    data = {**DEPTH, "states": states, "initial": "q0", "final": {"q0": 0.5}, "transitions": []}
    line = _one_line(_sample(_write(tmp_path, data)), "a.json", "fixed point of 40 states x 4",
                     "6,440 variables", "more than the 16.0 MB")
    assert line.count("needs ~") == 1 and built == []
    with pytest.raises(SizeError):
        load_automaton(data)


def test_the_load_cost_is_the_kinds_own():
    pda = load_cost(Declared("pushdown", tuple("q" + str(i) for i in range(20)), ("a",), ("X", "Y")))
    pfsa = load_cost(Declared("pfsa", tuple("q" + str(i) for i in range(20)), ("a",)))
    assert pda is not None and pfsa is not None
    assert "820 variables" in pda.what and pda.bytes >= 40 * 820**2  # dense: the Jacobian
    assert pfsa.bytes < pda.bytes / 1000


def test_a_slow_fixed_point_is_announced_before_it_starts(tmp_path, monkeypatch, built):
    from cfl_lightning.automata import declared

    monkeypatch.setattr(declared, "LOAD_SECONDS_PER_CUBE", 1.0)  # every fixed point is "slow"
    result = _sample(_write(tmp_path, DEPTH))
    assert result.returncode == 0, result.stderr
    assert "fixed point of 1 states x 4 stack symbols (5 variables): ~2 min estimated" in (
        result.stderr
    )


def test_the_load_estimate_follows_the_structured_fixed_point():
    """Above DENSE_MAX variables the pushdown fixed point is solved without a V x V Jacobian:
    the load estimate must not charge one (a 50-state automaton loads in ~20 MB)."""
    from cfl_lightning.automata import declared, pushdown_structured

    assert declared._DENSE_MAX == pushdown_structured.DENSE_MAX
    names = [f"q{i}" for i in range(50)]
    big = declared.Declared("pushdown", tuple(names), tuple("abcdefghij"), ("X", "Y", "Z"))
    cost = declared.load_cost(big)
    assert cost.bytes < 200e6  # the dense Jacobian alone would be 7,550^2 x 8 B = 456 MB
    small = declared.Declared("pushdown", tuple(names[:20]), ("a", "b"), ("X", "Y", "Z"))
    v = 3 * 20 * 20 + 20
    assert declared.load_cost(small).bytes >= 8 * v * v  # dense below: the Jacobian is formed
