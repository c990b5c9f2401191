"""``CflLightningCLI``: the LightningCLI of ``fit``/``validate``/``test`` (imports Lightning).

On top of LightningCLI's Trainer, model and data groups:

* ``--model`` takes any ``LightningModule`` class (default ``LSTMLanguageModel``); the sizes
  a class declares among ``num_symbols`` (the automaton's alphabet size S), ``vocab_in`` (the
  input ids: S symbols, EOS, BOS, PAD: ``S + 3``, the data module's ``vocab_size``) and
  ``vocab_out`` (the predicted ids: S symbols and EOS: ``S + 1``) are filled from the data
  module (:data:`LINKED_SIZES`).
  Switching the class (``--model=my_pkg.MyModel`` after a config written for the LSTM) keeps
  only the ``init_args`` that the new class accepts.
* ``--early_stopping.*`` and ``--checkpoint.*``: early stopping and checkpointing on
  ``val/kl_per_string``; with the shipped models, a monitor that the run never logs is refused
  before training (:func:`~cfl_lightning.callbacks.check_monitors`). Checkpoints are written
  atomically (:class:`~cfl_lightning.checkpoint_io.AtomicCheckpointIO`).
* Option names must be given in full (no abbreviations: ``--data.num_str`` is an error).
* ``test``/``validate --ckpt_path``: the model class and the init arguments given explicitly
  must be the checkpoint's (:func:`~cfl_lightning.cli.run_checks.check_checkpoint_model`), and
  its weights finite.
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
import shutil
import sys
from pathlib import Path
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from lightning.pytorch.utilities.model_helpers import is_overridden

from cfl_lightning.callbacks import (
    MONITOR,
    CheckedEarlyStopping,
    DecomposedKLCallback,
    EpochProgress,
    ResultsWriter,
    check_monitors,
)
from cfl_lightning.checkpoint_io import use_atomic_checkpoints
from cfl_lightning.cluster_env import quiet_srun_hint, single_process, trainer_plugins
from cfl_lightning.cli.model_switch import (
    config_overrides,
    explicit_model_args,
    explicit_model_class,
    reset_carried_defaults,
)
from cfl_lightning.cli.parser_errors import condense
from cfl_lightning.cli.run_checks import (
    check_checkpoint_fits,
    check_checkpoint_model,
    check_devices,
    check_finite_weights,
    check_root_dir,
    check_trainer_values,
    read_checkpoint,
)
from cfl_lightning.data.settings import GENERATOR_ARGS, applicable
from cfl_lightning.errors import CflError
from cfl_lightning.models import LanguageModel
from cfl_lightning.wandb_mode import has_wandb_credentials

__all__ = [
    "CflLightningCLI", "CflArgumentParser", "DEFAULT_MODEL", "LINKED_SIZES", "subcommand_usage",
    "remove_created",
    "on_terminal",
]

DEFAULT_MODEL = "cfl_lightning.models.LSTMLanguageModel"


def _plus_one(value: int) -> int:
    return value + 1


#: model argument -> (the data module's attribute it is filled from, function of that value)
LINKED_SIZES: dict[str, tuple[str, Any]] = {
    "num_symbols": ("num_symbols", None),
    "vocab_in": ("vocab_size", None),
    "vocab_out": ("num_symbols", _plus_one),
}


def on_terminal() -> bool:
    """Whether both stdout (where Lightning draws its bar) and stderr are terminals."""
    return sys.stdout.isatty() and sys.stderr.isatty()


def _takes(cls: type, name: str) -> bool:
    """Whether ``cls.__init__`` declares an argument ``name``: by name, or (through
    ``**kwargs`` passed on to ``super().__init__``, as LightningCLI follows them) in a base
    class's ``__init__``."""
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        try:
            params = inspect.signature(vars(klass)["__init__"]).parameters
        except (TypeError, ValueError):
            return False
        if name in params and params[name].kind not in (
            inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD
        ):
            return True
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return False
    return False


# ckpt_path values that Lightning resolves itself (not files)
_SPECIAL_CKPT = ("best", "last", "hpc")


def subcommand_usage(prog: str, command: str) -> dict[str, str]:
    """Compact ``usage``/``epilog`` of a subcommand's parser (instead of ~100 usage lines)."""
    return {
        "usage": (
            f"{prog} {command} [--config FILE] [--trainer.X VALUE] [--model=CLASS] "
            "[--model.init_args.X VALUE] [--data.X VALUE] [--early_stopping.X VALUE] "
            "[--checkpoint.X VALUE] [--results.path PATH] [--ckpt_path PATH]"
        ),
        "epilog": (
            f"A model's own arguments: {prog} {command} --model.help CLASS (e.g. "
            "LSTMLanguageModel, TransformerLanguageModel, my_pkg.MyModel). The resolved config: "
            f"{prog} {command} --config FILE --print_config."
        ),
    }


