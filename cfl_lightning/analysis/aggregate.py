"""Gather ``results.json`` files (or W&B runs), keep the best repeat, and build the curves.

The paper's recipe (section "Case Studies in Three Settings" and appendix "Error bars"):

* per (automaton, architecture, intervention, target, count) keep the repeat with the lowest
  total KL (:func:`best_of_repeats`), so that training-run variance does not confound the
  comparison;
* **causal** runs (``intervention != "none"``) are grouped by their requested count: one curve
  point per count, mean +- one standard error over automata;
* **correlational** runs (``intervention == "none"``) are placed at their *realized* count and
  binned (:func:`bin_edges`); each bin gets its own mean and standard error.

An unconstrained run records every event's realized counts and decomposed KL
(``occurrences``, ``kl``), so one correlational run serves every target
(:func:`expand_correlational`).

Exact-count runs count total occurrences of the target; at-least-once runs count training
strings that contain it. The two have different x axes (``x_kind`` ``"occurrences"`` /
``"strings"``); a correlational curve on the ``"strings"`` axis needs the runs' realized string
counts (``realized_strings``), when the results hold them. Correlational curves are drawn on the
axes of the target's causal runs (both when it has both kinds; on occurrences when it has none).

The y axis defaults to ``kl_target_unweighted``: the paper's per-state / per-transition /
per-symbol contribution (eq. kl-state-main and appendix "Targeted KL Divergence via
Decomposition"), an average over the test positions at which the target is at stake.
``kl_target`` is that contribution times its weight ``p_pi`` (the state's expected visits per
string), which in the correlational arm grows with the realized count and so couples y to x.

A target that the test strings never visit has an *unknown* contribution. Such runs are left
out, never scored 0: a run whose ``target_test_visits`` is below ``min_visits`` is excluded from
its curve (the same rule for causal and correlational runs), a null metric is left out, and in
older results (no ``target_test_visits``) a weighted value of exactly 0 beside a null unweighted
one -- the mark of an unvisited target -- is read as null.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from cfl_lightning.errors import CflError
from cfl_lightning.io import atomic_open
from cfl_lightning.sampling.intervention import COUNT_UNITS

__all__ = [
    "RunRecord",
    "CurveRow",
    "METRICS",
    "DEFAULT_METRIC",
    "SETTINGS",
    "BINNINGS",
    "record_from_results",
    "record_from_wandb",
    "load_results",
    "load_wandb_sweep",
    "best_of_repeats",
    "for_target",
    "expand_correlational",
    "default_targets",
    "bin_edges",
    "mean_sem",
    "curve_key",
    "VisitSplit",
    "split_by_visits",
    "quantity_name",
    "aggregate",
    "write_table",
]

METRICS = ("kl_target", "kl_target_unweighted", "kl_total")
# the paper's per-state / per-transition / per-symbol contribution (unweighted)
DEFAULT_METRIC = "kl_target_unweighted"
# intervention -> setting; the setting fixes the meaning of x.
SETTINGS = {
    "exact": "causal_exact",
    "at_least": "causal_at_least",
    "at_least_once": "causal_at_least_once",
    "none": "correlational",
}
# setting -> what x counts (the intervention's unit; the pure core's Intervention defines it)
X_KIND = {**{SETTINGS[k]: unit for k, unit in COUNT_UNITS.items()}, "correlational_strings": "strings"}
BINNINGS = ("quantile", "log", "linear")


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

    @property
    def setting(self) -> str:
        return SETTINGS.get(self.intervention, f"causal_{self.intervention}")


@dataclass(frozen=True)
class CurveRow:
    """One plotted point: a count (causal) or a bin (correlational) of one curve."""

    target: str
    model: str
    setting: str
    x_kind: str
    num_strings: int | None
    x: float
    x_min: float
    x_max: float
    mean: float
    sem: float
    n: int
    # which value is plotted: the results key and the paper's name for it
    metric: str = DEFAULT_METRIC
    quantity: str = ""
    # runs of this curve (all its points) left out: below --min-visits, and without a value
    excluded_min_visits: int = 0
    no_value: int = 0


# --------------------------------------------------------------------------- parsing


def _float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    if isinstance(value, str) and value.strip().lower() in ("", "null", "none"):
        return None
    value = _float(value)
    return None if value is None else int(round(value))


def _str(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    # "None" is how ``wandb agent`` writes a Python None; lower-case "none" is an intervention
    return None if text.strip() in ("", "null", "None") else text


def _model_name(value: Any) -> str | None:
    if isinstance(value, Mapping):
        value = value.get("class_path")
    if not isinstance(value, str) or not value:
        return None
    return value.rsplit(".", 1)[-1]


def record_from_results(data: Mapping[str, Any], source: str) -> RunRecord:
    """A :class:`RunRecord` from a ``results.json`` dict.

    Raises:
        CflError: a required key (``model``, ``intervention``, ``automaton_id`` or
            ``automaton``) is missing.
    """
    if not isinstance(data, Mapping):
        raise CflError(f"{source}: not a JSON object")
    model = _model_name(data.get("model"))
    intervention = _str(data.get("intervention"))
    ident = data.get("automaton_id")
    if not ident and isinstance(data.get("automaton"), Mapping):
        from cfl_lightning.results import automaton_id

        ident = automaton_id(data["automaton"])
    missing = [
        k
        for k, v in (("model", model), ("intervention", intervention), ("automaton_id", ident))
        if not v
    ]
    if missing:
        raise CflError(f"{source}: missing {', '.join(missing)}")
    visits = _int(data.get("target_test_visits"))
    weighted, unweighted = _known(
        _float(data.get("kl_target")), _float(data.get("kl_target_unweighted")), visits
    )
    return RunRecord(
        source=source,
        model=model,
        intervention=intervention,
        event=_str(data.get("event")),
        count=_int(data.get("count")),
        realized_count=_int(data.get("realized_count")),
        num_strings=_int(data.get("num_strings")),
        automaton_id=str(ident),
        kl_total=_float(data.get("kl_total")),
        kl_target=weighted,
        kl_target_unweighted=unweighted,
        realized_strings=_int(data.get("realized_strings")),
        seed=_int(data.get("seed")),
        target_test_visits=visits,
        occurrences=_occurrences(data.get("occurrences")),
        target_kl=_target_kl(data.get("kl"), data.get("kl_unweighted")),
        test_visits=_test_visits(data.get("test_visits")),
    )


def _known(
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


def _test_visits(value: Any) -> dict[str, int | None] | None:
    """``{spec: n}`` (or ``{kind: {name: n}}``) -> ``{spec: n}``."""
    if not isinstance(value, Mapping):
        return None
    out: dict[str, int | None] = {}
    for key, item in value.items():
        if isinstance(item, Mapping):
            out.update({f"{key}:{name}": _int(n) for name, n in item.items()})
        else:
            out[str(key)] = _int(item)
    return out or None


def _occurrences(value: Any) -> dict[str, tuple[int | None, int | None]] | None:
    """``{"count": {spec: n}, "strings": {spec: m}}`` -> ``{spec: (n, m)}``."""
    if not isinstance(value, Mapping):
        return None
    counts = value.get("count") if isinstance(value.get("count"), Mapping) else {}
    strings = value.get("strings") if isinstance(value.get("strings"), Mapping) else {}
    out = {str(k): (_int(counts.get(k)), _int(strings.get(k))) for k in {*counts, *strings}}
    return out or None


def _target_kl(
    weighted: Any, unweighted: Any
) -> dict[str, tuple[float | None, float | None]] | None:
    """``{"state": {name: v}, ...}`` (weighted and unweighted) -> ``{"state:name": (w, u)}``."""
    if not isinstance(weighted, Mapping):
        return None
    unweighted = unweighted if isinstance(unweighted, Mapping) else {}
    out = {}
    for kind, values in weighted.items():
        if not isinstance(values, Mapping):
            continue
        other = unweighted.get(kind) if isinstance(unweighted.get(kind), Mapping) else {}
        for name, value in values.items():
            out[f"{kind}:{name}"] = _known(_float(value), _float(other.get(name)))
    return out or None


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

    model = _model_name(config.get("model_class")) or _model_name(_lookup(config, "model"))
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
        "num_strings": _lookup(config, "data.num_strings"),
        "automaton_id": ident,
        "seed": _lookup(config, "seed_everything"),
        "target_test_visits": get("target_test_visits"),
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


def load_results(directory: str | os.PathLike) -> tuple[list[RunRecord], list[str]]:
    """Every ``results.json`` below ``directory``: the records and one problem line per skip."""
    records, problems = [], []
    for path in sorted(Path(directory).rglob("results.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            records.append(record_from_results(data, str(path)))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            problems.append(f"{path}: {err}")
        except CflError as err:
            problems.append(str(err))
    return records, problems


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


# --------------------------------------------------------------------------- statistics


def best_of_repeats(records: Iterable[RunRecord]) -> list[RunRecord]:
    """The lowest-``kl_total`` run per (automaton, model, intervention, target, count, size).

    Runs without a finite ``kl_total`` lose to any run with one; ``repeats`` of the kept record is
    the group size.
    """
    groups: dict[tuple, list[RunRecord]] = defaultdict(list)
    for record in records:
        key = (
            record.automaton_id,
            record.model,
            record.intervention,
            record.event,
            record.count,
            record.num_strings,
        )
        groups[key].append(record)
    best = []
    for members in groups.values():
        chosen = min(
            members, key=lambda r: (r.kl_total is None, r.kl_total if r.kl_total is not None else 0)
        )
        best.append(replace(chosen, repeats=len(members)))
    return best


def for_target(record: RunRecord, target: str) -> RunRecord | None:
    """``record`` seen as a run about ``target``, or None when it holds nothing about it.

    A run about its own event is returned as is. An unconstrained (correlational) run that
    recorded every event's occurrences and decomposed KL is re-targeted: its realized counts,
    target KL and test visits (unknown unless the results hold ``test_visits``) become
    ``target``'s. A causal run is only about its intervened event.
    """
    if record.event == target:
        visits = (record.test_visits or {}).get(target)
        if record.target_test_visits is None and visits is not None:
            weighted, unweighted = _known(record.kl_target, record.kl_target_unweighted, visits)
            return replace(
                record,
                target_test_visits=visits,
                kl_target=weighted,
                kl_target_unweighted=unweighted,
            )
        return record
    if record.setting != "correlational" or not record.occurrences or not record.target_kl:
        return None
    if target not in record.occurrences or target not in record.target_kl:
        return None
    count, strings = record.occurrences[target]
    visits = (record.test_visits or {}).get(target)
    weighted, unweighted = _known(*record.target_kl[target], visits)
    return replace(
        record,
        event=target,
        realized_count=count,
        realized_strings=strings,
        kl_target=weighted,
        kl_target_unweighted=unweighted,
        target_test_visits=visits,
    )


def default_targets(records: Iterable[RunRecord]) -> list[str]:
    """The intervened events of the causal runs; without causal runs, the runs' own events."""
    records = list(records)
    causal = {r.event for r in records if r.setting != "correlational" and r.event is not None}
    if causal:
        return sorted(causal)
    return sorted({r.event for r in records if r.event is not None})


