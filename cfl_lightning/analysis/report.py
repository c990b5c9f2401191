"""The analysis pipeline behind ``python -m cfl_lightning analyze``: runs in, a report out.

* :func:`input_kind` and :func:`read_inputs`: what an input names (a run directory, a ``.jsonl``
  file of results, a W&B sweep) and every input's runs;
* :func:`resolve_targets`: the curves' targets (named, pooled ``KIND:*``, or the causal runs'
  events) and the concrete events behind them;
* :func:`export_selection`: the runs an ``--export-results`` file keeps;
* :func:`build_curves`: the curve points with their intervals and gaps
  (:func:`~cfl_lightning.analysis.aggregate.aggregate`), and what was left out;
* :func:`gap_table`: the text listing the causal points whose gap interval excludes no gap.

The command line (:mod:`cfl_lightning.cli.analyze`) parses the arguments, calls these and prints.
The constants it shows live here or where they are defined: :data:`METRICS`,
:data:`DEFAULT_METRIC`, :data:`BINNINGS`, :data:`FORMATS` and :func:`model_label`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from cfl_lightning.analysis.aggregate import (
    BINNINGS,
    DEFAULT_METRIC,
    METRICS,
    CurveRow,
    VisitSplit,
    aggregate,
    best_of_repeats,
    default_targets,
    expand_correlational,
    for_target,
    split_by_visits,
)
from cfl_lightning.analysis.control import with_controls
from cfl_lightning.analysis.plot import FORMATS, model_label
from cfl_lightning.analysis.pooling import concrete_targets, covers, pool_records
from cfl_lightning.analysis.records import RunRecord
from cfl_lightning.analysis.selection import seed_units
from cfl_lightning.errors import CflError

__all__ = [
    "METRICS",
    "DEFAULT_METRIC",
    "BINNINGS",
    "FORMATS",
    "model_label",
    "Inputs",
    "Curves",
    "input_kind",
    "read_inputs",
    "known_events",
    "resolve_targets",
    "export_selection",
    "build_curves",
    "gap_table",
    "did_table",
    "BOTH",
]

BOTH = "both"  # ``--metric both``: the paper's two readings, a panel each

_WANDB_PART = re.compile(r"[A-Za-z0-9_.-]+")


# --------------------------------------------------------------------------- inputs


def _sweep_path(text: str) -> str | None:
    """``ENTITY/PROJECT/SWEEP_ID`` (also from ``ENTITY/PROJECT/sweeps/SWEEP_ID``), else None."""
    parts = text.strip("/").split("/")
    if len(parts) == 4 and parts[2] == "sweeps":
        parts = [parts[0], parts[1], parts[3]]
    return "/".join(parts) if len(parts) == 3 and all(parts) else None


def input_kind(item: str) -> tuple[str, str]:
    """What an input names: ``("dir", path)``, ``("jsonl", path)`` or ``("wandb", sweep)``.

    A W&B sweep is ``ENTITY/PROJECT/SWEEP_ID`` (or ``ENTITY/PROJECT/sweeps/SWEEP_ID``): three
    names of letters, digits, ``_``, ``.`` and ``-``, no leading ``/``, ``.`` or ``~``, and a
    first part that is not a local directory. Anything else is a local path.

    Raises:
        CflError: a local path that does not exist, or is a file but not ``.jsonl``.
    """
    if os.path.isdir(item):
        return "dir", item
    if item.endswith(".jsonl") and os.path.isfile(item):
        return "jsonl", item
    if os.path.exists(item):
        raise CflError(f"{item}: not a directory nor a .jsonl file of results")
    sweep = _sweep_path(item)
    local = (
        item.startswith(("/", ".", "~"))
        or item.endswith(".jsonl")
        or os.path.isdir(item.split("/", 1)[0])
    )
    names = sweep.split("/") if sweep else []
    if names and not local and all(_WANDB_PART.fullmatch(p) and p.strip(".") for p in names):
        return "wandb", sweep
    raise CflError(
        f"{item}: no such directory or file (a W&B sweep is written ENTITY/PROJECT/SWEEP_ID)"
    )


@dataclass(frozen=True)
class Inputs:
    """Every input's runs, one line per skipped run (``problems``) and the ``.jsonl`` inputs
    (which an export must not overwrite)."""

    records: list[RunRecord]
    problems: list[str] = field(default_factory=list)
    jsonl: list[str] = field(default_factory=list)


def read_inputs(inputs: Sequence[str], *, split: str = "test") -> Inputs:
    """Read every input (each checked by :func:`input_kind` before any is read), the values of
    ``split`` (``"test"``, or ``"long"``: the length split's; a run without it is skipped and
    named; a W&B sweep has only ``"test"``).

    Raises:
        CflError: an input that does not exist, a bad ``.jsonl`` line, an unreadable W&B sweep.
    """
    from cfl_lightning.analysis.records import load_jsonl, load_results, load_wandb_sweep

    records, problems, jsonl = [], [], []
    for kind, path in [input_kind(item) for item in inputs]:
        if kind == "dir":
            found, skipped = load_results(path, split=split)
        elif kind == "jsonl":
            skipped = []
            found = load_jsonl(path, split=split, problems=skipped)
            jsonl.append(path)
        elif split != "test":
            raise CflError(f"{path}: a W&B sweep's runs hold the test split only (--split {split})")
        else:
            found, skipped = load_wandb_sweep(path)
        records += found
        problems += skipped
    return Inputs(records, problems, jsonl)


# --------------------------------------------------------------------------- selection


def known_events(records: Sequence[RunRecord]) -> set[str]:
    """Every event a run is about or records occurrences of."""
    known = {r.event for r in records if r.event is not None}
    for r in records:
        known.update(r.occurrences or ())
    return known


def resolve_targets(
    records: Sequence[RunRecord], targets: Sequence[str] | None
) -> tuple[list[str], list[str]]:
    """The curves' targets (``targets``, or :func:`default_targets`) and the concrete events
    behind them (a pooled ``KIND:*`` target: every known event of its kind).

    Raises:
        CflError: a target that no run is about.
    """
    targets = list(targets or default_targets(records))
    known = known_events(records)
    unknown = [t for t in targets if not any(covers(t, k) for k in known)]
    if unknown:
        raise CflError(
            f"no runs about target {unknown[0]}; found: {', '.join(sorted(known)) or 'none'}"
        )
    return targets, concrete_targets(targets, known)


def export_selection(
    records: Sequence[RunRecord], events: Sequence[str] | None
) -> tuple[list[RunRecord], str]:
    """The runs an export keeps, and how to say which: about ``events`` (a causal run about its
    event, a correlational run recording one of them), or every run (``events`` None).

    Raises:
        CflError: no run to export.
    """
    if events is None:
        about, what = list(records), "every run, every event"
    else:
        about = [
            r
            for r in records
            if r.event in events
            or (r.setting == "correlational" and any(for_target(r, t) for t in events))
        ]
        what = f"those about {', '.join(events)}"
    if not about:
        raise CflError(
            f"nothing to export: none of the {len(records)} run(s) is about {', '.join(events)}"
        )
    return about, what


# --------------------------------------------------------------------------- curves


@dataclass(frozen=True)
class Curves:
    """The curve points (``rows``), the runs about the targets after best-of-repeats and pooling
    (``about``), their split by test visits, the number of run/target points, and optionally
    ``(measure, Curves)`` of the other measure (shown beside pooled curves)."""

    rows: list[CurveRow]
    about: list[RunRecord]
    split: VisitSplit
    num_best: int
    other: tuple[str, Curves] | None = None


def build_curves(
    records: Sequence[RunRecord],
    targets: Sequence[str],
    events: Sequence[str],
    *,
    metric: str = DEFAULT_METRIC,
    bins: int = 8,
    binning: str = "quantile",
    edges: Sequence[float] | None = None,
    min_visits: int = 1,
    control: bool = False,
    unit: str = "automaton",
    x: str = "count",
    repeats: str = "best",
) -> Curves:
    """The curves of ``targets`` (:func:`resolve_targets`) from the runs read.

    With ``control``, each run about a concrete event gets its non-target control
    (:func:`~cfl_lightning.analysis.control.with_controls`) and each row its ``did``. With
    ``unit="seed"`` the runs must be of one automaton and every interval is over training seeds
    (:func:`~cfl_lightning.analysis.selection.seed_units`). ``repeats``: ``best`` keeps the best
    repeat of a corpus, ``mean`` one run per training seed, averaged per automaton
    (:func:`~cfl_lightning.analysis.selection.best_of_repeats`).

    Raises:
        CflError: no point to plot (the message says how many runs were left out, and why), or
            ``unit="seed"`` on runs of several automata.
    """
    if unit == "seed":
        records = seed_units(records)
    about_events = expand_correlational(records, events)
    if control:
        about_events = with_controls(about_events, min_visits)
    best = pool_records(best_of_repeats(about_events, repeats), targets)
    about = [r for r in best if r.event in targets]
    split = split_by_visits(about, min_visits)
    rows = aggregate(
        best, metric=metric, bins=bins, binning=binning, targets=targets,
        min_visits=min_visits, edges=edges, control=control, unit=unit, x=x,
    )
    if not rows:
        valueless = sum(getattr(r, metric) is None for r in split.kept)
        raise CflError(
            f"nothing to plot: {len(about)} run/target point(s) about {', '.join(targets)}; "
            f"{sum(split.excluded.values())} below --min-visits {min_visits}, "
            f"{valueless} without a value of {metric}"
        )
    return Curves(rows, about, split, len(best))


def gap_table(rows: Sequence[CurveRow]) -> str:
    """Text: how many causal points have a gap interval, and those that exclude no gap."""
    from cfl_lightning.analysis.stats import GAP_FACTOR, excludes_no_gap

    with_gap = [r for r in rows if r.gap_kind is not None]
    with_interval = [r for r in with_gap if math.isfinite(r.gap_ci_low)]
    shown = [r for r in with_interval if excludes_no_gap(r.gap_kind, r.gap_ci_low, r.gap_ci_high)]
    factor = "sqrt2" if math.isclose(GAP_FACTOR, math.sqrt(2.0)) else f"{GAP_FACTOR:.3g}"
    head = (
        f"gap at each causal count N: causal mean vs the correlational runs with x in "
        f"[N/{factor}, N*{factor}] (ratio, or difference for signed quantities), "
        f"95% interval over automata\n"
        f"{len(with_gap)} causal point(s) have such runs, {len(with_interval)} an interval; "
        f"{len(shown)} exclude no gap (ratio 1, difference 0)"
    )
    if not shown:
        return head + "\n"
    table = [("target", "model", "setting", "N", "kind", "gap", "95% interval", "n", "gap_n")]
    for r in shown:
        table.append((
            r.target, model_label(r.model), r.setting, f"{r.x:g}", r.gap_kind, f"{r.gap:.3g}",
            f"[{r.gap_ci_low:.3g}, {r.gap_ci_high:.3g}]", str(r.n), str(r.gap_n),
        ))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in table]
    return head + ":\n" + "\n".join(lines) + "\n"


def did_table(rows: Sequence[CurveRow]) -> str:
    """Text: every point's non-target control and ``did`` (target minus control) with its 95%
    interval over automata (the rows' unit), causal points first; four decimals."""
    from cfl_lightning.analysis.labels import causal_settings

    shown = [r for r in rows if r.did_n is not None]
    order = {s: i for i, s in enumerate(causal_settings())}
    shown.sort(key=lambda r: (r.target, r.model, order.get(r.setting, 99), r.setting,
                              r.num_strings or 0, r.x))
    seeds = any(r.unit == "seed" for r in rows)
    each, over = ("training seed", "training seeds") if seeds else ("automaton", "automata")
    head = (
        "non-target control: per run, the mean of the same measure over the run's other events "
        "of the target's kind with a test visit (EOS excluded); did = target - control, averaged "
        f"per {each} first, 95% t-interval over {over}; a causal point at its count N, a "
        "correlational bin at its mean x\n"
    )
    table = [("target", "model", "setting", "x", "target mean", "control", "did",
              "95% interval", "n")]
    for r in shown:
        table.append((
            r.target, model_label(r.model), r.setting, f"{r.x:g}", _cell(r.mean),
            _cell(r.control), _cell(r.did), f"[{_cell(r.did_ci_low)}, {_cell(r.did_ci_high)}]",
            str(r.did_n),
        ))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in table]
    return head + "\n".join(lines) + "\n" + _without_control(shown)


def _without_control(rows: Sequence[CurveRow]) -> str:
    """One line per target none of whose points has a control, saying why it may have none."""
    missing = sorted({r.target for r in rows} - {r.target for r in rows if math.isfinite(r.control)})
    return "".join(
        f"{target}: no run has a control: none records another {target.partition(':')[0]}: "
        "event with a known value and a test visit (push: and pop: entries are in results.json "
        "only since 2026-11-29; runs written before have none)\n"
        for target in missing
    )


def _cell(value: float) -> str:
    """Four decimals, signed; ``-`` without a value."""
    return f"{value:+.4f}" if math.isfinite(value) else "-"
