"""What the callbacks need from a data module: a :class:`~cfl_lightning.PFADataModule`, or yours.

The callbacks never check a data module's class, only what it offers; where something is
missing they refuse when the run is set up, with one line naming it (never a silent skip).

**The decomposed KL** (:class:`~cfl_lightning.callbacks.DecomposedKLCallback`) needs

* an automaton: the callback's ``automaton=`` argument, else the data module's attribute
  ``automaton`` (any :class:`~cfl_lightning.automata.Automaton`: a PFSA, a pushdown
  automaton); the data module's ``event`` (an :class:`~cfl_lightning.automata.Event` or None)
  is used when present;
* evaluation batches (dicts) with the keys :data:`KL_BATCH_KEYS`: ``input_ids`` ``[B, T]``,
  ``target_ids`` ``[B, T]``, ``target_probs`` ``[B, T, S + 1]`` (the automaton's next-symbol
  distribution at each position: :func:`~cfl_lightning.automata.class_tables` rows),
  ``states`` ``[B, T]`` (each position's class id, from ``automaton.annotate``) and ``mask``
  ``[B, T]`` bool; optionally ``weights`` ``[B]``.

**The long split** (optional): a data module with a method ``long_test_dataloader()``
returning evaluation batches (the keys above), or None, has them evaluated after the test
strings and recorded under ``results.json``'s ``long_test``, with its attribute
``long_min_length`` (an int, or None) as ``min_length`` (:func:`long_split_of`).

**results.json** (:class:`~cfl_lightning.callbacks.ResultsWriter`) needs, besides the above,
the data facts it records: the attributes :data:`RESULTS_ATTRIBUTES` (as a
:class:`~cfl_lightning.PFADataModule` has them) and ``hparams["num_strings"]``.

Example (a minimal data module of your own; see ``tests/test_user_datamodule.py``)::

    class MyData(L.LightningDataModule):
        def __init__(self):
            super().__init__()
            self.automaton = load_automaton("A.json")
            self.event = None
        def test_dataloader(self): ...  # batches with the keys above
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cfl_lightning.automata import Automaton
from cfl_lightning.errors import CflError

__all__ = [
    "KL_BATCH_KEYS",
    "RESULTS_ATTRIBUTES",
    "datamodule_automaton",
    "check_kl_batch",
    "check_results_data",
    "long_split_of",
]

KL_BATCH_KEYS = ("input_ids", "target_ids", "target_probs", "states", "mask")
RESULTS_ATTRIBUTES = (
    "automaton", "event", "intervention", "automaton_id", "realized_count", "realized_strings",
    "expected_count", "occurrences", "expected_occurrences",
)


def datamodule_automaton(datamodule: Any) -> Automaton | None:
    """The data module's ``automaton`` (None without a data module or without the attribute).

    Raises:
        CflError: the attribute is there but is not an automaton.
    """
    automaton = getattr(datamodule, "automaton", None) if datamodule is not None else None
    if automaton is not None and not isinstance(automaton, Automaton):
        raise CflError(
            f"{type(datamodule).__name__}.automaton is a {type(automaton).__name__}, not an "
            "automaton (load one with cfl_lightning.automata.load_automaton)"
        )
    return automaton


def check_kl_batch(batch: Any, where: str) -> None:
    """Refuse a batch without the decomposed KL's keys (one line naming the first missing).

    Raises:
        CflError: ``batch`` is not a dict or lacks one of :data:`KL_BATCH_KEYS`.
    """
    if not isinstance(batch, Mapping):
        raise CflError(
            f"DecomposedKLCallback needs dict batches with keys {', '.join(KL_BATCH_KEYS)}; "
            f"the {where} batch is a {type(batch).__name__}"
        )
    missing = _first_missing(KL_BATCH_KEYS, lambda key: key in batch)
    if missing is not None:
        raise CflError(
            f"DecomposedKLCallback needs the batch key {missing!r} (batches carry "
            f"{', '.join(KL_BATCH_KEYS)}); the {where} batch has {', '.join(map(str, batch))}"
        )


def check_results_data(datamodule: Any) -> None:
    """Refuse a data module that lacks what ``results.json`` records (one line).

    Raises:
        CflError: naming the first missing attribute (or ``hparams["num_strings"]``).
    """
    name = type(datamodule).__name__ if datamodule is not None else "no data module"
    if datamodule is None:
        raise CflError(
            "ResultsWriter needs a data module (trainer.fit/test(..., datamodule=...)) with "
            f"the attributes {', '.join(RESULTS_ATTRIBUTES)}"
        )
    missing = _first_missing(RESULTS_ATTRIBUTES, lambda key: hasattr(datamodule, key))
    if missing is not None:
        raise CflError(
            f"ResultsWriter needs the data module's attribute {missing!r}, which {name} does "
            f"not have (results.json records {', '.join(RESULTS_ATTRIBUTES)}; see "
            "cfl_lightning.callbacks.requirements)"
        )
    datamodule_automaton(datamodule)
    if "num_strings" not in (getattr(datamodule, "hparams", None) or {}):
        raise CflError(
            f"ResultsWriter needs {name}.hparams['num_strings'] (the training corpus's size; "
            "call self.save_hyperparameters() in its __init__)"
        )


def _first_missing(names: Iterable[str], present: Any) -> str | None:
    return next((name for name in names if not present(name)), None)


def long_split_of(datamodule: Any) -> tuple[int | None, Iterable[Any]] | None:
    """``(long_min_length, long_test_dataloader())`` of a data module that offers a long split,
    else None (no data module, no ``long_test_dataloader``, or it returns None)."""
    method = getattr(datamodule, "long_test_dataloader", None) if datamodule is not None else None
    loader = method() if callable(method) else None
    if loader is None:
        return None
    return getattr(datamodule, "long_min_length", None), loader
