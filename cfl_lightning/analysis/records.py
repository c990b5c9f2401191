"""One run's results as the analysis sees them (:class:`RunRecord`), and where they come from.

Sources: ``results.json`` files below a directory (:func:`load_results`), a W&B sweep through
the public API (:func:`load_wandb_sweep`), and JSON Lines files of results objects, one per line
(:func:`load_jsonl`), which :func:`write_jsonl` writes from records in a compact form: only the
keys the analysis reads, every event's maps cut down to the analysed targets, and the config cut
down to what identifies the point (:func:`slim_config`).

Reading is the results package's (:mod:`cfl_lightning.results`): which files lie below a
directory, how one is read, and each key's type (a key the analysis reads that holds a value of
the wrong type, ``count: "many"``, ``kl_total: [1]``, is a :class:`~cfl_lightning.errors.CflError`
naming the source and the key, never read as missing; ``null``, ``"null"``, ``"None"``, ``""``
and non-finite numbers, ``NaN`` as W&B writes it, are missing values).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cfl_lightning.errors import CflError
from cfl_lightning.io import atomic_open
from cfl_lightning.kinds.interventions import INTERVENTION_KINDS
from cfl_lightning.results import (
    OCCURRENCE_PART,
    FieldReader,
    ResultsFileError,
    automaton_id,
    read_results,
    split_view,
    results_files,
)

__all__ = [
    "RunRecord",
    "SETTINGS",
    "METRICS",
    "record_from_results",
    "record_from_wandb",
    "record_to_results",
    "as_entry",
    "kept_kinds",
    "slim_config",
    "known_contribution",
    "load_results",
    "load_wandb_sweep",
    "load_jsonl",
    "write_jsonl",
]

METRICS = ("kl_target", "kl_target_unweighted", "kl_total")
# intervention -> setting; the setting fixes the meaning of x (each kind's registry entry,
# live: a kind registered later is read too)
SETTINGS = INTERVENTION_KINDS.mapping("setting")


@dataclass(frozen=True)
class RunRecord:
    """The parts of one run's results that the analysis uses."""

    source: str
    model: str
    intervention: str
    event: str | None
    count: int | None
    realized_count: int | None
    num_strings: int | None
    automaton_id: str
    kl_total: float | None
    kl_target: float | None
    kl_target_unweighted: float | None
    realized_strings: int | None = None
    seed: int | None = None
    repeats: int = 1
    # test positions at which the target is at stake (null: unknown, e.g. older results.json)
    target_test_visits: int | None = None
    # symbols in the training corpus (null: unknown, e.g. results.json before train_tokens)
    train_tokens: int | None = None
    # the token target ``data.tokens`` of a token-matched run (its ``num_strings`` is the K
    # chosen, which differs per run): such runs form one curve per target T, not per K
    tokens: int | None = None
    # every event's (realized count, strings containing it) and (weighted, unweighted) KL, from
    # ``occurrences`` / ``kl`` / ``kl_unweighted``: lets one unconstrained run serve all targets
    occurrences: Mapping[str, tuple[int | None, int | None]] | None = field(
        default=None, compare=False, repr=False
    )
    target_kl: Mapping[str, tuple[float | None, float | None]] | None = field(
        default=None, compare=False, repr=False
    )
    # every event's test visits, from ``test_visits`` (``{spec: n}``), when the results hold it
    test_visits: Mapping[str, int | None] | None = field(default=None, compare=False, repr=False)
    # what identifies the run's point (:func:`slim_config`); only kept for exports
    config: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    # the run's non-target control, (weighted, unweighted): the mean over its other events of
    # its target's kind (:mod:`cfl_lightning.analysis.control`); set by the analysis, never read
    control: tuple[float | None, float | None] | None = field(
        default=None, compare=False, repr=False
    )

    @property
    def setting(self) -> str:
        return SETTINGS.get(self.intervention, f"causal_{self.intervention}")


# --------------------------------------------------------------------------- typed reading


def _seed(value: Any, reader: FieldReader) -> int | None:
    """``seed_everything`` may be a bool in a LightningCLI config (false: no seeding)."""
    return None if isinstance(value, bool) else reader.integer(value, "seed")


def _model_name(value: Any, reader: FieldReader) -> str | None:
    if isinstance(value, Mapping):
        value = value.get("class_path")
        key = "model.class_path"
    else:
        key = "model"
    value = reader.text(value, key)
    return value.rsplit(".", 1)[-1] if value else None


