"""Train the runs of a list of ``fit`` command lines as ensembles, in one process.

``python -m cfl_lightning.ensemble SPEC.json`` (started by ``python -m cfl_lightning sweep
--ensemble M``) reads a list of members ``{"name", "args"}`` (``args``: the command line after
``python -m cfl_lightning fit``), builds every member as the CLI would
(:mod:`~cfl_lightning.ensemble.members`), trains the members that share a model class,
hyperparameters and Trainer settings as one :class:`~cfl_lightning.ensemble.EnsembleTrainer`,
tests each on its own test strings and writes its ``results.json`` where its own ``fit`` would
(:mod:`~cfl_lightning.ensemble.evaluate`). On CUDA the members of a group are one batched model;
on a CPU, where batching the arithmetic does not pay, they are trained one after another with
their own modules (:class:`~cfl_lightning.ensemble.loop.LoopTrainer`); the environment variable
``CFL_LIGHTNING_ENSEMBLE=batched|loop`` overrides the choice. A member that cannot be ensembled (a setting the
ensemble does not reproduce) is trained by the ordinary ``fit`` in this process. A member that
fails is reported and the others go on. One line per member on stdout: ``done NAME`` or
``FAILED NAME: reason``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

__all__ = ["run_members", "main", "BACKEND_ENV"]

#: environment variable choosing how a group is trained: "batched" or "loop"
BACKEND_ENV = "CFL_LIGHTNING_ENSEMBLE"


def _say(stream: TextIO, text: str) -> None:
    stream.write(text + "\n")
    stream.flush()


def run_members(
    members: Sequence[Mapping[str, Any]], *, device: str | None = None, stream: TextIO | None = None
) -> dict[str, str | None]:
    """Train and test ``members``; returns ``{name: None (done) or the failure reason}``.

    Args:
        members: ``[{"name": str, "args": [str, ...]}]``, the ``fit`` arguments of each run
            (with its ``--trainer.default_root_dir``).
        device: ``"cuda"``, ``"cpu"`` or None (CUDA when available).
        stream: where the per-member lines go (default stdout).
    """
    import torch

    from cfl_lightning.ensemble.members import NotEnsembleable, build_member, ensemble_key

    stream = sys.stdout if stream is None else stream
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    backend = os.environ.get(BACKEND_ENV, "").strip() or (
        "batched" if device.startswith("cuda") else "loop"
    )
    if backend not in ("batched", "loop"):
        raise ValueError(f"{BACKEND_ENV} must be 'batched' or 'loop', got {backend!r}")
    status: dict[str, str | None] = {}
    groups: dict[tuple, list[Any]] = {}
    alone: list[Mapping[str, Any]] = []
    for spec in members:
        name = str(spec["name"])
        try:
            member = build_member(name, [str(a) for a in spec["args"]])
        except NotEnsembleable as err:
            _say(stream, f"{name}: not ensembled ({err}); trained on its own")
            alone.append(spec)
            continue
        except Exception as err:  # noqa: BLE001 - a failed member is reported, others go on
            status[name] = _reason(err)
            _say(stream, f"FAILED {name}: {status[name]}")
            continue
        groups.setdefault(ensemble_key(member), []).append(member)
    for group in groups.values():
        _train_group(group, device, backend, status, stream)
    for spec in alone:
        _fit_alone(spec, status, stream)
    return status


def _reason(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return f"{type(err).__name__}: {text}"[:300]


def _train_group(group: list[Any], device: str, backend: str, status: dict, stream: TextIO) -> None:
    from cfl_lightning.ensemble.evaluate import test_members, write_member_results
    from cfl_lightning.ensemble.loop import LoopTrainer
    from cfl_lightning.ensemble.trainer import EnsembleTrainer

    names = [m.name for m in group]
    started = time.perf_counter()
    try:
        cls = EnsembleTrainer if backend == "batched" else LoopTrainer
        trainer = cls(
            [m.model for m in group], [m.datamodule for m in group], group[0].settings,
            device=device,
        )
        outcomes = trainer.fit()
        kl_results = test_members(trainer, outcomes)
    except Exception as err:  # noqa: BLE001
        traceback.print_exc()
        for name in names:
            status[name] = f"ensemble of {len(names)} failed: {_reason(err)}"
            _say(stream, f"FAILED {name}: {status[name]}")
        return
    _say(stream, f"trained and tested {len(names)} members ({backend}) in "
                 f"{time.perf_counter() - started:.1f} s")
    for member, outcome, (kl_result, visits) in zip(group, outcomes, kl_results):
        try:
            path = write_member_results(member, outcome, kl_result, visits)
            status[member.name] = None
            _say(stream, f"done {member.name}: {path}")
        except Exception as err:  # noqa: BLE001
            traceback.print_exc()
            status[member.name] = _reason(err)
            _say(stream, f"FAILED {member.name}: {status[member.name]}")


def _fit_alone(spec: Mapping[str, Any], status: dict, stream: TextIO) -> None:
    from cfl_lightning.cli.train import main as fit_main

    name = str(spec["name"])
    try:
        code = fit_main(["fit", *[str(a) for a in spec["args"]]])
    except Exception as err:  # noqa: BLE001
        traceback.print_exc()
        code, why = 1, _reason(err)
    else:
        why = f"fit exited with status {code}"
    status[name] = None if code == 0 else why
    _say(stream, f"done {name}" if code == 0 else f"FAILED {name}: {why}")


def main(argv: list[str] | None = None) -> int:
    """``python -m cfl_lightning.ensemble SPEC.json``: 0 when every member is done, else 1."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1:
        sys.stderr.write("usage: python -m cfl_lightning.ensemble SPEC.json\n")
        return 2
    from cfl_lightning.cli.train import configure_threads
    from cfl_lightning.cli.wandb_mode import ensure_wandb_mode

    ensure_wandb_mode()
    configure_threads()
    try:
        members = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        sys.stderr.write(f"python -m cfl_lightning.ensemble: cannot read {argv[0]}: {err}\n")
        return 2
    status = run_members(members)
    return 0 if all(v is None for v in status.values()) else 1
