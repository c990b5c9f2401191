"""What an ensemble needs from each member's data module: a :class:`~cfl_lightning.PFADataModule`,
or one of yours that offers the same.

An ensemble does not iterate a member's dataloaders: it packs every member's corpora itself and
replays each member's epoch orders (:mod:`~cfl_lightning.ensemble.data`), so it reads the data
module's corpora directly. It needs (:class:`MemberData`, the names :data:`ENSEMBLE_DATA`):

* ``setup(stage)``: sample or load the corpora of ``"fit"`` / ``"test"`` (idempotent);
* ``tokenized(split)``: the :class:`~cfl_lightning.data.batching.TokenizedCorpus` of
  ``"train"``, ``"val"`` or ``"test"`` (flat inputs, targets, classes, offsets; for an automaton
  of a kind without position classes, a PCFG, also ``target_probs``: ``[N, S + 1]`` float32, the
  exact next-symbol law of every position, which the ensemble packs as it is);
* ``batches(split)``: its ``[B]`` string-index batches in unshuffled order (training visits
  them in the order of a :class:`~cfl_lightning.data.batching.BatchOrderSampler` seeded with
  ``derive_seed(hparams["seed"], "batch-order")``, as a ``PFADataModule``'s training loader);
* ``target_table``: ``[C, S + 1]`` next-symbol distribution of each class
  (:func:`~cfl_lightning.automata.class_tables`), read only when the corpus has no
  ``target_probs`` (not needed for a kind without position classes, which has no table);
  ``pad_id``: the padding token id;
* ``test_weights()``: ``[K]`` importance weights of the test strings, or None;
* ``hparams["seed"]``: the data seed (the batch order);
* and what ``results.json`` records (:func:`~cfl_lightning.callbacks.requirements.check_results_data`:
  ``automaton``, ``event``, ..., ``hparams["num_strings"]``).

:func:`check_member_data` refuses a data module without one of them in one line naming it
(:class:`~cfl_lightning.ensemble.NotEnsembleable`: such a run is trained on its own).

Members of kinds without position classes are evaluated per symbol
(:class:`~cfl_lightning.ensemble.metrics.MemberSymbolKL`, written with
:func:`~cfl_lightning.callbacks.decomposed_kl.classless_entries` as their own ``fit`` does); an
ensemble does not mix them with members of kinds with classes.
"""

from __future__ import annotations

from typing import Any, Protocol

from torch import Tensor

from cfl_lightning.callbacks.decomposed_kl import has_position_classes
from cfl_lightning.callbacks.requirements import check_results_data, datamodule_automaton
from cfl_lightning.data.batching import TokenizedCorpus
from cfl_lightning.ensemble.settings import NotEnsembleable
from cfl_lightning.errors import CflError

__all__ = ["MemberData", "ENSEMBLE_DATA", "CLASSLESS_DATA", "check_member_data"]

#: the data module's attributes and methods an ensemble reads (besides ``hparams["seed"]`` and
#: what results.json records)
ENSEMBLE_DATA = ("setup", "tokenized", "batches", "target_table", "test_weights", "pad_id")
#: what it reads from a data module whose automaton has no position classes (a PCFG: the laws
#: are its corpora's ``target_probs``, there is no ``target_table``)
CLASSLESS_DATA = tuple(key for key in ENSEMBLE_DATA if key != "target_table")


class MemberData(Protocol):
    """The data module of an ensemble member, as the ensemble reads it (module docstring)."""

    pad_id: int
    hparams: Any

    def setup(self, stage: str | None = None) -> None:
        """Sample or load the corpora ``stage`` needs (idempotent)."""

    def tokenized(self, split: str = "train") -> TokenizedCorpus:
        """The per-position arrays of ``split``."""

    def batches(self, split: str = "train") -> list[Tensor]:
        """``[B]`` string-index batches of ``split``, unshuffled."""

    @property
    def target_table(self) -> Tensor:
        """``[C, S + 1]`` next-symbol distribution of each class (kinds with position classes)."""

    def test_weights(self) -> Tensor | None:
        """``[K]`` importance weights of the test strings, or None."""


def check_member_data(datamodule: Any) -> None:
    """Refuse a data module that lacks what an ensemble reads (one line naming the first).

    Raises:
        NotEnsembleable: naming the missing attribute (or ``hparams["seed"]``), or what
            results.json needs.
    """
    name = type(datamodule).__name__
    needed = ENSEMBLE_DATA
    try:
        automaton = datamodule_automaton(datamodule)
    except CflError:
        automaton = None  # check_results_data names it below
    if automaton is not None and not has_position_classes(automaton.kind):
        needed = CLASSLESS_DATA
    missing = next((key for key in needed if not _has(datamodule, key)), None)
    if missing is None and "seed" not in (getattr(datamodule, "hparams", None) or {}):
        missing = "hparams['seed']"
    if missing is not None:
        raise NotEnsembleable(
            f"an ensemble needs the data module's {missing}, which {name} does not have (it "
            f"reads {', '.join(needed)} and hparams['seed']; see "
            "cfl_lightning.ensemble.requirements)"
        )
    try:
        check_results_data(datamodule)
    except CflError as err:
        raise NotEnsembleable(f"an ensemble writes results.json: {err}") from None


def _has(datamodule: Any, key: str) -> bool:
    """Whether ``datamodule`` has ``key``, without evaluating a property."""
    return hasattr(type(datamodule), key) or key in getattr(datamodule, "__dict__", {})
