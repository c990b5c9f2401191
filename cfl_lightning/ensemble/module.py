"""``EnsembleLanguageModel``: M language models of one architecture as one LightningModule.

A plain ``lightning.Trainer`` trains it; every member gets what its own sequential run
(``python -m cfl_lightning fit``) would, member by member:

* initial weights: the member's own model instance (built under its seed), stacked into one
  ``[M, P]`` parameter (:class:`~cfl_lightning.ensemble.stacking.ParameterLayout`);
* data: its own ``PFADataModule`` corpus and batches, in its own epoch order; a tick trains
  some members, each on its next batch (:mod:`~cfl_lightning.ensemble.ticks`), and each
  member's sequence of updates is the sequential one;
* loss, gradient clipping by its own norm, Adam with its own state and learning rate (manual
  optimization; :class:`~cfl_lightning.ensemble.optim.StackedAdam`, an optimizer whose state
  Lightning checkpoints);
* after every epoch its own ``val/kl_per_string`` drives its ``ReduceLROnPlateau``, best
  weights and early stopping (:class:`~cfl_lightning.ensemble.schedule.MemberSchedules`:
  module state, checkpointed). A stopped member is masked, not removed (fixed shapes); when
  every member has stopped, ``trainer.should_stop`` ends the fit;
* at test, its best weights' decomposed KL and state visits on its own test strings, all
  members accumulated at once (:class:`~cfl_lightning.ensemble.metrics.MemberDecomposedKL`); for
  automata without position classes (a PCFG), its per-symbol KL
  (:class:`~cfl_lightning.ensemble.metrics.MemberSymbolKL`, the callback's ``SymbolKL``).

Lightning supplies the loop, ``max_epochs``, checkpointing and resume (``trainer.fit(...,
ckpt_path=...)``; every piece of training state is module, optimizer or loop state), loggers and
the profiler. The Trainer must reload its dataloaders every epoch (an epoch's ticks depend on
the epoch and on which members still train) and validate every epoch.

Computation is an engine's (:mod:`~cfl_lightning.ensemble.engines`): ``"stacked"`` (packed
batches through the stacked network; GPUs, with CUDA graphs) or ``"loop"`` (each member's own
network in turn; CPUs). Dropout masks are drawn per member from the global generator, so with
dropout the members' trajectories are statistically, not bitwise, those of sequential runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch import Tensor, nn

from cfl_lightning.callbacks import MONITOR
from cfl_lightning.ensemble.data import PACINGS, EnsembleData, Ticks
from cfl_lightning.ensemble.engines import ENGINES, LoopEngine, StackedEngine
from cfl_lightning.callbacks.decomposed_kl import classless_entries
from cfl_lightning.ensemble.metrics import (
    MemberDecomposedKL,
    MemberSymbolKL,
    classless_members,
    member_kl,
    update_member_kl,
)
from cfl_lightning.ensemble.optim import StackedAdam
from cfl_lightning.ensemble.requirements import check_member_data
from cfl_lightning.ensemble.schedule import MemberSchedules
from cfl_lightning.ensemble.settings import TrainSettings, check_ensembleable, check_trainer
from cfl_lightning.ensemble.stacking import ParameterLayout
from cfl_lightning.ensemble.step import MODES
from cfl_lightning.metrics import target_values
from cfl_lightning.sampling.visits import target_visits

__all__ = ["EnsembleLanguageModel", "MemberOutcome", "stacked_network", "CHECKPOINT_KEY"]

#: the checkpoint entry holding the members' names and the random generators' states
CHECKPOINT_KEY = "cfl_lightning_ensemble"
# the model hyperparameters that every member must share
_SHARED = ("num_layers", "dropout", "loss", "lr", "lr_factor", "lr_patience")


@dataclass
class MemberOutcome:
    """What training left for one member.

    Attributes:
        best_state: the best weights (``model.load_state_dict`` ready, on the CPU).
        best_val_loss: their ``val/kl_per_string`` (None if no finite value was seen).
        epochs: completed training epochs (Lightning's ``trainer.current_epoch`` after fit).
        train_time_s: the ensemble's training wall time until the member's last epoch
            (summed over resumed sessions).
        stopped_early: whether early stopping ended its training (Lightning's rule).
        steps: its optimizer steps.
        val_history: ``val/kl_per_string`` after every epoch (this session's).
        step_losses: the optimized loss at each of its steps (only with ``record_steps``).
    """

    best_state: dict[str, Tensor]
    best_val_loss: float | None
    epochs: int
    train_time_s: float
    stopped_early: bool = False
    steps: int = 0
    val_history: list[float] = field(default_factory=list)
    step_losses: list[float] = field(default_factory=list)


def stacked_network(model: nn.Module) -> Any:
    """A language model's stacked form (its ``LanguageModel.stacked_network`` hook).

    Raises:
        TypeError: the model has none (its ensembles run the loop engine).
    """
    network = model.stacked_network()
    if network is None:
        raise TypeError(f"no stacked network for {type(model).__name__}")
    return network


def _per_epoch(stage: str, sums: Tensor, loss: str | None) -> dict[str, float]:
    """A plain fit's ``{stage}/kl_per_string``, ``ce_per_string``, ``kl_per_token`` (and with
    ``loss``, ``train/loss``) from one member's ``[4]`` epoch sums (``EpochLoss``'s rule)."""
    kl, ce, tokens, strings = (float(v) for v in sums)
    values = {f"{stage}/kl_per_string": kl / max(strings, 1.0),
              f"{stage}/kl_per_token": kl / max(tokens, 1.0),
              f"{stage}/ce_per_string": ce / max(strings, 1.0)}
    if loss is not None:
        values[f"{stage}/loss"] = values[f"{stage}/{loss}_per_string"]
    return values


def _default_engine(model: nn.Module, device: torch.device) -> str:
    """``"loop"`` without a stacked network; else ``"stacked"``, except on a CPU where the
    architecture prefers the loop (``LanguageModel.ENSEMBLE_CPU_ENGINE``: the shipped LSTM, whose
    oneDNN kernel beats the batched recurrence; ``benchmarks/bench_ensemble.py``)."""
    if model.stacked_network() is None:
        return "loop"
    return model.ENSEMBLE_CPU_ENGINE if device.type == "cpu" else "stacked"


class EnsembleLanguageModel(pl.LightningModule):
    """M members of one architecture, trained and tested as one module (module docstring).

    Args:
        models: the members' freshly built ``LanguageModel`` instances (one class, shared
            hyperparameters; their weights are the initial weights, they are not modified).
        datamodules: their ``PFADataModule`` instances (or data modules offering what
            :mod:`~cfl_lightning.ensemble.requirements` lists: refused otherwise, with
            :class:`~cfl_lightning.ensemble.NotEnsembleable`).
        settings: the runs' clipping and early-stopping settings (``max_epochs`` is the
            Trainer's).
        names: the members' names (checked when resuming from a checkpoint).
        engine: ``"stacked"``, ``"loop"`` or ``"auto"`` (see :func:`_default_engine`).
        mode: the stacked engine's training step: ``"gather"``, ``"static"``, ``"graph"``
            (CUDA graphs) or ``"auto"`` (``"graph"`` on CUDA, else ``"gather"``).
        pacing: ``"width"``, ``"lockstep"`` or ``"auto"`` (lockstep on CUDA, ``"width"``
            elsewhere; the loop engine always goes in lockstep). On CUDA a tick's time grows
            with its time steps and hardly with its cells, and lockstep packs the shorter
            batches of a tick into the rows of its widest: on the bench's 128 members it took
            146 ticks and 37,846 time steps per epoch where ``"width"`` took 318 and 43,575.
        record_steps: keep every step's per-member loss (a host read per step; for tests).

    Example:
        >>> model = EnsembleLanguageModel(models, datamodules, TrainSettings())  # doctest: +SKIP
        >>> trainer = lightning.Trainer(max_epochs=50, reload_dataloaders_every_n_epochs=1,
        ...                             num_sanity_val_steps=0)                  # doctest: +SKIP
        >>> trainer.fit(model); trainer.test(model)                              # doctest: +SKIP
        >>> model.outcomes()[0].best_val_loss, model.test_results[0][0]["total"]  # doctest: +SKIP
    """

    def __init__(
        self,
        models: list[nn.Module],
        datamodules: list[Any],
        settings: TrainSettings = TrainSettings(),
        *,
        names: list[str] | None = None,
        engine: str = "auto",
        mode: str = "auto",
        pacing: str = "auto",
        record_steps: bool = False,
    ) -> None:
        super().__init__()
        if not models or len(models) != len(datamodules):
            raise ValueError("need one data module per model, and at least one model")
        first = models[0]
        check_ensembleable(first)
        for datamodule in datamodules:
            check_member_data(datamodule)
        self.classless = classless_members([dm.automaton for dm in datamodules])  # no classes
        for model in models[1:]:
            if type(model) is not type(first) or any(
                model.hparams.get(k) != first.hparams.get(k) for k in _SHARED
            ):
                raise ValueError("ensemble members must share the model class and hyperparameters")
        if engine not in (*ENGINES, "auto"):
            raise ValueError(f"engine must be one of {ENGINES} or 'auto', got {engine!r}")
        if mode not in (*MODES, "auto"):
            raise ValueError(f"mode must be one of {MODES} or 'auto', got {mode!r}")
        if pacing not in (*PACINGS, "auto"):
            raise ValueError(f"pacing must be one of {PACINGS} or 'auto', got {pacing!r}")
        self.automatic_optimization = False
        self.names = [str(n) for n in (names or range(len(models)))]
        if len(self.names) != len(models) or len(set(self.names)) != len(self.names):
            raise ValueError("names must be unique, one per member")
        self.settings = settings
        self.engine_name, self.mode, self.record_steps = engine, mode, record_steps
        self.pacing = pacing
        self.data = EnsembleData(list(datamodules), "width" if pacing == "auto" else pacing)
        self.layout = ParameterLayout.of(first)
        self.network = first.stacked_network()  # None: the loop engine only
        if engine == "stacked" and self.network is None:
            raise ValueError(
                f"{type(first).__name__} has no stacked network (LanguageModel.stacked_network): "
                "use engine 'loop' or 'auto'"
            )
        self.loss_name = first.loss_name
        self._template = [first]  # a plain list: not a submodule (neither saved nor moved)
        members = len(models)
        self.flat = nn.Parameter(self.layout.stack(models))
        self.register_buffer("best_params", self.flat.detach().clone())
        self.register_buffer("finish_time", torch.zeros(members, dtype=torch.float64))
        self.register_buffer("elapsed", torch.zeros((), dtype=torch.float64))
        self.schedules = MemberSchedules.from_model(
            first, members, settings.patience, settings.min_delta
        )
        self._lr = float(first.lr)
        self._engine: StackedEngine | LoopEngine | None = None
        self._epoch_started = 0.0
        self._val_sums: Tensor | None = None
        self._val_epoch: Tensor | None = None  # [4, M] epoch_sums of the validation strings
        self._val_metric: MemberDecomposedKL | MemberSymbolKL | None = None
        #: per member, the ``val/*`` values of its plain fit after the last validation
        self.val_metrics: list[dict[str, float]] = [{} for _ in range(members)]
        self._test_metric: MemberDecomposedKL | MemberSymbolKL | None = None
        self._test_batches = np.zeros(members, dtype=np.int64)
        self._plan_device: Tensor | None = None
        self._live_at_epoch_start = np.ones(members, dtype=bool)
        #: per member, ``val/kl_per_string`` after each epoch of this session
        self.val_history: list[list[float]] = [[] for _ in range(members)]
        #: called after every training epoch with ``(epoch, live members, per member its
        #: plain fit's per-epoch metrics, [M] steps this epoch)`` (each member's own loggers:
        #: :mod:`.member_logs`), or None
        self.member_log: Any = None
        #: ``(ids, losses)`` of every step (with ``record_steps``)
        self.step_log: list[tuple[np.ndarray, Tensor]] = []
        #: per member, ``(DecomposedKL result, [Q] state visits)`` of the last test
        #: (``(SymbolKL result, None)`` without position classes), or ``(None, None)`` without
        #: test strings
        self.test_results: list[tuple[dict[str, Tensor] | None, Tensor | None]] = []

    @property
    def num_members(self) -> int:
        """``M``."""
        return len(self.names)

    # ------------------------------------------------------------------ set-up
    def configure_optimizers(self) -> StackedAdam:
        lr = torch.full((self.num_members,), self._lr, dtype=torch.float64)
        return StackedAdam(self.flat, lr)

    def engine(self) -> StackedEngine | LoopEngine:
        """The engine on the module's device (built on first use)."""
        if self._engine is None or self._engine.device != self.device:
            name = self.engine_name
            if name == "auto":
                name = _default_engine(self._template[0], self.device)
            clip = self.settings.gradient_clip_val
            if name == "loop":
                self._engine = LoopEngine(self._template[0], self.layout, self.data, self.flat,
                                          self.loss_name, clip)
            else:
                mode = self.mode
                if mode == "auto":
                    mode = "graph" if self.device.type == "cuda" else "gather"
                self._engine = StackedEngine(self.network, self.layout, self.data, self.flat,
                                             self.loss_name, clip, mode)
        return self._engine

    def _pacing(self) -> str:
        """The loop engine trains members one after another: lockstep costs it nothing; on
        CUDA ``"auto"`` is lockstep (see the class's ``pacing``)."""
        if isinstance(self.engine(), LoopEngine):
            return "lockstep"
        if self.pacing == "auto":
            return "lockstep" if self.device.type == "cuda" else "width"
        return self.pacing

    def _optimizer(self) -> StackedAdam:
        optimizer = self.optimizers(use_pl_optimizer=False)
        assert isinstance(optimizer, StackedAdam)
        return optimizer

    def _cost(self) -> dict[str, float]:
        """``by_width``'s costs: launch-bound on CUDA, arithmetic-bound (cells) elsewhere."""
        if self.device.type == "cuda":
            return dict(overhead=8.0, cell_cost=0.0)
        return dict(overhead=2.0, cell_cost=0.5)

    def _live(self) -> np.ndarray:
        return (~self.schedules.stopped).cpu().numpy()

    # ------------------------------------------------------------------ training
    def on_fit_start(self) -> None:
        check_trainer(self.trainer)
        for dm in self.data.datamodules:
            dm.setup("fit")

    def train_dataloader(self) -> Ticks:
        """This epoch's ticks: ``(index, [M] global batch ids)`` (``-1``: the member does not train)."""
        plan = self.data.train_plan(
            self.current_epoch, self._live(), self.device, self._cost(), self._pacing()
        )
        self._plan_device = torch.as_tensor(plan).to(self.device)  # one upload per epoch
        return Ticks(plan)

    def on_train_epoch_start(self) -> None:
        self._epoch_started = time.perf_counter()

    def training_step(self, batch: tuple[int, np.ndarray], batch_idx: int) -> None:
        index, ids = batch
        ids = np.asarray(ids)
        device_ids = None if self._plan_device is None else self._plan_device[:, int(index)]
        engine, adam = self.engine(), self._optimizer()
        out: list[Tensor | None] = []
        # the engine steps StackedAdam itself; Lightning's optimizer wrapper counts the step
        self.optimizers().step(
            closure=lambda: out.append(engine.train(ids, device_ids, self.record_steps, adam))
        )
        if self.record_steps and out and out[0] is not None:
            self.step_log.append((ids.copy(), out[0]))

    def on_train_epoch_end(self) -> None:
        engine = self.engine()
        sums, epoch = engine.take_losses(), engine.take_epoch_sums()
        steps = self._steps_per_epoch()
        live = torch.as_tensor(self._live_at_epoch_start)
        if live.any():
            self.log("train/loss", float((sums[live] / steps[live]).mean()))
        if self.member_log is not None:
            members = np.nonzero(live.cpu().numpy())[0].tolist()
            metrics = [{} if m not in members else {
                **_per_epoch("train", epoch[:, m], self.loss_name), **self.val_metrics[m]
            } for m in range(self.num_members)]
            self.member_log(self.current_epoch, members, metrics, steps.tolist())

    # ------------------------------------------------------------------ validation
    def val_dataloader(self) -> Ticks:
        live = self._live()
        self._live_at_epoch_start = live
        plan = self.data.eval_plan("val", live, self.device, self._cost(), self._pacing())
        return Ticks(plan)

    def on_validation_epoch_start(self) -> None:
        self._val_sums = torch.zeros(2, self.num_members, dtype=torch.float64, device=self.device)
        self._val_epoch, self._val_metric = None, None
        if self.member_log is not None:  # the members' own val/* (nobody reads them otherwise)
            self._val_epoch = torch.zeros(4, self.num_members, dtype=torch.float64,
                                          device=self.device)
            self._val_metric = member_kl(
                [dm.automaton for dm in self.data.datamodules]
            ).to(self.device)

    def validation_step(self, batch: tuple[int, np.ndarray], batch_idx: int) -> None:
        if self.trainer.sanity_checking:
            return
        _, ids = batch
        assert self._val_sums is not None
        for out in self.engine().evaluate("val", self.flat.detach(), np.asarray(ids)):
            self._val_sums[0].index_add_(0, out.members, out.kl_sums().to(torch.float64))
            self._val_sums[1].index_add_(0, out.members, out.strings.to(torch.float64))
            self._member_val(out)

    def _member_val(self, out: Any) -> None:
        """The values of each member's plain-fit validation (its loggers; no training effect)."""
        if self._val_epoch is None or self._val_metric is None:
            return
        self._val_epoch.index_add_(1, out.members, out.epoch_sums())
        update_member_kl(self._val_metric, out, weighted=False)

    def on_validation_epoch_end(self) -> None:
        """Every live member's schedule, best weights and stop; ``should_stop`` when all stopped."""
        if self.trainer.sanity_checking or self._val_sums is None:
            return
        kl, strings = self._val_sums
        # rounded to float32 as Lightning logs them: the sequential run's LR schedule, early
        # stopping and checkpointing compare these logged values
        values = (kl / strings.clamp_min(1)).to(torch.float32)
        live = torch.as_tensor(self._live_at_epoch_start, device=self.device)
        optimizer = self._optimizer()
        improved, lr = self.schedules.update(values, optimizer.lr, live)
        with torch.no_grad():
            optimizer.lr.copy_(lr)
            torch.where(improved.unsqueeze(1), self.flat.detach(), self.best_params,
                        out=self.best_params)
            now = float(self.elapsed) + time.perf_counter() - self._epoch_started
            self.elapsed.fill_(now)
            self.finish_time.copy_(torch.where(live, now, self.finish_time))
        host = values.cpu().tolist()
        for m in np.nonzero(self._live_at_epoch_start)[0]:
            self.val_history[m].append(host[m])
        self._member_val_metrics(host)
        alive = ~self.schedules.stopped
        self.log("val/kl_per_string", float(values[live].double().mean()), prog_bar=True)
        self.log("ensemble/live", float(alive.sum()))
        if not bool(alive.any()):
            self.trainer.should_stop = True

    def _member_val_metrics(self, host: list[float]) -> None:
        """Each live member's ``val/*`` as its plain fit's ``DecomposedKLCallback`` logs them."""
        if self.member_log is None or self._val_epoch is None or self._val_metric is None:
            return
        sums = self._val_epoch.cpu()
        results = self._val_metric.compute()
        for m in np.nonzero(self._live_at_epoch_start)[0]:
            if float(sums[3, m]) == 0:
                self.val_metrics[m] = {}
                continue
            values = _per_epoch("val", sums[:, m], None)
            values[MONITOR] = host[m]
            result, visits = results[m]
            values["val/kl_total"] = float(result["total"])
            dm = self.data.datamodules[m]
            event = getattr(dm, "event", None)
            if visits is None:  # no position classes: the callback's classless rule
                target = classless_entries({k: v.cpu() for k, v in result.items()},
                                           dm.automaton, event)["kl_target"]
                if event is not None and target is not None:
                    values["val/kl_target"] = target
            elif event is not None and target_visits(dm.automaton, event, visits.cpu()) > 0:
                values["val/kl_target"] = target_values(
                    {k: v.cpu() for k, v in result.items()}, event, dm.automaton
                )[0]
            self.val_metrics[m] = values

    # ------------------------------------------------------------------ test
    def test_dataloader(self) -> Ticks:
        for dm in self.data.datamodules:
            dm.setup("test")
        everyone = np.ones(self.num_members, dtype=bool)
        plan = self.data.eval_plan("test", everyone, self.device, self._cost(), self._pacing())
        return Ticks(plan)

    def on_test_epoch_start(self) -> None:
        self._test_metric = member_kl([dm.automaton for dm in self.data.datamodules]).to(
            self.device
        )
        self._test_batches = np.zeros(self.num_members, dtype=np.int64)
        self.test_results = []

    def test_step(self, batch: tuple[int, np.ndarray], batch_idx: int) -> None:
        """The members' best weights on their own test batches, into one metric."""
        _, ids = batch
        ids = np.asarray(ids)
        self._test_batches += ids >= 0
        assert self._test_metric is not None
        for out in self.engine().evaluate("test", self.best_params, ids):
            update_member_kl(self._test_metric, out)

    def on_test_epoch_end(self) -> None:
        assert self._test_metric is not None
        results = self._test_metric.compute()
        self.test_results = [
            ({k: v.detach().cpu() for k, v in r.items()},
             None if visits is None else visits.detach().cpu())
            if self._test_batches[m] else (None, None)
            for m, (r, visits) in enumerate(results)
        ]
        totals = [float(r["total"]) for r, _ in self.test_results if r is not None]
        if totals:
            self.log("test/kl_total_mean", float(np.mean(totals)))

    # ------------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        rng = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        checkpoint[CHECKPOINT_KEY] = {"names": list(self.names), "rng": rng}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get(CHECKPOINT_KEY)
        if saved is None or list(saved["names"]) != self.names:
            raise ValueError(
                "the checkpoint is not of this ensemble (its members are "
                f"{None if saved is None else list(saved['names'])}, these are {self.names})"
            )
        torch.set_rng_state(saved["rng"]["cpu"])
        if "cuda" in saved["rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state(saved["rng"]["cuda"])

    # ------------------------------------------------------------------ outcomes
    def _steps_per_epoch(self) -> Tensor:
        return torch.tensor([len(dm.batches("train")) for dm in self.data.datamodules],
                            dtype=torch.float64)

    def outcomes(self) -> list[MemberOutcome]:
        """What training left for each member (after ``trainer.fit``)."""
        schedules = self.schedules
        epochs = schedules.epochs.cpu().tolist()
        best = schedules.best.cpu().tolist()
        early = schedules.stopped_early.cpu().tolist()
        finish = self.finish_time.cpu().tolist()
        steps = self._steps_per_epoch().long().tolist()
        params = self.best_params.detach().cpu()
        return [
            MemberOutcome(
                best_state=self.layout.state_dict(params[m]),
                best_val_loss=best[m] if np.isfinite(best[m]) else None,
                epochs=int(epochs[m]),
                train_time_s=float(finish[m]),
                stopped_early=bool(early[m]),
                steps=int(epochs[m]) * steps[m],
                val_history=list(self.val_history[m]),
                step_losses=self._member_steps(m),
            )
            for m in range(self.num_members)
        ]

    def _member_steps(self, member: int) -> list[float]:
        """Member ``member``'s recorded step losses, in order (empty without ``record_steps``)."""
        return [float(losses[member]) for ids, losses in self.step_log if ids[member] >= 0]
