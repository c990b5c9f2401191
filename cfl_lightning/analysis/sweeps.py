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

:func:`iter_grid` walks the grid lazily in the order of ``sweeps.next_runs`` (the engine the
W&B server uses; tests compare the two point by point), :func:`grid_size` counts it without
enumerating it, and :func:`check_grid_size` refuses grids above ``max_points``.
:func:`build_command` fills in the command macros exactly as ``wandb agent`` does (``${args}``
becomes ``--key=value`` with Python's ``str`` of the value, so write ``"null"`` rather than
``null`` for a None). Running the points (process supervision) is
:func:`cfl_lightning.runner.run_sweep`; ``run_sweep``, ``SweepSummary``, ``child_env`` and
``THREAD_ENV`` are still importable from here.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
import re
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfl_lightning.errors import CflError
from cfl_lightning.io import read_text

__all__ = [
    "SweepError",
    "SweepPoint",
    "load_sweep",
    "validate_sweep",
    "grid_size",
    "expand_grid",
    "iter_grid",
    "check_grid_size",
    "MAX_POINTS",
    "run_name",
    "point_hash",
    "format_args",
    "build_command",
    "find_results",
    "plan_sweep",
    "iter_plan",
    "grid_contains",
    "done_points",
    "run_sweep",
    "SweepSummary",
    "child_env",
    "THREAD_ENV",
]

MAX_POINTS = 100_000  # default bound on a grid's size (--max-points)
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
    if not path.exists():
        raise SweepError(f"no such sweep file: {path}")
    if path.is_dir():
        raise SweepError(f"{path}: is a directory, not a sweep file")
    try:
        config = yaml.safe_load(read_text(path, error=SweepError))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SweepError(f"{path}: invalid YAML{where}: {problem}") from None
    except UnicodeDecodeError:
        raise SweepError(f"{path}: not a text file (not UTF-8); expected sweep YAML") from None
    except OSError as err:
        raise SweepError(f"cannot read {path}: {err.strerror or err}") from None
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


def _grid_axes(config: Mapping[str, Any]) -> list[tuple[str, Sequence[Any] | None, Any]]:
    """``(name, values, constant)`` per parameter in the engine's order, values deduplicated.

    The order and the values are those of ``sweeps.grid_search_next_runs``: parameters sorted
    by name (``HyperParameterSet.from_config``); ``values`` kept in order with later duplicates
    (equal YAML dumps) dropped; ``int_uniform`` as ``range(min, max + 1)``; ``q_uniform`` as
    ``numpy.arange(min, max, q)``. ``int_uniform`` stays a lazy ``range``; a ``q_uniform`` is
    built only after :func:`check_grid_size` (see :func:`iter_grid`). ``values`` is None for a
    constant.
    """
    _import_sweeps()  # quietly, once
    from sweeps.config import ParamValidationError
    from sweeps.grid_search import yaml_hash
    from sweeps.params import HyperParameter, HyperParameterSet

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            params = HyperParameterSet.from_config(dict(config["parameters"]))
    except (ValueError, KeyError, TypeError, AssertionError, ParamValidationError) as err:
        raise SweepError(f"cannot expand the grid: {err}") from None
    axes: list[tuple[str, Sequence[Any] | None, Any]] = []
    for p in params:
        if p.type == HyperParameter.CONSTANT:
            axes.append((p.name, None, p.config["value"]))
        elif p.type == HyperParameter.CATEGORICAL:
            last: dict[str, Any] = {}
            for value in p.config["values"]:
                last[yaml_hash(value)] = value  # first position, last value (as the engine)
            axes.append((p.name, list(last.values()), None))
        elif p.type == HyperParameter.INT_UNIFORM:
            axes.append((p.name, range(p.config["min"], p.config["max"] + 1), None))
        elif p.type == HyperParameter.Q_UNIFORM:
            axes.append((p.name, _QUniform(p.config["min"], p.config["max"], p.config["q"]), None))
        else:
            raise SweepError(f"parameter {p.name!r} has no discrete values for a grid")
    return axes


class _QUniform(Sequence):
    """``numpy.arange(low, high, q).tolist()`` without building it until indexed."""

    def __init__(self, low: float, high: float, q: float) -> None:
        self.args = (low, high, q)
        self._size = max(math.ceil((high - low) / q), 0)
        self._values: list[Any] | None = None

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index: Any) -> Any:
        if self._values is None:
            import numpy as np

            self._values = np.arange(*self.args).tolist()
        return self._values[index]


def grid_size(config: Mapping[str, Any]) -> int:
    """Number of distinct grid points, counted without enumerating them.

    The product of each parameter's number of distinct values (what ``sweeps.next_runs``
    yields: duplicate values in a list are one point).
    """
    return math.prod(len(values) for _, values, _ in _grid_axes(config) if values is not None)


