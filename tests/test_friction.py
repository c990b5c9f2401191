"""First-contact friction (issue 31): each rough edge a new user met, as a test that fails on it.

In process: the CLI's ``main`` with tiny runs (the process boundary is not the point here).
"""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")  # before anything imports wandb

import json
import re
import textwrap
import warnings
from pathlib import Path

import lightning.pytorch  # noqa: F401 (its log handler binds stderr now, not a test's capture)
import pytest
import torch

from cfl_lightning.cli.train import main
from tests.helpers import tiny_args

USER_MODULE = '''
import lightning as L
import torch
from cfl_lightning import kl_to_automaton_loss


class FrictionGRU(L.LightningModule):
    """A user's model: declares its vocabulary sizes, and its own learning rate default."""

    def __init__(self, vocab_in: int, vocab_out: int, hidden: int = 8, lr: float = 3e-3):
        super().__init__()
        self.save_hyperparameters()
        self.embed = torch.nn.Embedding(vocab_in, hidden)
        self.gru = torch.nn.GRU(hidden, hidden, batch_first=True)
        self.out = torch.nn.Linear(hidden, vocab_out)

    def forward(self, input_ids):
        return self.out(self.gru(self.embed(input_ids))[0])

    def training_step(self, batch, batch_idx):
        return kl_to_automaton_loss(self(batch["input_ids"]), batch)

    def validation_step(self, batch, batch_idx):
        pass

    def test_step(self, batch, batch_idx):
        pass

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


class NeedsWidth(FrictionGRU):
    def __init__(self, vocab_in: int, vocab_out: int, width: int, lr: float = 3e-3):
        super().__init__(vocab_in, vocab_out, lr=lr)
'''

NO_A = {  # symbol "a" is in the alphabet but no transition emits it
    "alphabet": ["a", "b"],
    "states": ["s", "t"],
    "initial": "s",
    "final": {"s": 0.3, "t": 0.5},
    "transitions": [
        {"source": "s", "symbol": "b", "target": "t", "weight": 0.7},
        {"source": "t", "symbol": "b", "target": "s", "weight": 0.5},
    ],
}


