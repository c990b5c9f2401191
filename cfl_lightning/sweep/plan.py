"""Where each grid point runs and whether it is done (no process is started here).

A point runs in ``OUTPUT/<run_name>``; an existing directory ``OUTPUT/*_<hash>`` with the point's
hash is reused (so a renamed slug still matches). A point is done when that directory holds a
valid ``results.json`` (:mod:`cfl_lightning.results`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cfl_lightning.io import read_text
from cfl_lightning.results import find_results
from cfl_lightning.sweep.grid import SweepError, grid_contains, iter_grid, varying_parameters
from cfl_lightning.sweep.naming import point_hash, run_name

__all__ = ["SweepPoint", "iter_plan", "plan_sweep", "done_points"]


@dataclass(frozen=True)
class SweepPoint:
    """One grid point: its parameters (in the engine's order), name and run directory."""

    params: dict[str, Any]
    name: str
    directory: Path
    done: bool = False


def iter_plan(
    config: Mapping[str, Any], output: str | os.PathLike, *, max_points: int | None = None
) -> Iterator[SweepPoint]:
    """Each grid point (lazily, :func:`iter_grid`) with its run directory and whether it is done.

    A point is done when a directory ``OUTPUT/*_<hash>`` (the hash of
    :func:`~cfl_lightning.sweep.naming.run_name`, so a renamed slug still matches) holds a valid
    ``results.json`` anywhere below it (:func:`~cfl_lightning.results.find_results`).
    """
    output = Path(output)
    existing: dict[str, Path] = {}
    if output.is_dir():
        for child in output.iterdir():
            if child.is_dir() and "_" in child.name:
                existing.setdefault(child.name.rsplit("_", 1)[1], child)
    varying = varying_parameters(config)
    for params in iter_grid(config, max_points):
        name = run_name(params, varying)
        directory = existing.get(point_hash(params), output / name)
        yield SweepPoint(params, directory.name, directory, find_results(directory) is not None)


def done_points(config: Mapping[str, Any], output: str | os.PathLike) -> dict[str, Path]:
    """``{point_hash: directory}`` of the grid's points already done under ``output``.

    Found from the directories (their ``params.json`` and ``results.json``), without walking
    the grid: what :func:`cfl_lightning.sweep.runner.run_sweep` counts as "already done" beyond
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