def check_grid_size(
    config: Mapping[str, Any], max_points: int | None = None, *, source: str = "sweep"
) -> int:
    """:func:`grid_size`, refused above ``max_points`` (default :data:`MAX_POINTS`).

    Raises:
        SweepError: one line naming the size and the parameter with the most values.
    """
    bound = MAX_POINTS if max_points is None else int(max_points)
    axes = [(name, len(values)) for name, values, _ in _grid_axes(config) if values is not None]
    size = math.prod(n for _, n in axes)
    if size > bound:
        name, n = max(axes, key=lambda axis: axis[1])
        raise SweepError(
            f"{source}: the grid has {size:,} points, more than the limit of {bound:,} "
            f"(--max-points); parameter {name!r} alone has {n:,} values"
        )
    return size


def iter_grid(config: Mapping[str, Any], max_points: int | None = None) -> Iterator[dict[str, Any]]:
    """The grid's points one at a time, as ``{name: value}``, in the engine's order.

    Equal, point by point and key by key, to ``sweeps.next_runs(config, [], n=size + 1)`` (what
    a W&B server hands to its agents), but lazy: nothing is built beyond the current point, so
    ``itertools.islice(iter_grid(c), 2)`` is cheap for any grid within ``max_points``.

    Raises:
        SweepError: the grid is larger than ``max_points`` (:func:`check_grid_size`).
    """
    check_grid_size(config, max_points)
    axes = _grid_axes(config)
    if any(values is not None and len(values) == 0 for _, values, _ in axes):
        return
    names = [name for name, _, _ in axes]
    lists = [[const] if values is None else values for _, values, const in axes]
    # an odometer over indices, last parameter fastest (itertools.product's order); unlike
    # itertools.product it never turns a range of a billion values into a tuple
    index = [0] * len(lists)
    while True:
        yield copy.deepcopy({name: lst[i] for name, lst, i in zip(names, lists, index)})
        axis = len(lists) - 1
        while axis >= 0:
            index[axis] += 1
            if index[axis] < len(lists[axis]):
                break
            index[axis] = 0
            axis -= 1
        if axis < 0:
            return


def expand_grid(
    config: Mapping[str, Any], *, limit: int | None = None, max_points: int | None = None
) -> list[dict[str, Any]]:
    """The first ``limit`` (default: all) points of :func:`iter_grid`, as a list."""
    return list(itertools.islice(iter_grid(config, max_points), limit))


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
    axes = _grid_axes(config)
    return [name for name, values, _ in axes if values is not None and len(values) > 1]


def iter_plan(
    config: Mapping[str, Any], output: str | os.PathLike, *, max_points: int | None = None
) -> Iterator[SweepPoint]:
    """Each grid point (lazily, :func:`iter_grid`) with its run directory and whether it is done.

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
    for params in iter_grid(config, max_points):
        name = run_name(params, varying)
        directory = existing.get(point_hash(params), output / name)
        yield SweepPoint(params, directory.name, directory, find_results(directory) is not None)


def grid_contains(config: Mapping[str, Any], params: Mapping[str, Any]) -> bool:
    """Whether ``params`` is a point of the grid (same names, every value on its axis)."""
    from sweeps.grid_search import yaml_hash

    axes = _grid_axes(config)
    if set(params) != {name for name, _, _ in axes}:
        return False
    for name, values, constant in axes:
        value = params[name]
        if values is None:
            ok = yaml_hash(value) == yaml_hash(constant)
        elif isinstance(values, range):
            ok = isinstance(value, int) and not isinstance(value, bool) and value in values
        else:
            ok = yaml_hash(value) in {yaml_hash(v) for v in values}
        if not ok:
            return False
    return True


def done_points(config: Mapping[str, Any], output: str | os.PathLike) -> dict[str, Path]:
    """``{point_hash: directory}`` of the grid's points already done under ``output``.

    Found from the directories (their ``params.json`` and ``results.json``), without walking
    the grid: what :func:`cfl_lightning.runner.run_sweep` counts as "already done" beyond
    the points it walked.
    """
    output = Path(output)
    found: dict[str, Path] = {}
    if not output.is_dir():
        return found
    for child in sorted(output.iterdir()):
        if not (child.is_dir() and "_" in child.name and (child / "params.json").is_file()):
            continue
        try:
            params = json.loads(read_text(child / "params.json", limit=1 << 20, error=SweepError))
        except (OSError, ValueError):
            continue
        if isinstance(params, dict) and find_results(child) is not None:
            key = point_hash(params)
            if key == child.name.rsplit("_", 1)[1] and grid_contains(config, params):
                found.setdefault(key, child)
    return found


def plan_sweep(
    config: Mapping[str, Any], output: str | os.PathLike, *, max_points: int | None = None
) -> list[SweepPoint]:
    """Every point of :func:`iter_plan`, as a list."""
    return list(iter_plan(config, output, max_points=max_points))


def __getattr__(name: str) -> Any:
    """The process runner moved to :mod:`cfl_lightning.runner`; its old names still work here."""
    if name in _MOVED:
        from cfl_lightning import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_MOVED = ("run_sweep", "SweepSummary", "child_env", "THREAD_ENV")
