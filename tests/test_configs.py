"""Every YAML config under configs/ parses against the training CLI and follows the paper."""

from __future__ import annotations

import os

os.environ["WANDB_MODE"] = "disabled"  # before anything imports wandb

from pathlib import Path

import pytest
import yaml

from cfl_lightning.cli.train import build_cli
from cfl_lightning.models import LanguageModel

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


def test_the_three_case_studies_are_there():
    assert {p.stem for p in CONFIGS} >= {"parity_starfree", "random_topology", "fixed_topology"}


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_parses_and_instantiates(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative run directories land here (nothing is written)
    raw = yaml.safe_load(path.read_text())
    cli = build_cli(["--config", str(path)], run=False)
    model, data, trainer = cli.model, cli.datamodule, cli.trainer

    assert isinstance(model, LanguageModel)
    assert model.num_symbols == data.num_symbols == data.pfsa.num_symbols  # linked
    assert model.num_parameters <= model.param_budget == 128_000
    assert raw["trainer"]["default_root_dir"] == f"runs/{path.stem}"
    assert trainer.gradient_clip_val == 5 and trainer.gradient_clip_algorithm == "norm"
    assert 30 <= trainer.max_epochs <= 60
    loggers = {type(lg).__name__: lg for lg in trainer.loggers}
    assert set(loggers) == {"CSVLogger", "WandbLogger"}
    assert type(trainer.loggers[0]).__name__ == "CSVLogger"  # holds config, checkpoints, results
    wandb_args = next(lg for lg in raw["trainer"]["logger"] if "Wandb" in lg["class_path"])
    assert wandb_args["init_args"]["project"] == "cfl_lightning"
    # logger directories are relative to trainer.default_root_dir (resolved by the CLI)
    assert all(
        logger.save_dir == os.path.normpath(raw["trainer"]["default_root_dir"])
        for logger in trainer.loggers
    )

    assert trainer.early_stopping_callback.monitor == "val/kl_per_string"
    assert trainer.early_stopping_callback.patience == 10
    assert trainer.checkpoint_callback.monitor == "val/kl_per_string"
    assert (model.lr, model.lr_factor, model.lr_patience) == (0.01, 0.5, 5)
    assert model.loss_name == "kl"

    hp = data.hparams
    assert hp.num_strings == 500 and hp.max_tokens == 128
    assert hp.intervention != "none" and data.event is not None and hp.count > 0
    # an intervention that moves the count away from its natural value, but not absurdly far
    natural = data.expected_count if hp.intervention == "exact" else None
    if natural is not None:
        assert 1.2 <= hp.count / natural <= 2.0