def expand_correlational(records: Iterable[RunRecord], targets: Sequence[str]) -> list[RunRecord]:
    """Causal runs about ``targets``, and every correlational run once per target it covers."""
    out = []
    for record in records:
        if record.setting != "correlational":
            if record.event in targets:
                out.append(record)
            continue
        for target in targets:
            view = for_target(record, target)
            if view is not None:
                out.append(view)
    return out


def mean_sem(values: Sequence[float]) -> tuple[float, float, int]:
    """Mean, standard error of the mean (sample std / sqrt(n); NaN for n < 2) and n."""
    arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = int(arr.size)
    if n == 0:
        return math.nan, math.nan, 0
    mean = float(arr.mean())
    sem = float(arr.std(ddof=1) / math.sqrt(n)) if n >= 2 else math.nan
    return mean, sem, n


def bin_edges(x: Sequence[float], bins: int, method: str = "quantile") -> np.ndarray:
    """Edges of at most ``bins`` bins covering ``x``.

    ``quantile``: equal-count bins (duplicate edges merged), ``log``: log-spaced between
    max(min(x), 1) and max(x) (smaller counts fall in the first bin), ``linear``: equal width.
    Always at least two edges; a single distinct value gives one bin.
    """
    arr = np.asarray(x, dtype=float)
    if arr.size == 0:
        raise ValueError("no values to bin")
    if method not in BINNINGS:
        raise ValueError(f"unknown binning {method!r}; expected one of {BINNINGS}")
    bins = max(int(bins), 1)
    lo, hi = float(arr.min()), float(arr.max())
    if hi <= lo:
        return np.array([lo, hi])
    if method == "quantile":
        edges = np.unique(np.quantile(arr, np.linspace(0.0, 1.0, bins + 1)))
    elif method == "log":
        edges = np.geomspace(max(lo, 1.0), hi, bins + 1) if hi > max(lo, 1.0) else np.array([hi])
        edges = np.unique(np.concatenate([[lo], edges[1:] if edges.size > 1 else edges]))
    else:
        edges = np.linspace(lo, hi, bins + 1)
    if edges.size < 2:
        edges = np.array([lo, hi])
    return edges


