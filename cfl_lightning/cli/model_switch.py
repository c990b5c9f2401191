"""``--model=OtherClass`` after a config written for another class: no carried-over defaults.

When ``--model`` switches the class, jsonargparse keeps every ``init_args`` value that the new
class accepts, including the *defaults* it had filled in for the old class. Switching the
shipped LSTM config to ``--model=TransformerLanguageModel`` thus built a 1-layer transformer
(the LSTM's ``num_layers=1`` default) instead of the documented 2-layer one. After parsing,
:func:`reset_carried_defaults` puts every init argument that nobody gave explicitly (neither in
a ``--config`` file's ``model.init_args`` nor as a ``--model.*`` flag) back to the new class's
own default; explicitly given values that the new class accepts (``lr``, ``dropout``, ...) are
kept, as documented, and :func:`config_overrides` names those that the ``--config`` file (not
the command line) sets to other values than the new class's own defaults, so that the CLI can
say so (``note: --model=my_pkg.MyGRU takes lr=0.01 from the config; MyGRU's own default is
0.003 (give --model.init_args.lr=... to change it)``).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from typing import Any

import yaml

__all__ = [
    "config_overrides", "explicit_model_args", "explicit_model_class", "model_switched",
    "reset_carried_defaults",
]


def _config_paths(argv: Sequence[str]) -> list[str]:
    paths = []
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            paths.append(argv[i + 1])
        elif arg.startswith("--config="):
            paths.append(arg.split("=", 1)[1])
    return paths


def model_switched(argv: Sequence[str]) -> bool:
    """Whether the command line names the model class itself (``--model=X`` / ``--model X``)."""
    for i, arg in enumerate(argv):
        if arg.startswith("--model=") or (arg == "--model" and i + 1 < len(argv)):
            return True
    return False


def _config_models(argv: Sequence[str]) -> list[Any]:
    """The ``model`` entry of every ``--config`` file (YAML) that has one."""
    models = []
    for path in _config_paths(argv):
        try:
            with open(path, encoding="utf-8") as handle:
                data = yaml.safe_load(handle)
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            continue  # the parser has already reported unreadable configs
        if isinstance(data, dict) and data.get("model") is not None:
            models.append(data["model"])
    return models


def explicit_model_class(argv: Sequence[str]) -> bool:
    """Whether the model class was given, on the command line (``--model=X``,
    ``--model.class_path X``) or in a ``--config`` file (``model.class_path`` or ``model: X``),
    rather than left to the default."""
    if model_switched(argv) or any(a.startswith("--model.class_path") for a in argv):
        return True
    return any(
        isinstance(model, str) or (isinstance(model, dict) and "class_path" in model)
        for model in _config_models(argv)
    )


def explicit_model_args(argv: Sequence[str]) -> set[str]:
    """Names of the model's init arguments given explicitly on the command line or in configs.

    Args:
        argv: the command line after the subcommand.

    Returns:
        the keys of ``model.init_args`` in every ``--config`` file (YAML) and of every
        ``--model.init_args.X`` / ``--model.X`` flag.
    """
    names: set[str] = set()
    for model in _config_models(argv):
        init = model.get("init_args") if isinstance(model, dict) else None
        if isinstance(init, dict):
            names.update(str(key) for key in init)
    for arg in argv:
        if not arg.startswith("--model."):
            continue
        key = arg[len("--model."):].split("=", 1)[0]
        key = key[len("init_args."):] if key.startswith("init_args.") else key
        if key and "." not in key and key != "class_path":
            names.add(key)
    return names


def _resolve(class_path: str) -> Any:
    module, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _switched(model: Any, argv: Sequence[str]) -> tuple[Any, Any] | None:
    """``(init_args, the new class's signature parameters)`` after a ``--model`` switch on the
    command line; None when the class was not switched or cannot be inspected."""
    init = getattr(model, "init_args", None)
    class_path = getattr(model, "class_path", None)
    if init is None or not class_path or not model_switched(argv):
        return None
    try:
        return init, inspect.signature(_resolve(str(class_path))).parameters
    except (ImportError, AttributeError, TypeError, ValueError):
        return None


def reset_carried_defaults(model: Any, argv: Sequence[str]) -> list[str]:
    """After a ``--model`` switch, reset init args nobody gave to the new class's defaults.

    Args:
        model: the parsed ``model`` namespace (``class_path`` and ``init_args``), changed in place.
        argv: the command line after the subcommand.

    Returns:
        the names of the arguments that were reset (empty when the class was not switched).
    """
    switched = _switched(model, argv)
    if switched is None:
        return []
    init, parameters = switched
    explicit = explicit_model_args(argv)
    reset = []
    for name in list(vars(init)):
        parameter = parameters.get(name)
        if name in explicit or parameter is None or parameter.default is inspect.Parameter.empty:
            continue
        if getattr(init, name) != parameter.default:
            setattr(init, name, parameter.default)
            reset.append(name)
    return reset


def _flag_args(argv: Sequence[str]) -> set[str]:
    """Names of the model's init arguments given as ``--model.init_args.X`` / ``--model.X``."""
    return explicit_model_args([a for a in argv if a.startswith("--model.")])


def config_overrides(model: Any, argv: Sequence[str]) -> list[tuple[str, Any, Any]]:
    """After a ``--model`` switch: the new class's arguments that a ``--config`` file sets (and
    no command-line flag) to another value than the class's own default.

    Args:
        model: the parsed ``model`` namespace (``class_path`` and ``init_args``).
        argv: the command line after the subcommand.

    Returns:
        ``(name, value, class default)`` triples, in the class's argument order; empty when the
        class was not switched on the command line.
    """
    switched = _switched(model, argv)
    if switched is None:
        return []
    init, parameters = switched
    from_config = set()
    for config in _config_models(argv):
        args = config.get("init_args") if isinstance(config, dict) else None
        if isinstance(args, dict):
            from_config.update(str(key) for key in args)
    from_config -= _flag_args(argv)
    found = []
    for name, parameter in parameters.items():
        if name not in from_config or parameter.default is inspect.Parameter.empty:
            continue
        value = getattr(init, name, parameter.default)
        if value != parameter.default:
            found.append((name, value, parameter.default))
    return found