class CflArgumentParser(LightningArgumentParser):
    """Reports an argument error as one line plus a hint to use ``--help`` (exit status 2).

    Abbreviated option names are not accepted (``allow_abbrev=False``): ``--data.num_str=7``
    would otherwise silently set ``--data.num_strings``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> Any:  # type: ignore[override]
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG"):
            return super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        prog = parser.prog.replace(" [options]", "")
        command = _given_subcommand()
        if command and not prog.endswith(f" {command}"):
            # an error raised at the top level (e.g. a class's required arguments): the
            # options are the subcommand's, so point at its help
            prog = f"{prog} {command}"
        sys.stderr.write(f"{prog}: error: {condense(message)}\n")
        sys.stderr.write(f"  (see '{prog} --help' for the options)\n")
        self.exit(2)


class CflLightningCLI(LightningCLI):
    """LightningCLI with the data -> model link, early stopping, checkpointing and results.

    Attributes:
        results_writer: the run's :class:`ResultsWriter` (``results_writer.written`` is the path
            of ``results.json`` once written).
    """

    results_writer: ResultsWriter | None = None
    #: the instance being built (so that ``main`` can clean up after a failure in __init__)
    active: CflLightningCLI | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        CflLightningCLI.active = self
        #: directories this run created (removed again if the run fails on bad input)
        self.created: list[Path] = []
        self._checkpoint: dict[str, Any] | None = None
        self._argv: list[str] = []
        given = kwargs.get("args", args[11] if len(args) > 11 else None)
        #: the arguments as given (a command line or a config dict), read before parsing
        self._given_args: Any = sys.argv[1:] if given is None else given
        kwargs.setdefault("parser_class", CflArgumentParser)
        super().__init__(*args, **kwargs)

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, then read ``--ckpt_path`` once (one-line errors for missing/corrupt files)."""
        self._argv = [str(a) for a in args] if isinstance(args, list) else sys.argv[1:]
        super().parse_arguments(parser, args)
        command = self.config.get("subcommand")
        settings = self.config[command] if command else self.config
        reset_carried_defaults(settings.get("model"), self._argv)
        _note_config_overrides(settings.get("model"), self._argv, command)
        path = self.config[command].get("ckpt_path") if command else None
        if path and str(path) not in _SPECIAL_CKPT and not str(path).startswith("registry"):
            self._checkpoint = read_checkpoint(path)
            check_finite_weights(path, self._checkpoint)

    def _parse_ckpt_path(self) -> None:
        """Refuse a checkpoint of another model than the configured one, then let Lightning
        take the checkpoint's hyperparameters (those nobody gave explicitly)."""
        command = self.config.get("subcommand")
        if self._checkpoint is not None and command:
            settings = self.config[command]
            check_checkpoint_model(
                settings.get("ckpt_path"),
                self._checkpoint,
                settings.get("model"),
                class_given=explicit_model_class(self._argv),
                args_given=explicit_model_args(self._argv),
            )
        super()._parse_ckpt_path()

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # num_symbols is linked for every class (jsonargparse skips a class without it); the
        # vocabulary sizes only for a class that declares them (a link to a class taking
        # ``**kwargs`` would pass them on to a base class that does not take them)
        declared = _declared_model_args(self._given_args)
        for target, (source, compute) in LINKED_SIZES.items():
            if target == "num_symbols" or target in declared:
                parser.link_arguments(
                    f"data.{source}", f"model.init_args.{target}", compute, apply_on="instantiate"
                )
        parser.add_lightning_class_args(CheckedEarlyStopping, "early_stopping")
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
        _check_groups(config)
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

        if trainer is not None:
            check_trainer_values(trainer)
            check_devices(trainer)
            check_root_dir(trainer.get("default_root_dir"))
            root_path = Path(str(trainer.get("default_root_dir") or os.getcwd())).absolute()
            if not root_path.exists():
                self.created.append(root_path)
        evaluating = self.subcommand in ("validate", "test")
        asked = any(a.startswith("--trainer.logger") for a in self._argv)
        if evaluating and config.get("ckpt_path") and not asked and trainer is not None:
            # evaluating a saved checkpoint: no new version directory, no new W&B run
            trainer["logger"] = False
            self.save_config_callback = None
        elif any(str(getattr(e, "class_path", "")).endswith("WandbLogger") for e in loggers):
            _check_wandb_login()
        progress: list[Any] = []
        if trainer is not None:
            if not on_terminal():
                # Lightning's bar (drawn on stdout) is for terminals: in logs, pipes and sweep
                # children it would bury ``results: PATH`` under carriage returns
                trainer["enable_progress_bar"] = False
            if self.subcommand == "fit" and trainer.get("enable_progress_bar") is False:
                progress.append(EpochProgress())

        listed = trainer.get("callbacks") if trainer is not None else None
        listed = listed if isinstance(listed, list) else [listed] if listed else []
        has_kl = any(
            str(getattr(c, "class_path", "")).endswith("DecomposedKLCallback") for c in listed
        )
        results = config.get("results")
        path = results.get("path") if results else None
        # fit writes results.json after testing the best checkpoint; test only when asked to
        write = self.subcommand == "fit" or (self.subcommand == "test" and path is not None)
        self.results_writer = ResultsWriter(path=path) if write else None
        extra: list[Any] = [] if has_kl else [DecomposedKLCallback()]
        writer = [self.results_writer] if self.results_writer is not None else []
        self.trainer_defaults["callbacks"] = [*extra, *writer, *progress]

    def instantiate_classes(self) -> None:
        """Instantiate; a model's argument error (a ``ValueError`` from its ``__init__``, which
        jsonargparse wraps) becomes one line naming the model."""
        try:
            super().instantiate_classes()
        except CflError:
            raise
        except ValueError as err:
            root: BaseException = err
            while root.__cause__ is not None:
                root = root.__cause__
            if root is err or not isinstance(root, ValueError):
                raise
            model = self._subconfig().get("model")
            name = str(getattr(model, "class_path", "model")).rsplit(".", 1)[-1]
            raise CflError(f"{name}: {' '.join(str(root).split())}") from None

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        # Without a configured logger, log to CSV under default_root_dir (no TensorBoard here).
        config = self._get(self.config_init, "trainer", default={})
        if config.get("logger") in (None, True) and "logger" not in kwargs:
            root = config.get("default_root_dir") or os.getcwd()
            kwargs["logger"] = CSVLogger(save_dir=root, name="csv")
        if single_process(config):  # Lightning's srun hint is wrong for one process
            quiet_srun_hint()
        if config.get("plugins") is None and "plugins" not in kwargs and trainer_plugins():
            kwargs["plugins"] = trainer_plugins()  # in a SLURM step: submitit owns requeueing
        try:
            trainer = super().instantiate_trainer(**kwargs)
        except (TypeError, ValueError, ImportError) as err:
            # Lightning's checks of accelerator/devices/strategy/precision (e.g. a device list
            # on CPUs, an accelerator whose package is missing): one line, not a traceback
            message = " ".join(str(err).split()) or type(err).__name__
            raise CflError(f"--trainer: {message}") from None
        use_atomic_checkpoints(trainer)  # no truncated .ckpt, even on a full disk
        if self.subcommand in ("validate", "test"):
            # evaluating writes no checkpoint: a ModelCheckpoint would only restore its state
            # from the evaluated file and warn that its dirpath "changed" to a directory that
            # is never created
            trainer.callbacks = [c for c in trainer.callbacks if not isinstance(c, ModelCheckpoint)]
        for logger in trainer.loggers:
            # Lightning passes anonymous=None, which wandb >= 0.19 warns about on every run
            init = getattr(logger, "_wandb_init", None) if isinstance(logger, WandbLogger) else None
            if isinstance(init, dict) and init.get("anonymous") is None:
                init.pop("anonymous", None)
        return trainer

    def full_config(self) -> dict[str, Any]:
        """The run's config as plain JSON (``results.json``'s ``config``; used by ensembles)."""
        return self._full_config()

    def _full_config(self) -> dict[str, Any]:
        """The run's config as plain JSON, with the linked sizes actually used, and of the
        automaton's source only the arguments it uses (``data.eta`` only for the "parity"
        generator, ``data.topology_seed`` only for "random", none with ``data.automaton``:
        :func:`~cfl_lightning.data.settings.applicable`)."""
        config = self._subconfig()
        full = json.loads(self._parser(self.subcommand).dump(config, format="json", skip_unset=False))
        init_args = full.setdefault("model", {}).setdefault("init_args", {})
        for target, (source, compute) in LINKED_SIZES.items():
            if _takes(type(self.model), target):
                value = getattr(self.datamodule, source)
                init_args[target] = value if compute is None else compute(value)
        full.pop("results", None)
        data = full.get("data")
        if isinstance(data, dict) and data.get("generator") in GENERATOR_ARGS:
            # only the automaton source's own arguments: ``eta`` only for "parity", ...
            full["data"] = applicable(data)
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
        if getattr(self.datamodule, "hparams", None):
            params["data"] = {
                k: v for k, v in self.datamodule.hparams.items() if not k.startswith("_")
            }
        for logger in self.trainer.loggers:
            logger.log_hyperparams(params)

    def _check_fit(self) -> None:
        """What would otherwise fail after training started: evaluation steps, monitors."""
        model = self.model
        missing = [s for s in ("validation_step", "test_step") if not is_overridden(s, model)]
        if missing:
            raise CflError(
                f"{type(model).__name__} defines no {' or '.join(missing)}: fit validates every "
                "epoch (early stopping and checkpointing monitor val/kl_per_string) and tests "
                "the best checkpoint at the end; add them, they may do nothing "
                "(`def validation_step(self, batch, batch_idx): pass`; the DecomposedKLCallback "
                "evaluates)"
            )
        kl = next((c for c in self.trainer.callbacks if isinstance(c, DecomposedKLCallback)), None)
        if isinstance(model, LanguageModel) and kl is not None:  # every logged metric is known
            _, event = kl.resolve(self.datamodule)
            check_monitors(
                self.trainer.callbacks, (*kl.validation_metrics(event), *model.TRAINING_METRICS)
            )

    def _before_run(self) -> None:
        if self.subcommand == "fit":
            self._check_fit()
        if self._checkpoint is not None:
            path = self._subconfig().get("ckpt_path")
            check_checkpoint_fits(path, self._checkpoint, self.model)
            self._checkpoint = None  # Lightning loads it again; free the memory
        for logger in self.trainer.loggers:  # what logging hparams is about to create
            if isinstance(logger, (CSVLogger, TensorBoardLogger)):
                log_dir = Path(logger.log_dir).absolute()
                if not log_dir.exists():
                    self.created.append(log_dir)
        self._log_hparams()
        for logger in self.trainer.loggers:
            run = getattr(logger, "_experiment", None) if isinstance(logger, WandbLogger) else None
            run_dir = getattr(run, "dir", None)
            if run_dir:  # <save_dir>/wandb/<run>/files
                self.created.append(Path(run_dir).parent.absolute())
        if self.results_writer is not None:
            self.results_writer.config = self._full_config()
        if self.subcommand in ("validate", "test"):
            import warnings

            # the checkpoint's ModelCheckpoint/ResultsWriter states are of no use to evaluate
            warnings.filterwarnings(
                "ignore", message="Be aware that when using `ckpt_path`, callbacks used"
            )
        if self.subcommand in ("validate", "test") and not self.verbose_evaluation:
            # Lightning's table lists every logged metric (~60 with the decomposition); the
            # command prints :meth:`evaluation_summary` instead (the metrics are still logged)
            self.config_init[self.subcommand]["verbose"] = False

    @property
    def verbose_evaluation(self) -> bool:
        """Whether ``--verbose true`` was given (then Lightning prints its table of every
        metric); the last ``--verbose`` counts, ``--verbose false`` keeps the summary."""
        value = None
        for k, arg in enumerate(self._argv):
            if arg.startswith("--verbose="):
                value = arg.split("=", 1)[1]
            elif arg == "--verbose":
                value = self._argv[k + 1] if k + 1 < len(self._argv) else "true"
        return value is not None and value.strip().lower() in ("true", "1", "yes", "on")

    def evaluation_summary(self) -> str | None:
        """One line for ``validate``/``test``: the headline values and how many were logged.

        ``test: kl_total 0.41  kl_target 0.02 (state:odd)  test/kl_per_string 0.43  (nats per
        string; 61 metrics logged, --verbose true lists them)``; None for ``fit`` or when
        ``--verbose`` was given.
        """
        if self.subcommand not in ("validate", "test") or self.verbose_evaluation:
            return None
        metrics = {k: float(v) for k, v in self.trainer.callback_metrics.items()}
        stage = "val" if self.subcommand == "validate" else "test"
        prefix = "val/" if stage == "val" else ""
        names = [f"{prefix}kl_total", f"{prefix}kl_target", f"{stage}/kl_per_string"]
        kl = next((c for c in self.trainer.callbacks if isinstance(c, DecomposedKLCallback)), None)
        event = None if kl is None or kl.event is None else str(kl.event)
        parts = []
        for name in names:
            if name in metrics:
                label = f" ({event})" if name.endswith("kl_target") and event else ""
                parts.append(f"{name} {metrics[name]:.6g}{label}")
        shown = "  ".join(parts) or "no KL logged"
        return (
            f"{self.subcommand}: {shown}  (nats per string; {len(metrics)} metrics logged, "
            "--verbose true lists them)"
        )

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



