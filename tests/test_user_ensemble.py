"""A user's own ``LanguageModel`` (a GRU, no stacked network) ensembles too.

Without ``LanguageModel.stacked_network`` an ensemble runs each member's own forward (the loop
engine); at dropout 0 every member must then train exactly as its own run: in process against
a plain Lightning ``Trainer`` (quick), and end to end under ``sweep --ensemble 4`` in a grid
over learning rates and seeds against ``fit`` (slow). The GRU is the guide's
(``docs/guide/models.md``, executed by ``tests/user_models.py``).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import lightning
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint

from cfl_lightning.data import PFADataModule
from cfl_lightning.ensemble import EnsembleLanguageModel, NotEnsembleable, TrainSettings
from cfl_lightning.ensemble.settings import check_ensembleable
from cfl_lightning.models import LanguageModel
from tests.user_models import GRULanguageModel

REPO = Path(__file__).resolve().parents[1]
DATA = [dict(seed=0, count=30, num_strings=40), dict(seed=1, count=60, num_strings=70)]
EPOCHS = 3


def build(seed: int, data: dict):
    """Seed, data module, model: in the order of ``python -m cfl_lightning fit``."""
    lightning.seed_everything(seed, verbose=False)
    dm = PFADataModule(generator="parity", eta=0.3, intervention="exact", event="state:odd",
                       val_strings=20, test_strings=0, cache_dir="none", device="cpu", **data)
    model = GRULanguageModel(num_symbols=dm.num_symbols, dropout=0.0, lr=0.05, lr_patience=1)
    return model.double(), dm


class _Losses(Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def own_run(model, dm, tmp_path):
    """The member's own run, as the CLI trains it (clip 5, early stopping, best checkpoint)."""
    losses = _Losses()
    best = ModelCheckpoint(monitor="val/kl_per_string", dirpath=tmp_path, save_top_k=1)
    trainer = lightning.Trainer(
        max_epochs=EPOCHS, precision="64-true", gradient_clip_val=5.0, logger=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
        callbacks=[losses, EarlyStopping("val/kl_per_string", patience=1), best],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, datamodule=dm)
    state = torch.load(best.best_model_path, weights_only=True)["state_dict"]
    return losses.losses, float(best.best_model_score), state


def test_a_user_gru_trains_in_an_ensemble_exactly_as_its_own_runs(tmp_path):
    """float64, dropout 0: step losses, best validation value and best weights (in process)."""
    refs = [own_run(*build(i, d), tmp_path / str(i)) for i, d in enumerate(DATA)]
    models, dms = zip(*(build(i, d) for i, d in enumerate(DATA)))
    module = EnsembleLanguageModel(list(models), list(dms), TrainSettings(EPOCHS, patience=1),
                                   record_steps=True)
    trainer = lightning.Trainer(
        max_epochs=EPOCHS, logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, reload_dataloaders_every_n_epochs=1, num_sanity_val_steps=0,
        accelerator="cpu",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module)
    assert module.engine_name == "auto" and type(module.engine()).__name__ == "LoopEngine"
    for (losses, best_score, best_state), out in zip(refs, module.outcomes()):
        np.testing.assert_allclose(out.step_losses, losses, rtol=1e-10, atol=1e-12)
        assert out.best_val_loss == pytest.approx(best_score, rel=1e-6)
        for name, value in out.best_state.items():
            torch.testing.assert_close(value, best_state[name], rtol=1e-6, atol=1e-7)
    # negative control: the members' runs differ
    assert not np.allclose(refs[0][0][:3], refs[1][0][:3])


def test_a_user_model_has_no_stacked_engine_but_is_ensembleable():
    model, dm = build(0, DATA[0])
    assert model.stacked_network() is None
    check_ensembleable(model)  # no NotEnsembleable
    with pytest.raises(ValueError, match="GRULanguageModel has no stacked network"):
        EnsembleLanguageModel([model], [dm], engine="stacked")


class _OwnStep(GRULanguageModel):
    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx) * 2


