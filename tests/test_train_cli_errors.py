"""``fit``/``validate``/``test`` on bad input and on a good run, as a user sees them (subprocesses).

Bad input: one line naming the problem (plus a ``--help`` hint for argument errors), exit 2, no
traceback, no run directory. A good run: per-epoch progress on a non-terminal stderr, no stray
noise, ``results: PATH`` as the last stdout line without ANSI codes; ``test --ckpt_path`` makes
no new version directory.
"""

from __future__ import annotations

import os

os.environ["WANDB_MODE"] = "disabled"  # before anything imports wandb

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cfl_lightning.cli.run_checks import cpu_cores
from cfl_lightning.models import LSTMLanguageModel
from tests.helpers import CI_LIMIT_S, CONFIG, REPO, SMALL, cli_env

ROOT = REPO



def _run_all(commands: list[list[str]], cwd: Path, env: dict[str, str]) -> list:
    """Run the commands two at a time (each is mostly Lightning's import time)."""
    results = []
    for i in range(0, len(commands), 2):
        procs = [subprocess.Popen([sys.executable, "-m", "cfl_lightning", *c], cwd=cwd, env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
                 for c in commands[i:i + 2]]
        results += [(p.wait(timeout=CI_LIMIT_S), p.stdout.read(), p.stderr.read()) for p in procs]
    return results


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    base = tmp_path_factory.mktemp("bad")
    (base / "a_file").write_text("not a directory\n")
    (base / "corrupt.ckpt").write_bytes(b"PK\x03\x04" + os.urandom(500))
    torch.save({"a": 1}, base / "plain.ckpt")
    other = LSTMLanguageModel(num_symbols=10, param_budget=5000)  # another alphabet
    torch.save({"state_dict": other.state_dict(), "hyper_parameters": {}}, base / "other.ckpt")
    return base


CASES = [
    # (command, extra args, words the one line must contain, is an argument (usage) error)
    ("fit", ["--trainer.max_epochs=abc"], ["--trainer.max_epochs", "int", "abc"], True),
    ("fit", ["--bogus=1"], ["unrecognized", "--bogus"], True),
    ("fit", ["--model=nope.Nope"], ["--model", "nope"], True),
    ("fit", ["--data.intervention=sometimes"], ["--data.intervention", "sometimes"], True),
    ("fit", ["--trainer.max_epochs=-5"], ["max_epochs", "-5"], False),
    ("fit", ["--trainer.val_check_interval=0"], ["val_check_interval"], False),
    ("fit", ["--model.init_args.lr=-1"], ["lr", "-1"], False),
    ("fit", ["--model.init_args.param_budget=10"], ["budget 10", "too small"], False),
    ("fit", ["--model=TransformerLanguageModel", "--model.init_args.param_budget=100"],
     ["TransformerLanguageModel", "too small"], False),
    ("fit", ["--data.event=state:nowhere"], ["nowhere"], False),
    ("fit", ["--trainer.default_root_dir={base}/a_file/run"], ["default_root_dir", "a_file"], False),
    ("fit", ["--trainer.default_root_dir={base}/a_file"], ["default_root_dir", "not a directory"],
     False),
    ("test", ["--ckpt_path={base}/missing.ckpt"], ["missing.ckpt", "does not exist"], False),
    ("test", ["--ckpt_path={base}/corrupt.ckpt"], ["corrupt.ckpt", "cannot be read"], False),
    ("validate", ["--ckpt_path={base}/plain.ckpt"], ["plain.ckpt", "not a Lightning"], False),
    ("test", ["--ckpt_path={base}/other.ckpt"], ["other.ckpt", "does not fit", "shape"], False),
    ("test", ["--ckpt_path={base}"], ["not a file"], False),
    ("fit", ["--trainer.accelerator=cpu", f"--trainer.devices={cpu_cores() + 1}"],
     ["--trainer.devices", f"{cpu_cores() + 1} CPU processes", "CPU core"], False),
    ("validate", ["--trainer.accelerator=cpu", "--trainer.devices=[0,1]"],
     ["--trainer.devices", "not a number of CPU processes"], False),
    ("test", ["--trainer.strategy=bogus"], ["--trainer", "strategy", "bogus"], False),
]


def _command(i: int, base: Path, tmp_path: Path) -> tuple[list[str], Path]:
    command, extra, _, _ = CASES[i]
    root = tmp_path / f"run{i}"
    args = [a.format(base=base) for a in extra]
    given_root = any(a.startswith("--trainer.default_root_dir") for a in args)
    return [command, "--config", CONFIG, *SMALL,
            *([] if given_root else [f"--trainer.default_root_dir={root}"]), *args], root


def _check(i: int, code: int, err: str, root: Path) -> None:
    command, extra, words, usage = CASES[i]
    lines = [line for line in err.splitlines() if line.strip()]
    problem = [line for line in lines if ": error: " in line]
    label = f"{command} {extra}: {err[-1500:]}"
    assert code == 2, label
    assert "Traceback" not in err, label
    assert len(lines) <= 5 and len(problem) == 1, label
    assert problem[0].startswith(f"python -m cfl_lightning {command}: error: "), label
    for word in words:
        assert word in problem[0], (word, label)
    if usage:  # the hint instead of ~100 lines of usage
        assert "--help" in err and "usage:" not in err, label
    assert not root.exists(), label  # no partial run directory


@pytest.mark.parametrize("i", range(len(CASES)), ids=[" ".join(c[1])[:40] for c in CASES])
def test_bad_input_in_process(i, tmp_path, bad_files, capsys):
    """Every case through ``main`` (the code path of ``python -m cfl_lightning``)."""
    from cfl_lightning.cli.train import main

    args, root = _command(i, bad_files, tmp_path)
    try:
        code = main(args)
    except SystemExit as exit_:  # argument errors exit from the parser
        code = exit_.code
    _check(i, code, capsys.readouterr().err, root)


# one of each kind: arguments, trainer, model, root dir, checkpoint, devices
SUBPROCESS = [0, 4, 7, 10, 15, 17]


@pytest.mark.slow
def test_bad_input_subprocess(tmp_path, bad_files):
    """The same through real processes: exit status, stderr and the file system as a user sees."""
    commands = [_command(i, bad_files, tmp_path) for i in SUBPROCESS]
    outcomes = _run_all([c for c, _ in commands], tmp_path, cli_env())
    for i, (_, root), (code, _, err) in zip(SUBPROCESS, commands, outcomes):
        _check(i, code, err, root)
    assert sorted(p.name for p in bad_files.iterdir()) == [
        "a_file", "corrupt.ckpt", "other.ckpt", "plain.ckpt"]  # nothing written beside inputs


@pytest.mark.slow
def test_fit_help_is_short_and_points_to_model_help():
    proc = subprocess.run([sys.executable, "-m", "cfl_lightning", "fit", "--help"], env=cli_env(),
                          capture_output=True, text=True, timeout=CI_LIMIT_S)
    assert proc.returncode == 0 and proc.stderr == ""
    usage = proc.stdout.split("\n\n", 1)[0]
    assert usage.startswith("usage: python -m cfl_lightning fit") and len(usage.splitlines()) <= 4
    assert "--model.help CLASS" in proc.stdout and "--data.intervention" in proc.stdout


@pytest.mark.slow
def test_good_run_output_and_test_without_new_version(tmp_path):
    """fit (W&B offline, stderr and stdout not terminals), then test --ckpt_path."""
    root = tmp_path / "run"
    args = ["--config", CONFIG, *SMALL, f"--trainer.default_root_dir={root}"]
    ((code, out, err),) = _run_all([["fit", *args]], tmp_path, cli_env("offline"))
    assert code == 0, err[-3000:]
    last = out.strip().splitlines()[-1]
    assert last == f"results: {root / 'csv' / 'version_0' / 'results.json'}", out
    assert "\x1b[" not in out and "\x1b[" not in err
    epochs = re.findall(r"^epoch (\d)/2  train/loss \S+  val/kl_per_string \S+  lr \S+  \S+s$",
                        err, re.M)
    assert epochs == ["1", "2"], err
    assert "it/s" not in out + err  # no Lightning bar off a terminal (it draws on stdout)
    for noise in ("litlogger", "litmodels", "LeafSpec", "anonymous setting", "sync_dist",
                  "Traceback"):
        assert noise not in err, noise
    runs = list((root / "wandb").glob("offline-run-*"))
    assert len(runs) == 1

    (ckpt,) = (root / "csv" / "version_0" / "checkpoints").glob("*.ckpt")
    ((code, out, err),) = _run_all([["test", *args, f"--ckpt_path={ckpt}"]], tmp_path,
                                   cli_env("offline"))
    assert code == 0, err[-3000:]
    assert "kl_total" in out and "results:" not in out  # the metrics table; no results.json
    assert "it/s" not in out + err and "Testing DataLoader" not in out + err
    assert sorted(p.name for p in (root / "csv").iterdir()) == ["version_0"]
    assert len(list((root / "wandb").glob("offline-run-*"))) == 1  # no new W&B run
    assert not (root / "config.yaml").exists()


def test_unwritable_root_dir_is_refused(tmp_path, monkeypatch):
    """(Tests run as root, for whom every directory is writable: os.access stands in.)"""
    from cfl_lightning.cli.run_checks import check_root_dir
    from cfl_lightning.errors import CflError

    check_root_dir(tmp_path / "new" / "dir")  # creatable: fine
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(CflError, match="not writable"):
        check_root_dir(tmp_path / "new" / "dir")


def _run_on_a_terminal(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run ``command`` with stdout and stderr on one pseudo-terminal (120 columns)."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=CI_LIMIT_S), b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.slow
def test_terminal_gets_lightnings_bar_with_the_shipped_config(tmp_path):
    """The shipped configs leave the bar to the CLI: on a terminal, Lightning's bar and no
    per-epoch lines (off a terminal, see test_good_run_output_and_test_without_new_version)."""
    root = tmp_path / "run"
    code, text = _run_on_a_terminal(
        [sys.executable, "-m", "cfl_lightning", "fit", "--config", CONFIG, *SMALL,
         f"--trainer.default_root_dir={root}"], tmp_path, cli_env())
    assert code == 0, text[-3000:]
    # Lightning's default bar: TQDM's, or Rich's where ``rich`` is installed (import-linter, a
    # test dependency, brings it; Lightning then defaults to RichProgressBar)
    assert re.search(r"Epoch 1: 100%.*it/s|Epoch 1/1 .*3/3 .*it/s", text), text[-3000:]
    assert not re.search(r"^epoch \d/2  train/loss", text, re.M)
    assert text.rstrip().splitlines()[-1].strip() == (
        f"results: {root / 'csv' / 'version_0' / 'results.json'}")


@pytest.mark.parametrize("terminal, flag, bar, lines", [
    (True, None, True, False),
    (True, "false", False, True),
    (False, None, False, True),
    (False, "true", False, True),  # a bar in a log would bury results: PATH
])
def test_progress_choice(tmp_path, monkeypatch, terminal, flag, bar, lines):
    from lightning.pytorch.callbacks import ProgressBar

    import cfl_lightning.cli.lightning_cli as module
    from cfl_lightning.callbacks import EpochProgress
    from cfl_lightning.cli.train import build_cli

    monkeypatch.setattr(module, "on_terminal", lambda: terminal)
    args = ["fit", "--config", CONFIG, *SMALL, f"--trainer.default_root_dir={tmp_path}"]
    if flag is not None:
        args.append(f"--trainer.enable_progress_bar={flag}")
    seen = []

    def stop_before_fit(self):  # record the trainer's callbacks, train nothing
        seen.append(list(self.trainer.callbacks))
        raise KeyboardInterrupt

    monkeypatch.setattr(module.CflLightningCLI, "before_fit", stop_before_fit)
    with pytest.raises(KeyboardInterrupt):
        build_cli(args)
    (callbacks,) = seen
    assert any(isinstance(c, ProgressBar) for c in callbacks) == bar
    assert any(isinstance(c, EpochProgress) for c in callbacks) == lines


def test_shipped_configs_leave_the_bar_to_the_cli():
    import yaml

    for path in sorted((ROOT / "configs").glob("*.yaml")):
        trainer = yaml.safe_load(path.read_text(encoding="utf-8")).get("trainer", {})
        assert "enable_progress_bar" not in trainer, path.name