def _note_config_overrides(model: Any, argv: list[str], command: str | None) -> None:
    """One stderr line when ``--model=X`` keeps a config's values over X's own defaults.

    The documented rule (README, "Your own model"): when ``--model`` switches the class, the
    config's ``init_args`` that the new class accepts are kept (a study's ``lr`` applies to
    every model it compares); this line says which they are, so that nothing is silent.
    """
    found = config_overrides(model, argv)
    if not found:
        return
    name = str(model.class_path).rsplit(".", 1)[-1]
    values = ", ".join(f"{k}={v!r}" for k, v, _ in found)
    defaults = ", ".join(f"{k}={d!r}" for k, _, d in found)
    flags = " ".join(f"--model.init_args.{k}=..." for k, _, _ in found)
    prog = f"python -m cfl_lightning {command}" if command else "python -m cfl_lightning"
    sys.stderr.write(
        f"{prog}: note: --model={model.class_path} takes {values} from the config ({name}'s "
        f"own default: {defaults}); give {flags} to change it\n"
    )


def _given_subcommand() -> str | None:
    """The subcommand of the CLI being parsed (``fit``, ``validate``, ``test``), else None."""
    active = CflLightningCLI.active
    given = getattr(active, "_given_args", None)
    if isinstance(given, list) and given and str(given[0]) in ("fit", "validate", "test"):
        return str(given[0])
    return None