def known_contribution(
    weighted: float | None, unweighted: float | None, visits: int | None = None
) -> tuple[float | None, float | None]:
    """The target's (weighted, unweighted) contribution, null where it is unknown.

    Unknown: the test strings never visit the target (``visits == 0``), or -- in results written
    before ``target_test_visits`` existed -- a weighted contribution of exactly 0.0 beside a null
    unweighted one, which is how those scored an unvisited target.
    """
    if visits == 0 or (unweighted is None and weighted == 0.0):
        return None, None
    return weighted, unweighted


def _test_visits(value: Any, reader: FieldReader) -> dict[str, int | None] | None:
    """``{spec: n}`` (or ``{kind: {name: n}}``) -> ``{spec: n}``."""
    value = reader.mapping(value, "test_visits")
    if not value:
        return None
    out: dict[str, int | None] = {}
    for key, item in value.items():
        if isinstance(item, Mapping):
            out.update(
                {f"{key}:{n}": reader.integer(v, f"test_visits.{key}.{n}") for n, v in item.items()}
            )
        else:
            out[str(key)] = reader.integer(item, f"test_visits.{key}")
    return out or None


def _occurrences(
    value: Any, reader: FieldReader
) -> dict[str, tuple[int | None, int | None]] | None:
    """``{"count": {spec: n}, "strings": {spec: m}}`` -> ``{spec: (n, m)}``."""
    value = reader.mapping(value, "occurrences")
    if not value:
        return None
    parts = {}
    for part in OCCURRENCE_PART.values():
        table = reader.mapping(value.get(part), f"occurrences.{part}") or {}
        parts[part] = {
            str(k): reader.integer(v, f"occurrences.{part}.{k}") for k, v in table.items()
        }
    counts, strings = parts["count"], parts["strings"]
    out = {k: (counts.get(k), strings.get(k)) for k in sorted({*counts, *strings})}
    return out or None


def _target_kl(
    weighted: Any, unweighted: Any, reader: FieldReader
) -> dict[str, tuple[float | None, float | None]] | None:
    """``{"state": {name: v}, ...}`` (weighted and unweighted) -> ``{"state:name": (w, u)}``."""
    weighted = reader.mapping(weighted, "kl")
    unweighted = reader.mapping(unweighted, "kl_unweighted") or {}
    if not weighted:
        return None
    out = {}
    for kind, values in weighted.items():
        values = reader.mapping(values, f"kl.{kind}") or {}
        other = reader.mapping(unweighted.get(kind), f"kl_unweighted.{kind}") or {}
        for name, value in values.items():
            out[f"{kind}:{name}"] = known_contribution(
                reader.number(value, f"kl.{kind}.{name}"),
                reader.number(other.get(name), f"kl_unweighted.{kind}.{name}"),
            )
    return out or None


def slim_config(config: Any) -> dict[str, Any] | None:
    """What identifies a run's point in its config: ``seed_everything``, the scalar ``data``
    arguments and the model's class and scalar ``init_args`` (also flat ``data.X`` sweep keys).

    Trainer, logger and callback settings are dropped. None when nothing is left.
    """
    if not isinstance(config, Mapping):
        return None

    def scalars(node: Any) -> dict[str, Any]:
        if not isinstance(node, Mapping):
            return {}
        return {
            str(k): v for k, v in node.items() if v is None or isinstance(v, (str, int, float))
        }

    out: dict[str, Any] = {}
    for key, value in config.items():
        key = str(key)
        if key in ("seed_everything", "model_class") or key.startswith(("data.", "model.")):
            if value is None or isinstance(value, (str, int, float)):
                out[key] = value
        elif key == "data" and scalars(value):
            out["data"] = scalars(value)
        elif key == "model":
            if isinstance(value, Mapping):
                model = scalars(value)
                if scalars(value.get("init_args")):
                    model["init_args"] = scalars(value.get("init_args"))
                out["model"] = model
            elif isinstance(value, str):
                out["model"] = value
    return out or None


# --------------------------------------------------------------------------- records


