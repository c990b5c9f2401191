"""``fit``/``test`` under faults (issue 22, section 3): bad checkpoints, a full disk, diverging
models, settings that used to fail only after training started.

Every refusal: exit status 2, one ``error:`` line, no traceback; before training nothing is left
under ``default_root_dir``; after training started the run's logs are kept. Most cases go
through ``main`` in this process (the code path of ``python -m cfl_lightning``); the W&B cases
need their own processes (the first W&B mode of a process sticks).
"""

from __future__ import annotations

import os

os.environ["WANDB_MODE"] = "disabled"  # before anything imports wandb

import errno
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cfl_lightning.checkpoint_io import AtomicCheckpointIO, atomic_torch_save
from cfl_lightning.cli.train import main
from tests.helpers import CI_LIMIT_S, CONFIG, SMALL, exit_status
from tests.helpers import REPO as ROOT


def run(args: list[str], capsys) -> tuple[int, str, str]:
    code = exit_status(args, main)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line(code: int, err: str, *words: str) -> str:
    """The single ``error:`` line of a refusal (checked: status 2, no traceback)."""
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert code == 2 and "Traceback" not in err and len(errors) == 1, err[-2000:]
    for word in words:
        assert word in errors[0], (word, errors[0])
    return errors[0]


def fit_args(root: Path, *extra: str) -> list[str]:
    return ["fit", "--config", CONFIG, *SMALL, f"--trainer.default_root_dir={root}", *extra]


@pytest.fixture(scope="module")
def lstm_checkpoint(tmp_path_factory) -> Path:
    """The best checkpoint of a tiny LSTM fit (param_budget 5000)."""
    root = tmp_path_factory.mktemp("lstm")
    assert main(fit_args(root, "--trainer.max_epochs=1")) == 0
    (path,) = (root / "csv" / "version_0" / "checkpoints").glob("*.ckpt")
    return path


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize("yaml_text, words", [
    ("data: null\n", ["data:", "null"]),
    ("data: [1, 2]\n", ["data:", "[1, 2]"]),
])
def test_data_that_is_not_a_mapping_is_one_line(tmp_path, capsys, yaml_text, words):
    (tmp_path / "bad.yaml").write_text(yaml_text)
    root = tmp_path / "run"
    code, _, err = run(fit_args(root, "--config", str(tmp_path / "bad.yaml")), capsys)
    one_line(code, err, *words)
    assert not root.exists()


def test_abbreviated_options_are_refused(tmp_path, capsys):
    """``--data.num_str=7`` used to set --data.num_strings silently."""
    root = tmp_path / "run"
    code, _, err = run(fit_args(root, "--data.num_str=7"), capsys)
    one_line(code, err, "--data.num_str")
    assert not root.exists()


@pytest.mark.parametrize("option", ["--early_stopping.monitor", "--checkpoint.monitor"])
def test_unknown_monitor_is_refused_before_training(tmp_path, capsys, option):
    root = tmp_path / "run"
    code, _, err = run(fit_args(root, f"{option}=val/nope"), capsys)
    one_line(code, err, option, "val/nope", "val/kl_per_string")
    assert "epoch 1/" not in err and not root.exists()  # nothing trained, nothing written


def test_known_monitor_passes_the_check(tmp_path, capsys):
    """Negative control of the check: another metric the run logs is accepted."""
    code, out, err = run(fit_args(tmp_path, "--early_stopping.monitor=train/loss",
                                  "--trainer.max_epochs=1"), capsys)
    assert code == 0, err[-2000:]


def test_unknown_monitor_of_a_user_model_is_one_line_after_validation(tmp_path, capsys):
    """A user model's metrics are unknown before training: Lightning's late RuntimeError
    becomes one line, and the run keeps its logs."""
    code, _, err = run(fit_args(tmp_path, "--model=tests.cli_models.Bag",
                                "--early_stopping.monitor=val/acc"), capsys)
    line = one_line(code, err, "--early_stopping.monitor", "val/acc", "val/kl_per_string")
    assert "logs are kept" in line
    assert (tmp_path / "csv" / "version_0" / "metrics.csv").exists()


def test_huge_test_target_strings_is_a_size_refusal(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "2G")
    root = tmp_path / "run"
    code, _, err = run(fit_args(root, "--data.test_target_strings=100000000000"), capsys)
    one_line(code, err, "test_target_strings 100,000,000,000", "needs")
    assert not root.exists()


def test_module_without_validation_step_is_refused_before_training(tmp_path, capsys):
    root = tmp_path / "run"
    code, _, err = run(fit_args(root, "--model=tests.cli_models.NoValidation"), capsys)
    one_line(code, err, "NoValidation", "validation_step")
    assert not root.exists()


