"""One path for each concept through the layers (issue 23, the data side).

* The intervention is parsed (``Intervention.create``, ``Event.parse``) and validated
  (``Intervention.validate``) once on its way from a data module's settings, ``sample_corpus``
  or the ``sample`` command to the sampler; the sampler's internal entry (``draw``) parses
  nothing again.
* One memory check (``budget.estimate_sampling`` behind ``check_corpora_memory``) per entry
  point.
* One device resolver: every entry point refuses a bad device with the same message.

Each count is checked against a deliberately doubled path (negative control), so a test that
counts the wrong function cannot pass by accident.
"""

from __future__ import annotations

import collections
import json

import pytest
import torch

from cfl_lightning.__main__ import main
from cfl_lightning.automata import Event, events
from cfl_lightning.data import PFADataModule
from cfl_lightning.errors import CflError, InterventionError
from cfl_lightning.sampling import (
    Intervention,
    SamplingRequest,
    budget,
    check_request,
    draw,
    resolve_device,
    sample_corpus,
)
from cfl_lightning.sampling import intervention as intervention_module
from tests.helpers import PARITY_JSON


@pytest.fixture
def counted(monkeypatch):
    """Count the calls of the parse, validate and memory-estimate entry points, by name."""
    seen: collections.Counter[str] = collections.Counter()

    def counting(name, function):
        def wrapper(*args, **kwargs):
            seen[name] += 1
            return function(*args, **kwargs)

        return wrapper

    create = Intervention.create.__func__
    monkeypatch.setattr(Intervention, "create", classmethod(counting("create", create)))
    monkeypatch.setattr(events.Event, "parse", staticmethod(counting("parse", Event.parse)))
    monkeypatch.setattr(Intervention, "validate", counting("validate", Intervention.validate))
    monkeypatch.setattr(
        budget, "estimate_sampling", counting("estimate_sampling", budget.estimate_sampling)
    )
    return seen


SETTINGS = dict(
    generator="parity", eta=0.3, intervention="exact", event="state:odd", count=90,
    num_strings=40, val_strings=20, test_strings=20, device="cpu", cache_dir="none",
)


def test_a_data_module_parses_and_validates_its_intervention_once(counted):
    dm = PFADataModule(**SETTINGS)
    dm.setup("fit")
    dm.setup("test")
    assert dm.realized_count == 90
    assert counted == {"create": 1, "parse": 1, "validate": 1, "estimate_sampling": 3}


def test_same_validation_intervention_is_validated_once_more_not_parsed(counted):
    """``val_intervention="same"`` is another value (scaled count): validated, never re-parsed."""
    dm = PFADataModule(**{**SETTINGS, "val_intervention": "same", "test_target_strings": 10})
    dm.setup()
    assert (dm.val_intervention.kind, dm.val_intervention.count) == ("exact", 45)
    assert counted == {"create": 1, "parse": 1, "validate": 2, "estimate_sampling": 4}


def test_sample_corpus_parses_once_and_draw_parses_nothing(parity, counted):
    corpus = sample_corpus(parity, 30, seed=0, intervention="exact", event="state:odd", count=70)
    assert corpus.total_count == 70
    assert counted == {"create": 1, "parse": 1, "validate": 1, "estimate_sampling": 1}
    request = SamplingRequest(30, 0, Intervention.create("exact", "state:odd", 70))
    counted.clear()
    again = draw(parity, request)
    assert counted == {} and torch.equal(again.tokens, corpus.tokens)


def test_negative_control_a_doubled_path_is_counted(parity, counted):
    """The counters see a second parse: the old data module -> sample_corpus path had one."""
    spec = Intervention.create("exact", "state:odd", 70)
    spec.validate(parity, 30)
    sample_corpus(parity, 30, seed=0, intervention=spec.kind, event=str(spec.event), count=70)
    assert counted["create"] == 2 and counted["parse"] == 2 and counted["validate"] == 2


