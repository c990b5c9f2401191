"""What the paper measures: unvisited targets are unknown, targeted test strings, training until
early stopping (recorded), the LR halving after exactly ``lr_patience`` bad validations, and
validation strings under the training intervention."""

from __future__ import annotations

import os

os.environ["WANDB_MODE"] = "disabled"  # before anything imports wandb

import json
import math

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping

from cfl_lightning import PFSA
from cfl_lightning.callbacks import DecomposedKLCallback, ResultsWriter
from cfl_lightning.callbacks.decomposed_kl import MONITOR
from cfl_lightning.data import PFADataModule
from cfl_lightning.errors import CflError
from cfl_lightning.models import LSTMLanguageModel

# u is rare: a string reaches it with probability ~0.2%
RARE = {
    "alphabet": ["a", "b"],
    "states": ["s", "t", "u"],
    "initial": "s",
    "final": {"s": 0.9, "t": 0.5, "u": 0.5},
    "transitions": [
        {"source": "s", "symbol": "a", "target": "t", "weight": 0.05},
        {"source": "s", "symbol": "b", "target": "s", "weight": 0.05},
        {"source": "t", "symbol": "a", "target": "u", "weight": 0.04},
        {"source": "t", "symbol": "b", "target": "s", "weight": 0.46},
        {"source": "u", "symbol": "a", "target": "t", "weight": 0.5},
    ],
}


@pytest.fixture
def rare(tmp_path):
    path = tmp_path / "rare.json"
    path.write_text(json.dumps(RARE))
    return path


def datamodule(path, **kw) -> PFADataModule:
    args = dict(
        automaton=str(path),
        intervention="exact",
        event="state:u",
        count=6,
        num_strings=40,
        val_strings=20,
        test_strings=30,
        max_tokens=256,
        seed=0,
        cache_dir="none",
        device="cpu",
    )
    args.update(kw)
    return PFADataModule(**args)


