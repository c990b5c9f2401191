"""What the analysis calls things, read from the kind registries (pure Python, no torch).

* a target's quantity (:func:`quantity_name`: ``per-state contribution``) and how its gap is
  measured (:func:`gap_kind`) and how a curve point's interval is (:func:`interval_method`),
  from its event kind (:mod:`cfl_lightning.kinds.events`);
* a setting's x axis (:func:`x_kind`: occurrences or strings), legend label and plot style
  (:func:`setting_label`, :func:`setting_style`), from the intervention kind whose runs it
  holds (:mod:`cfl_lightning.kinds.interventions`); ``correlational_strings`` is the
  correlational arm drawn on the strings axis.

A kind registered later is labelled as the built-in ones are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from cfl_lightning.kinds.events import EVENT_KIND_REGISTRY, event_kind
from cfl_lightning.kinds.interventions import INTERVENTION_KINDS, InterventionKind

__all__ = [
    "quantity_name",
    "gap_kind",
    "interval_method",
    "x_kind",
    "setting_label",
    "setting_style",
    "setting_order",
    "causal_settings",
    "CORRELATIONAL",
    "CORRELATIONAL_STRINGS",
]

CORRELATIONAL = "correlational"
#: the correlational arm on the strings axis (against a kind that counts strings)
CORRELATIONAL_STRINGS = "correlational_strings"
_UNKNOWN_STYLE = ("--", "x", 0.10)


def _of_setting(setting: str) -> InterventionKind | None:
    """The intervention kind whose runs form ``setting`` (the correlational arm's for both
    correlational settings), or None."""
    setting = CORRELATIONAL if setting == CORRELATIONAL_STRINGS else setting
    for kind in INTERVENTION_KINDS:
        if kind.setting == setting:
            return kind
    return None


def x_kind(setting: str) -> str:
    """What x counts on a setting's curve: ``"occurrences"`` or ``"strings"``."""
    if setting == CORRELATIONAL_STRINGS:
        return "strings"
    kind = _of_setting(setting)
    return "occurrences" if kind is None else kind.unit


def setting_label(setting: str) -> str:
    """The legend label of a setting (``"causal (exact count)"``); the setting if unknown."""
    kind = _of_setting(setting)
    return setting if kind is None else kind.label


def setting_style(setting: str) -> tuple[str, str, float]:
    """The plot's ``(linestyle, marker, band alpha)`` of a setting."""
    kind = _of_setting(setting)
    return _UNKNOWN_STYLE if kind is None else kind.style


def setting_order() -> list[str]:
    """The settings in the legend's order: the causal kinds as registered, then correlational."""
    causal = causal_settings()
    return [*causal, CORRELATIONAL, CORRELATIONAL_STRINGS]


def causal_settings() -> list[str]:
    """The settings of the kinds that constrain the corpus (``causal_exact``, ...)."""
    return [k.setting for k in INTERVENTION_KINDS if k.constrained]


def quantity_name(metric: str, target: str | None = None) -> str:
    """The paper's name of what ``metric`` measures for ``target``.

    ``kl_target_unweighted`` -> ``"per-state contribution"`` (``"per-transition ..."``,
    ``"per-symbol ..."``: eq. kl-state/transition/symbol-main; a registered kind's
    ``quantity``), ``kl_target`` -> ``"p_pi-weighted per-state contribution"``, ``kl_total`` ->
    ``"total KL"``.
    """
    if metric == "kl_total":
        return "total KL"
    kind = (target or "").partition(":")[0]
    quantity = event_kind(kind).quantity if kind in EVENT_KIND_REGISTRY else "target"
    name = f"{quantity} contribution"
    return name if metric == "kl_target_unweighted" else f"p_pi-weighted {name}"


def gap_kind(metric: str, target: str, values: Iterable[float | None] = ()) -> str:
    """How the gap of ``target`` is measured: ``"ratio"`` or ``"difference"``.

    A difference for signed quantities, where a ratio of means is meaningless: per-transition
    and per-symbol contributions (``kl_target``, ``kl_target_unweighted``; an event kind's
    ``signed``), and any target with a value that is not positive among ``values`` (both arms,
    every architecture). A ratio for KLs (per-state contributions, ``kl_total``) whose values
    are all positive.
    """
    kind = target.partition(":")[0]
    if metric != "kl_total" and kind in EVENT_KIND_REGISTRY and event_kind(kind).signed:
        return "difference"
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return "ratio" if all(v > 0 for v in finite) else "difference"


def interval_method(metric: str, target: str) -> str:
    """How a curve point's interval is computed: ``"log-t"`` for quantities that cannot be
    negative (per-state contributions, ``kl_total``), ``"t"`` for signed ones (per-transition
    and per-symbol contributions; an event kind's ``signed``). The plans' contrasts keep the
    plain t-interval."""
    kind = target.partition(":")[0]
    if metric != "kl_total" and kind in EVENT_KIND_REGISTRY and event_kind(kind).signed:
        return "t"
    return "log-t"
