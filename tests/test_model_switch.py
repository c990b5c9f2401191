"""``--model=OtherClass`` after a config written for the LSTM: the new class's own defaults."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")

from pathlib import Path

import yaml

from cfl_lightning.cli.model_switch import explicit_model_args, model_switched
from cfl_lightning.cli.train import build_cli

ROOT = Path(__file__).resolve().parents[1]
BASE = ["--data.cache_dir=none", "--data.device=cpu", "--data.num_strings=5",
        "--data.val_strings=2", "--data.test_strings=2"]


def _model(args):
    return build_cli(args + BASE, run=False).model


def test_switch_to_transformer_gets_its_own_defaults(tmp_path):
    config = yaml.safe_load((ROOT / "configs" / "parity_starfree.yaml").read_text())
    config["model"]["init_args"]["lr"] = 0.003  # explicit in the config: carried over
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    model = _model(["--config", str(path), "--model=TransformerLanguageModel"])
    assert type(model).__name__ == "TransformerLanguageModel"
    # the LSTM's default num_layers=1 is not carried over (the old behaviour built 1 layer)
    assert model.hparams.num_layers == 2
    assert model.hparams.lr == 0.003 and model.hparams.dropout == 0.1
    explicit = _model(["--config", str(path), "--model=TransformerLanguageModel",
                       "--model.init_args.num_layers=3"])
    assert explicit.hparams.num_layers == 3
    lstm = _model(["--config", str(path)])  # no switch: the config's class, untouched
    assert type(lstm).__name__ == "LSTMLanguageModel" and lstm.hparams.num_layers == 1


def test_explicit_arguments_and_switch_detection(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  init_args:\n    lr: 0.1\n    dropout: 0.0\n")
    argv = ["--config", str(path), "--model=X", "--model.init_args.num_heads=2",
            "--model.hidden=3"]
    assert explicit_model_args(argv) == {"lr", "dropout", "num_heads", "hidden"}
    assert model_switched(argv) and model_switched(["--model", "X"])
    assert not model_switched(["--model.init_args.lr=1", "--config", str(path)])
