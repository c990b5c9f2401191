"""The ``fit``/``validate``/``test`` CLI: tiny end-to-end runs, results.json, W&B mode, errors."""

from __future__ import annotations

import os

os.environ["WANDB_MODE"] = "disabled"  # before anything imports wandb (the first mode sticks)

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from cfl_lightning.cli.train import main
from cfl_lightning.cli.wandb_mode import ensure_wandb_mode, has_wandb_credentials
from cfl_lightning.models import LSTMLanguageModel
from cfl_lightning.results import RESULT_KEYS
from tests.helpers import CI_LIMIT_S, tiny_args

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


def contract_result_keys() -> list[str]:
    text = (ROOT / "docs" / "internal_contract.md").read_text(encoding="utf-8")
    section = text.split("## results.json", 1)[1].split("\n## ", 1)[0]
    keys_text = section.split("keys:", 1)[1]
    # top-level keys are the backticked names outside the nested {...} shape descriptions
    flat = re.sub(r"\{[^{}]*(\{[^{}]*\}[^{}]*)*\}", "", keys_text)
    return re.findall(r"`([a-z_]+)`", flat)


def test_result_keys_match_the_contract():
    assert list(RESULT_KEYS) == contract_result_keys()


def test_fit_help_exits_cleanly(capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: python -m cfl_lightning" in out and "fit" in out
    assert "--early_stopping.patience" in out and "--data.intervention" in out


def test_tiny_fit_writes_results_and_loadable_checkpoint(tmp_path, capsys):
    args = tiny_args(tmp_path, "--model.param_budget=20000")
    assert main(["fit", *args]) == 0
    out = capsys.readouterr().out
    match = re.search(r"^results: (.+)$", out, re.M)
    assert match, out[-2000:]
    path = Path(match.group(1))
    assert path.name == "results.json" and path.parent.parent.parent == tmp_path
    results = json.loads(path.read_text())
    assert list(results) == contract_result_keys()
    assert results["model"] == "LSTMLanguageModel"
    assert results["intervention"] == "exact" and results["event"] == "state:odd"
    assert results["count"] == 40 and results["realized_count"] == 40
    assert results["num_strings"] == 30 and results["epochs"] == 1
    assert 0 < results["num_parameters"] <= 20_000
    assert results["config"]["model"]["init_args"]["num_symbols"] == 2
    assert results["config"]["data"]["count"] == 40
    from cfl_lightning.automata import parity_starfree_pfsa
    from cfl_lightning.results import automaton_id

    assert results["automaton_id"] == automaton_id(parity_starfree_pfsa(0.3).to_dict())
    assert results["automaton"] == parity_starfree_pfsa(0.3).to_dict()
    assert results["kl_total"] > 0 and results["kl_target"] is not None
    assert set(results["kl"]) == {"state", "symbol", "transition"}
    assert set(results["kl"]["state"]) == {"init", "odd", "even", "rep"}
    assert "EOS" in results["kl"]["symbol"] and "odd:EOS" in results["kl"]["transition"]
    assert results["kl_target"] == pytest.approx(results["kl"]["state"]["odd"])
    # the summary line comes right before results: PATH
    lines = out.strip().splitlines()
    assert lines[-2] == (f"test: kl_total {results['kl_total']:.6g}  kl_target "
                         f"{results['kl_target']:.6g} (state:odd)  (nats per string)")
    assert results["expected_strings"] is not None and results["count_unit"] == "occurrences"
    assert results["log_dir"] == str(path.parent)
    assert (path.parent / "config.yaml").exists() and (path.parent / "metrics.csv").exists()
    metrics = (path.parent / "metrics.csv").read_text().splitlines()[0]
    assert "val/kl_per_string" in metrics and "kl/state/odd" in metrics and "kl_target" in metrics

    (ckpt,) = (path.parent / "checkpoints").glob("*.ckpt")
    state = torch.load(ckpt, weights_only=True, map_location="cpu")
    assert state["hyper_parameters"]["num_symbols"] == 2
    model = LSTMLanguageModel.load_from_checkpoint(ckpt, map_location="cpu")
    assert model.num_parameters == results["num_parameters"]

    # the test subcommand on the saved checkpoint
    assert main(["test", *args, f"--ckpt_path={ckpt}"]) == 0


def test_transformer_trains(tmp_path, capsys):
    args = tiny_args(tmp_path)
    assert main(["fit", "--model=TransformerLanguageModel", "--model.param_budget=20000",
                 "--model.num_layers=1", *args]) == 0
    path = Path(re.search(r"^results: (.+)$", capsys.readouterr().out, re.M).group(1))
    results = json.loads(path.read_text())
    assert results["model"] == "TransformerLanguageModel"
    assert results["config"]["model"]["init_args"]["num_layers"] == 1
    assert results["kl_total"] is not None and results["kl_total"] < 50


def test_bad_event_is_one_line_error(tmp_path, capsys):
    args = tiny_args(tmp_path, "--data.event=state:nowhere")
    assert main(["fit", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nowhere" in err[0] and "Traceback" not in err[0]


def test_ensure_wandb_mode(tmp_path):
    env = {"HOME": str(tmp_path), "NETRC": str(tmp_path / "netrc")}
    assert ensure_wandb_mode(env) == "offline" and env["WANDB_MODE"] == "offline"
    env = {"WANDB_MODE": "disabled"}
    assert ensure_wandb_mode(env) == "disabled"
    env = {"WANDB_API_KEY": "x" * 40}
    assert ensure_wandb_mode(env) is None and "WANDB_MODE" not in env
    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password " + "y" * 40 + "\n")
    netrc.chmod(0o600)
    env = {"NETRC": str(netrc)}
    assert has_wandb_credentials(env) and ensure_wandb_mode(env) is None
    env = {"NETRC": str(netrc), "WANDB_BASE_URL": "https://wandb.example.org"}
    assert ensure_wandb_mode(env) == "offline"


@pytest.mark.slow
def test_wandb_offline_without_configuration_in_subprocess(tmp_path):
    """With no W&B mode, key or netrc, a config naming WandbLogger logs offline, no prompt."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "NETRC"}
    env.update(HOME=str(tmp_path), OMP_NUM_THREADS="1", CFL_LIGHTNING_CACHE="none")
    cmd = [sys.executable, "-m", "cfl_lightning", "fit",
           f"--config={CONFIGS / 'parity_starfree.yaml'}", "--data.count=60",
           "--data.num_strings=30", "--data.val_strings=10", "--data.test_strings=10",
           "--trainer.max_epochs=1", "--model.param_budget=20000"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=CI_LIMIT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "results: runs/parity_starfree/csv/version_0/results.json" in proc.stdout
    runs = list((tmp_path / "runs" / "parity_starfree" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1


def _local_config(name: str, tmp_path: Path) -> Path:
    """A copy of configs/NAME.yaml writing under tmp_path (W&B disabled by the environment)."""
    config = yaml.safe_load((CONFIGS / name).read_text())
    root = tmp_path / "runs" / Path(name).stem
    config["trainer"]["default_root_dir"] = str(root)
    for logger in config["trainer"]["logger"]:
        logger["init_args"]["save_dir"] = str(root)
    config["data"]["cache_dir"] = str(tmp_path / "cache")
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
def test_lstm_learns_parity_starfree_with_default_config(tmp_path, capsys):
    """The paper's LSTM recipe, with configs/parity_starfree.yaml unchanged but for paths."""
    start = time.perf_counter()
    assert main(["fit", f"--config={_local_config('parity_starfree.yaml', tmp_path)}"]) == 0
    elapsed = time.perf_counter() - start
    path = Path(re.search(r"^results: (.+)$", capsys.readouterr().out, re.M).group(1))
    results = json.loads(path.read_text())
    with capsys.disabled():
        print(f"\nparity_starfree LSTM: kl_total={results['kl_total']:.5f} nats/string, "
              f"epochs={results['epochs']}, train_time_s={results['train_time_s']:.1f}, "
              f"wall={elapsed:.1f}s")
    assert results["realized_count"] == results["count"] == 1500
    assert results["kl_total"] < 0.05
    # trained until early stopping (the paper's recipe), not until the 1000-epoch safety bound
    assert results["stopped_early"] is True and results["epochs"] < 1000 and results["steps"] > 0


def test_default_root_dir_moves_every_output(tmp_path, capsys, monkeypatch):
    """A shipped config with --trainer.default_root_dir=DIR writes logs and results under DIR;
    under a W&B agent (WANDB_RUN_ID) the CSV version is the run id."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_RUN_ID", "agentrun42")
    root = tmp_path / "elsewhere"
    shrink = [arg for arg in tiny_args(root) if not arg.startswith(("--data.generator",
              "--data.eta", "--data.intervention", "--data.event", "--data.count"))]
    config = str(ROOT / "configs" / "parity_starfree.yaml")
    code = main(["fit", "--config", config, *shrink, "--data.count=60"])
    assert code == 0
    out = capsys.readouterr().out
    path = Path(out.strip().splitlines()[-1].split("results: ", 1)[1])
    assert path == root / "csv" / "agentrun42" / "results.json" and path.exists()
    assert not (tmp_path / "runs").exists()
