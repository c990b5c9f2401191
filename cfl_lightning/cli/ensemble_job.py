"""``python -m cfl_lightning.cli.ensemble_job SPEC.json``: ``fit`` command lines trained as ensembles.

One process per job (``python -m cfl_lightning sweep --ensemble M`` starts them). ``SPEC.json``::

    {"members": [{"name": "POINT", "args": ["--config", "...", "--trainer.default_root_dir=DIR", ...]}],
     "checkpoint_dir": "DIR" | null}

``args`` is a member's command line after ``python -m cfl_lightning fit``. Each member is built
by the training CLI itself, without running (``build_cli(ARGS, run=False)``): seeded and
instantiated exactly as its own ``fit``, so its initial weights, corpus and output paths are its
sequential run's. Members that share the model class, hyperparameters and the Trainer settings
the ensemble reproduces are trained together as one
:class:`~cfl_lightning.ensemble.EnsembleLanguageModel`
(:func:`~cfl_lightning.ensemble.job.train_group`); a member with a setting it does not reproduce
is trained by the ordinary ``fit`` in this process. Each member's ``results.json`` goes where
its own ``fit`` would put it (``DIR/csv/version_0/results.json`` with the shipped configs).

* A member whose ``results.json`` already exists and is valid (parses, finite ``kl_total``;
  any version directory of the run's logger) is never trained or written again.
* With ``checkpoint_dir``, each ensemble is checkpointed atomically after every epoch
  (``checkpoint_dir/last.ckpt``; ``last-K.ckpt`` when the job holds several groups) and a rerun
  continues from the checkpoint when it holds the same members; the checkpoint is removed when
  every member is written.
* A member that fails (bad arguments, a corpus that cannot be sampled, an error in training)
  is reported alone; the others finish.

stdout: one line per member, ``done NAME`` or ``FAILED NAME: reason``, preceded by
``alone NAME: why`` for a member fitted on its own, and nothing else (everything else,
tracebacks included, goes to stderr). A member whose arguments the training CLI refuses fails
alone with the CLI's own line as its reason (``FAILED NAME: --model: class 'my_models.MyLM':
No module named 'my_models'``). Exit status 0 when every member is
done, 1 when one failed, 2 when the spec cannot be read.
"""

from __future__ import annotations

import contextlib
import json
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from cfl_lightning.cli.check_points import Tee, cli_refusal
from cfl_lightning.errors import CflError
from cfl_lightning.sweep.jobs import ALONE  # the grammar of the job's stdout lines

__all__ = ["main", "read_spec", "build_member", "train_settings", "run_job", "results_path", "PROG"]

PROG = "python -m cfl_lightning.cli.ensemble_job"


def read_spec(path: str | Path) -> tuple[list[tuple[str, list[str]]], Path | None]:
    """``([(name, args)], checkpoint_dir)`` from a spec file.

    Raises:
        CflError: one line naming what is wrong with the file.
    """
    try:
        spec = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CflError(f"cannot read {path}: {' '.join(str(err).split())}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("members"), list):
        raise CflError(f"{path}: expected {{\"members\": [...], \"checkpoint_dir\": ...}}")
    members = []
    for i, item in enumerate(spec["members"]):
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("name"), str)
            or not isinstance(item.get("args"), list)
            or not all(isinstance(a, str) for a in item["args"])
        ):
            raise CflError(f"{path}: members[{i}] must be {{\"name\": str, \"args\": [str, ...]}}")
        members.append((item["name"], list(item["args"])))
    names = [n for n, _ in members]
    if len(set(names)) != len(names):
        raise CflError(f"{path}: member names must be unique")
    folder = spec.get("checkpoint_dir")
    if folder is not None and not isinstance(folder, str):
        raise CflError(f"{path}: checkpoint_dir must be a string or null")
    return members, None if folder is None else Path(folder)


def results_path(cli: Any) -> Path:
    """Where the run of ``cli`` writes ``results.json`` (its ``ResultsWriter``'s rule, in the
    logger's folder that :func:`~cfl_lightning.results.version_dir` picks)."""
    from cfl_lightning.callbacks.results_writer import run_log_dir
    from cfl_lightning.results import RESULTS, version_dir

    results = cli.config.get("results") if hasattr(cli.config, "get") else None
    custom = results.get("path") if results else None
    if custom:
        return Path(custom)
    return version_dir(run_log_dir(cli.trainer)) / RESULTS


