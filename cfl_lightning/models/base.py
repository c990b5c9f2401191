"""The shared LightningModule of the language models: KL-to-automaton loss, optimizer, metrics.

Subclasses (:class:`~cfl_lightning.models.LSTMLanguageModel`,
:class:`~cfl_lightning.models.TransformerLanguageModel`) build the network and implement
:meth:`LanguageModel.forward`; everything else (loss, logging, optimizer and scheduler, the
decomposed KL on the validation and test strings) lives here.

Token ids follow ``docs/internal_contract.md``: symbols ``0..S-1``, EOS ``S``, BOS ``S+1``,
PAD ``S+2``; embeddings cover ``S+3`` ids, outputs are log-probabilities over ``S+1`` classes
(EOS last).
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from torch import Tensor, nn

from cfl_lightning.models.losses import cross_entropy_per_position, kl_per_position, per_string
from cfl_lightning.models.sizing import count_parameters

__all__ = ["LanguageModel", "MONITOR", "INIT_RANGE"]

#: The validation metric that the LR scheduler, early stopping and checkpointing monitor.
MONITOR = "val/kl_per_string"
#: Parameters are initialized uniformly in ``[-INIT_RANGE, INIT_RANGE]`` (layer norms: 1 and 0).
INIT_RANGE = 0.1

LossName = Literal["kl", "ce"]


class LanguageModel(pl.LightningModule):
    """Base class: a next-symbol model trained against a PFSA's next-symbol distributions.

    Loss (``loss="kl"``, the paper's eq. ``training-loss``): for each string ``y``,
    ``L(y) = sum_{t=1}^{|y|+1} KL(p_A(. | y_<t) || p_theta(. | y_<t))`` over all real positions
    (including the final EOS step; padding masked). The optimized loss is the mean of ``L(y)``
    over the strings of the batch. ``loss="ce"`` optimizes next-symbol cross-entropy on the
    sampled ``target_ids`` instead (same per-string normalization), for comparison.

    Logged metrics, once per epoch (``STAGE`` is ``train``, ``val`` or ``test``; exact epoch
    aggregates, accumulated as sums over the epoch's batches):

    * ``STAGE/kl_per_string``: the per-position KL summed over all positions of all strings,
      divided by the number of strings.
    * ``STAGE/kl_per_token``: the same sum divided by the number of real positions (each string
      of length ``n`` has ``n + 1``: its symbols and EOS).
    * ``STAGE/ce_per_string``: next-symbol cross-entropy, summed likewise, per string.
    * ``train/loss``: the optimized loss over the epoch (``train/kl_per_string`` or
      ``train/ce_per_string``; during training with dropout active).
    * ``val/kl_total`` and ``val/kl_target``: the decomposed KL (``DecomposedKL``) on the
      validation strings, total and the intervened event's contribution (when there is one).
    * at test end: every decomposed contribution (``kl/state/NAME``, ``kl/symbol/SYM``,
      ``kl/transition/SRC:SYM``, ``kl_unweighted/...``), ``kl_total``, ``kl_target`` and
      ``kl_target_unweighted``.

    ``val/kl_per_string`` (:data:`MONITOR`) drives ``ReduceLROnPlateau``, early stopping and
    checkpointing.

    Args:
        num_symbols: alphabet size ``|S|`` (the CLI links it from ``data.num_symbols``).
        param_budget: the model is sized to the largest width whose parameter count does not
            exceed this; the actual count is the ``num_parameters`` attribute (and hparam).
        num_layers: number of recurrent / transformer layers.
        dropout: dropout probability.
        lr: Adam learning rate.
        lr_factor: ``ReduceLROnPlateau`` factor.
        lr_patience: validation checks without improvement before the LR is multiplied by
            ``lr_factor``.
        loss: ``"kl"`` (KL to the automaton) or ``"ce"`` (next-symbol cross-entropy).
    """

    def __init__(
        self,
        num_symbols: int = 2,
        param_budget: int = 128_000,
        num_layers: int = 1,
        dropout: float = 0.1,
        lr: float = 0.01,
        lr_factor: float = 0.5,
        lr_patience: int = 5,
        loss: LossName = "kl",
    ) -> None:
        super().__init__()
        if num_symbols < 1:
            raise ValueError(f"num_symbols must be >= 1, got {num_symbols}")
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if loss not in ("kl", "ce"):
            raise ValueError(f"loss must be 'kl' or 'ce', got {loss!r}")
        self.num_symbols = int(num_symbols)
        self.num_classes = self.num_symbols + 1  # symbols + EOS
        self.vocab_size = self.num_symbols + 3  # symbols, EOS, BOS, PAD
        self.eos_id, self.bos_id, self.pad_id = num_symbols, num_symbols + 1, num_symbols + 2
        self.param_budget = int(param_budget)
        self.loss_name = loss
        self.lr, self.lr_factor, self.lr_patience = float(lr), float(lr_factor), int(lr_patience)
        self.num_parameters = 0
        self.size_summary = {"num_parameters": 0}
        # Decomposed-KL metrics and the automaton, built in setup(); kept in a plain dict so they
        # are neither submodules nor part of the state dict / checkpoint.
        self._eval: dict[str, Any] = {}
        # per-stage running sums of the loss statistics, logged at epoch end
        self._sums: dict[str, dict[str, Tensor]] = {}
        #: The decomposed KL on the test strings (CPU tensors), filled at the end of testing.
        self.test_kl_result: dict[str, Tensor] | None = None

    # ------------------------------------------------------------------ construction helpers
    def _finish_init(self, **sizes: int) -> None:
        """Initialize the weights, save the init args as hparams and record the parameter count.

        Call at the end of a subclass ``__init__``. ``sizes`` (the chosen widths) and the
        parameter count are kept in :attr:`size_summary` and logged as hyperparameters when
        fitting starts; they are not put into ``hparams``, which must hold init args only (the
        CLI re-instantiates models from a checkpoint's hparams).
        """
        self.reset_parameters()
        self.num_parameters = count_parameters(self)
        caller = inspect.currentframe()
        self.save_hyperparameters(frame=caller.f_back if caller is not None else None)
        self.size_summary: dict[str, int] = {**sizes, "num_parameters": self.num_parameters}

    def on_fit_start(self) -> None:
        """Log the actual sizes and parameter count as hyperparameters."""
        for logger in self.loggers:
            logger.log_hyperparams(dict(self.size_summary))

    def reset_parameters(self) -> None:
        """Uniform init in ``[-0.1, 0.1]`` for every parameter; layer norms weight 1, bias 0."""
        with torch.no_grad():
            for parameter in self.parameters():
                parameter.uniform_(-INIT_RANGE, INIT_RANGE)
            for module in self.modules():
                if isinstance(module, nn.LayerNorm):
                    if module.weight is not None:
                        module.weight.fill_(1.0)
                    if module.bias is not None:
                        module.bias.zero_()

    def forward(self, input_ids: Tensor) -> Tensor:  # pragma: no cover - abstract
        """``[B, T]`` token ids -> ``[B, T, S+1]`` next-symbol log-probabilities."""
        raise NotImplementedError

    # ------------------------------------------------------------------ losses
    def _losses(self, batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor], Tensor]:
        """Loss and per-batch sums (``kl``, ``ce``, ``strings``, ``tokens``) of one batch."""
        log_probs = self(batch["input_ids"])
        mask = batch["mask"].bool()
        kl_sums, _ = per_string(kl_per_position(batch["target_probs"], log_probs, mask), mask)
        ce = cross_entropy_per_position(log_probs, batch["target_ids"], mask)
        ce_sums, _ = per_string(ce, mask)
        loss = (kl_sums if self.loss_name == "kl" else ce_sums).mean()
        sums = {
            "kl": kl_sums.detach().sum(),
            "ce": ce_sums.detach().sum(),
            "strings": torch.tensor(float(mask.shape[0]), device=mask.device),
            "tokens": mask.sum().to(kl_sums.dtype),
        }
        return loss, sums, log_probs

    def _accumulate(self, stage: str, sums: dict[str, Tensor]) -> None:
        # Per-step self.log calls cost more than an LSTM step here; sums are logged per epoch.
        acc = self._sums.setdefault(stage, {})
        for key, value in sums.items():
            acc[key] = acc[key] + value if key in acc else value

    def _log_epoch(self, stage: str) -> None:
        """Log ``STAGE/{kl,ce}_per_string`` and ``STAGE/kl_per_token`` over the whole epoch."""
        acc = self._sums.pop(stage, None)
        if not acc:
            return
        trainer = self._trainer
        if trainer is not None and trainer.world_size > 1:
            acc = {k: trainer.strategy.reduce(v, reduce_op="sum") for k, v in acc.items()}
        strings, tokens = acc["strings"].clamp_min(1), acc["tokens"].clamp_min(1)
        values = {
            "kl_per_string": acc["kl"] / strings,
            "kl_per_token": acc["kl"] / tokens,
            "ce_per_string": acc["ce"] / strings,
        }
        if stage == "train":
            values["loss"] = values["kl_per_string" if self.loss_name == "kl" else "ce_per_string"]
        for name, value in values.items():
            self.log(f"{stage}/{name}", value, prog_bar=stage == "val" and name == "kl_per_string")

    def on_train_epoch_start(self) -> None:
        self._sums.pop("train", None)

    def on_train_epoch_end(self) -> None:
        self._log_epoch("train")

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss, sums, _ = self._losses(batch)
        self._accumulate("train", sums)
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step("val", batch)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._eval_step("test", batch)

    def _eval_step(self, stage: str, batch: dict[str, Tensor]) -> None:
        _, sums, log_probs = self._losses(batch)
        self._accumulate(stage, sums)
        metric = self._eval.get(stage)
        if metric is not None:
            metric.update(log_probs.detach(), batch["states"], batch["mask"].bool())

    # ------------------------------------------------------------------ decomposed KL
    def setup(self, stage: str) -> None:
        """Build the decomposed-KL metrics from ``trainer.datamodule.pfsa`` when there is one.

        Without a datamodule (plain dataloaders) or without an automaton on it, the decomposed
        KL is skipped and only the loss-based metrics are logged.
        """
        trainer = self._trainer
        datamodule = getattr(trainer, "datamodule", None) if trainer is not None else None
        pfsa = getattr(datamodule, "pfsa", None)
        if pfsa is None:
            self._eval = {}
            return
        from cfl_lightning.metrics import DecomposedKL

        if self._eval.get("pfsa") is not pfsa:
            self._eval = {
                "pfsa": pfsa,
                "event": getattr(datamodule, "event", None),
                "val": DecomposedKL(pfsa),
                "test": DecomposedKL(pfsa),
            }

    def _move_metric(self, stage: str) -> None:
        self._sums.pop(stage, None)
        metric = self._eval.get(stage)
        if metric is not None:
            metric.to(self.device)
            metric.reset()

    def on_validation_epoch_start(self) -> None:
        self._move_metric("val")

    def on_test_epoch_start(self) -> None:
        self._move_metric("test")

    def _target(self, result: dict[str, Tensor]) -> tuple[float, float] | None:
        event = self._eval.get("event")
        if event is None:
            return None
        from cfl_lightning.metrics import target_values

        return target_values(result, event, self._eval["pfsa"])

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")
        metric = self._eval.get("val")
        if metric is None or not _has_updates(metric):
            return
        result = metric.compute()
        self.log("val/kl_total", float(result["total"]))
        target = self._target(result)
        if target is not None:
            self.log("val/kl_target", target[0])
        metric.reset()

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")
        metric = self._eval.get("test")
        if metric is None or not _has_updates(metric):
            return
        from cfl_lightning.metrics import kl_log_dict

        result = metric.compute()
        self.test_kl_result = {k: v.detach().cpu() for k, v in result.items()}
        self.log("kl_total", float(result["total"]))
        for name, value in kl_log_dict(result, self._eval["pfsa"]).items():
            if name != "kl/total":  # logged as kl_total above
                self.log(name, float(value))
        target = self._target(result)
        if target is not None:
            self.log("kl_target", target[0])
            self.log("kl_target_unweighted", target[1])
        metric.reset()

    # ------------------------------------------------------------------ optimization
    def configure_optimizers(self) -> dict[str, Any]:
        """Adam, with ``ReduceLROnPlateau`` on :data:`MONITOR` stepped after every validation."""
        optimizer = torch.optim.Adam(self.parameters(), lr=self.lr)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="min", factor=self.lr_factor, patience=self.lr_patience
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {
                "scheduler": scheduler,
                "monitor": MONITOR,
                "interval": "epoch",
                "frequency": 1,
                # a run without validation (limit_val_batches=0) keeps its LR instead of failing
                "strict": False,
            },
        }


def _has_updates(metric: Any) -> bool:
    """Whether a torchmetrics metric saw at least one batch (compute() warns otherwise)."""
    return bool(getattr(metric, "update_count", getattr(metric, "_update_count", 1)))


def sinusoidal_positions(length: int, dim: int, *, device: torch.device | None = None) -> Tensor:
    """``[length, dim]`` sinusoidal position encodings (Vaswani et al., 2017), for any length."""
    position = torch.arange(length, dtype=torch.float32, device=device)[:, None]
    half = (dim + 1) // 2
    freq = torch.exp(
        torch.arange(half, dtype=torch.float32, device=device) * (-math.log(10000.0) * 2 / dim)
    )
    angles = position * freq[None, :]
    table = torch.zeros(length, 2 * half, device=device)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table[:, :dim]
