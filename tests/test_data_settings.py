"""The data module's parts: its settings dataclass, split plans (cache keys), occurrences,
targeted test strings, and ``build_results`` taking a ``FinishedRun``."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
import torch
from torch import nn

from cfl_lightning.automata import Event, random_pfsa
from cfl_lightning.callbacks import FinishedRun, build_results
from cfl_lightning.data import PFADataModule, tensorize
from cfl_lightning.data.occurrences import expected_occurrences, occurrences
from cfl_lightning.data.settings import DataSettings, applicable, build_automaton
from cfl_lightning.data.splits import REACH, SplitPlan
from cfl_lightning.data.targeted import at_stake
from cfl_lightning.errors import CflError, PFSAError
from cfl_lightning.results import RESULT_KEYS
from cfl_lightning.sampling import Intervention, sample_corpus

SMALL = dict(num_strings=30, val_strings=10, test_strings=10, device="cpu", cache_dir="none")


# ---------------------------------------------------------------------------- settings
def test_the_constructor_and_the_settings_have_the_same_fields():
    """Same names, order, defaults and annotations: the constructor's keyword arguments (and
    so the LightningCLI ``data.*`` keys) are the dataclass's fields."""
    parameters = list(inspect.signature(PFADataModule.__init__).parameters.values())[1:]
    fields = dataclasses.fields(DataSettings)
    assert [p.name for p in parameters] == [f.name for f in fields]
    assert [p.default for p in parameters] == [f.default for f in fields]
    assert [str(p.annotation) for p in parameters] == [str(f.type) for f in fields]


def test_every_field_is_documented_once_and_shown_as_the_constructors_args():
    doc = PFADataModule.__doc__
    args = doc.split("Args:\n", 1)[1]
    for field in dataclasses.fields(DataSettings):
        assert f"\n    {field.name}: " in "\n" + args, field.name
        assert f"    {field.name}: " in DataSettings.__doc__, field.name


def test_settings_check_and_normalize_integers():
    settings = DataSettings(num_strings=np.int64(7), seed=np.uint64(2**63), val_strings=0)
    assert settings.num_strings == 7 and type(settings.num_strings) is int
    assert settings.seed == 2**63 and type(settings.seed) is int
    with pytest.raises(CflError, match="num_strings must be an integer >= 1, got 0"):
        DataSettings(num_strings=0)
    with pytest.raises(CflError, match="max_tokens must be an integer >= 1, got 2.0"):
        DataSettings(max_tokens=2.0)
    with pytest.raises(CflError, match="weight_seed must be an integer in 0..18446744073709551615"):
        DataSettings(weight_seed=-1)
    with pytest.raises(CflError, match="test_strings"):
        DataSettings(test_strings=True)  # bools are not integers here
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seed = 3  # type: ignore[misc]


def test_data_module_keeps_its_settings_and_hparams():
    dm = PFADataModule(generator="random", num_states=5, num_symbols=3, seed=np.int64(4), **SMALL)
    assert dm.settings == DataSettings(
        generator="random", num_states=5, num_symbols=3, seed=4, **SMALL
    )
    assert dict(dm.hparams) == {**dm.settings.as_dict(), "num_symbols": dm.pfsa.num_symbols}
    assert list(dm.hparams) == [f.name for f in dataclasses.fields(DataSettings)]
    again = PFADataModule.from_settings(dm.settings)
    assert again.settings == dm.settings and again.pfsa == dm.pfsa
    # a file-based automaton: the recorded num_symbols is its alphabet size, not the argument
    parity = PFADataModule(generator="parity", num_symbols=9, **SMALL)
    assert parity.settings.num_symbols == 9 and parity.hparams["num_symbols"] == 2


def test_build_automaton_and_applicable_arguments():
    settings = DataSettings(generator="random", num_states=6, num_symbols=2, weight_seed=3)
    assert build_automaton(settings) == random_pfsa(6, 2, 0, 3)
    with pytest.raises(PFSAError, match="unknown generator 'nope'"):
        build_automaton(DataSettings(generator="nope"))  # type: ignore[arg-type]
    shown = applicable(DataSettings(generator="parity").as_dict())
    assert "eta" in shown and "num_states" not in shown and "automaton" not in shown
    shown = applicable(DataSettings(automaton="a.json").as_dict())
    assert "automaton" in shown and "generator" not in shown and "eta" not in shown
    assert shown["num_strings"] == 500  # every other argument is kept


