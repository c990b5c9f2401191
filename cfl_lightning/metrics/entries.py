"""The decomposed KL of a test run as ``results.json`` reports it (:func:`kl_entries`).

Computed once where the test is evaluated (:class:`~cfl_lightning.callbacks.DecomposedKLCallback`
at the end of a test run, the ensemble for each member) and written as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cfl_lightning.metrics.naming import kl_nested_dict, target_values
from cfl_lightning.sampling.visits import target_visits, visits_by_event

if TYPE_CHECKING:
    from torch import Tensor

    from cfl_lightning.automata import PFSA, Event

__all__ = ["KL_ENTRIES", "kl_entries"]

#: the ``results.json`` keys :func:`kl_entries` fills
KL_ENTRIES = (
    "kl_total", "kl_target", "kl_target_unweighted", "kl", "kl_unweighted",
    "target_test_visits", "test_visits",
)


def kl_entries(
    result: Mapping[str, Tensor] | None,
    visits: Tensor | None,
    pfsa: PFSA,
    event: Event | None,
) -> dict[str, Any]:
    """The KL values and test visits of ``results.json`` (None where unknown).

    A target (or a ``kl`` entry) that the test strings never visit has an unknown contribution:
    None, never 0. Floats are kept as computed (NaN included); the writer turns non-finite
    values into ``null``.

    Args:
        result: :meth:`DecomposedKL.compute`'s dict on the test strings, or None.
        visits: ``[Q]`` test positions per state, or None (unknown).
        pfsa: the automaton ``result`` refers to.
        event: the evaluated event, or None.

    Returns:
        the keys :data:`KL_ENTRIES`: ``kl_total``, ``kl_target``, ``kl_target_unweighted`` (the
        event's weighted and unweighted contribution), ``kl``, ``kl_unweighted`` (nested by
        kind and name), ``target_test_visits`` and ``test_visits`` (nested like ``kl``).
    """
    out: dict[str, Any] = dict.fromkeys(KL_ENTRIES)
    if visits is not None:
        out["test_visits"] = visits_by_event(pfsa, visits)
        if event is not None:
            out["target_test_visits"] = target_visits(pfsa, event, visits)
    if result is not None:
        out["kl_total"] = float(result["total"])
        out["kl"] = _unknown_where_unvisited(kl_nested_dict(result, pfsa), out["test_visits"])
        out["kl_unweighted"] = kl_nested_dict(result, pfsa, unweighted=True)
        if event is not None and out["target_test_visits"] != 0:
            out["kl_target"], out["kl_target_unweighted"] = target_values(result, event, pfsa)
    return out


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
