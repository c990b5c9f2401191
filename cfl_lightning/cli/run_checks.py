"""Checks of a training run's arguments, made before anything is written to disk.

Each raises :class:`~cfl_lightning.errors.CflError` with one line naming the problem, so that
``fit``/``validate``/``test`` exit with status 2, no traceback and no partial run directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cfl_lightning.checkpoint_io import read_checkpoint
from cfl_lightning.errors import CflError

__all__ = [
    "check_trainer_values", "check_devices", "check_root_dir",
    "read_checkpoint",  # re-exported: checkpoints are read by cfl_lightning.checkpoint_io
    "check_checkpoint_fits", "check_checkpoint_model", "check_finite_weights", "cpu_cores",
]

# option -> (smallest allowed value, what it means); None is always allowed
_TRAINER_BOUNDS = {
    "max_epochs": (-1, "a non-negative integer or -1 (no limit)"),
    "min_epochs": (0, "a non-negative integer"),
    "max_steps": (-1, "a non-negative integer or -1 (no limit)"),
    "min_steps": (0, "a non-negative integer"),
    "check_val_every_n_epoch": (1, "a positive integer"),
    "log_every_n_steps": (0, "a non-negative integer"),
    "accumulate_grad_batches": (1, "a positive integer"),
    "num_sanity_val_steps": (-1, "a non-negative integer or -1 (all batches)"),
    "gradient_clip_val": (0, "a non-negative number"),
}


def check_trainer_values(trainer: Mapping[str, Any]) -> None:
    """Bounds that Lightning only checks once the run has started (and its directories exist)."""
    for name, (low, meaning) in _TRAINER_BOUNDS.items():
        value = trainer.get(name)
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and value < low:
            raise CflError(f"--trainer.{name} must be {meaning}, got {value}")
    interval = trainer.get("val_check_interval")
    if isinstance(interval, (int, float)) and not isinstance(interval, bool) and interval <= 0:
        raise CflError(f"--trainer.val_check_interval must be positive, got {interval}")
    low, high = trainer.get("min_epochs"), trainer.get("max_epochs")
    if isinstance(low, int) and isinstance(high, int) and high >= 0 and low > high:
        raise CflError(f"--trainer.min_epochs ({low}) exceeds --trainer.max_epochs ({high})")


def cpu_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _device_count(devices: Any) -> int | None:
    """How many processes ``--trainer.devices`` asks for (None: auto, all, or indices)."""
    if isinstance(devices, bool):
        return None
    if isinstance(devices, int):
        return devices if devices > 0 else None
    if isinstance(devices, str) and devices.strip().isdigit():
        return int(devices) if int(devices) > 0 else None
    return None


def check_devices(trainer: Mapping[str, Any]) -> None:
    """``--trainer.devices`` on CPUs: a positive count no larger than this machine's cores.

    Lightning accepts any number of CPU processes and only fails once they are running (a DDP
    traceback per process); more processes than cores only slow training down. GPU counts are
    checked by Lightning itself when the Trainer is built.
    """
    import torch

    accelerator = trainer.get("accelerator")
    accelerator = accelerator.lower() if isinstance(accelerator, str) else accelerator
    on_cpu = accelerator == "cpu" or (
        accelerator in (None, "auto") and not torch.cuda.is_available()
        and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available())
    )
    if not on_cpu:
        return
    devices = trainer.get("devices")
    if devices is None or devices == "auto" or devices == -1 or devices == "-1":
        return
    count = _device_count(devices)
    if count is None:
        raise CflError(
            f"--trainer.devices={devices} is not a number of CPU processes "
            "(give a positive integer or auto)"
        )
    cores = cpu_cores()
    if count > cores:
        raise CflError(
            f"--trainer.devices={devices} asks for {count} CPU processes but this machine has "
            f"{cores} CPU core{'s' if cores != 1 else ''}"
            + (" and no GPU" if accelerator in (None, "auto") else "")
        )


def check_root_dir(path: str | os.PathLike | None) -> None:
    """``default_root_dir`` must be a directory, or creatable as one, and writable."""
    if path is None:
        return
    target = Path(path).expanduser().absolute()
    probe = target
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        what = "is not a directory" if probe == target else f"cannot be created ({probe} is a file)"
        raise CflError(f"--trainer.default_root_dir {os.fspath(path)} {what}")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise CflError(f"--trainer.default_root_dir {os.fspath(path)} is not writable ({probe})")


def check_finite_weights(path: str | os.PathLike, checkpoint: Mapping[str, Any]) -> None:
    """Every floating-point tensor of the checkpoint's ``state_dict`` must be finite.

    Raises:
        CflError: naming the first tensor holding NaN or an infinity.
    """
    import torch

    for name, value in checkpoint["state_dict"].items():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            bad = ~torch.isfinite(value)
            if bool(bad.any()):
                kind = "NaN" if bool(value.isnan().any()) else "an infinity"
                raise CflError(
                    f"checkpoint {os.fspath(path)} holds {kind} in {name} "
                    f"({int(bad.sum()):,} of {value.numel():,} values): the training that wrote "
                    "it diverged; evaluate an earlier checkpoint"
                )


def _short(class_path: str) -> str:
    return str(class_path).rsplit(".", 1)[-1]


def _same_class(a: str, b: str) -> bool:
    """Whether two class paths name the same class (imported when possible)."""
    import importlib

    def resolve(path: str) -> Any:
        module, _, name = str(path).rpartition(".")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            return path

    return a == b or resolve(a) is resolve(b)


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not (
        isinstance(a, bool) or isinstance(b, bool)
    ):
        return float(a) == float(b) or abs(float(a) - float(b)) <= 1e-12 * max(abs(a), abs(b))
    return a == b


def check_checkpoint_model(
    path: str | os.PathLike,
    checkpoint: Mapping[str, Any],
    model: Any,
    *,
    class_given: bool,
    args_given: set[str],
) -> None:
    """The configured model must be the checkpoint's: same class, same given init arguments.

    LightningCLI re-instantiates the model from the checkpoint's hyperparameters, so without
    this check ``test --model=TransformerLanguageModel --ckpt_path LSTM.ckpt`` silently tests
    the LSTM. What the user left to defaults is taken from the checkpoint; what they gave
    (``--model=...``, ``--model.init_args.X``, or in a ``--config`` file) must agree with it.

    Args:
        path: the checkpoint's path (for messages).
        checkpoint: the loaded checkpoint (``hyper_parameters`` with ``_class_path`` when the
            CLI wrote it).
        model: the parsed ``model`` config (``class_path`` and ``init_args``).
        class_given: whether the model class was given explicitly.
        args_given: the init arguments given explicitly.

    Raises:
        CflError: naming the class or the first argument that differs, and both values.
    """
    hparams = checkpoint.get("hyper_parameters")
    if not isinstance(hparams, Mapping) or model is None:
        return
    where = f"checkpoint {os.fspath(path)}"
    saved_class = hparams.get("_class_path")
    configured = getattr(model, "class_path", None)
    if class_given and saved_class and configured and not _same_class(saved_class, configured):
        raise CflError(
            f"{where} holds a {_short(saved_class)}, but the configured model is "
            f"{_short(configured)}: give --model={_short(saved_class)} (or no model: the "
            f"checkpoint's class is used), or a {_short(configured)} checkpoint"
        )
    init_args = getattr(model, "init_args", None)
    for name in sorted(args_given):
        if name not in hparams or init_args is None or not hasattr(init_args, name):
            continue
        given, saved = getattr(init_args, name), hparams[name]
        if not _same_value(given, saved):
            raise CflError(
                f"{where} was trained with model.init_args.{name}={saved!r}, but the "
                f"configuration gives {given!r}: leave {name} out (the checkpoint's value is "
                "used) or give the matching checkpoint"
            )


def check_checkpoint_fits(path: str | os.PathLike, checkpoint: Mapping[str, Any], model: Any) -> None:
    """The checkpoint's tensors must be exactly the model's (names and shapes)."""
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in checkpoint["state_dict"].items() if hasattr(v, "shape")}
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    shapes = [k for k in sorted(set(expected) & set(found)) if expected[k] != found[k]]
    if not (missing or unexpected or shapes):
        return
    name = type(model).__name__
    if shapes:
        k = shapes[0]
        detail = f"{k} has shape {list(found[k])}, the model's is {list(expected[k])}"
    elif missing:
        detail = f"{len(missing)} of the model's tensors are missing (e.g. {missing[0]})"
    else:
        detail = f"it holds {len(unexpected)} tensors the model does not have (e.g. {unexpected[0]})"
    raise CflError(f"checkpoint {os.fspath(path)} does not fit {name}: {detail}")
