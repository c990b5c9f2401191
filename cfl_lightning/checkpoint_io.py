"""Checkpoints written atomically: never a truncated ``.ckpt``, even on a full disk.

Lightning's :class:`~lightning.pytorch.plugins.TorchCheckpointIO` serializes a checkpoint to a
temporary file and then *copies* it onto the target: when the disk fills up midway, a truncated
``best-epoch=NNN.ckpt`` stays behind, and ``test --ckpt_path`` or ``ckpt_path="best"`` later
fails on it. :func:`atomic_torch_save` writes through :func:`cfl_lightning.io.atomic_open`
instead (a hidden temporary file beside the target, ``fsync``, then a rename): the target is
either the complete new checkpoint or untouched, and a failed write removes its temporary file
and raises the ``OSError`` (``ENOSPC``: "No space left on device").

:class:`AtomicCheckpointIO` is the Lightning plugin (``Trainer(plugins=[AtomicCheckpointIO()])``;
the ``fit`` CLI installs it); :func:`atomic_torch_save` is the plain function, for code that
saves checkpoints itself (e.g. ensembles). :func:`read_checkpoint` is the one way checkpoints
are read (``weights_only=True``; one line naming what is wrong), by the CLI's checks and by
the ensemble job.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins import TorchCheckpointIO

from cfl_lightning.errors import CflError
from cfl_lightning.io import atomic_open

__all__ = ["AtomicCheckpointIO", "atomic_torch_save", "use_atomic_checkpoints", "read_checkpoint"]


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save(obj, path)``, atomically (see the module docstring).

    The checkpoint is serialized in memory first: torch's zip writer reports a failed write
    to a file as a ``RuntimeError`` about stream positions, a plain write raises the
    ``OSError`` (``ENOSPC``).

    Raises:
        OSError: the write failed (the target is left as it was; no temporary file remains).
    """
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    try:
        with atomic_open(path, "wb") as handle:
            handle.write(buffer.getbuffer())
    except OSError as err:
        if err.filename is not None or err.errno is None:
            raise
        raise OSError(err.errno, err.strerror, os.fspath(path)) from err  # name the checkpoint


class AtomicCheckpointIO(TorchCheckpointIO):
    """:class:`TorchCheckpointIO` whose local saves are atomic (:func:`atomic_torch_save`).

    Remote paths (``s3://...`` and other ``fsspec`` URLs) are saved as Lightning saves them.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        atomic_torch_save(checkpoint, path)


def use_atomic_checkpoints(trainer: Any) -> bool:
    """Give ``trainer`` an :class:`AtomicCheckpointIO` unless it has its own checkpoint plugin.

    Returns:
        whether the plugin was installed (False: a custom ``CheckpointIO`` is kept).
    """
    strategy = trainer.strategy
    if type(strategy.checkpoint_io) is not TorchCheckpointIO:
        return False
    strategy.checkpoint_io = AtomicCheckpointIO()
    return True


def read_checkpoint(path: str | os.PathLike, *, mmap: bool = False) -> dict[str, Any]:
    """Load a Lightning checkpoint with ``weights_only=True``; one-line errors when it cannot be.

    Args:
        path: the ``.ckpt`` file.
        mmap: map the file instead of reading it (to look at a few entries of a large one).

    Raises:
        CflError: the file is missing, not a file, unreadable (corrupt, truncated, not a torch
            file, an unsafe pickle) or not a Lightning checkpoint (no ``state_dict``).
    """
    file = Path(path)
    if not file.exists():
        raise CflError(f"checkpoint {os.fspath(path)} does not exist")
    if not file.is_file():
        raise CflError(f"checkpoint {os.fspath(path)} is not a file")
    try:
        checkpoint = torch.load(file, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # corrupt, truncated, not a torch file, unsafe pickle
        reason = " ".join(str(err).split())[:120] or type(err).__name__
        raise CflError(f"checkpoint {os.fspath(path)} cannot be read: {reason}") from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise CflError(
            f"checkpoint {os.fspath(path)} is not a Lightning checkpoint (no state_dict)"
        )
    return checkpoint
