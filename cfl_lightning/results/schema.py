"""The ``results.json`` schema: every key, its type and what its ``null`` means, in file order.

This table is the one place of the format: the writer orders and checks its keys by it
(:func:`~cfl_lightning.results.writer.ordered`), the reader types its values by it
(:class:`~cfl_lightning.results.reader.FieldReader`), :func:`type_problems` checks a file
against it, and ``docs/reference.md`` shows it (:func:`markdown_table`, checked by
``tests/test_results_schema.py``). Pure Python: the sweep
runner, which imports no torch, reads results files through the same package.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "RESULTS",
    "Field",
    "FIELDS",
    "RESULT_KEYS",
    "TYPES",
    "OCCURRENCE_PART",
    "LONG_SPLIT_KEYS",
    "field",
    "type_problems",
    "automaton_id",
    "markdown_table",
]

#: the file name of a run's results
RESULTS = "results.json"

#: the JSON types of the schema (``"number"`` also holds integers)
TYPES = ("object", "string", "integer", "number", "boolean")

#: ``count_unit`` -> the part of ``occurrences`` that counts in that unit
OCCURRENCE_PART = {"occurrences": "count", "strings": "strings"}

_NO_EVENT = "without an event"
_NOT_TRAINED = "for a test run without training in the same process"
_NO_KL = "without a test KL (no `DecomposedKLCallback`, no test strings)"


@dataclass(frozen=True)
class Field:
    """One key of ``results.json``.

    Attributes:
        name: the key.
        type: its JSON type (one of :data:`TYPES`).
        meaning: what it holds.
        null: when it is ``null`` (``""``: never).
    """

    name: str
    type: str
    meaning: str
    null: str = ""


FIELDS: tuple[Field, ...] = (
    Field("config", "object", "the run's full config (LightningCLI's, as JSON)"),
    Field("model", "string", "the model's class name"),
    Field("intervention", "string", "the corpus's intervention kind (`none`: unconstrained)"),
    Field("event", "string", "the evaluated event (`state:Q`, `symbol:S`, `transition:Q:S`)",
          _NO_EVENT),
    Field("count", "integer", "the requested count, in `count_unit`", "without a count"),
    Field("realized_count", "integer", "the event's occurrences in the training corpus",
          _NO_EVENT),
    Field("expected_count", "number", "`num_strings` x E[occurrences per unconstrained string]",
          _NO_EVENT),
    Field("num_strings", "integer", "training strings (with `data.tokens`: the K chosen)"),
    Field("num_parameters", "integer", "the model's trainable parameters"),
    Field("seed", "integer", "`seed_everything` (model init, dropout; the corpus's seed is "
          "`config.data.seed`)", "when the run was not seeded"),
    Field("automaton", "object", "the automaton (interchange JSON)"),
    Field("automaton_id", "string", "first 16 hex digits of the sha256 of the canonical "
          "automaton JSON"),
    Field("kl_total", "number", "KL(p_A \\|\\| p_theta), nats per string, on the test strings "
          "(best checkpoint)", _NO_KL + ", or not finite"),
    Field("kl_target", "number", "the event's contribution to `kl_total` (nats per string)",
          "without an event, or when the test strings never visit it (unknown, never 0)"),
    Field("kl_target_unweighted", "number", "the same, per visit", "as `kl_target`, or "
          "undefined"),
    Field("kl", "object", "`{\"state\", \"symbol\", \"transition\"}` -> name -> contribution "
          "(a value is null where unvisited or undefined); a pushdown run also `\"push\"` and "
          "`\"pop\"` -> stack symbol -> the contribution of the steps that push / pop it (the "
          "sum of their transitions; unweighted: per step taken), since 2026-11-29", _NO_KL),
    Field("kl_unweighted", "object", "the same, per visit", _NO_KL),
    Field("best_val_loss", "number", "the best `val/kl_per_string`", "without validation"),
    Field("epochs", "integer", "completed training epochs", _NOT_TRAINED),
    Field("train_time_s", "number", "wall time of `fit` (a resumed fit's counts the earlier "
          "attempts' up to its checkpoint)", _NOT_TRAINED),
    Field("log_dir", "string", "the run's log directory"),
    Field("realized_strings", "integer", "training strings containing the event", _NO_EVENT),
    Field("occurrences", "object", "`{\"count\": {spec: n}, \"strings\": {spec: m}}` for every "
          "event of the training corpus"),
    Field("expected_occurrences", "object", "`{spec: num_strings x E[n]}`"),
    Field("target_test_visits", "integer", "test positions at which the event is at stake",
          "without an event, or visits unknown"),
    Field("test_visits", "object", "the same for every event, shaped like `kl`",
          "visits unknown"),
    Field("stopped_early", "boolean", "whether early stopping ended training", _NOT_TRAINED),
    Field("steps", "integer", "optimizer steps", _NOT_TRAINED),
    Field("expected_strings", "number", "`num_strings` x P(an unconstrained string contains the "
          "event)", _NO_EVENT),
    Field("count_unit", "string", "the unit of `count`: `strings` (`at_least_once`: strings "
          "containing the event) or `occurrences`"),
    Field("train_time_resumed_s", "number", "the part of `train_time_s` after resuming",
          "when the fit did not resume or did not run"),
    Field("long_test", "object", "the long split (`data.long_min_length`): `min_length`, "
          "`num_strings`, its plain per-string means `kl_per_string`, `kl_per_token`, "
          "`ce_per_string`, and `kl_total`, `kl_target`, `kl_target_unweighted`, `kl`, "
          "`kl_unweighted`, `target_test_visits`, `test_visits` as above, their per-visit "
          "averages from its strings", "without a long split, or without a test KL"),
    Field("train_tokens", "integer", "symbols in the training corpus (EOS excluded; with "
          "`data.tokens`, within 1% of it)", "for a data module without `train_tokens` (yours)"),
)

#: the keys of the ``long_test`` object besides the KL entries, in file order
LONG_SPLIT_KEYS = ("min_length", "num_strings", "kl_per_string", "kl_per_token", "ce_per_string")

#: the keys of ``results.json``, in file order
RESULT_KEYS: tuple[str, ...] = tuple(f.name for f in FIELDS)
_BY_NAME = {f.name: f for f in FIELDS}


def field(name: str) -> Field:
    """The :class:`Field` of key ``name``.

    Raises:
        KeyError: not a ``results.json`` key.
    """
    return _BY_NAME[name]


def automaton_id(automaton: Mapping[str, Any]) -> str:
    """First 16 hex digits of the sha256 of the canonical JSON (sorted keys, compact)."""
    text = json.dumps(automaton, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "string": (str,), "integer": (int,), "number": (int, float),
    "boolean": (bool,),
}


def type_problems(data: Mapping[str, Any]) -> list[str]:
    """What in the parsed ``results.json`` object ``data`` departs from the schema: a missing
    or unknown key, a value of another type, a null where the key is never null (``[]``: none).
    """
    problems = [f"missing {k}" for k in RESULT_KEYS if k not in data]
    problems += [f"unknown key {k}" for k in data if k not in _BY_NAME]
    for key, value in data.items():
        spec = _BY_NAME.get(key)
        if spec is None:
            continue
        if value is None:
            if not spec.null:
                problems.append(f"{key} is null (never null)")
        elif isinstance(value, bool) != (spec.type == "boolean") or not isinstance(
            value, _PYTHON_TYPES[spec.type]
        ):
            problems.append(f"{key}: expected {spec.type}, got {type(value).__name__}")
    return problems


def markdown_table() -> str:
    """The schema as the Markdown table of ``docs/reference.md`` (one row per key)."""
    rows = ["| key | type | holds | null |", "|---|---|---|---|"]
    rows += [f"| `{f.name}` | {f.type} | {f.meaning} | {f.null or 'never'} |" for f in FIELDS]
    return "\n".join(rows) + "\n"