def _given_model_class(args: Any) -> str | None:
    """The model's class path as given (last ``--model=X`` / ``--model.class_path=X``, else the
    last ``--config`` file's ``model``; a config dict's ``model``), before parsing; else None."""
    if isinstance(args, dict):
        model = args.get("model")
        return model.get("class_path") if isinstance(model, dict) else model
    argv = [str(a) for a in args or []]
    found = None
    for i, arg in enumerate(argv):
        for flag in ("--model", "--model.class_path"):
            if arg.startswith(flag + "="):
                found = arg.split("=", 1)[1]
            elif arg == flag and i + 1 < len(argv):
                found = argv[i + 1]
    if found is not None:
        return found
    from cfl_lightning.cli.model_switch import _config_models

    for model in reversed(_config_models(argv)):
        if isinstance(model, str):
            return model
        if isinstance(model, dict) and model.get("class_path"):
            return str(model["class_path"])
    return None


def _declared_model_args(args: Any) -> set[str]:
    """Which of :data:`LINKED_SIZES` the given model class declares (empty when the class is
    not a dotted path that imports: the shipped models declare only ``num_symbols``)."""
    import importlib

    path = _given_model_class(args)
    if not isinstance(path, str) or "." not in path:
        return set()
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except Exception:  # noqa: BLE001 (the parser reports a bad class path in one line)
        return set()
    return {t for t in LINKED_SIZES if isinstance(cls, type) and _takes(cls, t)}


