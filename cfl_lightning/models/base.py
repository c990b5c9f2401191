"""The shared LightningModule of the shipped language models: loss, training metrics, optimizer.

Subclasses (:class:`~cfl_lightning.models.LSTMLanguageModel`,
:class:`~cfl_lightning.models.TransformerLanguageModel`) build the network and implement
:meth:`LanguageModel.forward`; the training loss (:func:`~cfl_lightning.kl_to_automaton_loss`),
training metrics, optimizer and scheduler live here. Evaluation (validation/test losses, the
decomposed KL) is not the model's: it is :class:`~cfl_lightning.callbacks.DecomposedKLCallback`,
the same callback any user model gets.

Token ids follow ``docs/internal_contract.md`` (:class:`~cfl_lightning.data.tokens.TokenIds`):
symbols ``0..S-1``, EOS ``S``, BOS ``S+1``, PAD ``S+2``; embeddings cover ``S+3`` ids, outputs
are log-probabilities over ``S+1`` classes (EOS last).
"""

from __future__ import annotations

import copy
import inspect
import warnings
from typing import Any, Literal, Protocol

import lightning.pytorch as pl
import torch
from torch import Tensor, nn

from cfl_lightning.callbacks.decomposed_kl import MONITOR, DecomposedKLCallback
from cfl_lightning.data.tokens import TokenIds
from cfl_lightning.losses import LOSSES, training_loss
from cfl_lightning.metrics.epoch_loss import EPOCH_LOSS_NAMES, EpochLoss
from cfl_lightning.models.construction import cli_is_instantiating, finishing_init
from cfl_lightning.models.sizing import count_parameters

__all__ = ["LanguageModel", "StackedNetwork", "MONITOR", "INIT_RANGE"]

#: Parameters are initialized uniformly in ``[-INIT_RANGE, INIT_RANGE]`` (layer norms: 1 and 0).
INIT_RANGE = 0.1

LossName = Literal["kl", "ce"]


class StackedNetwork(Protocol):
    """The forward of M models of one architecture at once, from stacked ``[M, ...]`` weights.

    What :meth:`LanguageModel.stacked_network` returns, and what an ensemble's stacked engine
    calls on packed rows: each row of ``input_ids`` holds several strings side by side, each
    string's positions counting from 0 (``position``) in a slot of its own (``slot``).
    """

    def __call__(
        self, w: dict[str, Tensor], input_ids: Tensor, position: Tensor, slot: Tensor,
        training: bool,
    ) -> Tensor:
        """``[M, R, L]`` packed token ids -> ``[M, R, L, S+1]`` log-probabilities.

        Args:
            w: ``[M, ...]`` stacked parameters, named as in the model's ``named_parameters``.
            input_ids: ``[M, R, L]`` int64 token ids.
            position: ``[M, R, L]`` the position inside its string (0: a string starts).
            slot: ``[M, R, L]`` the slot (string) id inside the row.
            training: dropout on.
        """