def fit_and_test(dm, tmp_path, *, max_epochs=1, lr=0.01, early_stopping=None):
    L.seed_everything(0, verbose=False)
    model = LSTMLanguageModel(num_symbols=dm.num_symbols, param_budget=3000, lr=lr)
    writer = ResultsWriter(path=str(tmp_path / "results.json"))
    callbacks = [DecomposedKLCallback(), writer] + ([early_stopping] if early_stopping else [])
    trainer = L.Trainer(
        max_epochs=max_epochs,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(model, datamodule=dm)
    metrics = trainer.test(model, datamodule=dm, verbose=False)[0]
    return json.loads((tmp_path / "results.json").read_text()), metrics


def test_an_unvisited_target_is_unknown_not_zero(rare, tmp_path):
    dm = datamodule(rare)
    u = dm.pfsa.states.index("u")
    assert not (dm.tokenized("test").states == u).any()  # the test strings never reach u
    results, metrics = fit_and_test(dm, tmp_path)
    assert results["target_test_visits"] == 0
    assert results["kl_target"] is None and results["kl_target_unweighted"] is None
    assert results["test_visits"]["state"]["u"] == 0 and results["test_visits"]["state"]["s"] > 0
    assert results["kl"]["state"]["u"] is None and results["kl_unweighted"]["state"]["u"] is None
    assert results["kl"]["state"]["s"] is not None  # negative control: visited states keep values
    assert results["kl"]["transition"]["u:a"] is None
    assert metrics["target_test_visits"] == 0 and "kl_target" not in metrics
    assert math.isfinite(results["kl_total"])
    # training facts
    assert results["stopped_early"] is False and results["epochs"] == 1 and results["steps"] > 0


def test_targeted_test_strings_give_a_finite_contribution(rare, tmp_path):
    dm = datamodule(rare, test_target_strings=12)
    weights = dm.test_weights()
    assert weights.shape == (42,)
    plain = datamodule(rare)
    # the plain strings come first and are the same; every targeted string reaches u
    assert torch.equal(dm.corpus("test").tokens[: plain.corpus("test").tokens.numel()],
                       plain.corpus("test").tokens)
    results, metrics = fit_and_test(dm, tmp_path)
    assert results["target_test_visits"] >= 12
    assert results["target_test_visits"] == results["test_visits"]["state"]["u"]
    assert math.isfinite(results["kl_target_unweighted"]) and math.isfinite(results["kl_target"])
    assert metrics["kl_target_unweighted"] == pytest.approx(results["kl_target_unweighted"])
    # importance weights: every string that reaches u weighs the same, the others (n+m)/n
    u = dm.pfsa.states.index("u")
    tok = dm.tokenized("test")
    owner = torch.repeat_interleave(torch.arange(len(tok)), tok.positions)
    reached = torch.zeros(len(tok), dtype=torch.bool)
    reached[owner[tok.states == u]] = True
    assert reached[30:].all()
    assert weights[reached].unique().numel() == 1
    assert weights[~reached].unique().tolist() == [42 / 30]
    assert float(weights[reached][0]) < 0.1  # P(reach) is small: a targeted visit weighs little
    batch = next(iter(dm.test_dataloader()))
    assert batch["weights"].shape == batch["input_ids"].shape[:1]


def test_targeted_test_strings_need_an_event(rare):
    with pytest.raises(CflError, match="needs an event"):
        datamodule(rare, intervention="none", event=None, count=None, test_target_strings=5)
    with pytest.raises(CflError, match="test_target_strings"):
        datamodule(rare, test_target_strings=-1)


def test_early_stopping_is_recorded(rare, tmp_path):
    """lr 0: the validation loss never decreases, so patience 1 stops at the second validation."""
    stop = EarlyStopping(monitor=MONITOR, mode="min", patience=1)
    dm = datamodule(rare)
    results, _ = fit_and_test(dm, tmp_path, max_epochs=50, lr=0.0, early_stopping=stop)
    assert results["stopped_early"] is True
    assert results["epochs"] == 2 and results["steps"] == 2 * len(dm.batches("train"))


def test_lr_halves_at_exactly_the_fifth_validation_without_decrease():
    model = LSTMLanguageModel(num_symbols=2, param_budget=2000, lr=0.01, lr_patience=5)
    config = model.configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    assert config["lr_scheduler"]["monitor"] == MONITOR
    # best 0.9 at the second check; an equal value is no decrease
    scripted = [1.0, 0.9, 0.95, 0.9, 0.97, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.5]
    lrs = []
    for value in scripted:
        scheduler.step(value)
        lrs.append(optimizer.param_groups[0]["lr"])
    #        1.0   0.9   bad1  bad2  bad3  bad4  bad5   bad1   ...           bad5    improve
    assert lrs == [0.01] * 6 + [0.005] * 5 + [0.0025] * 2
    # negative control: torch's own patience=5 halves one validation later
    params = [torch.nn.Parameter(torch.zeros(1))]
    torch_opt = torch.optim.Adam(params, lr=0.01)
    plain = torch.optim.lr_scheduler.ReduceLROnPlateau(torch_opt, patience=5, factor=0.5)
    torch_lrs = []
    for value in scripted:
        plain.step(value)
        torch_lrs.append(torch_opt.param_groups[0]["lr"])
    assert torch_lrs.index(0.005) == 7  # the 6th validation without decrease, not the 5th
    with pytest.raises(ValueError, match="lr_patience"):
        LSTMLanguageModel(num_symbols=2, param_budget=2000, lr_patience=0)


def test_validation_strings_under_the_training_intervention(rare):
    same = datamodule(rare, val_intervention="same", count=8, num_strings=40, val_strings=20)
    assert (same.val_intervention.kind, same.val_intervention.count) == ("exact", 4)
    assert int(same.tokenized("val").counts.sum()) == 4
    default = datamodule(rare, count=8)
    assert default.val_intervention.kind == "none"  # unconstrained by default
    alo = datamodule(rare, intervention="at_least_once", count=10, val_intervention="same")
    assert (alo.val_intervention.kind, alo.val_intervention.count) == ("at_least_once", 5)
    assert int((alo.tokenized("val").counts > 0).sum()) == 5
    with pytest.raises(CflError, match="val_intervention"):
        datamodule(rare, val_intervention="train")