def train_settings(config: Mapping[str, Any], model: Any) -> Any:
    """The :class:`~cfl_lightning.ensemble.TrainSettings` of a ``fit`` run's full config.

    Args:
        config: the run's parsed config as plain JSON (``full_config()``, every value resolved,
            defaults included: what its ``results.json`` stores); its ``trainer``,
            ``early_stopping`` and ``checkpoint`` sections are read as they are.
        model: the run's model.

    Raises:
        NotEnsembleable: the run uses a setting or a model the ensemble does not reproduce
            (:mod:`cfl_lightning.ensemble.settings`).
    """
    from cfl_lightning.callbacks import MONITOR
    from cfl_lightning.ensemble.settings import (
        TRAINER_VALUES,
        NotEnsembleable,
        TrainSettings,
        check_ensembleable,
        refused_trainer_setting,
    )

    check_ensembleable(model)
    trainer, stopping = config["trainer"], config["early_stopping"]
    refused = refused_trainer_setting({key: trainer.get(key) for key in TRAINER_VALUES})
    if refused is not None:
        raise NotEnsembleable(refused)
    for group in ("early_stopping", "checkpoint"):
        if config[group]["monitor"] != MONITOR:
            raise NotEnsembleable(f"{group}.monitor is not {MONITOR}")
        if config[group]["mode"] != "min":
            raise NotEnsembleable(f"{group}.mode is not min")
    if stopping["check_finite"] is not True:
        raise NotEnsembleable("early_stopping.check_finite is False")
    if stopping["stopping_threshold"] is not None or stopping["divergence_threshold"] is not None:
        raise NotEnsembleable("early stopping thresholds are not reproduced")
    clip, max_epochs = trainer["gradient_clip_val"], trainer["max_epochs"]
    if max_epochs is None or max_epochs < 0:
        raise NotEnsembleable("trainer.max_epochs must be set (>= 0)")
    return TrainSettings(
        max_epochs=int(max_epochs),
        gradient_clip_val=None if clip in (None, 0) else float(clip),
        patience=int(stopping["patience"]),
        min_delta=float(stopping["min_delta"]),
    )


def build_member(name: str, args: list[str]) -> tuple[Any, Any]:
    """The member ``python -m cfl_lightning fit ARGS`` builds, without training it.

    Returns:
        ``(member, settings)``: a :class:`~cfl_lightning.ensemble.job.JobMember` and its
        :class:`~cfl_lightning.ensemble.TrainSettings`, or the
        :class:`~cfl_lightning.ensemble.NotEnsembleable` error in place of the settings.

    Raises:
        CflError: the arguments are bad (as ``fit`` reports them).
    """
    from cfl_lightning.cli.train import build_cli
    from cfl_lightning.ensemble.job import JobMember
    from cfl_lightning.ensemble.member_logs import prepare_wandb
    from cfl_lightning.ensemble.settings import NotEnsembleable
    from cfl_lightning.results import done_in_any_version

    cli = build_cli(list(args), run=False)
    config = cli.full_config()  # parsed once: results.json's config and the settings
    # the ``fit`` subcommand's own arguments (a member is built without a subcommand)
    config.setdefault("ckpt_path", None)
    config.setdefault("weights_only", None)
    path = results_path(cli)
    try:
        settings: Any = train_settings(config, cli.model)
    except NotEnsembleable as err:
        settings = err
    loggers: list[Any] = []
    if not done_in_any_version(path) and not isinstance(settings, NotEnsembleable):
        # its own CSV log and W&B run, as its fit would have (a member fitted on its own gets
        # them from its fit: logging here would leave a version folder with only hparams.yaml)
        loggers = list(cli.trainer.loggers)
        prepare_wandb(loggers)
        cli._log_hparams()
    member = JobMember(name, cli.model, cli.datamodule, path, config, loggers)
    return member, settings