def test_nan_during_fit_is_one_line_with_epoch_and_step_and_logs_kept(tmp_path, capsys):
    """NaN from step 4 (the second epoch; 3 batches per epoch): the training loss refuses it."""
    code, out, err = run(fit_args(tmp_path, "--model=tests.cli_models.NaNAfter",
                                  "--model.init_args.after=4"), capsys)
    line = one_line(code, err, "NaN", "epoch 1, step 4", "logs are kept")
    assert "results:" not in out
    assert (tmp_path / "csv" / "version_0" / "metrics.csv").exists()


# --------------------------------------------------------------------------- checkpoints


def test_checkpoint_of_another_class_is_refused(lstm_checkpoint, tmp_path, capsys):
    code, _, err = run(["test", "--config", CONFIG, *SMALL, "--model=TransformerLanguageModel",
                        f"--ckpt_path={lstm_checkpoint}"], capsys)
    one_line(code, err, "LSTMLanguageModel", "TransformerLanguageModel", lstm_checkpoint.name)


def test_checkpoint_with_other_hyperparameters_is_refused(lstm_checkpoint, capsys):
    code, _, err = run(["test", "--config", CONFIG, *SMALL, "--model.init_args.param_budget=9000",
                        f"--ckpt_path={lstm_checkpoint}"], capsys)
    one_line(code, err, "param_budget=5000", "9000")


def test_checkpoint_of_the_configured_model_is_tested(lstm_checkpoint, tmp_path, capsys):
    """Negative control: the matching class and budget, and no class at all, are accepted."""
    for extra in (["--config", CONFIG, *SMALL], ["--data.generator=parity_resampled",
                                                 "--data.weight_seed=1", "--data.test_strings=10",
                                                 "--data.cache_dir=none"]):
        code, out, err = run(["test", *extra, f"--ckpt_path={lstm_checkpoint}",
                              f"--trainer.default_root_dir={tmp_path}"], capsys)
        assert code == 0 and "kl_total" in out, err[-2000:]


def test_checkpoint_with_nan_weights_is_one_line(lstm_checkpoint, tmp_path, capsys):
    checkpoint = torch.load(lstm_checkpoint, weights_only=True)
    name = next(iter(checkpoint["state_dict"]))
    checkpoint["state_dict"][name][0] = float("nan")
    torch.save(checkpoint, tmp_path / "nan.ckpt")
    code, _, err = run(["test", "--config", CONFIG, *SMALL, f"--ckpt_path={tmp_path / 'nan.ckpt'}"],
                       capsys)
    one_line(code, err, "nan.ckpt", "NaN", name)


# --------------------------------------------------------------------------- a full disk


class _FullDisk:
    """``atomic_open`` that writes ``keep`` bytes and then fails with ENOSPC."""

    def __init__(self, keep: int) -> None:
        from cfl_lightning import io

        self.real, self.keep = io.atomic_open, keep

    def __call__(self, path, mode="w", **kwargs):
        import contextlib

        @contextlib.contextmanager
        def opened():
            with self.real(path, mode, **kwargs) as handle:
                class Handle:
                    def write(_, data):
                        handle.write(bytes(data)[: self.keep])
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

                yield Handle()

        return opened()


def test_atomic_torch_save_on_a_full_disk_leaves_the_old_file(tmp_path, monkeypatch):
    import cfl_lightning.checkpoint_io as module

    target = tmp_path / "best.ckpt"
    atomic_torch_save({"w": torch.ones(3)}, target)
    before = target.read_bytes()
    monkeypatch.setattr(module, "atomic_open", _FullDisk(keep=100))
    with pytest.raises(OSError) as info:
        atomic_torch_save({"w": torch.zeros(1000)}, target)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
    assert target.read_bytes() == before  # untouched, still loadable
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.ckpt"]  # no temporary file


