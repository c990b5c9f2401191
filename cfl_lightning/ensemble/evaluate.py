"""Test ensemble members and write their ``results.json``, as their own ``fit`` would.

The evaluation is the one every run gets: the test strings' decomposed KL is the
:class:`~cfl_lightning.metrics.DecomposedKL` metric (what
:class:`~cfl_lightning.callbacks.DecomposedKLCallback` feeds at test time), here fed each
member's best-checkpoint log-probabilities from the batched forward
(:meth:`EnsembleTrainer.predict <cfl_lightning.ensemble.EnsembleTrainer.predict>`, tested equal
to the shipped model's); the file is :func:`~cfl_lightning.results.build_results` +
:func:`~cfl_lightning.results.write_results` with the run's full CLI config, at the path the
run's :class:`~cfl_lightning.callbacks.ResultsWriter` would use (``--results.path``, else the
first logger's log directory). ``train_time_s`` is the ensemble's wall time until the member's
last epoch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor

__all__ = ["test_members", "results_path", "write_member_results"]


def test_members(trainer: Any, outcomes: list[Any]) -> list[dict[str, Tensor] | None]:
    """Each member's decomposed KL on its test strings, with its best checkpoint's weights.

    Args:
        trainer: the :class:`~cfl_lightning.ensemble.EnsembleTrainer` that trained them.
        outcomes: its :meth:`fit` outcomes.

    Returns:
        per member, ``DecomposedKL.compute()`` (CPU tensors), or None without test strings.
    """
    from cfl_lightning.metrics import DecomposedKL

    metrics = [DecomposedKL(dm.pfsa).to(trainer.device) for dm in trainer.datamodules]
    seen = [0] * len(metrics)

    def update(i: int, log_probs: Tensor, states: Tensor, mask: Tensor) -> None:
        metrics[i].update(log_probs, states, mask)
        seen[i] += 1

    trainer.predict("test", [o.best_state for o in outcomes], update)
    return [
        {k: v.detach().cpu() for k, v in metric.compute().items()} if n else None
        for metric, n in zip(metrics, seen)
    ]


def results_path(cli: Any) -> Path:
    """Where the run of ``cli`` writes ``results.json`` (its ``ResultsWriter``'s rule)."""
    from cfl_lightning.callbacks.results_writer import run_log_dir

    results = cli.config.get("results") if hasattr(cli.config, "get") else None
    custom = results.get("path") if results else None
    return Path(custom) if custom else run_log_dir(cli.trainer) / "results.json"


def write_member_results(member: Any, outcome: Any, kl_result: dict[str, Tensor] | None) -> Path:
    """Load the member's best weights into its model and write its ``results.json``."""
    from cfl_lightning.results import build_results, write_results

    cli = member.cli
    member.model.load_state_dict(outcome.best_state)
    config = cli.full_config()
    # the ``fit`` subcommand's own arguments (a member is built without a subcommand): an
    # ensemble always trains from scratch
    config.setdefault("ckpt_path", None)
    config.setdefault("weights_only", None)
    path = results_path(cli)
    results = build_results(
        config=config,
        model=member.model,
        datamodule=member.datamodule,
        kl_result=kl_result,
        best_val_loss=outcome.best_val_loss,
        epochs=outcome.epochs,
        train_time_s=outcome.train_time_s,
        log_dir=path.parent,
        seed=config.get("seed_everything"),
    )
    return write_results(path, results)