class LanguageModel(pl.LightningModule):
    """Base class: a next-symbol model trained against a PFSA's next-symbol distributions.

    Loss (``loss="kl"``, the paper's eq. ``training-loss``): for each string ``y``,
    ``L(y) = sum_{t=1}^{|y|+1} KL(p_A(. | y_<t) || p_theta(. | y_<t))`` over all real positions
    (including the final EOS step; padding masked). The optimized loss is the mean of ``L(y)``
    over the strings of the batch. ``loss="ce"`` optimizes next-symbol cross-entropy on the
    sampled ``target_ids`` instead (same per-string normalization), for comparison.

    Logged metrics, once per epoch (``STAGE`` is ``train``, ``val`` or ``test``; exact epoch
    aggregates, accumulated as sums over the epoch's batches; ``val``/``test`` and the decomposed
    KL come from :class:`~cfl_lightning.callbacks.DecomposedKLCallback`, which the model adds
    through ``configure_callbacks`` when the trainer has none):

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
    checkpointing. The LR is multiplied by ``lr_factor`` at the ``lr_patience``-th validation in
    a row without a decrease of :data:`MONITOR` (the paper: "after 5 checkpoints with no
    decrease"; torch's ``ReduceLROnPlateau`` counts one more, so it gets
    ``patience=lr_patience - 1``). Any decrease counts as improvement (``threshold=0``, as for
    early stopping's ``min_delta=0``).

    This signature is the one place of the arguments every shipped model shares. A subclass
    names its own arguments and the shared ones that lead its signature (``num_symbols``,
    ``param_budget``, ``num_layers``: their documentation or default differ per architecture)
    and passes the rest on as ``**training`` (``dropout``, ``lr``, ``lr_factor``,
    ``lr_patience``, ``loss``); LightningCLI (jsonargparse) follows ``super().__init__(...,
    **training)`` and shows them, typed and with these defaults and descriptions, as the
    subclass's ``model.init_args.*``. Every argument, defaults included, is saved as a
    hyperparameter in the subclass's signature order.

    **Writing a subclass** (the contract; a complete example, a GRU, in
    ``docs/guide/models.md``): its ``__init__`` calls ``super().__init__(...)`` first, then
    builds its layers; it implements :meth:`forward`. Nothing else is called: once the
    outermost ``__init__`` returns, the package initialises the parameters
    (:meth:`reset_parameters`: uniform in ``[-INIT_RANGE, INIT_RANGE]``, layer norms 1 and 0;
    override it to choose another initialisation, never call it), counts them
    (:attr:`num_parameters`) and saves the hyperparameters. Optional: :meth:`chosen_sizes`
    (widths to record), :meth:`stacked_network` (the stacked engine of ensembles). A subclass
    that keeps :meth:`training_step`, :meth:`configure_optimizers`, ``optimizer_step`` and
    ``configure_gradient_clipping`` trains under ``sweep --ensemble M`` as in its own runs.
    What it may read after ``super().__init__``:

    * ``num_symbols`` (``|S|``), ``vocab_size`` (input ids, ``S + 3``: the embedding's rows),
      ``num_classes`` (outputs, ``S + 1``, EOS last), ``eos_id``, ``bos_id``, ``pad_id``;
    * ``param_budget``, ``dropout_p`` (the ``dropout`` argument: the layers' dropout
      probability), ``lr``, ``lr_factor``, ``lr_patience``, ``loss_name``;
    * after construction, ``num_parameters`` and ``size_summary``.

    Args:
        num_symbols: alphabet size ``|S|`` (the CLI links it from ``data.num_symbols``).
        param_budget: the model is sized to the largest width whose parameter count does not
            exceed this; the actual count is the ``num_parameters`` attribute (and hparam).
        num_layers: number of recurrent / transformer layers.
        dropout: dropout probability.
        lr: Adam learning rate.
        lr_factor: ``ReduceLROnPlateau`` factor.
        lr_patience: validation checks without improvement before reducing the LR (>= 1).
        loss: ``"kl"`` (KL to the automaton) or ``"ce"`` (cross-entropy).
    """

    #: the metrics the model logs itself (after every training epoch)
    TRAINING_METRICS = (*(f"train/{name}" for name in EPOCH_LOSS_NAMES), "train/loss")

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
        if not (isinstance(lr, (int, float)) and lr >= 0):
            raise ValueError(f"lr (the learning rate) must be non-negative, got {lr}")
        if not 0.0 <= lr_factor < 1.0:
            raise ValueError(f"lr_factor must be in [0, 1), got {lr_factor}")
        if isinstance(lr_patience, bool) or lr_patience != int(lr_patience) or lr_patience < 1:
            raise ValueError(
                f"lr_patience must be an integer >= 1 (validations without improvement before "
                f"the LR is reduced), got {lr_patience}"
            )
        if param_budget < 1:
            raise ValueError(f"param_budget must be positive, got {param_budget}")
        if loss not in LOSSES:
            raise ValueError(f"loss must be 'kl' or 'ce', got {loss!r}")
        self.num_symbols = int(num_symbols)
        ids = TokenIds(self.num_symbols)
        self.num_classes = ids.num_classes  # symbols + EOS
        self.vocab_size = ids.vocab_size  # symbols, EOS, BOS, PAD
        self.eos_id, self.bos_id, self.pad_id = ids.eos, ids.bos, ids.pad
        self.param_budget = int(param_budget)
        self.dropout_p = dropout  # as given: the subclass's network takes it
        self.loss_name = loss
        self.lr, self.lr_factor, self.lr_patience = float(lr), float(lr_factor), int(lr_patience)
        self.num_parameters = 0
        self.size_summary = {"num_parameters": 0}
        #: epoch sums of the training loss (torchmetrics states, not in the state dict)
        self.train_loss = EpochLoss()

    # ------------------------------------------------------------------ construction
    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every subclass's ``__init__`` is finished by :meth:`_after_init` once the outermost
        one returns (:func:`~cfl_lightning.models.construction.finishing_init`)."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "finishes_language_model", False):
            cls.__init__ = finishing_init(init, LanguageModel._after_init)  # type: ignore[misc]

    def _after_init(self, arguments: dict[str, Any]) -> None:
        """Finish a constructed subclass (called once, after its ``__init__``; never by it).

        In this order: :meth:`reset_parameters` (the package's initialisation, or the
        subclass's override), :attr:`num_parameters`, the hyperparameters (the call's
        ``arguments``, or LightningCLI's parsed ``init_args`` when it instantiates the model,
        completed by :meth:`_add_shared_defaults`) and :attr:`size_summary` (the subclass's
        :meth:`chosen_sizes` and the parameter count; logged as hyperparameters when fitting
        starts, not put into ``hparams``, which must hold init args only: the CLI
        re-instantiates models from a checkpoint's hparams).
        """
        self.reset_parameters()
        self.num_parameters = count_parameters(self)
        if cli_is_instantiating():
            self.save_hyperparameters()  # LightningCLI's record of the call
        else:
            self.save_hyperparameters(arguments)
            self._hparams_name = "kwargs"  # as Lightning names a save of every init argument
        self._add_shared_defaults()
        sizes = self.__dict__.pop("_legacy_sizes", None)
        sizes = self.chosen_sizes() if sizes is None else sizes
        self.size_summary: dict[str, int] = {**sizes, "num_parameters": self.num_parameters}

    def chosen_sizes(self) -> dict[str, int]:
        """The widths this model chose (from its budget or its arguments), by name.

        Override to record them: they join :attr:`size_summary` before ``num_parameters``
        (the shipped LSTM: ``{"hidden_size_actual": ...}``). Default: none.
        """
        return {}

    def _finish_init(self, **sizes: int) -> None:
        """Deprecated: nothing needs calling any more (kept for subclasses written before).

        The model is finished after ``__init__`` returns (:meth:`_after_init`); ``sizes`` are
        recorded in place of :meth:`chosen_sizes`.
        """
        warnings.warn(
            "LanguageModel._finish_init is deprecated and not needed: the model is initialised "
            "after __init__ returns; override chosen_sizes() to record sizes",
            DeprecationWarning, stacklevel=2,
        )
        self.__dict__["_legacy_sizes"] = dict(sizes)

    def _add_shared_defaults(self) -> None:
        """Complete ``hparams`` with the shared arguments a subclass left to their defaults.

        A subclass passes the shared arguments on as ``**training``, so the call's arguments
        (:func:`~cfl_lightning.models.construction.init_arguments`) hold only those given.
        The missing ones are added at
        :class:`LanguageModel`'s defaults, every key in the order of the subclass's signature
        followed by ours (the order the keys had when each subclass listed them all). Under
        LightningCLI the hyperparameters are the parsed ``init_args`` (all of them): kept as
        they are.
        """
        shared = {
            name: parameter.default
            for name, parameter in inspect.signature(LanguageModel.__init__).parameters.items()
            if parameter.default is not inspect.Parameter.empty
        }
        given = dict(self.hparams)
        if all(name in given for name in shared):
            return
        own = [
            name
            for name, parameter in inspect.signature(type(self).__init__).parameters.items()
            if parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and name in given
        ]
        ordered = {name: given.pop(name) for name in own}
        for name, default in shared.items():
            ordered.setdefault(name, given.pop(name, default))
        ordered.update(given)
        self.hparams.clear()
        self.hparams.update(ordered)
        self._hparams_initial = copy.deepcopy(self._hparams)

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

    # ------------------------------------------------------------------ ensembles
    #: the engine an ensemble of this architecture runs on a CPU unless told otherwise:
    #: ``"stacked"`` (:meth:`stacked_network` on packed rows) or ``"loop"`` (each member's own
    #: :meth:`forward` in turn); without a stacked network always ``"loop"``
    ENSEMBLE_CPU_ENGINE = "stacked"

    def stacked_network(self) -> StackedNetwork | None:
        """The hook of ensembles: this architecture's forward over a member dimension.

        :class:`~cfl_lightning.ensemble.EnsembleLanguageModel` trains M models of one class
        from one stacked ``[M, P]`` parameter. A subclass that returns a
        :class:`StackedNetwork` (the M members' :meth:`forward` from stacked weights, on packed
        rows; the shipped LSTM's batched recurrence, the transformer's block-causal packing)
        gets the stacked engine: one batched computation for all members (GPUs). The default,
        None, gives the loop engine: each member's own :meth:`forward` in turn
        (``torch.func.functional_call`` with its weights), so that any subclass can be
        ensembled; at dropout 0 each member then trains exactly as its own run.

        Returns:
            the stacked forward (it must equal :meth:`forward` member by member, dropout
            aside), or None.
        """
        return None

    # ------------------------------------------------------------------ training
    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        """The loss of one batch (:func:`~cfl_lightning.losses.training_loss`:
        :func:`~cfl_lightning.kl_to_automaton_loss` for ``loss="kl"``, the next-symbol
        cross-entropy per string for ``loss="ce"``); epoch sums accumulate."""
        scores = self(batch["input_ids"])
        self.train_loss.update(torch.log_softmax(scores, dim=-1), batch)
        return training_loss(self.loss_name, scores, batch)

    def on_train_epoch_start(self) -> None:
        self.train_loss.reset()

    def on_train_epoch_end(self) -> None:
        """Log ``train/{kl,ce}_per_string``, ``train/kl_per_token`` and ``train/loss`` over the
        whole epoch (sums reduced across processes first)."""
        values = self.train_loss.compute()
        if self.train_loss.num_strings() == 0:
            return
        values["loss"] = values["kl_per_string" if self.loss_name == "kl" else "ce_per_string"]
        sync = self._trainer is not None and self._trainer.world_size > 1
        for name, value in values.items():
            self.log(f"train/{name}", float(value), sync_dist=sync)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Nothing: :class:`~cfl_lightning.callbacks.DecomposedKLCallback` evaluates."""

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Nothing: :class:`~cfl_lightning.callbacks.DecomposedKLCallback` evaluates."""

    def configure_callbacks(self) -> list[pl.Callback]:
        """A :class:`DecomposedKLCallback` unless the trainer already has one (the CLI adds it),
        so that a plain ``Trainer`` logs :data:`MONITOR` for the LR schedule."""
        trainer = self._trainer
        if trainer is not None and any(
            isinstance(c, DecomposedKLCallback) for c in trainer.callbacks
        ):
            return []
        return [DecomposedKLCallback()]

    @property
    def test_kl_result(self) -> dict[str, Tensor] | None:
        """The decomposed KL of the last test run (the trainer's ``DecomposedKLCallback``)."""
        trainer = self._trainer
        if trainer is None:
            return None
        callback = next(
            (c for c in trainer.callbacks if isinstance(c, DecomposedKLCallback)), None
        )
        return None if callback is None else callback.test_result

    # ------------------------------------------------------------------ optimization
    def configure_optimizers(self) -> dict[str, Any]:
        """Adam, with ``ReduceLROnPlateau`` on :data:`MONITOR` stepped after every validation.

        The LR is multiplied by ``lr_factor`` exactly at the ``lr_patience``-th validation in a
        row without a decrease (torch reduces when its bad-epoch count *exceeds* ``patience``).
        """
        optimizer = torch.optim.Adam(self.parameters(), lr=self.lr)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer,
            mode="min",
            factor=self.lr_factor,
            patience=self.lr_patience - 1,
            threshold=0.0,
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

