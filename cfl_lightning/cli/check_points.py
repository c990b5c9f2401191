"""``python -m cfl_lightning.cli.check_points``: a sweep's ``fit`` command lines checked, untrained.

``sweep --dry-run`` starts this module once (the sweep command itself imports no Lightning) and
writes to its stdin a JSON list ``[{"name": POINT, "args": [...]}]``, ``args`` being each
point's command line after ``python -m cfl_lightning fit``. For every point it

1. parses the arguments with the training CLI itself (``fit``'s parser: unknown or misspelled
   options, values of the wrong type, the model's ``class_path``, which is imported, and its
   ``init_args``), and runs the CLI's checks of the Trainer values and ``default_root_dir``;
2. builds the point's :class:`~cfl_lightning.data.PFADataModule` from its ``data`` settings
   (the automaton, the event, the count, the memory estimate; nothing is sampled), once per
   distinct setting.

No model is instantiated, nothing is trained, sampled or written. stdout: one line per point
that would fail, ``bad NAME: problem`` (the problem as ``fit`` states it), and nothing else;
exit status 0 once every point is checked, 2 when stdin is not such a list.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["main", "check_point", "cli_refusal", "Tee", "BAD"]

#: the word of a stdout line ``bad NAME: problem``
BAD = "bad"
_PROG = "python -m cfl_lightning.cli.check_points"


class Tee(io.TextIOBase):
    """A text stream that writes through to ``stream`` (None: nowhere) and keeps what it wrote."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream, self.kept = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.stream.write(text) if self.stream is not None else len(text)

    def flush(self) -> None:
        if self.stream is not None:
            self.stream.flush()


def cli_refusal(printed: str) -> str | None:
    """The training CLI's one-line refusal (``PROG: error: WHAT``, given as WHAT) in what it
    ``printed`` on stderr (the last one), else None."""
    for line in reversed(printed.splitlines()):
        head, found, what = line.partition(": error: ")
        if found and head and not head[0].isspace():
            return " ".join(what.split())[:300]
    return None


class _Parsed(Exception):
    """Raised by the parse-only CLI once the arguments are parsed and checked."""


def _parse(args: Sequence[str]) -> Any:
    """The ``fit`` config of ``args`` (the training CLI's parse and pre-instantiation checks)."""
    from cfl_lightning.cli import train

    base = train._cli_class()

    class ParseOnly(base):  # type: ignore[misc, valid-type]
        def before_instantiate_classes(self) -> None:
            super().before_instantiate_classes()  # the trainer values, default_root_dir
            raise _Parsed(self.config["fit"])

    original = train._cli_class
    train._cli_class = lambda: ParseOnly
    try:
        train.build_cli(["fit", *args])
    except _Parsed as parsed:
        return parsed.args[0]
    finally:
        train._cli_class = original
    raise RuntimeError("the training CLI did not stop after parsing")  # pragma: no cover


def check_point(args: Sequence[str], data_checked: dict[str, str | None]) -> str | None:
    """The problem that ``fit ARGS`` would stop on before training, or None.

    Args:
        args: the command line after ``python -m cfl_lightning fit``.
        data_checked: ``{data settings as JSON: problem or None}`` of the data settings already
            checked (filled in; points that share their data settings build it once).
    """
    from cfl_lightning.errors import CflError

    printed = Tee()
    try:
        with contextlib.redirect_stderr(printed):
            config = _parse(args)
    except SystemExit as err:
        why = cli_refusal(printed.kept.getvalue())
        return why or f"the training CLI exited with status {err.code}"
    except (CflError, OSError, ValueError) as err:
        return " ".join(str(err).split())[:300] or type(err).__name__
    data = config.get("data")
    data = data.as_dict() if hasattr(data, "as_dict") else dict(data or {})
    key = json.dumps(data, sort_keys=True, default=str)
    if key not in data_checked:
        data_checked[key] = _data_problem(data)
    return data_checked[key]


def _data_problem(data: dict[str, Any]) -> str | None:
    """Whether the point's data module can be built (nothing is sampled or cached)."""
    from cfl_lightning.data import PFADataModule
    from cfl_lightning.errors import CflError

    try:
        PFADataModule(**{**data, "cache_dir": "none"})
    except (CflError, ValueError, TypeError, OSError) as err:
        return " ".join(str(err).split())[:300] or type(err).__name__
    return None


def _read_points(stream: TextIO) -> list[tuple[str, list[str]]]:
    try:
        items = json.loads(stream.read())
    except ValueError as err:
        raise ValueError(f"stdin is not JSON: {err}") from None
    if not isinstance(items, list) or not all(
        isinstance(i, dict) and isinstance(i.get("name"), str) and isinstance(i.get("args"), list)
        and all(isinstance(a, str) for a in i["args"]) for i in items
    ):
        raise ValueError('stdin must be a JSON list of {"name": str, "args": [str, ...]}')
    return [(i["name"], list(i["args"])) for i in items]


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0 once every point is checked (bad ones printed), 2 for bad input."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv:
        sys.stderr.write(f"usage: {_PROG} < POINTS.json (see the module's docstring)\n")
        return 2
    try:
        points = _read_points(sys.stdin)
    except ValueError as err:
        sys.stderr.write(f"{_PROG}: error: {err}\n")
        return 2
    from cfl_lightning.cli.train import configure_threads, quiet_noise
    from cfl_lightning.wandb_mode import ensure_wandb_mode

    ensure_wandb_mode()  # before anything imports wandb
    configure_threads()
    quiet_noise()
    data_checked: dict[str, str | None] = {}
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        for name, args in points:
            problem = check_point(args, data_checked)
            if problem is not None:
                out.write(f"{BAD} {name}: {problem}\n")
                out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