def _check_groups(config: Any) -> None:
    """``data`` must be a mapping of arguments and ``model`` a class (``data: null`` or
    ``data: [1, 2]`` in a config would fail inside jsonargparse with a traceback)."""
    data, model = config.get("data"), config.get("model")
    if not isinstance(data, Namespace):
        raise CflError(
            "data: expected a mapping of PFADataModule arguments (e.g. generator: parity), "
            f"got {json.dumps(data, default=str)}; leave data out for the defaults"
        )
    if not (isinstance(model, Namespace) and model.get("class_path")):
        raise CflError(
            "model: expected a class (class_path: ..., init_args: {...}) or a class name, got "
            f"{json.dumps(model, default=str)}; leave model out for the default LSTM"
        )


def _check_wandb_login() -> None:
    """``WANDB_MODE=online`` (or ``run``) needs an API key; refuse before W&B is started."""
    mode = os.environ.get("WANDB_MODE", "").strip().lower()
    if mode in ("online", "run") and not has_wandb_credentials():
        raise CflError(
            f"WANDB_MODE={mode} but no W&B API key is configured (WANDB_API_KEY or `wandb "
            "login`); set WANDB_MODE=offline to log locally, or disabled"
        )


def remove_created(cli: CflLightningCLI | None) -> None:
    """Remove the directories a failed run created (newest first; only those it created)."""
    if cli is None:
        return
    for path in reversed(cli.created):
        shutil.rmtree(path, ignore_errors=True)
    cli.created = []
