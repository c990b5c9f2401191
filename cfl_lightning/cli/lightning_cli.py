"""``CflLightningCLI``: the LightningCLI of ``fit``/``validate``/``test`` (imports Lightning).

On top of LightningCLI's Trainer, model and data groups:

* ``--model`` takes any ``LightningModule`` class (default ``LSTMLanguageModel``);
  ``model.init_args.num_symbols`` is linked from ``data.num_symbols`` when the class takes it.
  Switching the class (``--model=my_pkg.MyModel`` after a config written for the LSTM) keeps
  only the ``init_args`` that the new class accepts.
* ``--early_stopping.*`` and ``--checkpoint.*``: early stopping and checkpointing on
  ``val/kl_per_string``.
* Callbacks added by default: :class:`~cfl_lightning.callbacks.DecomposedKLCallback` (unless the
  config lists one in ``trainer.callbacks``) and :class:`~cfl_lightning.callbacks.ResultsWriter`
  (``--results.path`` overrides where ``results.json`` goes).
* ``fit`` ends by testing the best checkpoint (the ``after_fit`` hook); the ``ResultsWriter``
  writes ``results.json`` at the end of that test run.
"""

from __future__ import annotations

import inspect
import json
import os
from typing import Any

from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger

from cfl_lightning.callbacks import MONITOR, DecomposedKLCallback, ResultsWriter
from cfl_lightning.data import PFADataModule
from cfl_lightning.models import LanguageModel

__all__ = ["CflLightningCLI", "DEFAULT_MODEL"]

DEFAULT_MODEL = "cfl_lightning.models.LSTMLanguageModel"


def _takes(cls: type, name: str) -> bool:
    """Whether ``cls(...)`` accepts a keyword argument ``name``."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


class CflLightningCLI(LightningCLI):
    """LightningCLI with the data -> model link, early stopping, checkpointing and results.

    Attributes:
        results_writer: the run's :class:`ResultsWriter` (``results_writer.written`` is the path
            of ``results.json`` once written).
    """

    results_writer: ResultsWriter | None = None

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments(
            "data.num_symbols", "model.init_args.num_symbols", apply_on="instantiate"
        )
        parser.add_lightning_class_args(EarlyStopping, "early_stopping")
        parser.set_defaults(
            {
                "early_stopping.monitor": MONITOR,
                "early_stopping.mode": "min",
                "early_stopping.patience": 10,
            }
        )
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": MONITOR,
                "checkpoint.mode": "min",
                "checkpoint.save_top_k": 1,
                "checkpoint.filename": "best-{epoch:03d}",
            }
        )
        parser.add_argument(
            "--results.path",
            type=str | None,
            default=None,
            help="where to write results.json (default: <first logger's log_dir>/results.json)",
        )
        parser.set_defaults({"model": {"class_path": DEFAULT_MODEL}})

    def _subconfig(self) -> Any:
        return self.config[self.subcommand] if self.subcommand else self.config

    def before_instantiate_classes(self) -> None:
        """Resolve logger directories; add the evaluation and results callbacks.

        A relative logger ``save_dir`` (the configs use ``.``) is taken relative to
        ``trainer.default_root_dir``, so ``--trainer.default_root_dir=DIR`` moves logs,
        checkpoints and ``results.json`` together. Under a W&B agent (``WANDB_RUN_ID`` set) an
        unversioned CSV logger uses the run id as its version, so agents sharing a directory
        never collide.
        """
        config = self._subconfig()
        trainer = config.get("trainer")
        loggers = trainer.get("logger") if trainer is not None else None
        if not isinstance(loggers, list):
            loggers = [loggers] if loggers is not None and hasattr(loggers, "init_args") else []
        root = trainer.get("default_root_dir") or os.getcwd() if trainer is not None else "."
        run_id = os.environ.get("WANDB_RUN_ID")
        for entry in loggers:
            init = getattr(entry, "init_args", None)
            if init is None:
                continue
            save_dir = init.get("save_dir")
            if save_dir is not None and not os.path.isabs(str(save_dir)):
                init["save_dir"] = os.path.normpath(os.path.join(str(root), str(save_dir)))
            if run_id and str(entry.class_path).endswith("CSVLogger") and init.get("version") is None:
                init["version"] = run_id

        listed = trainer.get("callbacks") if trainer is not None else None
        listed = listed if isinstance(listed, list) else [listed] if listed else []
        has_kl = any(
            str(getattr(c, "class_path", "")).endswith("DecomposedKLCallback") for c in listed
        )
        results = config.get("results")
        self.results_writer = ResultsWriter(path=results.get("path") if results else None)
        extra: list[Any] = [] if has_kl else [DecomposedKLCallback()]
        self.trainer_defaults["callbacks"] = [*extra, self.results_writer]

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        # Without a configured logger, log to CSV under default_root_dir (no TensorBoard here).
        config = self._get(self.config_init, "trainer", default={})
        if config.get("logger") in (None, True) and "logger" not in kwargs:
            root = config.get("default_root_dir") or os.getcwd()
            kwargs["logger"] = CSVLogger(save_dir=root, name="csv")
        return super().instantiate_trainer(**kwargs)

    def _full_config(self) -> dict[str, Any]:
        """The run's config as plain JSON, with the linked ``num_symbols`` actually used."""
        config = self._subconfig()
        full = json.loads(self._parser(self.subcommand).dump(config, format="json", skip_unset=False))
        init_args = full.setdefault("model", {}).setdefault("init_args", {})
        if _takes(type(self.model), "num_symbols"):
            init_args["num_symbols"] = self.datamodule.num_symbols
        full.pop("results", None)
        return full

    def _log_hparams(self) -> None:
        # Lightning's automatic hparams logging (disabled in trainer_defaults) would merge the
        # model's and the datamodule's hparams and fail on ``num_symbols``: the model holds
        # the automaton's alphabet size (linked), the datamodule its constructor argument
        # (only used by the "random" generator). Log both, nested, instead.
        model = {k: v for k, v in self.model.hparams.items() if not k.startswith("_")}
        if isinstance(self.model, LanguageModel):
            model.update(self.model.size_summary)
        # "model_hparams", not "model": a W&B sweep parameter named "model" locks that key.
        params: dict[str, Any] = {
            "model_hparams": model,
            "model_class": type(self.model).__name__,
        }
        if isinstance(self.datamodule, PFADataModule):
            params["data"] = {
                k: v for k, v in self.datamodule.hparams.items() if not k.startswith("_")
            }
        for logger in self.trainer.loggers:
            logger.log_hyperparams(params)

    def _before_run(self) -> None:
        self._log_hparams()
        if self.results_writer is not None:
            self.results_writer.config = self._full_config()

    def before_fit(self) -> None:
        self._before_run()

    def before_validate(self) -> None:
        self._before_run()

    def before_test(self) -> None:
        self._before_run()

    def after_fit(self) -> None:
        """Test the best checkpoint (the ``ResultsWriter`` then writes ``results.json``)."""
        trainer = self.trainer
        if trainer.interrupted:
            return
        callback = trainer.checkpoint_callback
        best = isinstance(callback, ModelCheckpoint) and bool(callback.best_model_path)
        trainer.test(
            self.model,
            datamodule=self.datamodule,
            ckpt_path="best" if best else None,
            verbose=False,
        )

