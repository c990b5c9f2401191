"""W&B grid sweep files: loading, validation and lazy expansion with W&B's own sweep engine.

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
enumerating it, and :func:`check_grid_size` refuses grids above ``max_points``. Command lines
are :mod:`cfl_lightning.sweep.command`, run names :mod:`cfl_lightning.sweep.naming`.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from cfl_lightning.errors import CflError
from cfl_lightning.io import read_text

__all__ = [
    "SweepError",
    "load_sweep",
    "validate_sweep",
    "grid_size",
    "expand_grid",
    "iter_grid",
    "check_grid_size",
    "grid_contains",
    "varying_parameters",
    "MAX_POINTS",
    "DEFAULT_COMMAND",
]

MAX_POINTS = 100_000  # default bound on a grid's size (--max-points)
#: the command W&B runs when a sweep file has none
DEFAULT_COMMAND = ["${env}", "${interpreter}", "${program}", "${args}"]


class SweepError(CflError):
    """A sweep file is missing, malformed or not a runnable grid."""


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


def varying_parameters(config: Mapping[str, Any]) -> list[str]:
    """The parameters with more than one value (those a run name shows)."""
    axes = _grid_axes(config)
    return [name for name, values, _ in axes if values is not None and len(values) > 1]


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
