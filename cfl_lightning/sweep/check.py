"""``sweep --dry-run`` checks the points it prints: each ``fit`` command line as ``fit`` reads it.

The sweep imports no training code, so the check runs in one process of its own,
``python -m CHECK_MODULE`` (:data:`CHECK_MODULE`, the training CLI's parser and data module; see
that module), fed the points' ``fit`` arguments as JSON on stdin; it prints ``bad NAME:
problem`` for each point whose ``fit`` would stop before training (a model class that does not
import, an unknown option, a value of the wrong type, an event or count the automaton refuses).

Points whose command lines differ only in ``--trainer.default_root_dir`` and an integer
``--seed_everything`` are checked once (a grid's seeds multiply its points, not its settings).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from cfl_lightning.sweep.grid import SweepError

__all__ = ["CHECK_MODULE", "check_points", "parse_bad_line"]

#: the module run as ``python -m CHECK_MODULE`` to check the points (reads JSON on stdin)
CHECK_MODULE = "cfl_lightning.cli.check_points"
_BAD = re.compile(r"^bad ([^\s:]+): (.*)$")
_SAME = re.compile(r"^--(?:trainer\.default_root_dir=.*|seed_everything=-?\d+)$")


def parse_bad_line(line: str) -> tuple[str, str] | None:
    """``(NAME, problem)`` from the checker's ``bad NAME: problem`` line, else None."""
    match = _BAD.match(line.strip())
    return None if match is None else (match.group(1), match.group(2).strip())


def _key(args: Sequence[str]) -> str:
    return json.dumps([a for a in args if not _SAME.match(a)])


def check_points(
    points: Sequence[tuple[str, Sequence[str]]], env: Mapping[str, str], cwd: str | os.PathLike
) -> dict[str, str]:
    """``{name: problem}`` of the points whose ``fit ARGS`` would stop before training.

    Args:
        points: ``[(name, the arguments after python -m cfl_lightning fit)]``.
        env: the runs' environment (:func:`~cfl_lightning.sweep.process.child_env`).
        cwd: where the sweep was started (the checker runs there).

    Raises:
        SweepError: the checker itself failed (its error line named).
    """
    first: dict[str, str] = {}  # command key -> the name of the point checked for it
    same: dict[str, list[str]] = {}
    for name, args in points:
        key = _key(args)
        if key not in first:
            first[key] = name
        same.setdefault(first[key], []).append(name)
    if not first:
        return {}
    wanted = {name: list(args) for name, args in points if name in same}
    spec = json.dumps([{"name": name, "args": wanted[name]} for name in same])
    proc = subprocess.run([sys.executable, "-m", CHECK_MODULE], input=spec, env=dict(env),
                          cwd=Path(cwd), capture_output=True, text=True)
    if proc.returncode != 0:
        why = next((line for line in reversed(proc.stderr.splitlines()) if line.strip()), "")
        raise SweepError(f"checking the points failed (exit {proc.returncode}): "
                         f"{why.strip() or 'no output'}")
    problems: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        parsed = parse_bad_line(line)
        if parsed is not None and parsed[0] in same:
            for name in same[parsed[0]]:
                problems[name] = parsed[1]
    return problems
