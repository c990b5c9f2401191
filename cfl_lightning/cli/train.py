"""``python -m cfl_lightning fit|validate|test``: LightningCLI for the PFSA language models.

Usage::

    python -m cfl_lightning fit --config configs/parity_starfree.yaml
    python -m cfl_lightning fit --config configs/random_topology.yaml \\
        --model=TransformerLanguageModel
    python -m cfl_lightning fit --data.generator parity --data.eta 0.3 --trainer.max_epochs 20
    python -m cfl_lightning test --config CONFIG --ckpt_path PATH/TO/best.ckpt

The model is chosen by ``model.class_path`` in a YAML config or ``--model=LSTMLanguageModel`` /
``--model=TransformerLanguageModel`` / ``--model=my_pkg.MyModel`` (any LightningModule; default:
LSTM); its flags (``--model.init_args.X``) must come after ``--model=...``.
``model.init_args.num_symbols`` (the automaton's alphabet size S), ``vocab_in`` (``S + 3``: the
symbols, EOS, BOS, PAD) and ``vocab_out`` (``S + 1``: the symbols and EOS) are filled from the
data module when the class declares them. When ``--model`` switches the class, the config's
``init_args`` that the new class accepts are kept, and a ``note:`` line on stderr names those
that differ from the class's own defaults. Beyond the Trainer, model and data groups there are
``--early_stopping.*`` (EarlyStopping on ``val/kl_per_string``, patience 10),
``--checkpoint.*`` (ModelCheckpoint keeping the best ``val/kl_per_string``) and
``--results.path``; see :class:`~cfl_lightning.cli.lightning_cli.CflLightningCLI`.

``fit`` then tests the best checkpoint on the test strings; the ``ResultsWriter`` callback writes
``results.json`` (see :mod:`cfl_lightning.results`) into the run's log directory, and ``fit``
prints a summary line (``test: kl_total ...  kl_target ... (EVENT)``) and ``results: <path>``
as the last two lines on stdout. ``validate``/``test`` print one line (``test: kl_total ...
kl_target ... (EVENT)  test/kl_per_string ...  (nats per string; 61 metrics logged, --verbose
true lists them)``) instead of Lightning's table of every logged metric.

Environment:

* ``WANDB_MODE``: respected; when neither it nor W&B credentials are configured, the CLI sets
  ``offline`` before wandb is imported (see :mod:`cfl_lightning.wandb_mode`).
* ``CFL_LIGHTNING_THREADS``: torch CPU threads; default 1 on machines without CUDA (several
  training processes with several threads each on a small machine slow each other down by
  orders of magnitude).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
from typing import Any

from cfl_lightning.wandb_mode import ensure_wandb_mode

__all__ = [
    "main", "build_cli", "PROG", "configure_threads", "quiet_noise", "finish_wandb", "summary_line",
]

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


class _DropSeedLine(logging.Filter):
    """Drops Lightning's ``Seed set to N`` (the seed is in the run's saved config and in
    ``results.json``); printed before a configuration is validated, it made bad input two lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Seed set to ")


def quiet_noise() -> None:
    """Silence messages that say nothing about the run (idempotent).

    Lightning's tips and ``LeafSpec`` deprecation (:func:`cfl_lightning.quiet.quiet_noise`),
    LightningCLI's note about ``args`` (``__main__`` hands over its argv), and its ``Seed set to
    N`` line (for the package's commands only: a user's own script keeps it).
    """
    import warnings

    from cfl_lightning.quiet import quiet_noise as quiet_lightning

    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    quiet_lightning()
    seed_log = logging.getLogger("lightning.fabric.utilities.seed")
    if not any(isinstance(f, _DropSeedLine) for f in seed_log.filters):
        seed_log.addFilter(_DropSeedLine())


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def finish_wandb() -> None:
    """Finish a W&B run now, its footer on stderr (``wandb sync ...``), so that ``results: PATH``
    stays the last line on stdout; ANSI colours are dropped when stderr is not a terminal."""
    if "wandb" not in sys.modules:
        return
    import wandb

    if wandb.run is None:
        return
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        wandb.finish()
    text = buffer.getvalue()
    sys.stderr.write(text if sys.stderr.isatty() else _ANSI.sub("", text))
    sys.stderr.flush()