def test_the_sample_command_checks_memory_once(tmp_path, counted, capsys):
    automaton = tmp_path / "parity.json"
    automaton.write_text(json.dumps(PARITY_JSON))
    out = tmp_path / "out.jsonl"
    code = main([
        "sample", "--automaton", str(automaton), "--num-strings", "30", "--seed", "0",
        "--intervention", "exact", "--event", "state:odd", "--count", "70", "--device", "cpu",
        "--output", str(out),
    ])
    assert code == 0, capsys.readouterr().err
    assert counted == {"create": 1, "parse": 1, "validate": 1, "estimate_sampling": 1}
    assert len(out.read_text().splitlines()) == 30


def test_the_memory_check_of_the_command_is_the_one_that_refuses(tmp_path, capsys, monkeypatch):
    """The single check includes writing JSON Lines (``write=True``): its message names it."""
    automaton = tmp_path / "parity.json"
    automaton.write_text(json.dumps(PARITY_JSON))
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "1M")
    code = main([
        "sample", "--automaton", str(automaton), "--num-strings", "100000", "--seed", "0",
        "--output", str(tmp_path / "out.jsonl"),
    ])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "this corpus needs ~" in err[0]


# ---------------------------------------------------------------------------- memory check
def test_check_corpora_memory_combines_corpora(parity, monkeypatch):
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "off")
    exact = Intervention.create("exact", "state:odd", 500)
    one = budget.check_corpora_memory(parity, [(100, exact)])
    assert one == budget.check_sampling_memory(
        parity, 100, intervention="exact", event="state:odd", count=500
    )
    both = budget.check_corpora_memory(parity, [(100, exact), (50, Intervention()), (0, exact)])
    alone = budget.estimate_sampling(parity, 50)
    assert both.num_strings == 150 and both.bins_bytes == one.bins_bytes
    assert both.corpus_bytes == one.corpus_bytes + alone.corpus_bytes
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "40K")
    with pytest.raises(CflError, match="the splits needs ~"):
        budget.check_corpora_memory(parity, [(100, exact)], what="the splits")


# ---------------------------------------------------------------------------- device
BAD_DEVICES = ["tpu", "", "mps", 3.5] + ([] if torch.cuda.is_available() else ["cuda", "cuda:1"])


@pytest.mark.parametrize("device", BAD_DEVICES, ids=[repr(d) for d in BAD_DEVICES])
def test_every_entry_point_refuses_a_device_with_the_resolvers_message(parity, device):
    with pytest.raises(InterventionError) as expected:
        resolve_device(device)
    message = str(expected.value)
    with pytest.raises(InterventionError) as sampled:
        sample_corpus(parity, 5, seed=0, device=device)
    with pytest.raises(InterventionError) as checked:
        check_request(parity, 5, seed=0, device=device)
    with pytest.raises(InterventionError) as data:
        PFADataModule(generator="parity", device=device, cache_dir="none")
    assert str(sampled.value) == str(checked.value) == str(data.value) == message


def test_the_resolver_resolves(parity):
    auto = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("auto") == auto and resolve_device(torch.device("cpu")).type == "cpu"
    dm = PFADataModule(generator="parity", device="auto", cache_dir="none")
    assert dm.device == auto and isinstance(dm.device, torch.device)
    request = check_request(parity, 3, seed=1, device="cpu")
    assert request.device == torch.device("cpu") and request.intervention == Intervention()


# ---------------------------------------------------------------------------- the value
def test_create_takes_any_integer_type_and_refuses_other_events():
    import numpy as np

    spec = Intervention.create("exact", "state:odd", np.int64(7))
    assert spec.count == 7 and type(spec.count) is int
    assert Intervention.create("at_least", "symbol:a", torch.tensor(3)).count == 3
    with pytest.raises(CflError, match="event must be text"):
        Intervention.create("exact", 3, 1)
    with pytest.raises(InterventionError, match="count must be an integer, got 2.5"):
        Intervention.create("exact", "state:odd", 2.5)


def test_reach_is_not_an_intervention_kind():
    """Targeted test strings are conditioned on reaching the event's at-stake states: a label
    of the cache key (``data.splits.REACH``), not a condition on the training corpus."""
    assert "reach" not in intervention_module.INTERVENTIONS
    with pytest.raises(InterventionError, match="unknown intervention 'reach'"):
        Intervention.create("reach", "state:odd")