def record_from_results(data: Mapping[str, Any], source: str) -> RunRecord:
    """A :class:`RunRecord` from a ``results.json`` dict.

    Raises:
        CflError: a required key (``model``, ``intervention``, ``automaton_id`` or
            ``automaton``) is missing, or a key the analysis reads has the wrong type (the
            message names ``source`` and the key).
    """
    if not isinstance(data, Mapping):
        raise CflError(f"{source}: not a JSON object")
    reader = FieldReader(source)
    model = _model_name(data.get("model"), reader)
    intervention = reader.text(data.get("intervention"), "intervention")
    ident = data.get("automaton_id")
    if isinstance(ident, int) and not isinstance(ident, bool):
        ident = str(ident)
    ident = reader.text(ident, "automaton_id")
    automaton = reader.mapping(data.get("automaton"), "automaton")
    if not ident and automaton:
        ident = automaton_id(automaton)
    missing = [
        k
        for k, v in (("model", model), ("intervention", intervention), ("automaton_id", ident))
        if not v
    ]
    if missing:
        raise CflError(f"{source}: missing {', '.join(missing)}")
    visits = reader.get(data, "target_test_visits")
    weighted, unweighted = known_contribution(
        reader.get(data, "kl_target"),
        reader.get(data, "kl_target_unweighted"),
        visits,
    )
    return RunRecord(
        source=source,
        model=model,
        intervention=intervention,
        event=reader.get(data, "event"),
        count=reader.get(data, "count"),
        realized_count=reader.get(data, "realized_count"),
        num_strings=reader.get(data, "num_strings"),
        automaton_id=ident,
        kl_total=reader.get(data, "kl_total"),
        kl_target=weighted,
        kl_target_unweighted=unweighted,
        realized_strings=reader.get(data, "realized_strings"),
        seed=_seed(data.get("seed"), reader),
        target_test_visits=visits,
        train_tokens=reader.get(data, "train_tokens"),
        tokens=_tokens(data.get("config")),
        occurrences=_occurrences(data.get("occurrences"), reader),
        target_kl=_target_kl(data.get("kl"), data.get("kl_unweighted"), reader),
        test_visits=_test_visits(data.get("test_visits"), reader),
        config=slim_config(data.get("config")),
    )