def test_lightnings_checkpoint_io_would_leave_a_truncated_file(tmp_path, monkeypatch):
    """Negative control of the fault injection: a plain (non-atomic) write of the same bytes
    leaves a truncated file behind; AtomicCheckpointIO leaves none."""
    checkpoint = {"w": torch.zeros(1000)}
    plain = tmp_path / "plain.ckpt"
    with pytest.raises(OSError), open(plain, "wb") as handle:
        handle.write(b"x" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")
    assert plain.stat().st_size == 100
    import cfl_lightning.checkpoint_io as module

    monkeypatch.setattr(module, "atomic_open", _FullDisk(keep=100))
    with pytest.raises(OSError):
        AtomicCheckpointIO().save_checkpoint(checkpoint, tmp_path / "atomic.ckpt")
    assert not (tmp_path / "atomic.ckpt").exists()


def test_fit_on_a_full_disk_is_one_line_and_keeps_the_logs(tmp_path, capsys, monkeypatch):
    """The second checkpoint write fails with ENOSPC (simulated): one line naming it, exit 2,
    the earlier checkpoint intact, metrics.csv kept, no temporary file."""
    import cfl_lightning.checkpoint_io as module

    real, calls = module.atomic_open, []

    def failing_second(path, mode="w", **kwargs):
        calls.append(path)
        return (_FullDisk(keep=1000) if len(calls) == 2 else real)(path, mode, **kwargs)

    monkeypatch.setattr(module, "atomic_open", failing_second)
    code, out, err = run(fit_args(tmp_path, "--trainer.max_epochs=4"), capsys)
    line = one_line(code, err, "No space left on device", ".ckpt", "logs are kept")
    assert str(calls[1]) in line and "results:" not in out
    version = tmp_path / "csv" / "version_0"
    assert (version / "metrics.csv").exists()
    for ckpt in (version / "checkpoints").iterdir():
        assert not ckpt.name.startswith(".")  # no temporary file
        torch.load(ckpt, weights_only=True)  # complete


def test_corpus_cache_on_a_full_disk_is_a_warning(tmp_path, monkeypatch):
    """The cache is optional: a full disk there warns (it used to be a RuntimeError from
    torch's zip writer, about stream positions) and the corpus is still served."""
    import cfl_lightning.checkpoint_io as module
    from cfl_lightning.data import PFADataModule

    monkeypatch.setattr(module, "atomic_open", _FullDisk(keep=50))
    dm = PFADataModule(generator="parity", num_strings=5, val_strings=0, test_strings=0,
                       cache_dir=str(tmp_path), device="cpu")
    with pytest.warns(UserWarning, match="No space left on device"):
        dm.setup("fit")
    assert len(dm.corpus("train")) == 5
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # nothing half-written


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True)
    return proc.returncode == 0


@pytest.mark.slow
def test_fit_on_a_real_full_2mb_tmpfs(tmp_path):
    """A real full disk (a 2 MB tmpfs; needs root and permission to mount): exit 2, one line,
    no truncated checkpoint, the logs kept."""
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "2m"):
        pytest.skip("cannot mount a tmpfs here")
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
               "WANDB_MODE": "disabled", "CFL_LIGHTNING_CACHE": "none"}
        args = [a for a in fit_args(disk / "run", "--trainer.max_epochs=6") if "budget" not in a]
        proc = subprocess.run([sys.executable, "-m", "cfl_lightning", *args], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=CI_LIMIT_S)
        line = one_line(proc.returncode, proc.stderr, "No space left on device", "logs are kept")
        assert ".ckpt" in line
        version = disk / "run" / "csv" / "version_0"
        assert (version / "metrics.csv").exists()
        for ckpt in (version / "checkpoints").iterdir():
            torch.load(ckpt, weights_only=True)  # every checkpoint left is complete
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


# --------------------------------------------------------------------------- W&B and sizes


def test_wandb_online_without_key_is_refused_before_anything_is_written(
        tmp_path, capsys, monkeypatch):
    """(In this process: the refusal comes before wandb is used, so the mode cannot stick.)"""
    for name in ("WANDB_API_KEY", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_MODE", "online")
    root = tmp_path / "run"
    code, _, err = run(fit_args(root), capsys)
    one_line(code, err, "WANDB_MODE=online", "API key")
    assert not root.exists()


def test_size_refusal_comes_before_any_logger_writes(tmp_path, capsys, monkeypatch):
    """The corpus is refused when the data module is built, before the loggers' directories
    (hparams.yaml) or a W&B run exist."""
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "2G")
    root = tmp_path / "run"
    code, _, err = run(fit_args(root, "--data.num_strings=3000000000", "--data.count=1000"), capsys)
    one_line(code, err, "num_strings 3,000,000,000", "needs")
    assert not root.exists()


@pytest.mark.slow
def test_wandb_online_without_key_and_late_size_refusal_leave_nothing(tmp_path):
    """As a user sees them (real processes, W&B really used): WANDB_MODE=online without a key,
    and a size refusal with W&B offline: one line, exit 2, nothing under default_root_dir (no
    hparams.yaml, no offline-run directory)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_") and k != "NETRC"}
    base.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HOME=str(tmp_path),
                CFL_LIGHTNING_CACHE="none", CFL_LIGHTNING_MEMORY_LIMIT="2G")
    cases = [
        ({"WANDB_MODE": "online"}, [], ["WANDB_MODE=online", "API key"]),
        ({"WANDB_MODE": "offline"}, ["--data.num_strings=3000000000", "--data.count=1000"],
         ["needs", "num_strings 3,000,000,000"]),
    ]
    procs = []
    for i, (env, extra, _) in enumerate(cases):
        args = fit_args(tmp_path / f"run{i}", *extra)
        procs.append(subprocess.Popen([sys.executable, "-m", "cfl_lightning", *args],
                                      env={**base, **env}, cwd=tmp_path, text=True,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE))
    for i, (proc, (_, _, words)) in enumerate(zip(procs, cases)):
        out, err = proc.communicate(timeout=CI_LIMIT_S)
        one_line(proc.returncode, err, *words)
        assert not (tmp_path / f"run{i}").exists(), list((tmp_path / f"run{i}").rglob("*"))
