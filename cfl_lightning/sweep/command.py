"""Command lines of grid points, built from a sweep's ``command:`` as ``wandb agent`` does."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cfl_lightning.sweep.grid import DEFAULT_COMMAND, SweepError

__all__ = ["format_args", "build_command"]

_ENVVAR = re.compile(r"\$\{envvar:([A-Za-z0-9_]*)\}")
_MACRO = re.compile(r"^\$\{([A-Za-z_]+)\}$")


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

