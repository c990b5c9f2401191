"""Callbacks and the API under misuse (issue 22, section 4): the callback's own event in
results.json, probabilities/integers/infinities where logits are expected, an event without an
automaton, and ``trainer.test(ckpt_path="best")``."""

from __future__ import annotations

import os

os.environ["WANDB_MODE"] = "disabled"  # before anything imports wandb

import json
import warnings

import lightning as L
import pytest
import torch

import cfl_lightning.losses as losses
from cfl_lightning import CflError, kl_to_automaton_loss, parity_starfree_pfsa
from cfl_lightning.callbacks import DecomposedKLCallback, ResultsWriter
from cfl_lightning.data import PFADataModule
from cfl_lightning.losses import ProbabilitiesAsLogitsWarning
from cfl_lightning.sampling.visits import containing_probability
from tests.cli_models import Bag
from tests.reference import enumerate_strings


def _dm(**kw) -> PFADataModule:
    args = dict(generator="parity", eta=0.3, num_strings=40, val_strings=10, test_strings=60,
                seed=0, cache_dir="none", device="cpu")
    args.update(kw)
    return PFADataModule(**args)


def _trainer(*callbacks, root=None, **kw) -> L.Trainer:
    return L.Trainer(callbacks=list(callbacks), logger=False, enable_progress_bar=False,
                     enable_model_summary=False, enable_checkpointing=False,
                     default_root_dir=root, **kw)


@pytest.fixture(autouse=True)
def _fresh_probability_warning(monkeypatch):
    monkeypatch.setattr(losses, "_warned_probabilities", False)


# --------------------------------------------------------------------------- results.json event


def test_results_json_takes_the_callbacks_event(tmp_path):
    """DecomposedKLCallback(event=...) on a data module without one: results.json records that
    event, its kl_target and its counts in the training corpus."""
    dm = _dm()
    writer = ResultsWriter(str(tmp_path / "results.json"))
    trainer = _trainer(DecomposedKLCallback(event="state:odd"), writer)
    (metrics,) = trainer.test(Bag(2), datamodule=dm, verbose=False)
    results = json.loads(writer.written.read_text())
    assert results["event"] == "state:odd" and results["intervention"] == "none"
    assert results["kl_target"] == pytest.approx(metrics["kl_target"], rel=1e-6)
    assert results["kl_target"] == pytest.approx(results["kl"]["state"]["odd"], rel=1e-12)
    assert results["realized_count"] == results["occurrences"]["count"]["state:odd"]
    assert results["realized_strings"] == results["occurrences"]["strings"]["state:odd"]
    assert results["expected_count"] == pytest.approx(
        results["expected_occurrences"]["state:odd"])
    assert results["target_test_visits"] == metrics["target_test_visits"] > 0
    # negative control: without the callback's event there is none
    writer = ResultsWriter(str(tmp_path / "plain.json"))
    _trainer(DecomposedKLCallback(), writer).test(Bag(2), datamodule=dm, verbose=False)
    plain = json.loads(writer.written.read_text())
    assert plain["event"] is None and plain["kl_target"] is None


def test_callback_event_other_than_the_data_modules_is_refused_before_training(tmp_path):
    dm = _dm(intervention="exact", event="state:even", count=60)
    model = Bag(2)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = _trainer(DecomposedKLCallback(event="state:odd"), ResultsWriter(), root=tmp_path,
                       max_epochs=1)
    with pytest.raises(CflError, match="state:odd.*state:even"):
        trainer.fit(model, datamodule=dm)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # not trained
    # the same event given twice is fine
    _trainer(DecomposedKLCallback(event="state:even"), ResultsWriter(str(tmp_path / "r.json")),
             max_epochs=1).fit(Bag(2), datamodule=dm)


def test_callback_automaton_other_than_the_data_modules_is_refused(tmp_path):
    trainer = _trainer(DecomposedKLCallback(pfsa=parity_starfree_pfsa(0.4)), ResultsWriter(),
                       root=tmp_path)
    with pytest.raises(CflError, match="another automaton"):
        trainer.test(Bag(2), datamodule=_dm(), verbose=False)


def test_event_without_an_automaton_is_an_error():
    class Plain(L.LightningDataModule):
        def test_dataloader(self):
            return _dm(test_strings=5).test_dataloader()

    dm = _dm(test_strings=5)
    dm.setup("test")
    plain = Plain()
    plain.test_dataloader = dm.test_dataloader
    with pytest.raises(CflError, match="no automaton"):
        _trainer(DecomposedKLCallback(event="state:odd")).test(Bag(2), datamodule=plain,
                                                               verbose=False)
    # without an event too: never a silent skip of the decomposed KL (one line naming it)
    with pytest.raises(CflError, match="no attribute 'automaton'") as err:
        _trainer(DecomposedKLCallback()).test(Bag(2), datamodule=plain, verbose=False)
    assert "\n" not in str(err.value)
    # negative control: the callback's own automaton serves a data module without one
    callback = DecomposedKLCallback(event="state:odd", automaton=parity_starfree_pfsa(0.3))
    (metrics,) = _trainer(callback).test(Bag(2), datamodule=plain, verbose=False)
    assert "test/kl_per_string" in metrics and "kl_total" in metrics