def _cli_class() -> type:
    """The LightningCLI subclass (imports Lightning); a seam for tests that only parse."""
    from cfl_lightning.cli.lightning_cli import CflLightningCLI

    return CflLightningCLI


def build_cli(args: list[str] | dict | None, *, run: bool = True) -> Any:
    """Construct (and with ``run=True`` execute) the training CLI on ``args``.

    ``args`` is the command line after ``python -m cfl_lightning`` (starting with the subcommand
    when ``run``), or a config dict. With ``run=False`` only the model, data and trainer are
    instantiated (no subcommand), as in config tests.
    """
    ensure_wandb_mode()
    quiet_noise()
    from lightning.pytorch import LightningModule

    from cfl_lightning.cli.lightning_cli import subcommand_usage
    from cfl_lightning.data import PFADataModule

    return _cli_class()(
        LightningModule,
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
            "enable_autolog_hparams": False,  # logged by the CLI itself (CflLightningCLI)
        },
        parser_kwargs={
            "prog": PROG,
            **{cmd: subcommand_usage(PROG, cmd) for cmd in ("fit", "validate", "test")},
        },
        save_config_kwargs={"overwrite": True},
    )


def summary_line(results: dict[str, Any]) -> str:
    """``test: kl_total 0.4123  kl_target 0.0201  (nats per string, best checkpoint)``."""

    def value(key: str) -> str:
        number = results.get(key)
        return "null" if number is None else f"{number:.6g}"

    parts = [f"kl_total {value('kl_total')}"]
    if results.get("event") is not None:
        parts.append(f"kl_target {value('kl_target')} ({results['event']})")
    return f"test: {'  '.join(parts)}  (nats per string)"


def _trained(cli: Any) -> bool:
    """Whether the failed run took an optimizer step (then its logs are kept)."""
    trainer = getattr(cli, "trainer", None) if cli is not None else None
    return trainer is not None and trainer.global_step > 0


def _failure(err: BaseException, cli: Any) -> str:
    """The one line describing a failed run; removes what it created unless it trained."""
    if isinstance(err, OSError):
        what = err.strerror or str(err)
        message = f"cannot write {err.filename}: {what}" if err.filename else what
    else:
        message = " ".join(str(err).split()) or type(err).__name__
    if not _trained(cli):
        from cfl_lightning.cli.lightning_cli import remove_created

        remove_created(cli)
        return message
    from cfl_lightning.callbacks import run_log_dir

    trainer = cli.trainer
    return (
        f"{message} (stopped at epoch {trainer.current_epoch}, step {trainer.global_step}; the "
        f"run's logs are kept in {run_log_dir(trainer)})"
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``fit``/``validate``/``test``; ``argv[0]`` is the subcommand.

    Bad input (arguments, trainer values, the model's arguments, ``default_root_dir``, the
    checkpoint, sizes) gives one line on stderr and exit status 2, and no run directory is left
    behind. A run that fails after training started (NaN predictions, a full disk) also gives
    one line and status 2, naming the epoch and step, and keeps its logs.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    ensure_wandb_mode()  # before anything imports wandb
    configure_threads()
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from cfl_lightning.cli.lightning_cli import CflLightningCLI
    from cfl_lightning.errors import CflError

    CflLightningCLI.active = None
    try:
        cli = build_cli(argv)
    except (CflError, MisconfigurationException, OSError) as err:
        message = _failure(err, CflLightningCLI.active)
        sys.stderr.write(f"{PROG} {argv[0] if argv else ''}: error: {message}\n")
        return 2
    finally:
        CflLightningCLI.active = None
    finish_wandb()
    summary = cli.evaluation_summary()
    if summary is not None and not (cli.results_writer and cli.results_writer.written):
        print(summary, flush=True)
    writer = cli.results_writer
    if writer is not None and writer.written is not None and writer.results is not None:
        print(summary_line(writer.results), flush=True)
        print(f"results: {writer.written}", flush=True)
    return 0