def _fit_alone(name: str, args: list[str]) -> str | None:
    """Train a member with the ordinary ``fit``; None when it succeeded, else the reason."""
    from cfl_lightning.cli.train import main as fit_main

    tee = Tee(sys.stderr)
    try:
        with contextlib.redirect_stderr(tee):
            code = fit_main(["fit", *args])
    except Exception as err:  # noqa: BLE001
        traceback.print_exc()
        from cfl_lightning.ensemble.job import reason

        return reason(err)
    if code == 0:
        return None
    why = cli_refusal(tee.kept.getvalue())
    return f"fit exited with status {code}" + (f": {why}" if why else "")


def run_job(
    members: Sequence[tuple[str, list[str]]],
    checkpoint_dir: Path | None = None,
    *,
    device: str | None = None,
    engine: str = "auto",
    stream: TextIO | None = None,
) -> dict[str, str | None]:
    """Train and test ``members``; returns ``{name: None (done) or the failure reason}``.

    Args:
        members: ``[(name, fit arguments)]``.
        checkpoint_dir: where the job's ensembles are checkpointed (None: nowhere).
        device: ``"cuda"``, ``"cpu"`` or None (CUDA when available).
        engine: the ensembles' engine (``"auto"``, ``"stacked"``, ``"loop"``).
        stream: where the ``done``/``FAILED`` lines go (default: stdout). Everything else
            printed while training goes to stderr.
    """
    from cfl_lightning.callbacks.decomposed_kl import has_position_classes
    from cfl_lightning.ensemble.job import default_checkpoint, reason, train_group
    from cfl_lightning.ensemble.settings import NotEnsembleable, ensemble_key
    from cfl_lightning.results import done_in_any_version

    out = sys.stdout if stream is None else stream
    status: dict[str, str | None] = {}

    def say(name: str, why: str | None) -> None:
        status[name] = why
        out.write(f"done {name}\n" if why is None else f"FAILED {name}: {why}\n")
        out.flush()

    groups: dict[tuple, tuple[Any, list[Any]]] = {}
    alone: list[tuple[str, list[str]]] = []
    with contextlib.redirect_stdout(sys.stderr):
        for name, args in members:
            tee = Tee(sys.stderr)
            try:
                with contextlib.redirect_stderr(tee):
                    member, settings = build_member(name, args)
            except SystemExit as err:  # the training CLI's one-line refusal of the arguments
                why = cli_refusal(tee.kept.getvalue())
                say(name, why or f"the training CLI exited with status {err.code}")
                continue
            except Exception as err:  # noqa: BLE001 - a failed member is reported, others go on
                traceback.print_exc()
                say(name, reason(err))
                continue
            if done_in_any_version(member.results_path):
                say(name, None)
            elif isinstance(settings, NotEnsembleable):
                sys.stderr.write(f"{name}: not ensembled ({settings}); trained on its own\n")
                out.write(f"{ALONE} {name}: {settings}\n")
                out.flush()
                alone.append((name, args))
            else:
                # kinds with and without position classes are tested differently: not together
                automaton = getattr(member.datamodule, "automaton", None)
                classes = automaton is None or has_position_classes(automaton.kind)
                key = (ensemble_key(member.model, settings), classes)
                groups.setdefault(key, (settings, []))[1].append(member)
        for k, (settings, group) in enumerate(groups.values()):
            checkpoint = None
            if checkpoint_dir is not None:
                checkpoint = default_checkpoint(checkpoint_dir, k, len(groups))
            train_group(group, settings, say, checkpoint=checkpoint, device=device, engine=engine)
        for name, args in alone:
            say(name, _fit_alone(name, args))
    return status


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0 when every member is done, 1 when one failed, 2 for a bad spec."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv in (["-h"], ["--help"]):
        sys.stdout.write(f"usage: {PROG} SPEC.json\n\n{__doc__.split(chr(10), 1)[1].strip()}\n")
        return 0
    if len(argv) != 1:
        sys.stderr.write(f"usage: {PROG} SPEC.json (see --help)\n")
        return 2
    try:
        members, checkpoint_dir = read_spec(argv[0])
    except CflError as err:
        sys.stderr.write(f"{PROG}: error: {err}\n")
        return 2
    from cfl_lightning.cli.train import configure_threads, quiet_noise
    from cfl_lightning.wandb_mode import ensure_wandb_mode

    ensure_wandb_mode()  # before anything imports wandb
    configure_threads()
    quiet_noise()
    status = run_job(members, checkpoint_dir)
    return 0 if all(v is None for v in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