def _assign(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin index of each x: ``[e_i, e_{i+1})``, the last bin closed on the right."""
    return np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)


def _metric(record: RunRecord, metric: str) -> float | None:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
    return getattr(record, metric)


_KIND_NAMES = {"state": "per-state", "transition": "per-transition", "symbol": "per-symbol"}


def quantity_name(metric: str, target: str | None = None) -> str:
    """The paper's name of what ``metric`` measures for ``target``.

    ``kl_target_unweighted`` -> ``"per-state contribution"`` (``"per-transition ..."``,
    ``"per-symbol ..."``: eq. kl-state/transition/symbol-main), ``kl_target`` ->
    ``"p_pi-weighted per-state contribution"``, ``kl_total`` -> ``"total KL"``.
    """
    if metric == "kl_total":
        return "total KL"
    kind = (target or "").partition(":")[0]
    name = f"{_KIND_NAMES.get(kind, 'target')} contribution"
    return name if metric == "kl_target_unweighted" else f"p_pi-weighted {name}"


def curve_key(record: RunRecord) -> tuple[str | None, str, str, int | None]:
    """The curve a run belongs to: (target, model, setting, training strings)."""
    return (record.event, record.model, record.setting, record.num_strings)


@dataclass(frozen=True)
class VisitSplit:
    """Runs kept and left out by :func:`split_by_visits`.

    ``excluded`` and ``unknown`` count runs per :func:`curve_key`: below ``min_visits`` (left
    out), and without ``target_test_visits`` (kept: results written before the key existed).
    """

    kept: list[RunRecord]
    excluded: dict[tuple, int]
    unknown: dict[tuple, int]


def split_by_visits(records: Iterable[RunRecord], min_visits: int = 1) -> VisitSplit:
    """Leave out runs whose target the test strings visit fewer than ``min_visits`` times.

    The same rule for causal and correlational runs. A run with unknown visits is kept.
    """
    kept, excluded, unknown = [], defaultdict(int), defaultdict(int)
    for record in records:
        visits = record.target_test_visits
        if visits is None:
            unknown[curve_key(record)] += 1
        elif visits < min_visits:
            excluded[curve_key(record)] += 1
            continue
        kept.append(record)
    return VisitSplit(kept, dict(excluded), dict(unknown))


def aggregate(
    records: Iterable[RunRecord],
    *,
    metric: str = DEFAULT_METRIC,
    bins: int = 8,
    binning: str = "quantile",
    targets: Sequence[str] | None = None,
    min_visits: int = 1,
) -> list[CurveRow]:
    """The curve points: causal per count, correlational per realized-count bin.

    ``records`` should already be reduced with :func:`best_of_repeats`. Runs whose target the
    test strings visit fewer than ``min_visits`` times (:func:`split_by_visits`), runs without a
    finite ``metric`` (unknown, never 0) and correlational runs without a realized count are
    left out; each row says how many runs of its curve were left out for the first two reasons.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {METRICS}")
    records = [
        r for r in records if r.event is not None and (targets is None or r.event in targets)
    ]
    split = split_by_visits(records, min_visits)
    missing: dict[tuple, int] = defaultdict(int)
    usable = []
    for r in split.kept:
        if _metric(r, metric) is None:
            missing[curve_key(r)] += 1
        else:
            usable.append(r)
    causal: dict[tuple, list[float]] = defaultdict(list)
    corr: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    alo_events = {r.event for r in usable if r.setting == "causal_at_least_once"}
    # a correlational curve on the occurrences axis where causal runs of the target are drawn on
    # it, or where no causal run of the target is given (a correlational-only analysis)
    causal_events = {r.event for r in usable if r.setting != "correlational"}
    occurrence_events = {
        r.event
        for r in usable
        if r.setting != "correlational" and X_KIND.get(r.setting, "occurrences") == "occurrences"
    }
    for r in usable:
        value = _metric(r, metric)
        if r.setting == "correlational":
            on_occurrences = r.event in occurrence_events or r.event not in causal_events
            if r.realized_count is not None and on_occurrences:
                corr[(r.event, r.model, "correlational", r.num_strings)].append(
                    (r.realized_count, value)
                )
            if r.realized_strings is not None and r.event in alo_events:
                corr[(r.event, r.model, "correlational_strings", r.num_strings)].append(
                    (r.realized_strings, value)
                )
        elif r.count is not None:
            causal[(r.event, r.model, r.setting, r.num_strings, r.count)].append(value)

    def row(event, model, setting, k, x, lo, hi, stats) -> CurveRow:
        key = (event, model, "correlational" if setting.startswith("correlational") else setting, k)
        return CurveRow(
            event,
            model,
            setting,
            X_KIND.get(setting, "occurrences"),
            k,
            x,
            lo,
            hi,
            *stats,
            metric=metric,
            quantity=quantity_name(metric, event),
            excluded_min_visits=split.excluded.get(key, 0),
            no_value=missing.get(key, 0),
        )

    rows = []
    for (event, model, setting, k, count), values in causal.items():
        stats = mean_sem(values)
        if stats[2]:
            rows.append(row(event, model, setting, k, *(float(count),) * 3, stats))
    for (event, model, setting, k), pairs in corr.items():
        x = np.array([p[0] for p in pairs], dtype=float)
        y = np.array([p[1] for p in pairs], dtype=float)
        edges = bin_edges(x, bins, binning)
        index = _assign(x, edges)
        for b in range(len(edges) - 1):
            members = index == b
            if not members.any():
                continue
            stats = mean_sem(y[members].tolist())
            rows.append(
                row(
                    event,
                    model,
                    setting,
                    k,
                    float(x[members].mean()),
                    float(edges[b]),
                    float(edges[b + 1]),
                    stats,
                )
            )
    rows.sort(key=lambda r: (r.target, r.model, r.setting, r.num_strings or 0, r.x))
    return rows


def write_table(rows: Sequence[CurveRow], path: str | os.PathLike) -> None:
    """Write the curve points as CSV (atomically); NaN is written as an empty cell."""
    names = [f.name for f in fields(CurveRow)]

    def cell(value: Any) -> Any:
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return ""
        if isinstance(value, float):
            return f"{value:.6g}"
        return value

    with atomic_open(path, "w") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(names)
        for row in rows:
            writer.writerow([cell(getattr(row, name)) for name in names])
