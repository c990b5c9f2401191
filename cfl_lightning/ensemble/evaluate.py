"""Test ensemble members and write their ``results.json``, as their own ``fit`` would.

The evaluation is the one every run gets: each member's own module, with its best checkpoint's
weights, predicts on its own test batches through the callback's ``predict_log_probs``, and the
callback's metrics (:class:`~cfl_lightning.metrics.DecomposedKL`,
:class:`~cfl_lightning.metrics.StateVisits`) accumulate them; the file is :func:`~cfl_lightning.results.build_results` +
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


def test_members(
    trainer: Any, outcomes: list[Any]
) -> list[tuple[dict[str, Tensor] | None, Tensor | None]]:
    """Each member's decomposed KL and state visits on its test strings, at its best checkpoint.

    The member's own module runs on its own test batches (importance ``weights`` included),
    predicted by the callback's :func:`~cfl_lightning.callbacks.decomposed_kl.predict_log_probs`
    and accumulated by the callback's metrics (``DecomposedKL``, ``StateVisits``).

    Args:
        trainer: the :class:`~cfl_lightning.ensemble.EnsembleTrainer` or
            :class:`~cfl_lightning.ensemble.loop.LoopTrainer` that trained them.
        outcomes: its :meth:`fit` outcomes.

    Returns:
        per member, ``(DecomposedKL.compute(), StateVisits.compute())`` as CPU tensors, or
        ``(None, None)`` without test strings.
    """
    from cfl_lightning.callbacks.decomposed_kl import predict_log_probs
    from cfl_lightning.metrics import DecomposedKL, StateVisits

    device = trainer.device
    out = []
    for model, dm, outcome in zip(trainer.models, trainer.datamodules, outcomes):
        dm.setup("test")
        model.load_state_dict(outcome.best_state)
        model.to(device)
        metric = DecomposedKL(dm.pfsa).to(device)
        visits = StateVisits(dm.pfsa.num_states).to(device)
        batches = 0
        for batch in dm.test_dataloader():
            batch = {k: v.to(device) for k, v in batch.items()}
            mask = batch["mask"].bool()
            metric.update(predict_log_probs(model, batch), batch["states"], mask, batch.get("weights"))
            visits.update(batch["states"], mask)
            batches += 1
        if not batches:
            out.append((None, None))
            continue
        result = {k: v.detach().cpu() for k, v in metric.compute().items()}
        out.append((result, visits.compute().detach().cpu()))
    return out


def results_path(cli: Any) -> Path:
    """Where the run of ``cli`` writes ``results.json`` (its ``ResultsWriter``'s rule)."""
    from cfl_lightning.callbacks.results_writer import run_log_dir

    results = cli.config.get("results") if hasattr(cli.config, "get") else None
    custom = results.get("path") if results else None
    return Path(custom) if custom else run_log_dir(cli.trainer) / "results.json"


def write_member_results(
    member: Any,
    outcome: Any,
    kl_result: dict[str, Tensor] | None,
    test_visits: Tensor | None = None,
) -> Path:
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
        test_visits=test_visits,
        stopped_early=outcome.stopped_early,
        steps=outcome.steps,
    )
    return write_results(path, results)