def test_a_model_whose_training_the_ensemble_does_not_reproduce_is_refused():
    with pytest.raises(NotEnsembleable, match="_OwnStep overrides LanguageModel.training_step"):
        check_ensembleable(_OwnStep())
    with pytest.raises(NotEnsembleable, match="Linear is not a LanguageModel"):
        check_ensembleable(torch.nn.Linear(2, 2))
    model, dm = build(0, DATA[0])
    own = _OwnStep(num_symbols=dm.num_symbols, dropout=0.0).double()
    with pytest.raises(NotEnsembleable, match="overrides LanguageModel.training_step"):
        EnsembleLanguageModel([own], [dm])
    # the refusal is the override's: the same model without it is an ensemble, and the override
    # changes what a step optimizes (the ensemble would train it as LanguageModel does)
    assert EnsembleLanguageModel([model], [dm]).num_members == 1
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    batch = {k: v.double() if v.is_floating_point() else v for k, v in batch.items()}
    ours = LanguageModel.training_step(own, batch, 0)
    assert float(own.training_step(batch, 0)) == pytest.approx(2 * float(ours))


FIT = ["${env}", "${interpreter}", "-m", "cfl_lightning", "fit", "--config",
       "configs/parity_starfree.yaml", "--model=tests.user_models.GRULanguageModel",
       "--model.init_args.dropout=0", "--data.num_strings=40", "--data.count=80",
       "--data.val_strings=20", "--data.test_strings=30", "--data.cache_dir=none",
       "--trainer.max_epochs=3", "--trainer.logger=[{class_path: CSVLogger, init_args: "
       "{save_dir: ., name: csv}}]", "${args}"]


@pytest.mark.slow  # ensemble jobs (processes of their own) and four plain fits
def test_a_user_gru_trains_under_sweep_ensemble_4_as_its_plain_fits(tmp_path, monkeypatch):
    """The guide's GRU (no private call), in a grid whose points differ in learning rate and
    seed, under ``sweep --ensemble 4``: every point trains as its plain ``fit`` (dropout 0), its
    own learning rate, its true parameter count in results.json."""
    from cfl_lightning.__main__ import main
    from cfl_lightning.cli.train import main as fit_main

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the job imports tests.user_models
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    grid = tmp_path / "grid.yaml"
    grid.write_text("method: grid\nparameters:\n  seed_everything:\n    values: [0, 1]\n"
                    "  model.init_args.lr:\n    values: [0.02, 0.05]\n"
                    "command:\n" + "".join(f"  - {json.dumps(c)}\n" for c in FIT))
    out = tmp_path / "ens"
    assert main(["sweep", str(grid), "--output", str(out), "--ensemble", "4"]) == 0
    jobs = list(out.glob(".ensembles/*"))
    assert jobs and all("not ensembled" not in (job / "job.log").read_text() for job in jobs)
    found = {}
    for path in out.rglob("results.json"):
        init_args = json.loads(path.read_text())["config"]["model"]["init_args"]
        found[(json.loads(path.read_text())["seed"], init_args["lr"])] = path
    assert sorted(found) == [(0, 0.02), (0, 0.05), (1, 0.02), (1, 0.05)]
    # the true count, by formula: embedding (S + 3 = 5 ids), GRU (3 gates), output (S + 1 = 3)
    count = 5 * 12 + 3 * (12 * 12 + 12 * 12 + 12 + 12) + (12 * 3 + 3)
    assert count == sum(p.numel() for p in GRULanguageModel(num_symbols=2).parameters())
    plain_args = FIT[5:-1]
    for (seed, lr), ens in found.items():
        point = next(p for p in ens.parents if (p / "run.log").is_file())
        assert (point / "run.log").read_text().startswith("# trained in ensemble job ")
        root = tmp_path / "plain" / f"{seed}-{lr}"
        assert fit_main(["fit", *plain_args, f"--seed_everything={seed}",
                         f"--model.init_args.lr={lr}",
                         f"--trainer.default_root_dir={root}"]) == 0
        (plain,) = root.rglob("results.json")
        a, b = json.loads(plain.read_text()), json.loads(ens.read_text())
        assert a["model"] == b["model"] and "GRULanguageModel" in json.dumps(a["model"])
        assert a["num_parameters"] == b["num_parameters"] == count
        for key in ("seed", "automaton_id", "epochs", "steps", "test_visits", "stopped_early"):
            assert a[key] == b[key], key
        assert b["kl_total"] == pytest.approx(a["kl_total"], rel=1e-4)
        assert b["best_val_loss"] == pytest.approx(a["best_val_loss"], rel=1e-5)
    # negative control: the learning rate mattered
    kl = {key: json.loads(path.read_text())["kl_total"] for key, path in found.items()}
    assert kl[(0, 0.02)] != pytest.approx(kl[(0, 0.05)], rel=1e-3)
