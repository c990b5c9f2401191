"""The figure's words: axis labels, curve labels, panel titles and the legend's note on the marks.

Part of the curves figure (:mod:`cfl_lightning.analysis.plot`); no matplotlib here.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from collections.abc import Sequence

from cfl_lightning.analysis.aggregate import CurveRow, quantity_name
from cfl_lightning.analysis.stats import WIDE_FACTOR
from cfl_lightning.kinds.events import EVENT_KIND_REGISTRY, event_kind

__all__ = [
    "METRIC_LABELS",
    "X_LABELS",
    "HOLLOW_BELOW",
    "NOTE_PARTS",
    "BOTH_ROWS_NOTE",
    "WIDE_NOTE",
    "model_label",
    "target_title",
    "metric_label",
    "legend_note",
    "is_causal",
    "correlational_in_both_rows",
    "DID_QUANTITY",
    "DID_NOTE",
    "SEED_NOTE",
    "did_label",
    "reading_name",
    "unit_note",
]

# the quantity of a did panel's points (:func:`cfl_lightning.analysis.plot.did_rows`)
DID_QUANTITY = "target minus non-target control"
DID_NOTE = (
    "lower row: the target minus its non-target control (per run, the mean over the run's other "
    "events of the target's kind with a test visit), averaged per automaton; 0: the target "
    "learnt no better than the rest of the corpus"
)
# the figure's title line where the intervals are over training seeds (``analyze --unit seed``)
SEED_NOTE = (
    "95% intervals over the training seeds of one automaton (n: seeds); they do not "
    "generalize over automata"
)

# generic axis labels; :func:`metric_label` names the target's kind (state, transition, symbol)
METRIC_LABELS = {
    "kl_target": "p_π-weighted contribution of the target (nats/string)",
    "kl_target_unweighted": "contribution of the target (nats per visit)",
    "kl_total": "total KL (nats/string)",
}
X_LABELS = {
    "occurrences": "occurrences of the target in training",
    "strings": "training strings containing the target",
    "train_tokens": "symbols in the training corpus (train_tokens)",
}
HOLLOW_BELOW = 3  # points resting on fewer automata get hollow markers
# the legend note, one part per kind of mark (the bins' part only where there are bins)
NOTE_PARTS = (
    "vertical bars and bands: 95% intervals over automata",
    "horizontal bars: a bin's range of counts",
    "numbers: n (automata)",
    f"hollow markers: n < {HOLLOW_BELOW}",
)
_NOTE_CHARS_PER_INCH = 14  # at the note's 8 pt (about 16 characters an inch): a margin kept
BOTH_ROWS_NOTE = (
    "the same correlational runs appear in both rows: by occurrences, and by strings containing "
    "the target"
)
# where a point's interval is too wide to read (:func:`cfl_lightning.analysis.stats.too_wide`)
WIDE_NOTE = (
    f"dashed bars: intervals spanning more than {WIDE_FACTOR:g}x (or none: mean <= 0), "
    "too wide to read"
)


def model_label(model: str) -> str:
    """``LSTMLanguageModel`` -> ``LSTM``."""
    return model[: -len("LanguageModel")] if model.endswith("LanguageModel") else model


def target_title(event: str) -> str:
    """``state:odd`` -> ``state odd``; ``transition:q1:a`` -> ``transition q1 -a->``;
    ``symbol:*`` -> ``every symbol, pooled``."""
    kind, _, rest = event.partition(":")
    if rest == "*":
        return f"every {kind}, pooled"
    if not rest:
        return event
    return event_kind(kind).panel_title(rest) if kind in EVENT_KIND_REGISTRY else f"{kind} {rest}"


def metric_label(metric: str, target: str | None = None) -> str:
    """The y axis label: the paper's name of the quantity, with its unit.

    ``kl_target_unweighted`` of ``state:q`` -> ``per-state contribution (nats per visit)``: an
    average over the test positions at which the target is at stake; ``kl_target``
    -> ``p_π(q) × per-state contribution (nats/string)``.
    """
    if metric not in ("kl_target", "kl_target_unweighted") or not target:
        return METRIC_LABELS.get(metric, metric)
    name = quantity_name("kl_target_unweighted", target)
    if metric == "kl_target_unweighted":
        return f"{name} (nats per visit)"
    kind = target.partition(":")[0]
    weight = (event_kind(kind).weight if kind in EVENT_KIND_REGISTRY else "") or "p_π"
    return f"{weight} × {name} (nats/string)"


def did_label(label: str) -> str:
    """A did panel's y label from its reading's (:func:`metric_label`)."""
    return f"target − non-target control:\n{label}"


def reading_name(metric: str) -> str:
    """A panel title's name of the reading: ``unweighted``, ``p_π-weighted``, ``total KL``."""
    return {"kl_target_unweighted": "unweighted", "kl_target": "p_π-weighted"}.get(
        metric, METRIC_LABELS.get(metric, metric))


def unit_note(rows: Sequence[CurveRow]) -> str:
    """:data:`SEED_NOTE` where the intervals of ``rows`` are over training seeds, else ``""``."""
    return SEED_NOTE if any(r.unit == "seed" for r in rows) else ""


def legend_note(rows: Sequence[CurveRow], width: float) -> list[str]:
    """The legend's note, in lines that fit a figure ``width`` inches wide: what each mark is
    (:data:`NOTE_PARTS`; the bins' part where there are correlational bins; :data:`WIDE_NOTE`
    where an interval is too wide to read) and, where the same correlational runs are drawn in
    two rows, :data:`BOTH_ROWS_NOTE`."""
    parts = [p for i, p in enumerate(NOTE_PARTS)
             if i != 1 or any(not is_causal(r) for r in rows)]
    if any(r.ci_wide for r in rows):
        parts.append(WIDE_NOTE)
    if any(r.quantity == DID_QUANTITY for r in rows):
        parts.append(DID_NOTE)
    if unit_note(rows):  # the unit is the training seed: say so in every part that counts
        parts = [p.replace("automata", "training seeds") for p in parts]
    limit = max(30, int(width * _NOTE_CHARS_PER_INCH))
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + 2 + len(part) <= limit:
            lines[-1] += "; " + part
        else:
            lines += textwrap.wrap(part, limit)
    if correlational_in_both_rows(rows):
        lines += textwrap.wrap(BOTH_ROWS_NOTE, limit)
    return lines


def is_causal(row: CurveRow) -> bool:
    """Whether ``row`` is a causal point (not a correlational bin)."""
    return not row.setting.startswith("correlational")


def correlational_in_both_rows(rows: Sequence[CurveRow]) -> bool:
    """Whether the same correlational runs are drawn twice: for one target and architecture,
    by occurrences (``correlational``) and by strings containing it (``correlational_strings``)."""
    settings = defaultdict(set)
    for r in rows:
        settings[(r.target, r.model, r.num_strings)].add(r.setting)
    return any({"correlational", "correlational_strings"} <= s for s in settings.values())