def _tokens(config: Any) -> int | None:
    """``data.tokens`` of a run's config (a token-matched run), else None."""
    if not isinstance(config, Mapping):
        return None
    value = _lookup(config, "data.tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _lookup(config: Mapping[str, Any], dotted: str) -> Any:
    """``config["a.b"]`` (a sweep parameter) or ``config["a"]["b"]`` (nested hparams)."""
    if dotted in config:
        value = config[dotted]
        return value.get("value") if isinstance(value, Mapping) and "value" in value else value
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def record_from_wandb(
    config: Mapping[str, Any], summary: Mapping[str, Any], source: str
) -> RunRecord:
    """A :class:`RunRecord` from a W&B run's config and summary.

    The training CLI logs the data module's arguments under ``data`` (or the sweep sets
    ``data.X``), the model class as ``model_class`` (or the sweep's ``model``), and
    ``realized_count``/``automaton_id`` as config; the test metrics ``kl_total``, ``kl_target``
    and ``kl_target_unweighted`` are in the summary.
    """

    def get(key: str) -> Any:
        for where in (summary, config):
            value = _lookup(where, key)
            if value is not None:
                return value
        return None

    model = config.get("model_class") or _lookup(config, "model")
    ident = get("automaton_id")
    if not ident:  # fall back to the automaton's generating arguments
        keys = (
            "automaton",
            "generator",
            "eta",
            "num_states",
            "num_symbols",
            "topology_seed",
            "weight_seed",
        )
        ident = "cfg:" + json.dumps([_lookup(config, f"data.{k}") for k in keys], default=str)
    data = {
        "model": model,
        "intervention": _lookup(config, "data.intervention"),
        "event": _lookup(config, "data.event"),
        "count": _lookup(config, "data.count"),
        "realized_count": get("realized_count"),
        "realized_strings": get("realized_strings"),
        "num_strings": get("train_strings") or _lookup(config, "data.num_strings"),
        "automaton_id": ident,
        "seed": _lookup(config, "seed_everything"),
        "target_test_visits": get("target_test_visits"),
        "train_tokens": get("train_tokens"),
        "config": config,
    }
    for metric in METRICS:
        data[metric] = _lookup(summary, metric)
        if data[metric] is None:
            data[metric] = _lookup(summary, f"test/{metric}")
    # per-event KL logged as kl/<kind>/<name> and kl_unweighted/<kind>/<name>
    nested: dict[str, dict[str, dict[str, Any]]] = {"kl": {}, "kl_unweighted": {}}
    for key, value in summary.items():
        head, _, rest = str(key).partition("/")
        if head in nested and "/" in rest:
            kind, name = rest.split("/", 1)
            nested[head].setdefault(kind, {})[name] = value
    data["kl"], data["kl_unweighted"] = nested["kl"] or None, nested["kl_unweighted"] or None
    data["occurrences"] = get("occurrences")
    data["test_visits"] = get("test_visits")
    return record_from_results(data, source)


# event kinds whose one entry sits under another kind's name in the results' maps: a pushdown
# automaton's ``class:STATE/TOP`` is its per-class ("state") entry ``state:STATE/TOP``
_KL_PART = {"class": "state"}


def as_entry(event: str) -> str:
    """The name of ``event``'s entry in a run's per-event maps (``class:q/(`` -> ``state:q/(``)."""
    kind, _, rest = event.partition(":")
    return f"{_KL_PART[kind]}:{rest}" if kind in _KL_PART else event


def kept_kinds(events: Iterable[str]) -> set[str]:
    """The kinds of per-event entries an export about ``events`` keeps: each event's own kind and
    the kind its entry sits under (``class:q/(`` -> ``class`` and ``state``). Whole kinds, not
    single events: a target's non-target control reads the run's other events of its kind."""
    return {k for e in events for k in (e.partition(":")[0], as_entry(e).partition(":")[0])}


def record_to_results(record: RunRecord, events: Iterable[str] | None = None) -> dict[str, Any]:
    """The compact ``results.json`` object of ``record`` (what :func:`record_from_results` reads).

    Args:
        record: the run.
        events: keep the per-event maps (``occurrences``, ``kl``, ``kl_unweighted``,
            ``test_visits``) only for the kinds of these events (:func:`kept_kinds`; default:
            every event).

    Returns:
        A JSON-serializable dict that :func:`record_from_results` turns back into an equal
        record, with the same per-event values for the kept events.
    """
    keep = None if events is None else kept_kinds(events)

    def kept(table: Mapping[str, Any] | None) -> dict[str, Any]:
        return {k: v for k, v in (table or {}).items()
                if keep is None or k.partition(":")[0] in keep}

    out: dict[str, Any] = {
        "model": record.model,
        "intervention": record.intervention,
        "event": record.event,
        "count": record.count,
        "realized_count": record.realized_count,
        "realized_strings": record.realized_strings,
        "num_strings": record.num_strings,
        "automaton_id": record.automaton_id,
        "seed": record.seed,
        "kl_total": record.kl_total,
        "kl_target": record.kl_target,
        "kl_target_unweighted": record.kl_target_unweighted,
        "target_test_visits": record.target_test_visits,
    }
    if record.train_tokens is not None:
        out["train_tokens"] = record.train_tokens
    occurrences = kept(record.occurrences)
    if occurrences:
        out["occurrences"] = {
            "count": {k: v[0] for k, v in occurrences.items()},
            "strings": {k: v[1] for k, v in occurrences.items()},
        }
    target_kl = kept(record.target_kl)
    if target_kl:
        weighted: dict[str, dict[str, float | None]] = {}
        unweighted: dict[str, dict[str, float | None]] = {}
        for spec, (w, u) in target_kl.items():
            kind, _, name = spec.partition(":")
            weighted.setdefault(kind, {})[name] = w
            unweighted.setdefault(kind, {})[name] = u
        out["kl"], out["kl_unweighted"] = weighted, unweighted
    visits = kept(record.test_visits)
    if visits:
        out["test_visits"] = visits
    if record.config:
        out["config"] = record.config
    out["source"] = record.source
    return out


# --------------------------------------------------------------------------- sources


def _split_record(
    data: Mapping[str, Any], source: str, split: str
) -> RunRecord | None:
    """The record of ``data``'s ``split`` (:func:`~cfl_lightning.results.split_view`): None for
    a run without that split (``"long"`` without ``long_test``)."""
    try:
        view = split_view(data, split)
    except CflError as err:
        raise CflError(f"{source}: {err}") from None
    return None if view is None else record_from_results(view, source)


def load_results(
    directory: str | os.PathLike, *, split: str = "test"
) -> tuple[list[RunRecord], list[str]]:
    """Every ``results.json`` below ``directory`` (outside a point's earlier attempts,
    :func:`~cfl_lightning.results.results_files`): the records and one problem line per skip
    (unreadable, not JSON, a missing key or a wrong type, no such ``split``; each names its
    file). ``split``: ``"test"`` (the test set's values) or ``"long"`` (the length split's)."""
    records, problems = [], []
    for path in results_files(directory):
        try:
            record = _split_record(read_results(path), str(path), split)
            if record is None:
                problems.append(f"{path}: no {split} split (long_test is null)")
            else:
                records.append(record)
        except ResultsFileError as err:
            problems.append(f"{path}: {err}")
        except CflError as err:
            problems.append(str(err))
    return records, problems


def load_jsonl(
    path: str | os.PathLike, *, split: str = "test", problems: list[str] | None = None
) -> list[RunRecord]:
    """The records of a JSON Lines file, one results object per line (blank lines skipped).

    ``split``: ``"test"`` (the test set's values) or ``"long"`` (the length split's); a run
    without it is named in ``problems`` when given (as :func:`load_results` does), an error
    otherwise.

    Raises:
        CflError: a line is not JSON, not an object, lacks a required key or has a wrong type
            (one line naming ``FILE:LINE``), or the file is not UTF-8 text.
    """
    records = []
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                where = f"{os.fspath(path)}:{number}"
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as err:
                    raise CflError(f"{where}: not JSON ({err.msg}, column {err.colno})") from None
                if not isinstance(data, Mapping):
                    record_from_results(data, where)  # raises, naming the problem
                record = _split_record(data, where, split)
                if record is not None:
                    records.append(record)
                elif problems is None:
                    raise CflError(f"{where}: no {split} split (long_test is null)")
                else:
                    problems.append(f"{where}: no {split} split (long_test is null)")
    except UnicodeDecodeError as err:
        raise CflError(f"{os.fspath(path)}: not UTF-8 text ({err.reason})") from None
    return records


def write_jsonl(
    records: Iterable[RunRecord],
    path: str | os.PathLike,
    *,
    events: Iterable[str] | None = None,
    inputs: Iterable[str | os.PathLike] = (),
) -> int:
    """Write ``records`` as JSON Lines (:func:`record_to_results`, compact), atomically.

    Args:
        records: the runs, written in order.
        path: the output file.
        events: the events whose kinds of per-event values are kept (:func:`kept_kinds`; default:
            all).
        inputs: input files that ``path`` must not be.

    Returns:
        The number of lines written.
    """
    events = None if events is None else sorted(set(events))
    count = 0
    with atomic_open(path, "w", inputs=inputs) as handle:
        for record in records:
            line = json.dumps(
                record_to_results(record, events), separators=(",", ":"), allow_nan=False
            )
            handle.write(line + "\n")
            count += 1
    return count


def load_wandb_sweep(path: str, *, timeout: int = 30) -> tuple[list[RunRecord], list[str]]:
    """The finished runs of the W&B sweep ``ENTITY/PROJECT/SWEEP_ID`` (public API).

    Raises:
        CflError: W&B is switched off (``WANDB_MODE`` offline/disabled), no API key is
            configured, or the sweep cannot be read (one line).
    """
    from cfl_lightning.wandb_mode import has_wandb_credentials

    mode = os.environ.get("WANDB_MODE", "").lower()
    if mode in ("offline", "disabled", "dryrun"):
        raise CflError(
            f"cannot read W&B sweep {path}: WANDB_MODE={mode} (unset it to use the W&B API, "
            "or pass the run directories)"
        )
    if not has_wandb_credentials():
        raise CflError(
            f"cannot read W&B sweep {path}: no W&B API key (run `wandb login` or set WANDB_API_KEY)"
        )
    try:
        import wandb

        api = wandb.Api(timeout=timeout)
        runs = list(api.sweep(path).runs)
    except Exception as err:  # network, auth, not found: all reported in one line
        text = str(err).strip().splitlines()
        raise CflError(
            f"cannot read W&B sweep {path}: {type(err).__name__}: {text[0] if text else ''}"
        ) from None
    records, problems = [], []
    for run in runs:
        name = "/".join(str(p) for p in getattr(run, "path", [getattr(run, "id", "?")]))
        state = getattr(run, "state", "finished")
        if state != "finished":
            problems.append(f"{name}: state {state}")
            continue
        try:
            summary = dict(getattr(run, "summary", {}) or {})
            records.append(record_from_wandb(dict(run.config), summary, name))
        except CflError as err:
            problems.append(str(err))
    return records, problems
