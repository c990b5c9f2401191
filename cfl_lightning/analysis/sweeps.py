"""W&B grid sweeps, expanded and run offline with W&B's own sweep engine.

A sweep file is an ordinary W&B sweep YAML (``wandb sweep FILE`` accepts it unchanged) with
``method: grid``, *flat* dotted parameter names (``data.count``, ``model.init_args.lr``) and a
``command:`` block list such as::

    command:
      - ${env}
      - ${interpreter}
      - -m
      - cfl_lightning
      - fit
      - --config
      - configs/parity_starfree.yaml
      - ${args}

:func:`expand_grid` enumerates the grid with ``sweeps.next_runs`` (the engine the W&B server
uses), :func:`build_command` fills in the command macros exactly as ``wandb agent`` does
(``${args}`` becomes ``--key=value`` with Python's ``str`` of the value, so write ``"null"``
rather than ``null`` for a None), and :func:`run_sweep` runs the points as subprocesses, a few
at a time, each in its own directory ``OUTPUT/<run_name>`` (see :func:`run_name`), skipping
points that already hold a ``results.json``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from cfl_lightning.errors import CflError
from cfl_lightning.io import atomic_write_text

__all__ = [
    "SweepError",
    "SweepPoint",
    "load_sweep",
    "validate_sweep",
    "grid_size",
    "expand_grid",
    "run_name",
    "point_hash",
    "format_args",
    "build_command",
    "find_results",
    "plan_sweep",
    "run_sweep",
    "SweepSummary",
    "child_env",
    "THREAD_ENV",
]

THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CFL_LIGHTNING_THREADS")
DEFAULT_COMMAND = ["${env}", "${interpreter}", "${program}", "${args}"]
_ENVVAR = re.compile(r"\$\{envvar:([A-Za-z0-9_]*)\}")
_MACRO = re.compile(r"^\$\{([A-Za-z_]+)\}$")
# short slug forms of common parameters (the last dotted component is the key)
_SHORT = {
    "weight_seed": "w",
    "topology_seed": "t",
    "count": "n",
    "seed_everything": "s",
    "num_strings": "K",
    "max_epochs": "ep",
}
_VALUE_ONLY = {"event", "model", "intervention", "generator", "class_path"}
_SLUG_MAX = 72


class SweepError(CflError):
    """A sweep file is missing, malformed or not a runnable grid."""


@dataclass(frozen=True)
class SweepPoint:
    """One grid point: its parameters (in the engine's order), name and run directory."""

    params: dict[str, Any]
    name: str
    directory: Path
    done: bool = False


# --------------------------------------------------------------------------- loading


def _import_sweeps() -> Any:
    with warnings.catch_warnings():  # pydantic v2 warns about the engine's v1-style config
        warnings.simplefilter("ignore")
        import sweeps

    return sweeps


def load_sweep(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a sweep YAML file (see :func:`validate_sweep`).

    Raises:
        SweepError: the file is missing or unreadable, is not YAML, or is not a valid grid sweep.
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        raise SweepError(f"no such sweep file: {path}")
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SweepError(f"{path}: invalid YAML{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SweepError(f"cannot read {path}: {err}") from None
    validate_sweep(config, source=str(path))
    return config


def validate_sweep(config: Any, *, source: str = "sweep") -> None:
    """Check that ``config`` is a W&B sweep this module can run offline.

    It must pass W&B's schema (``sweeps.schema_violations_from_proposed_config``), use
    ``method: grid``, have flat parameter names (no nested ``parameters:``) with discrete values,
    and have a ``command`` list of strings (or a ``program`` for W&B's default command).

    Raises:
        SweepError: naming the first problem.
    """
    if not isinstance(config, Mapping):
        raise SweepError(f"{source}: expected a mapping at the top level of the sweep file")
    method = config.get("method")
    if method != "grid":
        raise SweepError(
            f"{source}: method is {method!r}; only 'method: grid' sweeps can be run offline "
            "(use `wandb agent` for random/bayes sweeps)"
        )
    params = config.get("parameters")
    if not isinstance(params, Mapping) or not params:
        raise SweepError(f"{source}: 'parameters' must be a non-empty mapping")
    for name, spec in params.items():
        if isinstance(spec, Mapping) and "parameters" in spec:
            raise SweepError(
                f"{source}: parameter {name!r} is nested; use flat dotted names such as "
                f"'{name}.x' (W&B's grid engine never finishes nested grids)"
            )
    violations = _import_sweeps().schema_violations_from_proposed_config(dict(config))
    if violations:
        more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
        raise SweepError(f"{source}: not a valid W&B sweep: {violations[0]}{more}")
    for name, spec in params.items():
        if not isinstance(spec, Mapping) or not ({"value", "values"} & set(spec)):
            dist = spec.get("distribution") if isinstance(spec, Mapping) else None
            if dist not in ("int_uniform", "q_uniform"):
                raise SweepError(
                    f"{source}: parameter {name!r} has no discrete values "
                    f"(grid needs 'value', 'values', int_uniform or q_uniform)"
                )
    command = config.get("command", DEFAULT_COMMAND)
    if not isinstance(command, list) or not command:
        raise SweepError(f"{source}: 'command' must be a non-empty list")
    if not all(isinstance(c, (str, int, float)) for c in command):
        raise SweepError(f"{source}: every 'command' entry must be a string")
    if "${program}" in command and not config.get("program"):
        raise SweepError(f"{source}: the command uses ${{program}} but 'program' is not set")


# --------------------------------------------------------------------------- expansion


def _param_size(spec: Mapping[str, Any]) -> int:
    if "values" in spec:
        return len(spec["values"])
    if "value" in spec:
        return 1
    if spec.get("distribution") == "int_uniform":
        return max(int(spec["max"]) - int(spec["min"]) + 1, 0)
    if spec.get("distribution") == "q_uniform":
        return max(math.ceil((spec["max"] - spec["min"]) / spec["q"]), 0)
    return 1


def grid_size(config: Mapping[str, Any]) -> int:
    """Number of grid points (product of the parameters' value counts)."""
    return math.prod(_param_size(spec) for spec in config["parameters"].values())


def expand_grid(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """All points of a grid sweep, as ``{name: value}`` in the engine's order.

    Uses ``sweeps.next_runs(config, [], n=size + 1)``: exactly what a W&B server hands to its
    agents (parameter names come out sorted).
    """
    sweeps = _import_sweeps()
    size = grid_size(config)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runs = sweeps.next_runs(dict(config), [], n=size + 1)
    except (ValueError, KeyError, TypeError) as err:
        raise SweepError(f"cannot expand the grid: {err}") from None
    points = [{k: v["value"] for k, v in run.config.items()} for run in runs if run is not None]
    return points


# --------------------------------------------------------------------------- naming


def point_hash(params: Mapping[str, Any]) -> str:
    """First 8 hex digits of the sha256 of the parameters' canonical JSON."""
    text = json.dumps(dict(params), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def _slug_value(value: Any) -> str:
    text = str(value)
    if text.endswith("LanguageModel"):
        text = text.rsplit(".", 1)[-1][: -len("LanguageModel")] or text
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-") or "x"


def run_name(params: Mapping[str, Any], varying: Sequence[str] | None = None) -> str:
    """A stable, readable directory name: a slug of the (varying) parameters + a short hash.

    The hash covers *all* parameters, so names are unique and stable; the slug only helps
    reading (e.g. ``n500_state-odd_w3_LSTM_s0_1a2b3c4d``).

    Args:
        params: the point's parameters.
        varying: the parameters shown in the slug (default: all), e.g. those with more than one
            value in the grid.
    """
    keys = [k for k in params if varying is None or k in varying]
    parts = []
    for key in keys:
        last = key.rsplit(".", 1)[-1]
        value = _slug_value(params[key])
        if last in _VALUE_ONLY or key == "model":
            parts.append(value)
        elif last in _SHORT:
            parts.append(f"{_SHORT[last]}{value}")
        else:
            parts.append(f"{last}-{value}")
    slug = "_".join(parts)[:_SLUG_MAX].rstrip("_-.") or "run"
    return f"{slug}_{point_hash(params)}"


# --------------------------------------------------------------------------- commands


def format_args(params: Mapping[str, Any]) -> dict[str, list[str]]:
    """The argument macros of ``wandb agent`` (``wandb/sdk/launch/sweeps/utils.py``)."""
    flags = [f"--{k}={v}" for k, v in params.items()]
    return {
        "args": flags,
        "args_no_hyphens": [f"{k}={v}" for k, v in params.items()],
        "args_no_equals": [t for k, v in params.items() for t in (f"--{k}", str(v))],
        "args_no_boolean_flags": [
            f"--{k}" if isinstance(v, bool) else f"--{k}={v}"
            for k, v in params.items()
            if not (isinstance(v, bool) and not v)
        ],
        "args_json": [json.dumps(dict(params))],
    }


def build_command(
    config: Mapping[str, Any],
    params: Mapping[str, Any],
    *,
    interpreter: str | None = None,
    run_dir: str | os.PathLike | None = None,
    absolute_from: str | os.PathLike | None = None,
) -> list[str]:
    """The command line of one point, as ``wandb agent`` would build it.

    ``${env}`` -> ``/usr/bin/env``, ``${interpreter}`` -> ``interpreter`` (default
    ``sys.executable``; the agent uses ``python`` from ``PATH``), ``${program}`` -> the sweep's
    ``program``, ``${args}`` & co. -> the parameters, ``${envvar:NAME}`` -> ``$NAME``. With
    ``run_dir``, ``--trainer.default_root_dir=RUN_DIR`` is appended.

    Args:
        absolute_from: if given, relative file paths of the command template that exist relative
            to this directory (``--config configs/x.yaml``, ``${program}``) and parameter values
            that look like existing relative paths are made absolute, so the command can run in
            another working directory.
    """
    macros = format_args(params)
    macros["env"] = ["/usr/bin/env"]
    macros["interpreter"] = [interpreter or sys.executable]
    if config.get("program"):
        macros["program"] = [_absolute(str(config["program"]), absolute_from)]
    out: list[str] = []
    arg_macros = {k for k in macros if k.startswith("args")}
    for raw in config.get("command", DEFAULT_COMMAND):
        token = _ENVVAR.sub(lambda m: os.environ.get(m.group(1), m.group(1)), str(raw))
        match = _MACRO.match(token)
        if match:
            name = match.group(1)
            if name not in macros:
                raise SweepError(f"unknown command macro ${{{name}}}")
            values = macros[name]
            if name in arg_macros and absolute_from is not None:
                values = [_absolute_flag(v, absolute_from) for v in values]
            out.extend(values)
        elif "${" in token:
            raise SweepError(f"unsupported macro in command entry {token!r}")
        else:
            out.append(_absolute_flag(token, absolute_from))
    if run_dir is not None:
        out.append(f"--trainer.default_root_dir={os.fspath(run_dir)}")
    return out


def _absolute(token: str, base: str | os.PathLike | None) -> str:
    """``token`` made absolute if it looks like a relative path that exists under ``base``."""
    if base is None or not token or os.path.isabs(token) or token.startswith("-"):
        return token
    if not ("/" in token or token.endswith((".yaml", ".yml", ".json", ".py"))):
        return token  # e.g. ``cfl_lightning`` after ``-m``, or ``fit``
    candidate = Path(base) / token
    return str(candidate.resolve()) if candidate.exists() else token


def _absolute_flag(token: str, base: str | os.PathLike | None) -> str:
    if base is None:
        return token
    if token.startswith("-") and "=" in token:
        flag, value = token.split("=", 1)
        return f"{flag}={_absolute(value, base)}"
    return _absolute(token, base)


# --------------------------------------------------------------------------- planning


def find_results(directory: str | os.PathLike) -> Path | None:
    """The first ``results.json`` under ``directory`` (recursively), or None."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    return next(iter(sorted(directory.rglob("results.json"))), None)


def _varying(config: Mapping[str, Any]) -> list[str]:
    return [k for k, spec in config["parameters"].items() if _param_size(spec) > 1]


def plan_sweep(config: Mapping[str, Any], output: str | os.PathLike) -> list[SweepPoint]:
    """Every grid point with its run directory under ``output`` and whether it is done.

    A point is done when a directory ``OUTPUT/*_<hash>`` (the hash of :func:`run_name`, so a
    renamed slug still matches) holds a ``results.json`` anywhere below it.
    """
    output = Path(output)
    existing: dict[str, Path] = {}
    if output.is_dir():
        for child in output.iterdir():
            if child.is_dir() and "_" in child.name:
                existing.setdefault(child.name.rsplit("_", 1)[1], child)
    varying = _varying(config)
    points = []
    for params in expand_grid(config):
        name = run_name(params, varying)
        directory = existing.get(point_hash(params), output / name)
        points.append(
            SweepPoint(params, directory.name, directory, find_results(directory) is not None)
        )
    return points


# --------------------------------------------------------------------------- running


@dataclass
class _Running:
    point: SweepPoint
    process: subprocess.Popen
    log: TextIO
    started: float


@dataclass
class SweepSummary:
    """Counts of one :func:`run_sweep` call."""

    total: int = 0
    done: int = 0
    skipped: int = 0
    failed: list[str] = field(default_factory=list)
    not_run: int = 0
    interrupted: bool = False


def child_env(
    threads: int = 1,
    environ: Mapping[str, str] | None = None,
    launch_dir: str | os.PathLike | None = None,
) -> dict[str, str]:
    """The environment of a run: ``threads`` CPU threads, ``WANDB_MODE=offline`` unless set.

    With ``launch_dir``, it is put first on ``PYTHONPATH`` (a run's working directory is its run
    directory, yet ``python -m pkg`` should import as if started from ``launch_dir``).
    """
    env = dict(os.environ if environ is None else environ)
    if launch_dir is not None:
        parts = [os.fspath(launch_dir)] + [
            p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p
        ]
        env["PYTHONPATH"] = os.pathsep.join(parts)
    for name in THREAD_ENV:
        env[name] = str(threads)
    if not env.get("WANDB_MODE"):
        env["WANDB_MODE"] = "offline"
    return env


def _terminate(running: list[_Running], grace: float = 10.0) -> None:
    """SIGTERM each child's process group, wait up to ``grace`` s, then SIGKILL what is left."""
    for item in running:
        _signal_group(item.process, signal.SIGTERM)
    deadline = time.monotonic() + grace
    try:
        for item in running:
            try:
                item.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                _signal_group(item.process, signal.SIGKILL)
                item.process.wait()
    except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
        for item in running:
            _signal_group(item.process, signal.SIGKILL)
    finally:
        for item in running:
            item.log.close()


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, sig)  # the child leads its own process group (start_new_session)
    except (ProcessLookupError, PermissionError):
        pass


def run_sweep(
    config: Mapping[str, Any],
    output: str | os.PathLike,
    *,
    parallel: int = 1,
    limit: int | None = None,
    dry_run: bool = False,
    threads: int = 1,
    stream: TextIO | None = None,
    source: str = "sweep",
) -> SweepSummary:
    """Run the pending points of a grid sweep, ``parallel`` at a time.

    Each point runs in its own directory ``OUTPUT/<run_name>`` (also its working directory, so
    relative outputs of a config such as ``runs/...`` and ``wandb/`` land there), with
    ``params.json`` written first and stdout/stderr in ``run.log``. Done points are skipped; a
    failing point is reported in one line and the others go on. Ctrl-C (or SIGTERM) terminates
    the running children and returns with ``interrupted`` set.

    Args:
        limit: run at most this many of the pending points (in grid order).
        dry_run: only print the commands.
        threads: CPU threads per run (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``,
            ``CFL_LIGHTNING_THREADS``).
    """
    stream = sys.stderr if stream is None else stream
    output = Path(output).absolute()
    cwd = Path.cwd()
    points = plan_sweep(config, output)
    summary = SweepSummary(total=len(points))
    pending = [p for p in points if not p.done]
    summary.skipped = len(points) - len(pending)
    if limit is not None and len(pending) > limit:
        summary.not_run = len(pending) - limit
        pending = pending[:limit]

    def command_of(point: SweepPoint) -> list[str]:
        return build_command(config, point.params, run_dir=point.directory, absolute_from=cwd)

    def say(text: str) -> None:
        stream.write(text + "\n")
        stream.flush()

    say(
        f"{source}: {len(points)} points, {summary.skipped} already done, "
        f"{len(pending)} to run"
        + (f" ({summary.not_run} left for later: --limit)" if summary.not_run else "")
    )
    if dry_run:
        for point in pending:
            say(f"{point.directory}: {shlex.join(command_of(point))}")
        return summary

    env = child_env(threads, launch_dir=cwd)
    queue = list(pending)
    running: list[_Running] = []
    finished = 0

    def report(point: SweepPoint, ok: bool, detail: str) -> None:
        nonlocal finished
        finished += 1
        if ok:
            summary.done += 1
            say(f"[{finished}/{len(pending)}] done {point.name} ({detail})")
        else:
            summary.failed.append(point.name)
            log = point.directory / "run.log"
            say(f"[{finished}/{len(pending)}] FAILED {point.name} ({detail}); log: {log}")

    previous = _install_sigterm()
    try:
        while queue or running:
            while queue and len(running) < max(parallel, 1):
                point = queue.pop(0)
                try:
                    running.append(_start(point, command_of(point), env))
                except OSError as err:
                    report(point, False, f"cannot start: {err}")
            time.sleep(0.05)
            for item in [r for r in running if r.process.poll() is not None]:
                running.remove(item)
                item.log.close()
                code = item.process.returncode
                if code == 0 and find_results(item.point.directory) is not None:
                    report(item.point, True, f"{time.monotonic() - item.started:.1f} s")
                else:
                    why = f"exit {code}" if code != 0 else "exit 0 but no results.json"
                    report(item.point, False, why)
    except KeyboardInterrupt:
        summary.interrupted = True
        say(f"interrupted: stopping {len(running)} running point(s)")
        _terminate(running)
        summary.not_run += len(queue) + len(running)
    finally:
        _restore_sigterm(previous)
    return summary


def _start(point: SweepPoint, command: list[str], env: Mapping[str, str]) -> _Running:
    """Write ``params.json``, open ``run.log`` and start the point's command in its directory."""
    point.directory.mkdir(parents=True, exist_ok=True)
    atomic_write_text(point.directory / "params.json", json.dumps(point.params, indent=1) + "\n")
    log = open(point.directory / "run.log", "w", encoding="utf-8")  # noqa: SIM115
    try:
        log.write(f"# {shlex.join(command)}\n")
        log.flush()
        process = subprocess.Popen(
            command,
            cwd=point.directory,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: terminated as a whole
        )
    except OSError as err:
        log.write(f"cannot start: {err}\n")
        log.close()
        raise
    return _Running(point, process, log, time.monotonic())


def _install_sigterm() -> Any:
    """Turn SIGTERM and SIGINT into KeyboardInterrupt (so children are terminated).

    SIGINT is set explicitly because a process started in the background (``nohup``, CI
    runners) inherits it ignored, and then Ctrl-C or ``kill -INT`` would leave orphans running.

    Returns:
        the previous handlers, to restore.
    """

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        return (
            signal.signal(signal.SIGTERM, handler),
            signal.signal(signal.SIGINT, signal.default_int_handler),
        )
    except ValueError:  # not the main thread: leave signals alone
        return None


def _restore_sigterm(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
