"""The user-model contract of ``docs/guide/models.md``, run from the guide's own code.

A ``LanguageModel`` subclass writes ``super().__init__(...)``, its layers and ``forward``, and
calls nothing else: the package then initialises it (its ``reset_parameters``), counts its
parameters and saves its arguments. Checked against independent computations (the same layers
built by hand and initialised uniformly; parameter counts by formula), with negative controls.
What an ensemble needs from a data module is checked in one line naming what is missing.
"""

from __future__ import annotations

import math
import types
import warnings
from typing import Any

import pytest
import torch
from torch import nn

from cfl_lightning.callbacks.requirements import RESULTS_ATTRIBUTES
from cfl_lightning.data import PFADataModule
from cfl_lightning.ensemble import NotEnsembleable, check_member_data
from cfl_lightning.ensemble.requirements import ENSEMBLE_DATA
from cfl_lightning.models import LanguageModel
from cfl_lightning.models.base import INIT_RANGE
from tests.user_models import GRULanguageModel, guide_block

MODEL_BLOCK = guide_block("class GRULanguageModel(LanguageModel)")


def _by_hand(num_symbols: int, hidden: int, layers: int = 1) -> nn.ModuleList:
    """The guide's layers, built in its order (the same draws from the global generator)."""
    embedding = nn.Embedding(num_symbols + 3, hidden)
    gru = nn.GRU(hidden, hidden, layers, batch_first=True)
    return nn.ModuleList([embedding, gru, nn.Linear(hidden, num_symbols + 1)])


def test_the_guides_model_calls_nothing_private():
    code = MODEL_BLOCK.replace("super().__init__", "")
    assert "_finish_init" not in code and "self._" not in code and "reset_parameters" not in code


def test_the_package_initialises_a_subclass_after_its_init():
    """Uniform in [-INIT_RANGE, INIT_RANGE], drawn after the layers were built (in parameter
    order): equal to the same layers built by hand and initialised so."""
    torch.manual_seed(0)
    model = GRULanguageModel(num_symbols=2, hidden_size=12)
    torch.manual_seed(0)
    reference = _by_hand(2, 12)
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.uniform_(-INIT_RANGE, INIT_RANGE)
    ours = [p.detach() for p in model.parameters()]
    theirs = [p.detach() for p in reference.parameters()]
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    assert max(float(p.abs().max()) for p in ours) <= INIT_RANGE
    # the parameter count, by formula: embedding, GRU (3 gates), output layer
    count = 5 * 12 + 3 * (12 * 12 + 12 * 12 + 12 + 12) + (12 * 3 + 3)
    assert model.num_parameters == count == 1035
    assert model.size_summary == {"num_parameters": count}


def test_a_subclass_may_choose_its_own_initialisation():
    """Negative control of the above: overriding reset_parameters keeps PyTorch's own (the
    embedding is N(0, 1), far outside [-0.1, 0.1])."""

    class PyTorchInit(GRULanguageModel):
        def reset_parameters(self) -> None:
            pass

    torch.manual_seed(0)
    model = PyTorchInit(num_symbols=2)
    torch.manual_seed(0)
    reference = _by_hand(2, 12)
    for a, b in zip(model.parameters(), reference.parameters()):
        assert torch.equal(a.detach(), b.detach())
    assert float(model.embedding.weight.detach().abs().max()) > 1.0


def test_hyperparameters_are_the_calls_arguments_with_every_default():
    model = GRULanguageModel(num_symbols=3, hidden_size=8, lr=0.02)
    expected = dict(num_symbols=3, param_budget=128_000, num_layers=1, hidden_size=8,
                    dropout=0.1, lr=0.02, lr_factor=0.5, lr_patience=5, loss="kl")
    assert list(model.hparams.items()) == list(expected.items())
    again = GRULanguageModel(**model.hparams)  # a checkpoint's rebuild
    assert {k: v.shape for k, v in again.state_dict().items()} == {
        k: v.shape for k, v in model.state_dict().items()
    }
    assert model.dropout.p == 0.1 and model.vocab_size == 6 and model.num_classes == 4


