"""PFSA tensors, JSON interchange, validation, generators, events."""

from __future__ import annotations

import json

import pytest
import torch

from cfl_lightning.automata import (
    PFSA,
    Event,
    parity_starfree_pfsa,
    random_pfsa,
    resampled_parity_starfree_pfsa,
)
from cfl_lightning.errors import EventError, PFSAError
from tests import helpers
from tests.helpers import short_pfsa

PARITY_JSON = helpers.PARITY_JSON


def test_issue_schema_roundtrip(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps(PARITY_JSON))
    pfsa = PFSA.from_json(path)
    assert pfsa == parity_starfree_pfsa(0.3)
    assert pfsa.states == ("init", "odd", "even", "rep") and pfsa.alphabet == ("a", "b")
    assert pfsa.next_state.tolist() == [[3, 1], [1, 2], [2, 1], [3, -1]]
    out = tmp_path / "b.json"
    pfsa.to_json(out)
    again = json.loads(out.read_text())
    assert set(again) == {"alphabet", "states", "initial", "final", "transitions"}
    assert again["final"] == {"odd": 0.1, "rep": 0.1}
    assert PFSA.from_json(out) == pfsa


def test_distributions_and_closed_forms():
    pfsa = parity_starfree_pfsa(0.3)
    probs = pfsa.next_symbol_probs()
    assert probs.shape == (4, 3) and torch.allclose(probs.sum(1), torch.ones(4, dtype=torch.float64))
    visits = pfsa.expected_visits()
    # init once; rep: 0.3 * 1/(1-0.9) = 3; odd/even from the parity chain.
    assert visits[0] == pytest.approx(1.0) and visits[3] == pytest.approx(3.0)
    assert float(pfsa.allsum()) == pytest.approx(1.0)
    assert Event.parse("state:rep").expected_count(pfsa) == pytest.approx(3 * 0.9)
    moved = pfsa.to("cpu")
    assert moved == pfsa and moved.device.type == "cpu"


def mutate(**changes):
    data = json.loads(json.dumps(PARITY_JSON))
    for key, value in changes.items():
        data[key] = value
    return data


@pytest.mark.parametrize(
    "data,match",
    [
        (mutate(final={"odd": 0.1, "rep": float("nan")}), "rep"),
        (mutate(final={"odd": 0.2, "rep": 0.1}), "state 'odd'.*sum"),
        (mutate(initial="nowhere"), "unknown state 'nowhere'"),
        (mutate(final={"ghost": 0.1}), "unknown state 'ghost'"),
        (mutate(alphabet=["a", "a"]), "duplicate symbol"),
        (mutate(states="init"), "list of strings"),
    ],
)
def test_validation_errors_name_the_problem(data, match):
    with pytest.raises(PFSAError, match=match):
        PFSA.from_dict(data, source="x.json")


def test_validation_transitions():
    data = mutate()
    data["transitions"][0]["weight"] = -0.3
    data["transitions"][1]["weight"] = 1.3
    with pytest.raises(PFSAError, match="invalid weight -0.3"):
        PFSA.from_dict(data)
    data = mutate()
    data["transitions"].append({"source": "init", "symbol": "a", "target": "odd", "weight": 0.0})
    with pytest.raises(PFSAError, match="nondeterminism: state 'init'.*'a'"):
        PFSA.from_dict(data)
    data = mutate()
    data["transitions"][0]["symbol"] = "z"
    with pytest.raises(PFSAError, match="unknown symbol 'z'"):
        PFSA.from_dict(data)
    data = mutate()
    del data["transitions"][0]["weight"]
    with pytest.raises(PFSAError, match="keys"):
        PFSA.from_dict(data)


@pytest.mark.parametrize("end", ["target", "source"])
def test_an_unknown_state_names_the_transition_by_source_and_symbol(end):
    """Issue 42: "unknown state 'qO' in transition #6" did not say that #6 counts from 0."""
    data = mutate()
    arc = data["transitions"][-1]
    arc[end] = "qO"
    with pytest.raises(PFSAError) as err:
        PFSA.from_dict(data, source="x.json")
    last = len(data["transitions"]) - 1
    name = f"transition {arc['source']!r} --{arc['symbol']}--> (transitions[{last}])"
    assert str(err.value) == f"x.json: unknown state 'qO' as the {end} of {name}"
    assert "#" not in str(err.value)


def test_reachable_state_that_cannot_terminate():
    data = mutate(final={"odd": 0.1})  # rep loops forever with 0.9 -> also unnormalized
    data["transitions"][-1]["weight"] = 1.0
    with pytest.raises(PFSAError, match="state 'rep' is reachable but cannot terminate"):
        PFSA.from_dict(data, source="loop.json")


def test_unreachable_dead_state_is_allowed():
    data = mutate()
    data["states"].append("dead")
    data["transitions"].append({"source": "dead", "symbol": "a", "target": "dead", "weight": 1.0})
    pfsa = PFSA.from_dict(data)
    assert pfsa.reachable()[-1] is False


@pytest.mark.parametrize(
    "content,match", [(None, "no such file"), ("{", "not valid JSON"), ("[]", "JSON object")]
)
def test_file_errors_name_the_file(tmp_path, content, match):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(PFSAError, match=match) as info:
        PFSA.from_json(path)
    if content is not None:
        assert "bad.json" in str(info.value)


def test_random_generator_deterministic_and_paper_like():
    a = random_pfsa(50, 10, topology_seed=3, weight_seed=4)
    assert a == random_pfsa(50, 10, topology_seed=3, weight_seed=4)
    b = random_pfsa(50, 10, topology_seed=3, weight_seed=5)
    assert torch.equal(a.next_state, b.next_state) and not torch.equal(a.weights, b.weights)
    accepting = a.final > 0
    has_arcs = (a.next_state >= 0).any(1)
    assert torch.allclose(a.final[accepting & has_arcs], torch.tensor(0.3, dtype=torch.float64))
    kept = float((a.next_state >= 0).double().mean())
    assert 0.35 < kept < 0.65  # each symbol kept with probability 1/2
    assert all(a.coaccessible())


def test_resampled_parity():
    a = resampled_parity_starfree_pfsa(3)
    assert a.final.tolist() == [0.0, 0.1, 0.0, 0.1]
    assert float(a.weights[3, 0]) == pytest.approx(0.9)
    assert not torch.equal(a.weights, resampled_parity_starfree_pfsa(4).weights)
    assert torch.equal(a.next_state, parity_starfree_pfsa().next_state)


def test_events():
    pfsa = short_pfsa()
    assert Event.parse("state:t").function(pfsa).tolist() == [[0, 0], [1, 1], [0, 0]]
    assert Event.parse("symbol:a").function(pfsa).tolist() == [[1, 0], [1, 0], [1, 0]]
    assert Event.parse("transition:u:a").function(pfsa).tolist() == [[0, 0], [0, 0], [1, 0]]
    assert str(Event.parse("transition:u:a")) == "transition:u:a"
    for bad in ["state", "state:", "colour:x", "transition:u"]:
        with pytest.raises(EventError):
            Event.parse(bad)
    with pytest.raises(EventError, match="unknown state"):
        Event.parse("state:zz").function(pfsa)
    with pytest.raises(EventError, match="no transition"):
        Event.parse("transition:u:b").function(pfsa)
