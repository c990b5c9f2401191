"""Every YAML config under configs/ parses against the training CLI and follows the paper; no
config or sweep stops training before early stopping does."""

from __future__ import annotations

import os

os.environ["WANDB_MODE"] = "disabled"  # before anything imports wandb

from pathlib import Path

import pytest
import yaml

from cfl_lightning.cli.train import build_cli
from cfl_lightning.models import LanguageModel

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))
SWEEPS = sorted((REPO / "sweeps").rglob("*.yaml"))
# The paper trains until 10 validations pass without improvement. An epoch cap below this would
# bind before early stopping does (and, since an intervention changes the corpus length and so
# the steps per epoch, it would confound the causal curves).
MIN_EPOCH_CAP = 1000


def _uncapped(value) -> bool:
    """A max_epochs / max_steps value that does not stop training before early stopping."""
    return value is None or value == -1 or (isinstance(value, int) and value >= MIN_EPOCH_CAP)


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
    assert _uncapped(raw["trainer"].get("max_epochs")) and _uncapped(trainer.max_epochs)
    assert raw["trainer"].get("max_steps") in (None, -1) and trainer.max_steps == -1
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


def test_the_sweeps_are_there():
    paper = {p.stem for p in SWEEPS if p.parent.name == "sweeps"}
    reduced = {p.stem for p in SWEEPS if p.parent.name == "repro"}
    arms = {"causal_exact", "causal_at_least_once", "correlational"}
    cases = ("parity_starfree", "random_topology", "fixed_topology")
    assert {f"{case}_{arm}" for case in cases for arm in arms} <= paper
    # the reproductions (docs/reproduction_<case>.md): case (iii) is at least once only
    assert {f"{case}_{arm}" for case in cases[:2] for arm in arms} <= reduced
    assert {"fixed_topology_causal_at_least_once", "fixed_topology_correlational"} <= reduced


def _sweep_values(spec) -> list:
    """The values a W&B sweep parameter can take (value, values, or a distribution's bounds)."""
    if not isinstance(spec, dict):
        return [spec]
    if "value" in spec:
        return [spec["value"]]
    if "values" in spec:
        return list(spec["values"])
    return [spec[k] for k in ("min", "max") if k in spec]


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_sweep_trains_until_early_stopping(path):
    raw = yaml.safe_load(path.read_text())
    params = raw.get("parameters", {})
    for name in ("trainer.max_epochs", "trainer.max_steps"):
        for value in _sweep_values(params.get(name)):
            assert _uncapped(value), f"{path.name}: {name} = {value} caps training"
    command = [str(c) for c in raw.get("command", [])]
    assert not [c for c in command if "max_epochs" in c or "max_steps" in c], command
    # the config each run starts from is one of configs/, which are checked above
    config = command[command.index("--config") + 1]
    trainer = yaml.safe_load((REPO / config).read_text())["trainer"]
    assert _uncapped(trainer.get("max_epochs")) and trainer.get("max_steps") in (None, -1)


@pytest.mark.parametrize(
    "value,ok", [(None, True), (-1, True), (1000, True), (5000, True), (999, False), (30, False)]
)
def test_epoch_cap_rule(value, ok):
    """Negative control for the rule the two tests above apply."""
    assert _uncapped(value) is ok


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_sweep_names_the_project_and_unsets_the_count_when_correlational(path):
    """Every sweep logs to project cfl_lightning; a correlational sweep (intervention none) sets
    data.count to "null" when its config sets a count (else every run is refused)."""
    raw = yaml.safe_load(path.read_text())
    assert raw.get("project") == "cfl_lightning", path.name
    params = raw.get("parameters", {})
    command = [str(c) for c in raw.get("command", [])]
    config = yaml.safe_load((REPO / command[command.index("--config") + 1]).read_text())
    if "none" in _sweep_values(params.get("data.intervention")) and config["data"].get("count"):
        assert _sweep_values(params.get("data.count")) == ["null"], path.name


def test_readme_explains_the_correlational_count():
    readme = (REPO / "docs" / "guide" / "sweeps.md").read_text(encoding="utf-8")
    section = readme.split("## W&B sweeps", 1)[1].split("\n## ", 1)[0]
    assert 'data.count:\n    value: "null"' in section
