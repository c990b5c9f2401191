"""``results.json``: one training run's outcome, in the format of ``docs/internal_contract.md``.

Written by :class:`~cfl_lightning.callbacks.ResultsWriter` at the end of a test run (``python -m
cfl_lightning fit`` tests the best checkpoint and writes it into the run's log directory). Keys (:data:`RESULT_KEYS`):

* ``config``: the full LightningCLI config of the run (JSON);
* ``model``: the model's class name (``LSTMLanguageModel``, ``TransformerLanguageModel`` or a
  user's class);
* ``intervention``, ``event`` (str or null), ``count`` (requested, or null): the data's settings;
* ``realized_count`` (event occurrences in the training corpus, or null without an event) and
  ``expected_count`` (``num_strings`` times the expected occurrences per unconstrained string);
* ``num_strings`` (training strings), ``num_parameters`` (the model's actual count);
* ``seed``: the run's ``seed_everything`` value (model init, dropout); the sampling seed of the
  data is ``config["data"]["seed"]``;
* ``automaton`` (JSON interchange dict) and ``automaton_id`` (first 16 hex digits of the sha256
  of the canonical automaton JSON);
* ``kl_total``: the decomposed KL estimate of ``KL(p_A || p_theta)`` in nats per string on the
  test strings, with the restored best checkpoint;
* ``kl_target`` / ``kl_target_unweighted``: the intervened event's weighted / unweighted
  contribution (null without an event);
* ``kl`` / ``kl_unweighted``: ``{"state": {name: v}, "symbol": {name|"EOS": v},
  "transition": {"SOURCE:SYM": v}}`` (NaN -> null);
* ``best_val_loss`` (best ``val/kl_per_string``), ``epochs`` (completed training epochs),
  ``train_time_s`` (wall time of ``fit``, without the final test; ``epochs`` and ``train_time_s``
  are null for a test run without training in the same process; a resumed fit's
  ``train_time_s`` also counts the earlier attempts' time, up to the checkpoint it resumed
  from), ``log_dir``;
* ``realized_strings``: training strings containing the event (the x-axis of at-least-once
  interventions; null without an event);
* ``target_test_visits``: test positions at which the event is at stake (positions in its
  state; for symbol and transition events, positions in states where it has positive
  probability), null without an event; ``test_visits``: the same for every event, nested like
  ``kl``. A target with no test visit has an unknown contribution: its ``kl_target``,
  ``kl_target_unweighted`` and ``kl``/``kl_unweighted`` entries are null, never 0;
* ``stopped_early`` (whether early stopping ended training), ``steps`` (optimizer steps), both
  null for a test run without training in the same process;
* ``expected_strings``: ``num_strings`` x P(an unconstrained string contains the event), the
  natural value of an ``at_least_once`` count (null without an event); ``count_unit``:
  ``"strings"`` (``at_least_once``: ``count`` counts strings containing the event) or
  ``"occurrences"`` (every other intervention). ``realized_count`` and ``expected_count`` are
  always occurrences, ``realized_strings`` and ``expected_strings`` always strings;
* ``occurrences``: ``{"count": {spec: n}, "strings": {spec: m}}`` for every ``state:``,
  ``symbol:`` and ``transition:`` event in the training corpus, and ``expected_occurrences``
  (``{spec: num_strings x E[n]}``), so one unconstrained (correlational) run serves every target;
* ``train_time_resumed_s``: the part of ``train_time_s`` spent after resuming from a
  checkpoint (``fit --ckpt_path``); null when the fit did not resume or did not run.

Non-finite floats are written as ``null`` so that the file is strict JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfl_lightning.io import atomic_write_text

if TYPE_CHECKING:
    from torch import Tensor, nn

    from cfl_lightning.automata import Event
    from cfl_lightning.data import PFADataModule


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters of ``module`` (``results.json``'s ``num_parameters``, and
    what models are sized by; works on ``meta``-device modules too)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


__all__ = [
    "RESULT_KEYS", "FinishedRun", "automaton_id", "build_results", "write_results", "json_safe",
    "count_parameters",
]

RESULT_KEYS = (
    "config",
    "model",
    "intervention",
    "event",
    "count",
    "realized_count",
    "expected_count",
    "num_strings",
    "num_parameters",
    "seed",
    "automaton",
    "automaton_id",
    "kl_total",
    "kl_target",
    "kl_target_unweighted",
    "kl",
    "kl_unweighted",
    "best_val_loss",
    "epochs",
    "train_time_s",
    "log_dir",
    "realized_strings",
    "occurrences",
    "expected_occurrences",
    "target_test_visits",
    "test_visits",
    "stopped_early",
    "steps",
    "expected_strings",
    "count_unit",
    "train_time_resumed_s",
)


def automaton_id(automaton: Mapping[str, Any]) -> str:
    """First 16 hex digits of the sha256 of the canonical JSON (sorted keys, compact)."""
    text = json.dumps(automaton, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def json_safe(value: Any) -> Any:
    """Recursively convert to JSON-ready values: tensors/numpy scalars to Python numbers,
    non-finite floats to None, paths to strings, tuples to lists."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return json_safe(value.tolist())
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def _float(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


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
        kl_result: the decomposed KL on the test strings (:meth:`DecomposedKL.compute`'s dict,
            e.g. :attr:`DecomposedKLCallback.test_result`), or None.
        best_val_loss: best ``val/kl_per_string``, or None.
        epochs: completed training epochs (None when the run did not train).
        train_time_s: wall time of training (None when the run did not train); a resumed
            fit's includes the earlier attempts' time.
        train_time_resumed_s: the part of ``train_time_s`` after resuming (None when the fit
            did not resume).
        seed: the run's ``seed_everything`` value.
        test_visits: ``[Q]`` test positions per state (e.g.
            :attr:`DecomposedKLCallback.test_visits`), or None (visits unknown).
        stopped_early: whether early stopping ended training (None when the run did not train).
        steps: optimizer steps taken (None when the run did not train).
        event: the event that ``kl_result`` was evaluated for (e.g.
            :attr:`DecomposedKLCallback.event`); default the data module's. Another event than
            the data module's is allowed only when the data module has none (its counts are
            then read from the corpus's ``occurrences``).
    """

    model: nn.Module
    datamodule: PFADataModule
    log_dir: str | os.PathLike
    config: Mapping[str, Any] | None = None
    kl_result: Mapping[str, Tensor] | None = None
    best_val_loss: float | None = None
    epochs: int | None = None
    train_time_s: float | None = None
    seed: int | None = None
    test_visits: Tensor | None = None
    stopped_early: bool | None = None
    steps: int | None = None
    event: Event | None = None
    train_time_resumed_s: float | None = None


def build_results(run: FinishedRun) -> dict[str, Any]:
    """Assemble the ``results.json`` dict of a finished run.

    Returns:
        a JSON-ready dict with exactly the keys :data:`RESULT_KEYS`, in that order.

    Raises:
        ValueError: ``run.event`` differs from the data module's own event.
    """
    from cfl_lightning.sampling.visits import containing_probability

    datamodule, model = run.datamodule, run.model
    intervention, pfsa = datamodule.intervention, datamodule.automaton
    event = _event_of(run)
    occurrences = datamodule.occurrences()
    expected = datamodule.expected_occurrences()
    realized_count, realized_strings, expected_count = _event_counts(
        datamodule, event, occurrences, expected
    )
    kl = _kl_entries(run, event)
    num_strings = datamodule.hparams["num_strings"]
    out = {
        "config": dict(_default_config(model, datamodule) if run.config is None else run.config),
        "model": type(model).__name__,
        "intervention": intervention.kind,
        "event": None if event is None else str(event),
        "count": intervention.count,
        "realized_count": realized_count,
        "expected_count": _float(expected_count),
        "num_strings": num_strings,
        "num_parameters": count_parameters(model),
        "seed": run.seed,
        "automaton": pfsa.to_dict(),
        "automaton_id": datamodule.automaton_id,
        "kl_total": kl["kl_total"],
        "kl_target": kl["kl_target"],
        "kl_target_unweighted": kl["kl_target_unweighted"],
        "kl": kl["kl"],
        "kl_unweighted": kl["kl_unweighted"],
        "best_val_loss": _float(run.best_val_loss),
        "epochs": None if run.epochs is None else int(run.epochs),
        "train_time_s": None if run.train_time_s is None else float(run.train_time_s),
        "log_dir": os.fspath(run.log_dir),
        "realized_strings": realized_strings,
        "occurrences": occurrences,
        "expected_occurrences": expected,
        "target_test_visits": kl["target_test_visits"],
        "test_visits": kl["test_visits"],
        "stopped_early": None if run.stopped_early is None else bool(run.stopped_early),
        "steps": None if run.steps is None else int(run.steps),
        "expected_strings": None if event is None else _float(
            num_strings * containing_probability(pfsa, event)
        ),
        "count_unit": intervention.unit,
        "train_time_resumed_s": _float(run.train_time_resumed_s),
    }
    assert tuple(out) == RESULT_KEYS
    return json_safe(out)


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


def _kl_entries(run: FinishedRun, event: Event | None) -> dict[str, Any]:
    """The KL values and test visits of ``results.json`` (None where unknown).

    Returns:
        ``kl_total``, ``kl_target``, ``kl_target_unweighted``, ``kl``, ``kl_unweighted``,
        ``target_test_visits`` and ``test_visits``.
    """
    from cfl_lightning.metrics import kl_nested_dict, target_values
    from cfl_lightning.sampling.visits import target_visits, visits_by_event

    pfsa, kl_result = run.datamodule.automaton, run.kl_result
    out: dict[str, Any] = dict.fromkeys(
        ("kl_total", "kl_target", "kl_target_unweighted", "kl", "kl_unweighted",
         "target_test_visits", "test_visits")
    )
    if run.test_visits is not None:
        out["test_visits"] = visits_by_event(pfsa, run.test_visits)
        if event is not None:
            out["target_test_visits"] = target_visits(pfsa, event, run.test_visits)
    if kl_result is not None:
        out["kl_total"] = _float(kl_result["total"])
        out["kl"] = _unknown_where_unvisited(kl_nested_dict(kl_result, pfsa), out["test_visits"])
        out["kl_unweighted"] = kl_nested_dict(kl_result, pfsa, unweighted=True)
        if event is not None and out["target_test_visits"] != 0:
            weighted, unweighted = target_values(kl_result, event, pfsa)
            out["kl_target"], out["kl_target_unweighted"] = _float(weighted), _float(unweighted)
    return out


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


def _unknown_where_unvisited(
    nested: dict[str, dict[str, float | None]], visits: dict[str, dict[str, int]] | None
) -> dict[str, dict[str, float | None]]:
    """Null (unknown) for every entry whose event the test strings never put at stake."""
    if visits is None:
        return nested
    return {
        kind: {
            name: None if visits.get(kind, {}).get(name, 1) == 0 else value
            for name, value in values.items()
        }
        for kind, values in nested.items()
    }


def write_results(path: str | os.PathLike, results: Mapping[str, Any]) -> Path:
    """Write ``results`` as indented strict JSON to ``path`` atomically; returns the path."""
    text = json.dumps(json_safe(results), indent=1, allow_nan=False) + "\n"
    atomic_write_text(path, text)
    return Path(path)
