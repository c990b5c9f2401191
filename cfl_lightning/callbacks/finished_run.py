"""What a finished run hands to ``results.json`` (:class:`FinishedRun`, :func:`build_results`).

The format itself (keys, types, what null means, the writing) is :mod:`cfl_lightning.results`;
this module gathers a run's values from its model, its data module and the decomposed KL that
was computed when it was tested (:func:`~cfl_lightning.metrics.kl_entries`, by
:class:`~cfl_lightning.callbacks.DecomposedKLCallback` or the ensemble), and recomputes none of
them. Used by :class:`~cfl_lightning.callbacks.ResultsWriter` and the ensemble's writer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cfl_lightning.metrics import KL_ENTRIES
from cfl_lightning.results import count_parameters, ordered
from cfl_lightning.sampling.visits import containing_probability

if TYPE_CHECKING:
    from torch import nn

    from cfl_lightning.automata import Event
    from cfl_lightning.data import PFADataModule

__all__ = ["FinishedRun", "build_results"]


@dataclass
class FinishedRun:
    """What a finished run hands to :func:`build_results`.

    Attributes:
        model: the trained module (any ``nn.Module``; ``results["model"]`` is its class name,
            ``num_parameters`` its trainable parameter count).
        datamodule: the data module the model was trained and tested on.
        log_dir: the run's log directory.
        config: the run's full config (a plain dict); None: the model's and the data module's
            hyperparameters (``{"model": {"class_path", "init_args"}, "data": {...}}``).
        kl: the test's decomposed KL as :func:`~cfl_lightning.metrics.kl_entries` gives it
            (e.g. :attr:`DecomposedKLCallback.test_entries`), or None (no test evaluated).
        best_val_loss: best ``val/kl_per_string``, or None.
        epochs: completed training epochs (None when the run did not train).
        train_time_s: wall time of training (None when the run did not train); a resumed
            fit's includes the earlier attempts' time.
        train_time_resumed_s: the part of ``train_time_s`` after resuming (None when the fit
            did not resume).
        seed: the run's ``seed_everything`` value.
        stopped_early: whether early stopping ended training (None when the run did not train).
        steps: optimizer steps taken (None when the run did not train).
        event: the event that ``kl`` was evaluated for (e.g.
            :attr:`DecomposedKLCallback.event`); default the data module's. Another event than
            the data module's is allowed only when the data module has none (its counts are
            then read from the corpus's ``occurrences``).
        long: the same evaluation on the long split (``min_length``, ``num_strings`` and the
            :func:`~cfl_lightning.metrics.kl_entries`; e.g.
            :attr:`DecomposedKLCallback.long_entries`), or None (no long split evaluated).
    """

    model: nn.Module
    datamodule: PFADataModule
    log_dir: str | os.PathLike
    config: Mapping[str, Any] | None = None
    kl: Mapping[str, Any] | None = None
    best_val_loss: float | None = None
    epochs: int | None = None
    train_time_s: float | None = None
    seed: int | None = None
    stopped_early: bool | None = None
    steps: int | None = None
    event: Event | None = None
    train_time_resumed_s: float | None = None
    long: Mapping[str, Any] | None = None


def build_results(run: FinishedRun) -> dict[str, Any]:
    """Assemble the ``results.json`` dict of a finished run.

    Returns:
        a JSON-ready dict with exactly the keys of :data:`cfl_lightning.results.RESULT_KEYS`,
        in that order (non-finite floats as None).

    Raises:
        ValueError: ``run.event`` differs from the data module's own event.
    """
    datamodule, model = run.datamodule, run.model
    intervention, pfsa = datamodule.intervention, datamodule.automaton
    event = _event_of(run)
    occurrences = datamodule.occurrences()
    expected = datamodule.expected_occurrences()
    realized_count, realized_strings, expected_count = _event_counts(
        datamodule, event, occurrences, expected
    )
    # the strings actually trained on (a token-matched corpus's K), else the setting
    num_strings = getattr(datamodule, "train_strings", datamodule.hparams["num_strings"])
    kl = dict.fromkeys(KL_ENTRIES) if run.kl is None else run.kl
    return ordered({
        "config": dict(_default_config(model, datamodule) if run.config is None else run.config),
        "model": type(model).__name__,
        "intervention": intervention.kind,
        "event": None if event is None else str(event),
        "count": intervention.count,
        "realized_count": realized_count,
        "expected_count": None if expected_count is None else float(expected_count),
        "num_strings": num_strings,
        "num_parameters": count_parameters(model),
        "seed": run.seed,
        "automaton": pfsa.to_dict(),
        "automaton_id": datamodule.automaton_id,
        **{key: kl[key] for key in KL_ENTRIES},
        "best_val_loss": None if run.best_val_loss is None else float(run.best_val_loss),
        "epochs": None if run.epochs is None else int(run.epochs),
        "train_time_s": None if run.train_time_s is None else float(run.train_time_s),
        "log_dir": os.fspath(run.log_dir),
        "realized_strings": realized_strings,
        "occurrences": occurrences,
        "expected_occurrences": expected,
        "stopped_early": None if run.stopped_early is None else bool(run.stopped_early),
        "steps": None if run.steps is None else int(run.steps),
        "expected_strings": None if event is None else float(
            num_strings * containing_probability(pfsa, event)
        ),
        "count_unit": intervention.unit,
        "train_time_resumed_s": (
            None if run.train_time_resumed_s is None else float(run.train_time_resumed_s)
        ),
        "long_test": None if run.long is None else dict(run.long),
        "train_tokens": getattr(datamodule, "train_tokens", None),
    })


def _event_of(run: FinishedRun) -> Event | None:
    """The event the run's KL was evaluated for: ``run.event``, else the data module's."""
    own = run.datamodule.event
    if run.event is None:
        return own
    if own is not None and run.event != own:
        raise ValueError(f"event {run.event} differs from the data module's event {own}")
    return run.event


def _default_config(model: nn.Module, datamodule: PFADataModule) -> dict[str, Any]:
    """``{"model": {"class_path", "init_args"}, "data": {...}}`` from the hyperparameters."""
    cls = type(model)
    return {
        "model": {
            "class_path": f"{cls.__module__}.{cls.__qualname__}",
            "init_args": dict(getattr(model, "hparams", {})),
        },
        "data": dict(datamodule.hparams),
    }


def _event_counts(
    datamodule: PFADataModule,
    event: Event | None,
    occurrences: Mapping[str, Mapping[str, int]],
    expected: Mapping[str, float],
) -> tuple[int | None, int | None, float | None]:
    """``(realized_count, realized_strings, expected_count)`` of ``event`` in the training corpus
    (the data module's own values for its event; else read from ``occurrences``)."""
    if event is None:
        return None, None, None
    if event == datamodule.event:
        return datamodule.realized_count, datamodule.realized_strings, datamodule.expected_count
    spec = str(event)
    return (
        occurrences["count"].get(spec, 0), occurrences["strings"].get(spec, 0),
        expected.get(spec, 0.0),
    )
