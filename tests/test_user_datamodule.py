"""A user's own data module (issue 37): the callbacks work with any data module that gives what
they need (:mod:`cfl_lightning.callbacks.requirements`), and refuse one that does not in one
line naming what is missing -- never a silent skip."""

from __future__ import annotations

import os

os.environ["WANDB_MODE"] = "disabled"  # before anything imports wandb

import json

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from cfl_lightning import CflError
from cfl_lightning.automata import class_tables, load_automaton, parity_starfree_pfsa
from cfl_lightning.callbacks import DecomposedKLCallback, ResultsWriter
from cfl_lightning.data.batching import collate, tensorize
from cfl_lightning.data.occurrences import expected_occurrences, occurrences
from cfl_lightning.sampling import Intervention, sample_corpus
from tests.cli_models import Bag


class MyData(L.LightningDataModule):
    """A minimal data module written against the requirements, not derived from PFADataModule."""

    def __init__(self, path: str, num_strings: int = 30) -> None:
        super().__init__()
        self.save_hyperparameters()  # results.json reads hparams["num_strings"]
        self.automaton = load_automaton(path)
        self.event, self.intervention = None, Intervention()
        self.automaton_id = "mine"
        self.realized_count = self.realized_strings = self.expected_count = None
        corpus = sample_corpus(self.automaton, num_strings, seed=1)
        self.tok = tensorize(corpus, self.automaton)
        self.probs = class_tables(self.automaton)[0].float()

    def occurrences(self):
        return occurrences(self.automaton, self.tok)

    def expected_occurrences(self):
        return expected_occurrences(self.automaton, self.hparams["num_strings"])

    def test_dataloader(self):
        index = torch.arange(len(self.tok))
        batch = collate(self.tok, index, self.probs, self.automaton.num_symbols + 2)
        return DataLoader([batch], batch_size=None)


def _trainer(*callbacks) -> L.Trainer:
    return L.Trainer(callbacks=list(callbacks), logger=False, enable_progress_bar=False,
                     enable_model_summary=False, enable_checkpointing=False)


@pytest.fixture
def automaton_file(tmp_path):
    path = tmp_path / "a.json"
    parity_starfree_pfsa(0.3).to_json(path)
    return str(path)


def test_a_users_data_module_gets_the_decomposed_kl_and_results(automaton_file, tmp_path):
    writer = ResultsWriter(str(tmp_path / "results.json"))
    (metrics,) = _trainer(DecomposedKLCallback(event="state:odd"), writer).test(
        Bag(2), datamodule=MyData(automaton_file), verbose=False)
    assert metrics["kl_total"] > 0 and "kl/state/odd" in metrics
    results = json.loads(writer.written.read_text())
    assert results["kl_total"] == pytest.approx(metrics["kl_total"], rel=1e-6)
    assert results["event"] == "state:odd" and results["automaton_id"] == "mine"
    assert results["realized_count"] == results["occurrences"]["count"]["state:odd"]


@pytest.mark.parametrize("callbacks,missing", [
    (lambda: [DecomposedKLCallback()], "no attribute 'automaton'"),
    (lambda: [ResultsWriter()], "attribute 'automaton'"),
])
def test_a_bare_data_module_is_refused_in_one_line(automaton_file, callbacks, missing):
    dm = MyData(automaton_file)

    class Bare(L.LightningDataModule):
        def test_dataloader(self):
            return dm.test_dataloader()

    with pytest.raises(CflError, match=missing) as err:
        _trainer(*callbacks()).test(Bag(2), datamodule=Bare(), verbose=False)
    assert "\n" not in str(err.value)


def test_missing_results_attribute_and_batch_key_are_named(automaton_file):
    dm = MyData(automaton_file)
    del dm.expected_count
    with pytest.raises(CflError, match="attribute 'expected_count'"):
        _trainer(ResultsWriter()).test(Bag(2), datamodule=dm, verbose=False)

    class NoStates(MyData):
        def test_dataloader(self):
            (batch,) = super().test_dataloader()
            del batch["states"]
            return DataLoader([batch], batch_size=None)

    with pytest.raises(CflError, match="batch key 'states'") as err:
        _trainer(DecomposedKLCallback()).test(
            Bag(2), datamodule=NoStates(automaton_file), verbose=False)
    assert "\n" not in str(err.value)