def tiny(root: Path, *extra: str) -> list[str]:
    """:func:`tests.helpers.tiny_args` with a 20k-parameter model."""
    return tiny_args(root, "--model.param_budget=20000", *extra)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """``friction_user.FrictionGRU`` importable, and a config written for the shipped LSTM."""
    (tmp_path / "friction_user.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "lstm.yaml"
    config.write_text(textwrap.dedent("""\
        model:
          class_path: cfl_lightning.models.LSTMLanguageModel
          init_args:
            param_budget: 20000
            lr: 0.01
        data:
          generator: parity
          num_strings: 30
          val_strings: 10
          test_strings: 20
          cache_dir: none
          device: cpu
        trainer:
          max_epochs: 1
          enable_progress_bar: false
          enable_model_summary: false
    """))
    return config


def build(args: list[str]):
    from cfl_lightning.cli.train import build_cli

    return build_cli(args, run=False)


def run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argument errors exit from the parser
        return int(exc.code)


def results_of(out: str) -> dict:
    match = re.search(r"^results: (.+)$", out, re.M)
    assert match, out[-2000:]
    return json.loads(Path(match.group(1)).read_text())


# --------------------------------------------------------------------------- --model=user class


def test_user_class_gets_vocab_sizes_and_is_told_which_config_values_it_keeps(
    user_module, tmp_path, capsys
):
    """The documented rule: a switched class keeps the config's values it accepts (a study's lr
    applies to every model it compares); the CLI says so, naming the class's own default."""
    cli = build([f"--config={user_module}", "--model=friction_user.FrictionGRU",
                 f"--trainer.default_root_dir={tmp_path / 'r'}"])
    err = capsys.readouterr().err
    assert cli.model.hparams.lr == 0.01
    (note,) = [line for line in err.splitlines() if "note:" in line]
    assert "--model=friction_user.FrictionGRU takes lr=0.01 from the config" in note
    assert "FrictionGRU's own default: lr=0.003" in note and "--model.init_args.lr=" in note
    # the vocabulary sizes come from the data module: parity has S=2 symbols
    assert (cli.model.hparams.vocab_in, cli.model.hparams.vocab_out) == (5, 3)
    assert cli.model.embed.num_embeddings == cli.datamodule.vocab_size
    assert cli.model.out.out_features == cli.datamodule.num_symbols + 1


def test_no_note_when_the_user_sets_the_value_or_keeps_the_class(user_module, tmp_path, capsys):
    cli = build([f"--config={user_module}", "--model=friction_user.FrictionGRU",
                 "--model.init_args.lr=0.002", f"--trainer.default_root_dir={tmp_path / 'r'}"])
    assert cli.model.hparams.lr == 0.002 and "note:" not in capsys.readouterr().err
    cli = build([f"--config={user_module}", f"--trainer.default_root_dir={tmp_path / 'r'}"])
    assert "note:" not in capsys.readouterr().err
    assert not hasattr(cli.model.hparams, "vocab_in")  # the LSTM declares no vocab sizes


def test_vocab_links_only_for_classes_that_declare_them(user_module):
    from cfl_lightning.cli.lightning_cli import _declared_model_args

    assert _declared_model_args(["--model=friction_user.FrictionGRU"]) == {"vocab_in", "vocab_out"}
    # the shipped models pass **kwargs on to LanguageModel, which takes no vocabulary sizes
    assert _declared_model_args(["--model=cfl_lightning.models.LSTMLanguageModel"]) == {
        "num_symbols"
    }
    assert _declared_model_args({"model": {"class_path": "friction_user.NeedsWidth"}}) == {
        "vocab_in", "vocab_out"
    }
    assert _declared_model_args(["--model=nowhere.Missing"]) == set()


def test_top_level_argument_error_points_at_the_subcommand_help(user_module, tmp_path, capsys):
    code = run(["fit", f"--config={user_module}", "--model=friction_user.NeedsWidth",
                f"--trainer.default_root_dir={tmp_path / 'r'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 2, err
    assert err[0].startswith("python -m cfl_lightning fit: error: ") and "width" in err[0]
    assert err[1] == "  (see 'python -m cfl_lightning fit --help' for the options)"


def test_bad_value_of_a_class_argument_names_the_flag(user_module, tmp_path, capsys):
    code = run(["fit", f"--config={user_module}", "--model=friction_user.FrictionGRU",
                "--model.init_args.hidden=x", f"--trainer.default_root_dir={tmp_path / 'r'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[0] == (
        "python -m cfl_lightning fit: error: --model.init_args.hidden: expected int, got 'x' "
        "(class 'friction_user.FrictionGRU')"
    )


# --------------------------------------------------------------------------- data messages


def test_count_without_intervention_gives_the_correlational_fix(tmp_path, capsys):
    code = run(["fit", *tiny(tmp_path, "--data.intervention=none")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "--data.count=null" in err[0] and "correlational" in err[0]
    assert not (tmp_path / "csv").exists()


def test_impossible_event_is_one_line_from_the_cli_and_an_error_in_the_api(tmp_path, capsys):
    from cfl_lightning import PFADataModule
    from cfl_lightning.cli.sample import main as sample_main
    from cfl_lightning.errors import InterventionError

    path = tmp_path / "no_a.json"
    path.write_text(json.dumps(NO_A))
    with pytest.raises(InterventionError, match="symbol:a cannot occur"):
        PFADataModule(automaton=str(path), intervention="exact", event="symbol:a", count=5,
                      cache_dir="none")
    code = run(["fit", *tiny(tmp_path / "run", f"--data.automaton={path}",
                             "--data.event=symbol:a", "--data.count=5")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "symbol:a cannot occur" in err[0], err
    assert "choose an event it can emit" in err[0] and not (tmp_path / "run").exists()
    code = sample_main(["sample", "--automaton", str(path), "--num-strings", "10", "--seed", "0",
                        "--intervention", "exact", "--event", "symbol:a", "--count", "5",
                        "--output", str(tmp_path / "c.jsonl")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "symbol:a cannot occur" in err[0], err


# --------------------------------------------------------------------------- runs


def test_evaluation_resume_and_recorded_config(tmp_path, capsys):
    """One tiny run serves four items: the recorded config holds only the automaton source's
    own arguments; ``test``/``validate --ckpt_path`` print one summary line and no warning
    about a checkpoint directory they never create; a resumed fit's ``train_time_s`` is the
    total and ``train_time_resumed_s`` its resumed part."""
    first = tmp_path / "first"
    assert main(["fit", *tiny(first, "--checkpoint.save_last=true")]) == 0
    results = results_of(capsys.readouterr().out)
    data = results["config"]["data"]
    assert data["generator"] == "parity" and data["eta"] == 0.3
    assert not {"num_states", "num_symbols", "topology_seed", "weight_seed"} & set(data)
    assert results["train_time_s"] > 0 and results["train_time_resumed_s"] is None
    (last,) = first.rglob("last.ckpt")

    for command in ("validate", "test"):
        root = tmp_path / command
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert main([command, *tiny(root), f"--ckpt_path={last}"]) == 0
        out = capsys.readouterr().out.strip().splitlines()
        assert not [w for w in caught if "dirpath" in str(w.message)], [
            str(w.message) for w in caught
        ]
        assert not [w for w in caught if "Be aware that when using" in str(w.message)]
        assert not (root / "checkpoints").exists()
        assert len(out) == 1, out  # not Lightning's table of ~60 metrics
        stage = "val/" if command == "validate" else ""
        assert re.match(
            rf"{command}: {stage}kl_total \S+  {stage}kl_target \S+ \(state:odd\)  .*"
            r"\(nats per string; \d+ metrics logged, --verbose true lists them\)$", out[0]
        ), out[0]

    before = torch.load(last, weights_only=True, map_location="cpu")
    (state,) = [v for k, v in before["callbacks"].items() if "ResultsWriter" in k]
    second = tmp_path / "second"
    assert main(["fit", *tiny(second, "--trainer.max_epochs=2"), f"--ckpt_path={last}"]) == 0
    resumed = results_of(capsys.readouterr().out)
    assert resumed["epochs"] == 2 and resumed["train_time_resumed_s"] > 0
    assert resumed["train_time_s"] == pytest.approx(
        state["train_time_s"] + resumed["train_time_resumed_s"]
    )
    assert 0 < state["train_time_s"] <= results["train_time_s"]


@pytest.mark.parametrize("argv,verbose", [
    (["test"], False), (["test", "--verbose", "true"], True), (["test", "--verbose=true"], True),
    (["test", "--verbose", "false"], False), (["test", "--verbose=False"], False),
    (["test", "--verbose=true", "--verbose=false"], False), (["test", "--verbose"], True),
])
def test_only_verbose_true_lists_every_metric(argv, verbose):
    from cfl_lightning.cli.lightning_cli import CflLightningCLI

    cli = object.__new__(CflLightningCLI)  # the property reads the command line only
    cli._argv = argv
    assert cli.verbose_evaluation is verbose
