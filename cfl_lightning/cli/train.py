"""``python -m cfl_lightning fit|validate|test``: LightningCLI for the PFSA language models.

Usage::

    python -m cfl_lightning fit --config configs/parity_starfree.yaml
    python -m cfl_lightning fit --config configs/random_topology.yaml \\
        --model=TransformerLanguageModel
    python -m cfl_lightning fit --data.generator parity --data.eta 0.3 --trainer.max_epochs 20
    python -m cfl_lightning test --config CONFIG --ckpt_path PATH/TO/best.ckpt

The model is chosen by ``model.class_path`` in a YAML config or ``--model=LSTMLanguageModel`` /
``--model=TransformerLanguageModel`` (default: LSTM); its flags (``--model.init_args.X``) must
come after ``--model=...``. ``model.init_args.num_symbols`` is linked from ``data.num_symbols``
(the automaton's alphabet size). Beyond the Trainer, model and data groups there are
``--early_stopping.*`` (EarlyStopping on ``val/kl_per_string``, patience 10) and
``--checkpoint.*`` (ModelCheckpoint keeping the best ``val/kl_per_string``).

``fit`` then tests the best checkpoint on the test strings, writes ``results.json`` (see
:mod:`cfl_lightning.results`) into the run's log directory and prints ``results: <path>``.

Environment:

* ``WANDB_MODE``: respected; when neither it nor W&B credentials are configured, the CLI sets
  ``offline`` before wandb is imported (see :mod:`cfl_lightning.cli.wandb_mode`).
* ``CFL_LIGHTNING_THREADS``: torch CPU threads; default 1 on machines without CUDA (several
  training processes with several threads each on a small machine slow each other down by
  orders of magnitude).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from cfl_lightning.cli.wandb_mode import ensure_wandb_mode

__all__ = ["main", "build_cli", "PROG", "configure_threads"]

PROG = "python -m cfl_lightning"
THREADS_ENV = "CFL_LIGHTNING_THREADS"


def configure_threads(environ: dict[str, str] | None = None) -> int | None:
    """Set torch's CPU threads: ``$CFL_LIGHTNING_THREADS``, else 1 when CUDA is unavailable.

    Returns:
        the thread count set, or None when left at torch's default.
    """
    import torch

    environ = os.environ if environ is None else environ
    value = environ.get(THREADS_ENV, "").strip()
    if value:
        try:
            threads = int(value)
            if threads < 1:
                raise ValueError
        except ValueError:
            raise SystemExit(f"{THREADS_ENV} must be a positive integer, got {value!r}") from None
    elif not torch.cuda.is_available():
        threads = 1
    else:
        return None
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:  # already set, or inter-op work already started in this process
        pass
    return threads


def _cli_class() -> type:
    """The LightningCLI subclass (imports Lightning; built on first use)."""
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
    from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
    from lightning.pytorch.loggers import CSVLogger

    from cfl_lightning.models.base import MONITOR

    class CflLightningCLI(LightningCLI):
        """LightningCLI with the data -> model link, early stopping, checkpointing and results."""

        results_path: Path | None = None
        results: dict[str, Any] | None = None

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
            parser.set_defaults({"model": {"class_path": "cfl_lightning.models.LSTMLanguageModel"}})

        def before_instantiate_classes(self) -> None:
            """Resolve logger directories against ``trainer.default_root_dir``.

            A relative logger ``save_dir`` (the configs use ``.``) is taken relative to the run's
            root directory, so ``--trainer.default_root_dir=DIR`` moves logs, checkpoints and
            ``results.json`` together. Under a W&B agent (``WANDB_RUN_ID`` set) an unversioned
            CSV logger uses the run id as its version, so agents sharing a directory never
            collide.
            """
            config = self.config[self.subcommand] if self.subcommand else self.config
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

        def instantiate_trainer(self, **kwargs: Any) -> Any:
            # Without a configured logger, log to CSV under default_root_dir (no TensorBoard here).
            config = self._get(self.config_init, "trainer", default={})
            if config.get("logger") in (None, True) and "logger" not in kwargs:
                root = config.get("default_root_dir") or os.getcwd()
                kwargs["logger"] = CSVLogger(save_dir=root, name="csv")
            return super().instantiate_trainer(**kwargs)

        def _log_hparams(self) -> None:
            # Lightning's automatic hparams logging (disabled in trainer_defaults) would merge the
            # model's and the datamodule's hparams and fail on ``num_symbols``: the model holds
            # the automaton's alphabet size (linked), the datamodule its constructor argument
            # (only used by the "random" generator). Log both, nested, instead.
            model = {k: v for k, v in self.model.hparams.items() if not k.startswith("_")}
            model.update(getattr(self.model, "size_summary", {}))
            # "model_hparams", not "model": a W&B sweep parameter named "model" locks that key.
            params: dict[str, Any] = {
                "model_hparams": model,
                "model_class": type(self.model).__name__,
            }
            if self.datamodule is not None:
                data = getattr(self.datamodule, "hparams", {})
                params["data"] = {k: v for k, v in data.items() if not k.startswith("_")}
            for logger in self.trainer.loggers:
                logger.log_hyperparams(params)

        def before_fit(self) -> None:
            self._log_hparams()
            self._fit_started = time.perf_counter()

        def before_validate(self) -> None:
            self._log_hparams()

        def before_test(self) -> None:
            self._log_hparams()

        def after_fit(self) -> None:
            """Test the best checkpoint, write ``results.json`` (rank 0) and log the summary."""
            trainer = self.trainer
            train_time = time.perf_counter() - getattr(self, "_fit_started", time.perf_counter())
            if trainer.interrupted:
                return
            callback = trainer.checkpoint_callback
            best_path = getattr(callback, "best_model_path", "") if callback is not None else ""
            best_score = getattr(callback, "best_model_score", None) if best_path else None
            if best_score is None:
                best_score = trainer.callback_metrics.get(MONITOR)
            epochs = trainer.current_epoch
            trainer.test(
                self.model,
                datamodule=self.datamodule,
                ckpt_path="best" if best_path else None,
                verbose=False,
            )
            if not trainer.is_global_zero:
                return
            self.results = self._build_results(train_time, best_score, epochs)
            if self.results is None:
                return
            from cfl_lightning.results import write_results

            path = Path(self.results["log_dir"]) / "results.json"
            self.results_path = write_results(path, self.results)
            summary = {
                key: self.results[key]
                for key in (
                    "realized_count",
                    "realized_strings",
                    "expected_count",
                    "automaton_id",
                    "num_parameters",
                    "occurrences",
                )
            }
            for logger in trainer.loggers:
                logger.log_hyperparams(summary)
                logger.save()

        def _build_results(self, train_time: float, best_score: Any, epochs: int) -> Any:
            from cfl_lightning.results import build_results

            if self.datamodule is None or getattr(self.datamodule, "pfsa", None) is None:
                return None
            config = self.config[self.subcommand]
            parser = self._parser(self.subcommand)
            full = json.loads(parser.dump(config, format="json", skip_unset=False))
            # link targets are filled at instantiation; record the values actually used
            full.setdefault("model", {}).setdefault("init_args", {})["num_symbols"] = (
                self.model.num_symbols
            )
            return build_results(
                config=full,
                model=self.model,
                datamodule=self.datamodule,
                best_val_loss=None if best_score is None else float(best_score),
                epochs=epochs,
                train_time_s=train_time,
                log_dir=run_log_dir(self.trainer),
                seed=config.get("seed_everything"),
            )

    def run_log_dir(trainer: Any) -> Path:
        """The CSV logger's versioned directory, else the first logger's, else the root dir."""
        for logger in trainer.loggers:
            if isinstance(logger, CSVLogger):
                return Path(logger.log_dir)
        if trainer.loggers and trainer.log_dir:
            return Path(trainer.log_dir)
        return Path(trainer.default_root_dir)

    return CflLightningCLI


def build_cli(args: list[str] | dict | None, *, run: bool = True) -> Any:
    """Construct (and with ``run=True`` execute) the training CLI on ``args``.

    ``args`` is the command line after ``python -m cfl_lightning`` (starting with the subcommand
    when ``run``), or a config dict. With ``run=False`` only the model, data and trainer are
    instantiated (no subcommand), as in config tests.
    """
    ensure_wandb_mode()
    import warnings

    from cfl_lightning.data import PFADataModule
    from cfl_lightning.models import LanguageModel

    # ``args`` is how __main__ hands over its argv: LightningCLI's warning about sys.argv also
    # being non-empty does not apply.
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    return _cli_class()(
        LanguageModel,
        PFADataModule,
        subclass_mode_model=True,
        args=args,
        run=run,
        auto_configure_optimizers=False,
        seed_everything_default=0,
        trainer_defaults={
            "max_epochs": 50,
            "gradient_clip_val": 5.0,
            "gradient_clip_algorithm": "norm",
            "default_root_dir": "runs/default",
            "log_every_n_steps": 10,
            "enable_autolog_hparams": False,  # logged by the CLI itself (see _log_hparams)
        },
        parser_kwargs={"prog": PROG},
        save_config_kwargs={"overwrite": True},
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``fit``/``validate``/``test``; ``argv[0]`` is the subcommand."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ensure_wandb_mode()  # before anything imports wandb
    configure_threads()
    from cfl_lightning.errors import CflError

    try:
        cli = build_cli(argv)
    except CflError as err:
        sys.stderr.write(f"cfl_lightning {argv[0] if argv else ''}: error: {err}\n")
        return 2
    if cli.results_path is not None:
        print(f"results: {cli.results_path}", flush=True)
    return 0