class _Counting(GRULanguageModel):
    resets = 0

    def reset_parameters(self) -> None:
        _Counting.resets += 1
        super().reset_parameters()


class _Wider(_Counting):
    def __init__(self, width: int = 5, **kwargs: Any) -> None:
        super().__init__(hidden_size=width, **kwargs)


def test_a_subclass_of_a_subclass_is_finished_once_with_its_own_arguments():
    _Counting.resets = 0
    model = _Wider(width=7, num_symbols=2)
    assert _Counting.resets == 1 and model.gru.hidden_size == 7
    assert list(model.hparams)[:2] == ["width", "num_symbols"] and model.hparams["width"] == 7
    assert model.num_parameters == sum(p.numel() for p in model.parameters())


class _Legacy(LanguageModel):
    """Written for the old contract: calls the private ``_finish_init`` at the end."""

    def __init__(self, num_symbols: int = 2, hidden_size: int = 12, **training: Any) -> None:
        super().__init__(num_symbols=num_symbols, **training)
        self.embedding = nn.Embedding(self.vocab_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, 1, batch_first=True)
        self.output = nn.Linear(hidden_size, self.num_classes)
        self._finish_init(hidden_size_actual=hidden_size)


def test_the_old_private_call_still_works_deprecated():
    torch.manual_seed(0)
    with pytest.warns(DeprecationWarning, match="_finish_init is deprecated"):
        legacy = _Legacy(num_symbols=2)
    torch.manual_seed(0)
    current = GRULanguageModel(num_symbols=2)
    for a, b in zip(legacy.parameters(), current.parameters()):  # initialised once, the same
        assert torch.equal(a.detach(), b.detach())
    assert legacy.size_summary == {"hidden_size_actual": 12, "num_parameters": 1035}


# ---------------------------------------------------------------------- the ensemble's data
def _data() -> PFADataModule:
    return PFADataModule(generator="parity", intervention="exact", event="state:odd", count=10,
                         num_strings=12, val_strings=5, test_strings=5, cache_dir="none",
                         device="cpu")


def _without(dm: PFADataModule, missing: str) -> types.SimpleNamespace:
    """A stand-in offering what ``dm`` offers the ensemble and results.json, but ``missing``."""
    names = {*ENSEMBLE_DATA, *RESULTS_ATTRIBUTES} - {missing}
    fake = types.SimpleNamespace(**{name: getattr(dm, name) for name in names})
    fake.hparams = {k: v for k, v in dm.hparams.items() if k != missing}
    return fake


@pytest.mark.parametrize("missing", [*ENSEMBLE_DATA, "seed", "automaton_id", "num_strings"])
def test_what_an_ensemble_reads_from_a_data_module_is_checked_in_one_line(missing):
    dm = _data()
    check_member_data(dm)
    check_member_data(_without(dm, "nothing"))  # the stand-in itself is enough
    with pytest.raises(NotEnsembleable) as err:
        check_member_data(_without(dm, missing))
    message = str(err.value)
    assert "\n" not in message and missing in message and "SimpleNamespace" in message


@pytest.mark.slow  # a plain fit and a four-member ensemble, two epochs each
def test_the_guides_python_example_runs(tmp_path, monkeypatch):
    """The guide's usage block, run after its model block: four members trained and tested."""
    monkeypatch.chdir(tmp_path)  # Lightning writes nothing else, but in case
    namespace: dict[str, Any] = {"__name__": "guide_example"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(MODEL_BLOCK, "models.md", "exec"), namespace)
        exec(compile(guide_block("EnsembleLanguageModel(list(models)"), "models.md", "exec"),
             namespace)
    assert namespace["model"].trainer.current_epoch == 2
    assert len(namespace["best"]) == 4 and all(math.isfinite(v) for v in namespace["best"])
    totals = [float(t) for t in namespace["kl_total"]]
    assert len(totals) == 4 and all(math.isfinite(t) and t > 0 for t in totals)
    assert len(set(totals)) == 4  # four runs, four corpora and initialisations
