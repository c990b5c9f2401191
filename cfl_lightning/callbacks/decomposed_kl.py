"""``DecomposedKLCallback``: the decomposed KL and the evaluation losses for any LightningModule.

Prediction protocol: for every validation/test batch the callback calls
``pl_module.next_symbol_logits(batch)`` if the module defines it, else
``pl_module(batch["input_ids"])``, in eval mode and under ``no_grad``. The result is a
``[B, T, |S|+1]`` tensor of logits or log-probabilities, EOS last; it is normalized with
``log_softmax``, after the checks of :func:`~cfl_lightning.losses.check_scores` (integer
dtypes, NaN and ``+inf`` are errors naming the stage, epoch and step; probabilities given
instead of logits warn once). Lightning runs the validation/test loops only for a module that
defines ``validation_step`` / ``test_step``: they may do nothing (without ``validation_step``
the callback warns when fitting starts: nothing is validated, so nothing is monitored).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch import Tensor

from cfl_lightning.automata import Automaton, Event, counting_table
from cfl_lightning.callbacks.requirements import (
    check_kl_batch,
    datamodule_automaton,
    long_split_of,
)
from cfl_lightning.errors import CflError
from cfl_lightning.kinds import automaton_kind
from cfl_lightning.losses import as_log_probs
from cfl_lightning.metrics import (
    EOS_NAME, EPOCH_LOSS_NAMES, KL_ENTRIES, DecomposedKL, EpochLoss, SymbolKL, kl_entries,
    kl_log_dict, symbol_unweighted, target_values,
)
from cfl_lightning.metrics.state_visits import StateVisits
from cfl_lightning.sampling.visits import target_visits

__all__ = [
    "DecomposedKLCallback",
    "MONITOR",
    "predict_log_probs",
    "has_position_classes",
    "classless_line",
    "classless_entries",
]

#: The validation metric that LR schedules, early stopping and checkpointing monitor.
MONITOR = "val/kl_per_string"
#: the long split's stage: its values are logged as ``long_test/...``
LONG = "long_test"
_STAGES = ("val", "test", LONG)
_NAMES = {"val": "validation", "test": "test", LONG: "long test"}


def has_position_classes(kind: str) -> bool:
    """Whether automata of ``kind`` have position classes (an unregistered kind: assumed so)."""
    try:
        return automaton_kind(kind).position_classes
    except CflError:
        return True


def classless_line(kind: str) -> str:
    """The one line a run on an automaton without position classes gets (what is logged)."""
    return (f"automata of kind {kind!r} have no position classes: the KL is logged in total and "
            "per symbol (val/kl_total, kl_total, kl/symbol/SYM); per state and per transition "
            "it is not available")


def classless_entries(
    result: dict[str, Tensor], automaton: Automaton, event: Event | None = None
) -> dict[str, Any]:
    """The ``results.json`` KL entries of an automaton without position classes.

    ``kl_total``; ``kl.symbol`` and ``kl_unweighted.symbol`` (``{SYM: value}``, EOS last; the
    unweighted value divides by the symbol's exact expected occurrences per string,
    :func:`~cfl_lightning.metrics.symbol_unweighted`; null where the test strings never put the
    symbol at stake); ``test_visits.symbol`` (positions where the symbol has ``p > 0``); with a
    ``symbol:X`` event, ``kl_target``, ``kl_target_unweighted`` (X's entries) and
    ``target_test_visits`` (null for a ``rule`` event: it has no place in the per-symbol KL).
    Per state and per transition: absent.
    """
    out: dict[str, Any] = dict.fromkeys(KL_ENTRIES)
    names = (*automaton.alphabet, EOS_NAME)
    stakes = [int(v) for v in result["stakes"]]
    expected = torch.as_tensor(automaton.expected_symbol_counts(), dtype=torch.float64)
    unweighted = symbol_unweighted(result["symbol"].to(torch.float64), expected)

    def known(values: Tensor) -> dict[str, float | None]:
        return {n: (None if k == 0 or math.isnan(v) else float(v))
                for n, v, k in zip(names, values.tolist(), stakes)}

    out["kl_total"] = float(result["total"])
    out["kl"] = {"symbol": known(result["symbol"])}
    out["kl_unweighted"] = {"symbol": known(unweighted)}
    out["test_visits"] = {"symbol": dict(zip(names, stakes))}
    where = () if event is None else automaton.event_location(event)[1]
    if where:  # a rule event has no place in the per-symbol KL: its entries stay null
        (index,) = where
        out["target_test_visits"] = stakes[index]
        out["kl_target"] = out["kl"]["symbol"][names[index]]
        out["kl_target_unweighted"] = out["kl_unweighted"]["symbol"][names[index]]
    return out


def predict_log_probs(
    pl_module: pl.LightningModule, batch: dict[str, Tensor], *, where: str = ""
) -> Tensor:
    """The module's next-symbol log-probabilities ``[B, T, |S|+1]`` on ``batch`` (protocol above).

    Runs in eval mode and under ``no_grad`` (the module's mode is restored afterwards).

    Args:
        pl_module: any module following the prediction protocol.
        batch: a :class:`~cfl_lightning.PFADataModule` batch.
        where: appended to the prediction's name in messages (e.g. ``" (validation, epoch 3,
            step 120)"``).

    Raises:
        CflError: the prediction does not have the batch's ``[B, T, |S|+1]`` shape, or fails
            :func:`~cfl_lightning.losses.check_scores` (integer dtype, NaN, ``+inf``).
    """
    method = getattr(pl_module, "next_symbol_logits", None)
    was_training = pl_module.training
    pl_module.eval()
    try:
        with torch.no_grad():
            scores = method(batch) if callable(method) else pl_module(batch["input_ids"])
    finally:
        pl_module.train(was_training)
    name = type(pl_module).__name__
    source = f"{name}.next_symbol_logits(batch)" if callable(method) else f"{name}(input_ids)"
    return as_log_probs(scores, batch, source=source + where)


class DecomposedKLCallback(pl.Callback):
    """Evaluates any next-symbol model against the automaton its evaluation strings come from.

    During validation it logs ``val/kl_per_string`` (:data:`MONITOR`), ``val/kl_per_token``,
    ``val/ce_per_string``, ``val/kl_total`` and ``val/kl_target`` (with an event), so that early
    stopping, checkpointing and LR schedules work for a model that logs nothing. At the end of a
    test run it logs ``test/kl_per_string``, ``test/kl_per_token``, ``test/ce_per_string``,
    ``kl_total``, ``kl_target``, ``kl_target_unweighted``, ``kl/state/NAME``, ``kl/symbol/SYM``,
    ``kl/transition/SRC:SYM``, ``kl_unweighted/...`` and ``target_test_visits`` (test positions
    at which the event is at stake): ``trainer.test`` returns them, and :attr:`test_result` keeps
    the full-precision decomposition (for ``results.json``), :attr:`test_visits` the positions
    per state. A target that the evaluation strings never visit has an unknown contribution:
    ``kl_target`` and ``kl_target_unweighted`` (and ``val/kl_target``) are then not logged.
    Batches with ``weights`` ``[B]`` (importance weights of the strings) are weighted
    everywhere except in the visit counts.

    The long split (a data module's ``long_test_dataloader()``, e.g. ``PFADataModule``'s with
    ``long_min_length``) is evaluated right after the test strings, by the same code on its own
    metric states: the same values are logged with the prefix ``long_test/``
    (``long_test/kl_total``, ``long_test/kl_per_string``, ``long_test/kl/state/NAME``, ...) and
    :attr:`long_entries` keeps its ``results.json`` object. The batches are moved to the module's
    device with its ``transfer_batch_to_device``; the module's ``test_step`` is not called.

    Every value is global: the sums are torchmetrics states reduced across processes, so under
    DDP each process logs the single-process value on the same strings (the data module gives
    every evaluation string to exactly one process).

    What the data module must offer (a :class:`~cfl_lightning.PFADataModule`, or a user's own:
    its ``automaton``, batches with ``target_probs``, ``states``, ``mask``...) is written in
    :mod:`cfl_lightning.callbacks.requirements`; a data module without an automaton is refused
    when the run is set up (one line naming what is missing). With plain dataloaders (no data
    module) and no ``automaton=``, only the per-string losses are logged. An automaton of a kind
    without position classes (a PCFG) has no decomposition by state or transition: the callback
    says so in one warning line when the run is set up and logs ``val/kl_total``, ``kl_total``
    and ``kl/symbol/SYM`` (:class:`~cfl_lightning.metrics.SymbolKL`, from the batches' exact
    ``target_probs``); :attr:`test_result` then holds ``total`` and ``symbol``.

    Args:
        event: the intervened event (``"state:NAME"``, ``"symbol:SYM"``,
            ``"transition:SRC:SYM"``); default: the data module's ``event``.
        pfsa: the automaton the evaluation strings are drawn from (any
            :class:`~cfl_lightning.automata.Automaton`; ``automaton=`` is the same argument);
            default ``trainer.datamodule.automaton``.
        automaton: the same as ``pfsa`` (its name since pushdown automata).

    Example:
        >>> trainer = L.Trainer(callbacks=[DecomposedKLCallback()])  # doctest: +SKIP
        >>> trainer.test(model, datamodule=PFADataModule(...))       # doctest: +SKIP
        [{'kl_total': 0.41, 'kl_target': 0.02, 'kl/state/odd': 0.02, ...}]
    """

    def __init__(
        self,
        event: str | Event | None = None,
        pfsa: Automaton | None = None,
        *,
        automaton: Automaton | None = None,
    ) -> None:
        super().__init__()
        if pfsa is not None and automaton is not None and pfsa is not automaton:
            raise CflError("DecomposedKLCallback: give the automaton once (pfsa= or automaton=)")
        pfsa = automaton if automaton is not None else pfsa
        self._event_arg = Event.parse(event) if isinstance(event, str) else event
        self._pfsa_arg = pfsa
        self.pfsa: Automaton | None = pfsa
        self.event: Event | None = self._event_arg
        self.losses = {stage: EpochLoss() for stage in _STAGES}
        self.metrics: dict[str, DecomposedKL | SymbolKL] = {}
        #: the automaton's kind has no position classes (a PCFG): ``metrics`` are ``SymbolKL``
        self.classless = False
        self.visits: dict[str, StateVisits] = {}
        #: positions per state in the last test run (``[Q]`` int64 CPU tensor)
        self.test_visits: Tensor | None = None
        #: the decomposition of the last test run (float64 CPU tensors; see ``DecomposedKL``)
        self.test_result: dict[str, Tensor] | None = None
        #: the ``results.json`` entries of the last test run
        #: (:func:`~cfl_lightning.metrics.kl_entries`, computed once from :attr:`test_result` and
        #: :attr:`test_visits`; None without an automaton)
        self.test_entries: dict[str, Any] | None = None
        #: the flat values logged at the end of the last test run
        self.test_metrics: dict[str, float] = {}
        #: the long split's ``results.json`` object of the last test run (``min_length``,
        #: ``num_strings`` and :func:`~cfl_lightning.metrics.kl_entries`), None without one
        self.long_entries: dict[str, Any] | None = None

    def validation_metrics(self, event: Event | None | bool = None) -> tuple[str, ...]:
        """The names this callback logs after every validation (what early stopping,
        checkpointing and LR schedules may monitor).

        Args:
            event: whether ``val/kl_target`` is logged too (an event, or True); default the
                event given to the constructor.
        """
        event = self._event_arg if event is None else event
        names = tuple(f"val/{name}" for name in EPOCH_LOSS_NAMES) + ("val/kl_total",)
        return names + (("val/kl_target",) if event else ())

    # ------------------------------------------------------------------ set-up
    def resolve(self, datamodule: Any) -> tuple[Automaton | None, Event | None]:
        """The automaton and event this callback evaluates with ``datamodule``: its own
        arguments first, then the data module's ``automaton`` and ``event`` attributes.
        Without a data module (plain dataloaders) and without ``automaton=``: none, and only
        the per-string losses are logged.

        Raises:
            CflError: a data module (or an event) without an automaton (one line naming the
                missing ``automaton``), or an event naming an unknown state or symbol (or any
                event, on a kind without events: a PCFG).
        """
        pfsa = self._pfsa_arg if self._pfsa_arg is not None else datamodule_automaton(datamodule)
        event = self._event_arg
        if event is None:
            event = getattr(datamodule, "event", None)
        if pfsa is None and (datamodule is not None or event is not None):
            what = f"event={str(event)!r}" if event is not None else ""
            owner = (
                "there is no data module" if datamodule is None
                else f"{type(datamodule).__name__} has no attribute 'automaton'"
            )
            raise CflError(
                f"DecomposedKLCallback({what}) has no automaton to evaluate on: {owner}; pass "
                "automaton=... or give the data module one (see cfl_lightning.callbacks."
                "requirements)"
            )
        if pfsa is not None and event is not None:
            counting_table(pfsa, event)  # an unknown name fails here, not at test end
        return pfsa, event

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Resolve the automaton and the event (:meth:`resolve`)."""
        pfsa, event = self.resolve(trainer.datamodule)
        if stage == "fit" and not is_overridden("validation_step", pl_module):
            warnings.warn(
                f"{type(pl_module).__name__} defines no validation_step, so Lightning runs no "
                f"validation and {MONITOR} is never logged (add an empty validation_step: this "
                "callback evaluates)",
                stacklevel=2,
            )
        if pfsa is not self.pfsa or not self.metrics:
            self.classless = pfsa is not None and not has_position_classes(pfsa.kind)
            if self.classless:
                rank_zero_warn(f"DecomposedKLCallback: {classless_line(pfsa.kind)}")
                self.metrics = {s: SymbolKL(pfsa.num_symbols) for s in _STAGES}
                self.visits = {}
            else:
                self.metrics = {} if pfsa is None else {s: DecomposedKL(pfsa) for s in _STAGES}
                self.visits = {} if pfsa is None else {
                    s: StateVisits(len(pfsa.class_names)) for s in _STAGES
                }
        self.pfsa, self.event = pfsa, event

    # ------------------------------------------------------------------ per batch
    def _start(self, stage: str, pl_module: pl.LightningModule) -> None:
        self.losses[stage].to(pl_module.device).reset()
        if stage in self.metrics:
            self.metrics[stage].to(pl_module.device).reset()
        if stage in self.visits:
            self.visits[stage].to(pl_module.device).reset()

    def _update(self, stage: str, trainer: pl.Trainer, pl_module: Any, batch: Any) -> None:
        if trainer.sanity_checking:
            return
        name = _NAMES[stage]
        where = f" ({name}, epoch {trainer.current_epoch}, step {trainer.global_step})"
        check_kl_batch(batch, name)
        log_probs = predict_log_probs(pl_module, batch, where=where)
        self.losses[stage].update(log_probs, batch)
        if stage in self.metrics and self.classless:
            self.metrics[stage].update(log_probs, batch)
        elif stage in self.metrics:
            mask = batch["mask"].bool()
            self.metrics[stage].update(log_probs, batch["states"], mask, batch.get("weights"))
            self.visits[stage].update(batch["states"], mask)

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start("val", pl_module)

    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start("test", pl_module)
        self.test_result, self.test_metrics, self.test_visits = None, {}, None
        self.test_entries, self.long_entries = None, None

    def on_validation_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
        batch_idx: int, dataloader_idx: int = 0,
    ) -> None:
        self._update("val", trainer, pl_module, batch)

    def on_test_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
        batch_idx: int, dataloader_idx: int = 0,
    ) -> None:
        self._update("test", trainer, pl_module, batch)

    # ------------------------------------------------------------------ per epoch
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_end("val", trainer, pl_module)

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_end("test", trainer, pl_module)
        self._evaluate_long(trainer, pl_module)

    def _evaluate_long(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The long split, through the test's own per-batch and per-epoch code."""
        long = long_split_of(trainer.datamodule)
        if long is None:
            return
        min_length, loader = long
        self._start(LONG, pl_module)
        for batch in loader:
            batch = pl_module.transfer_batch_to_device(batch, pl_module.device, 0)
            self._update(LONG, trainer, pl_module, batch)
        entries = self._epoch_end(LONG, trainer, pl_module)
        if entries is not None:
            losses = {k: float(v) for k, v in self.losses[LONG].compute().items()}
            strings = self.losses[LONG].num_strings()
            self.long_entries = {
                "min_length": min_length, "num_strings": strings, **losses, **entries
            }

    def _classless_values(self, stage: str, values: dict[str, float]) -> dict[str, Tensor]:
        """An automaton without position classes: the KL in total and per symbol
        (:class:`~cfl_lightning.metrics.SymbolKL`) added to ``values``; its result returned."""
        assert self.pfsa is not None
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*before the ``update`` method")
            result = {k: v.detach().cpu() for k, v in self.metrics[stage].compute().items()}
        prefix = {"val": "val/", "test": ""}.get(stage, f"{stage}/")
        values[f"{prefix}kl_total"] = float(result["total"])
        if stage != "val":
            names = (*self.pfsa.alphabet, EOS_NAME)
            values.update((f"{prefix}kl/symbol/{n}", float(v))
                          for n, v in zip(names, result["symbol"]))
        return result

    def _epoch_end(
        self, stage: str, trainer: pl.Trainer, pl_module: pl.LightningModule
    ) -> dict[str, Any] | None:
        """Reduce the epoch's sums (across processes) and log; shared by every stage.

        Returns:
            the ``results.json`` entries (:func:`~cfl_lightning.metrics.kl_entries`) of the test
            and the long split; None for validation, without strings or without an automaton.
        """
        if trainer.sanity_checking:
            return None
        losses = self.losses[stage].compute()
        if self.losses[stage].num_strings() == 0:  # no evaluation strings on any process
            return None
        values = {f"{stage}/{name}": float(value) for name, value in losses.items()}
        result, entries, visits = None, None, None
        if stage in self.metrics and self.classless:
            result = self._classless_values(stage, values)
            classless = classless_entries(result, self.pfsa, self.event)
            if stage != "val":
                entries = classless
                _classless_test_values(entries, stage, values)
            elif classless["kl_target"] is not None:  # at stake in the strings; not a rule
                values["val/kl_target"] = classless["kl_target"]
        elif stage in self.metrics:
            with warnings.catch_warnings():  # a process may have had no batch: fine after sync
                warnings.filterwarnings("ignore", message=".*before the ``update`` method")
                result = self.metrics[stage].compute()
                visits = self.visits[stage].compute()
            assert self.pfsa is not None
            if stage == "val":
                values["val/kl_total"] = float(result["total"])
                if self.event is not None:
                    # the target's contribution is unknown where the strings never visit it
                    if target_visits(self.pfsa, self.event, visits) > 0:
                        values["val/kl_target"] = target_values(result, self.event, self.pfsa)[0]
            else:
                result = {k: v.detach().cpu() for k, v in result.items()}
                visits = visits.detach().cpu()
                entries = kl_entries(result, visits, self.pfsa, self.event)
                prefix = "" if stage == "test" else f"{stage}/"
                values.update(_test_values(result, entries, self.pfsa, self.event, prefix))
        # The values are already global and equal on every process; sync_dist (a mean of equal
        # values, exact) only keeps Lightning from asking for it.
        sync = trainer.world_size > 1
        for name, value in values.items():
            pl_module.log(name, value, prog_bar=name == MONITOR, sync_dist=sync)
        if stage == "test":
            self.test_result = result
            self.test_visits = None if result is None else visits
            self.test_entries = entries
            self.test_metrics = values
        return entries


def _classless_test_values(entries: dict[str, Any], stage: str, values: dict[str, float]) -> None:
    """Add a classless test's target and unweighted per-symbol values to the logged ``values``."""
    prefix = "" if stage == "test" else f"{stage}/"
    if entries["target_test_visits"] is not None:
        values[prefix + "target_test_visits"] = float(entries["target_test_visits"])
    if entries["kl_target"] is not None:
        values[prefix + "kl_target"] = entries["kl_target"]
        values[prefix + "kl_target_unweighted"] = entries["kl_target_unweighted"]
    for name, value in entries["kl_unweighted"]["symbol"].items():
        if value is not None:
            values[f"{prefix}kl_unweighted/symbol/{name}"] = value


def _test_values(
    result: dict[str, Tensor], entries: dict[str, Any], automaton: Automaton, event: Event | None,
    prefix: str,
) -> dict[str, float]:
    """The flat values logged at the end of a test (``prefix``: ``""``, or ``long_test/``)."""
    values = {}
    if event is not None:
        values[prefix + "target_test_visits"] = float(entries["target_test_visits"])
    values[prefix + "kl_total"] = entries["kl_total"]
    values.update(
        (prefix + k, float(v)) for k, v in kl_log_dict(result, automaton).items() if k != "kl/total"
    )
    if entries["kl_target"] is not None:
        values[prefix + "kl_target"] = entries["kl_target"]
        values[prefix + "kl_target_unweighted"] = entries["kl_target_unweighted"]
    return values
