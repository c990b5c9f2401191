"""A member's ``results.json``: the file its own ``fit`` writes.

:func:`write_member_results` computes the member's test KL entries once
(:func:`member_entries`: :func:`~cfl_lightning.metrics.kl_entries`, or
:func:`~cfl_lightning.callbacks.decomposed_kl.classless_entries` for an automaton without
position classes, as the ``DecomposedKLCallback`` of its own ``fit`` does) and writes them
with :func:`~cfl_lightning.callbacks.build_results` + :func:`~cfl_lightning.results.write_results`
(atomic), with the member's best weights, its data
module and its run's full config, at the path its own ``ResultsWriter`` would use.
``train_time_s`` is the ensemble's training wall time until the member's last epoch. Whether a
member counts as done is the results-file rule (:func:`cfl_lightning.results.has_results`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

from cfl_lightning.callbacks import FinishedRun, build_results
from cfl_lightning.callbacks.decomposed_kl import classless_entries, has_position_classes
from cfl_lightning.metrics import kl_entries
from cfl_lightning.results import write_results

__all__ = ["write_member_results", "member_entries"]


def write_member_results(
    path: str | os.PathLike,
    config: Mapping[str, Any],
    model: Any,
    datamodule: Any,
    outcome: Any,
    kl_result: dict[str, Tensor] | None,
    test_visits: Tensor | None = None,
) -> Path:
    """Load ``outcome``'s best weights into ``model`` and write its ``results.json`` at ``path``.

    Args:
        path: where the member's own run writes it.
        config: the run's full config (as its ``ResultsWriter`` stores it).
        model: the member's ``LanguageModel`` (its weights are replaced by the best ones).
        datamodule: its ``PFADataModule``.
        outcome: its :class:`~cfl_lightning.ensemble.MemberOutcome`.
        kl_result: its test's ``DecomposedKL.compute()`` (``SymbolKL.compute()`` for an automaton
            without position classes; None without test strings).
        test_visits: its test's ``[Q]`` positions per state (None without position classes).
    """
    # the member's buffers (never trained: a user's model may have some) with its best weights
    model.load_state_dict({**model.state_dict(), **outcome.best_state})
    path = Path(path)
    results = build_results(FinishedRun(
        config=dict(config),
        model=model,
        datamodule=datamodule,
        kl=member_entries(kl_result, test_visits, datamodule.automaton, datamodule.event),
        best_val_loss=outcome.best_val_loss,
        epochs=outcome.epochs,
        train_time_s=outcome.train_time_s,
        log_dir=path.parent,
        seed=config.get("seed_everything"),
        stopped_early=outcome.stopped_early,
        steps=outcome.steps,
    ))
    return write_results(path, results)


def member_entries(
    kl_result: dict[str, Tensor] | None, test_visits: Tensor | None, automaton: Any, event: Any
) -> dict[str, Any]:
    """A member's ``results.json`` KL entries, by its own ``fit``'s rule.

    Args:
        kl_result: its test's ``DecomposedKL.compute()``, or ``SymbolKL.compute()`` (``total``,
            ``symbol`` ``[S+1]``, ``stakes`` ``[S+1]``) for an automaton without position
            classes; None without test strings.
        test_visits: its ``[Q]`` test positions per state (None without position classes).
        automaton: its automaton.
        event: its event, or None.

    Returns:
        :func:`~cfl_lightning.metrics.kl_entries`, or
        :func:`~cfl_lightning.callbacks.decomposed_kl.classless_entries` for a kind without
        position classes and a test result.
    """
    if kl_result is not None and not has_position_classes(automaton.kind):
        return classless_entries(kl_result, automaton, event)
    return kl_entries(kl_result, test_visits, automaton, event)