# ---------------------------------------------------------------------------- split plans
def test_split_plans_and_their_cache_key_arguments():
    """The key format is the cache's: these records must not change (a change re-samples every
    cached corpus)."""
    dm = PFADataModule(
        generator="parity", intervention="exact", event="state:odd", count=60,
        test_target_strings=5, seed=3, **SMALL,
    )
    cpu = torch.device("cpu")
    common = {"method": "binning", "device_type": "cpu"}
    train, val, test, target = (dm._plan(s) for s in ("train", "val", "test", "test_target"))
    assert train.intervention is dm.intervention  # the validated value travels as it is
    assert train.key_arguments(cpu) == {
        "split": "train", "num_strings": 30, "seed": train.seed, "intervention": "exact",
        "event": "state:odd", "count": 60, **common,
    }
    assert val.key_arguments(cpu) == {
        "split": "val", "num_strings": 10, "seed": val.seed, "intervention": "none",
        "event": None, "count": None, **common,
    }
    assert test.intervention == Intervention() and test.reach is None
    assert target.key_arguments(cpu) == {
        "split": "test_target", "num_strings": 5, "seed": target.seed, "intervention": REACH,
        "event": "state:odd", "count": None, **common,
    }
    assert len({train.seed, val.seed, test.seed, target.seed}) == 4
    # an unconstrained run records its event, but samples (and keys) without it
    none = PFADataModule(generator="parity", event="state:odd", **SMALL)._plan("train")
    assert none.intervention == Intervention() and none.key_arguments(cpu)["event"] is None


def test_an_empty_split_is_drawn_empty():
    plan = SplitPlan("val", 0, 1)
    corpus = plan.draw(build_automaton(DataSettings()), torch.device("cpu"), None)
    assert len(corpus) == 0 and corpus.offsets.tolist() == [0]


# ---------------------------------------------------------------------------- occurrences
def test_occurrences_match_a_python_count(parity):
    corpus = sample_corpus(parity, 60, seed=2)
    tokenized = tensorize(corpus, parity, None)
    table = parity.next_state.tolist()
    count: dict[str, int] = {}
    strings: dict[str, set[int]] = {}
    for k, string in enumerate(corpus.to_lists()):
        state = parity.initial
        for symbol in string:
            src, sym = parity.states[state], parity.alphabet[symbol]
            for spec in (f"state:{src}", f"symbol:{sym}", f"transition:{src}:{sym}"):
                count[spec] = count.get(spec, 0) + 1
                strings.setdefault(spec, set()).add(k)
            state = table[state][symbol]
    found = occurrences(parity, tokenized)
    assert {k: v for k, v in found["count"].items() if v} == count
    holders = {k: len(v) for k, v in strings.items()}
    assert {k: v for k, v in found["strings"].items() if v} == holders
    # negative control: another corpus gives other counts
    other = tensorize(sample_corpus(parity, 60, seed=3), parity, None)
    assert occurrences(parity, other)["count"] != found["count"]
    expected = expected_occurrences(parity, 60)
    assert set(expected) == set(found["count"])
    assert expected["state:init"] == pytest.approx(60.0)  # every string starts there


# ---------------------------------------------------------------------------- targeted
def test_targeted_strings_need_a_reachable_event(parity):
    stake, p_reach = at_stake(parity, Event.parse("state:odd"), 0)
    assert stake is not None and stake.sum() == 1 and p_reach is None
    _, p_reach = at_stake(parity, Event.parse("state:odd"), 5)
    assert 0 < p_reach < 1
    assert at_stake(parity, None, 0) == (None, None)
    with pytest.raises(CflError, match="test_target_strings needs an event"):
        at_stake(parity, None, 5)


# ---------------------------------------------------------------------------- results
def test_build_results_takes_a_finished_run():
    dm = PFADataModule(generator="parity", intervention="exact", event="state:odd", count=60,
                       **SMALL)
    model = nn.Linear(2, 3)
    results = build_results(FinishedRun(model=model, datamodule=dm, log_dir="logs", seed=1))
    assert list(results) == list(RESULT_KEYS)
    assert results["config"]["data"] == dict(dm.hparams)
    assert (results["intervention"], results["count"], results["realized_count"]) == (
        "exact", 60, 60
    )
    assert results["num_parameters"] == 9 and results["kl_total"] is None
    assert results["epochs"] is None and results["log_dir"] == "logs"
    with pytest.raises(ValueError, match="differs from the data module's event"):
        build_results(FinishedRun(model, dm, "logs", event=Event.parse("state:even")))