# --------------------------------------------------------------------------- units


@pytest.mark.parametrize("event", ["transition:t:a", "state:u", "symbol:b"])
def test_containing_probability_matches_enumeration(small, event):
    from cfl_lightning.automata import Event

    function = Event.parse(event).function(small)
    strings = enumerate_strings(small, function, max_len=15)
    missing = 1 - sum(p for p, _ in strings.values())  # strings longer than 15
    assert 0 <= missing < 1e-3
    p_contains = sum(p for p, n in strings.values() if n > 0)
    assert p_contains - 1e-12 <= containing_probability(small, event) <= p_contains + missing
    # negative control: the expected count differs (an event can occur more than once)
    expected = sum(p * n for p, n in strings.values())
    assert abs(expected - p_contains) > 1e-3


def test_expected_strings_and_count_unit(tmp_path):
    """expected_strings = K x P(a string contains the event); count_unit: strings for
    at_least_once, occurrences otherwise."""
    pfsa, event = parity_starfree_pfsa(0.3), "transition:odd:a"
    units = {}
    for kind, count in (("at_least_once", 10), ("exact", 50), ("none", None)):
        dm = _dm(intervention=kind, event=event, count=count, test_strings=5)
        writer = ResultsWriter(str(tmp_path / f"{kind}.json"))
        _trainer(DecomposedKLCallback(), writer).test(Bag(2), datamodule=dm, verbose=False)
        results = json.loads(writer.written.read_text())
        assert results["expected_strings"] == pytest.approx(
            40 * containing_probability(pfsa, event), rel=1e-12)
        assert results["expected_strings"] < results["expected_count"]
        units[kind] = results["count_unit"]
    assert units == {"at_least_once": "strings", "exact": "occurrences", "none": "occurrences"}
    writer = ResultsWriter(str(tmp_path / "no_event.json"))
    _trainer(DecomposedKLCallback(), writer).test(Bag(2), datamodule=_dm(test_strings=5),
                                                  verbose=False)
    results = json.loads(writer.written.read_text())
    assert results["expected_strings"] is None and results["count_unit"] == "occurrences"


# --------------------------------------------------------------------------- scores


def _batch(b=3, t=4, v=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    target = torch.softmax(torch.randn(b, t, v, generator=g), -1)
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[1, 2:] = False
    return {"input_ids": torch.zeros(b, t, dtype=torch.long),
            "target_probs": target * mask[..., None], "mask": mask}, g


def test_probabilities_given_as_logits_warn_once_in_the_loss():
    batch, g = _batch()
    logits = torch.randn(3, 4, 3, generator=g)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kl_to_automaton_loss(logits, batch)  # logits: silent
        kl_to_automaton_loss(torch.log_softmax(logits, -1), batch)  # log-probabilities: silent
    probs = torch.softmax(logits, -1)
    probs[1, 2:] = 7.0  # padding does not matter
    with pytest.warns(ProbabilitiesAsLogitsWarning, match="log_softmax"):
        kl_to_automaton_loss(probs, batch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kl_to_automaton_loss(probs, batch)  # once per process


def test_probabilities_given_as_logits_warn_in_the_callback(tmp_path):
    class Softmax(Bag):
        def forward(self, input_ids):
            return super().forward(input_ids).softmax(-1)

    with pytest.warns(ProbabilitiesAsLogitsWarning, match=r"Softmax\(input_ids\).*log_softmax"):
        _trainer(DecomposedKLCallback()).test(Softmax(2), datamodule=_dm(), verbose=False)


@pytest.mark.parametrize("make, words", [
    (lambda x: x.long(), ["dtype int64", "floating-point"]),
    (lambda x: x.masked_fill(torch.zeros_like(x, dtype=torch.bool).index_fill(-1,
     torch.tensor([0]), True), float("inf")), ["+inf"]),
    (lambda x: x * float("nan"), ["NaN"]),
    (lambda x: torch.full_like(x, float("-inf")), ["-inf for every symbol"]),
])
def test_bad_scores_are_named(make, words):
    batch, g = _batch()
    with pytest.raises(CflError) as info:
        kl_to_automaton_loss(make(torch.randn(3, 4, 3, generator=g)), batch)
    for word in words:
        assert word in str(info.value)
    assert "NaN" not in str(info.value) or words == ["NaN"]


def test_bad_scores_in_the_callback_name_stage_epoch_and_step():
    class Infinite(Bag):
        def forward(self, input_ids):
            out = super().forward(input_ids).clone()
            out[..., 0] = float("inf")
            return out

    with pytest.raises(CflError, match=r"Infinite\(input_ids\) \(test, epoch 0, step 0\) "
                                       r"contains \+inf"):
        _trainer(DecomposedKLCallback()).test(Infinite(2), datamodule=_dm(), verbose=False)


def test_module_without_validation_step_warns_when_fitting(tmp_path):
    from tests.cli_models import NoValidation

    with pytest.warns(UserWarning, match="no validation_step"):
        _trainer(DecomposedKLCallback(), root=tmp_path, max_epochs=1).fit(
            NoValidation(2), datamodule=_dm())
