"""Shared helpers of the light-weight commands: one-line errors, no tracebacks, clean signals."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable, Sequence

from cfl_lightning.errors import CflError

__all__ = [
    "run_command",
    "ArgumentParser",
    "command_args",
    "seed_type",
    "positive_type",
    "probability_type",
    "edges_type",
    "path_type",
    "STDOUT",
]

SEED_MAX = 2**64 - 1
STDOUT = "-"  # ``--output -``: standard output, where a command can stream its output


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line on stderr and exits with status 2.

    Option names must be given in full (``allow_abbrev=False``: ``--num-string`` is not
    ``--num-strings``), and an unknown option is named, with the closest known one, before
    anything else is checked: ``unrecognized argument --num-strigns (did you mean
    --num-strings?)`` rather than "the following arguments are required: --num-strings".
    """

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003 - argparse's own
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, args: Sequence[str] | None = None, namespace=None):  # noqa: ANN001, ANN201
        args = list(sys.argv[1:] if args is None else args)
        unknown = self.unknown_option(args)
        if unknown is not None:
            self.error(unknown)
        return super().parse_args(args, namespace)

    def unknown_option(self, args: Sequence[str]) -> str | None:
        """The message for the first option in ``args`` that this parser does not know, or None.

        Arguments after ``--``, ``-`` itself, negative numbers and tokens with a space are values,
        not options; after a subcommand's name (``automaton random ...``) the subcommand's parser
        checks the rest.
        """
        commands = {name: sub for action in self._actions
                    if isinstance(action, argparse._SubParsersAction)  # noqa: SLF001
                    for name, sub in action.choices.items()}
        for i, token in enumerate(args):
            if token == "--":
                return None
            if token in commands and isinstance(commands[token], ArgumentParser):
                return commands[token].unknown_option(args[i + 1:])
            if not token.startswith("-") or token == "-" or " " in token:
                continue  # a value (argparse reads a token with a space as one too)
            negative = self._negative_number_matcher.match(token)
            if negative and not self._has_negative_number_optionals:
                continue
            name = token.split("=", 1)[0] if token.startswith("--") else token[:2]
            if name in self._option_string_actions:
                continue
            known = [o for o in self._option_string_actions if o.startswith("--")]
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
            hint = f"did you mean {close[0]}?" if close else f"see {self.prog} --help"
            return f"unrecognized argument {name} ({hint})"
        return None

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def _number(text: str, kind: type, expected: str) -> int | float:
    """``kind(text)``, or an ``ArgumentTypeError`` saying ``expected ..., got 'text'``."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None


def seed_type(text: str) -> int:
    """An argparse type: an integer seed in ``0 .. 2**64 - 1``."""
    value = _number(text, int, "an integer seed")
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"a seed must be in 0..2**64-1, got {text}")
    return value


def positive_type(text: str) -> int:
    """An argparse type: a positive integer (``1``, ``2``, ...)."""
    value = _number(text, int, "a positive integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def probability_type(text: str) -> float:
    """An argparse type: a probability in ``[0, 1]``."""
    value = _number(text, float, "a probability")
    if not 0.0 <= value <= 1.0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"a probability must be in [0, 1], got {text}")
    return value


def edges_type(text: str) -> list[float]:
    """An argparse type: comma-separated finite numbers (bin edges such as ``100,200,400``)."""
    import math

    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers such as 100,200,400, got {text!r}"
        )
    return values


def path_type(text: str) -> str:
    """An argparse type: an output path that is a file, not standard output (``-``), for
    commands that write files (a figure and its CSV, a YAML and its CSV, a directory)."""
    if text == STDOUT:
        raise argparse.ArgumentTypeError(
            "this command cannot write to standard output ('-'); give a file path"
        )
    return text


def command_args(argv: list[str] | None, command: str) -> list[str]:
    """The arguments after ``command`` (``argv`` as dispatched by ``__main__``, or ``sys.argv``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return args[1:] if args and args[0] == command else args


def run_command(body: Callable[[], int | None], prog: str) -> int:
    """Run ``body``; turn user-facing errors into ``prog: error: ...`` and exit status 2.

    Warnings are printed as ``prog: warning: ...`` (one line). SIGTERM and SIGHUP raise
    :class:`~cfl_lightning.io.Interrupted` inside ``body`` (so
    temporary files are removed) and end the command with status ``128 + signal``; Ctrl-C
    ends it with 130.
    """
    import warnings

    from cfl_lightning.io import Interrupted, signals_interrupt

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        sys.stderr.write(f"{prog}: warning: {_first_line(Warning(message))}\n")

    try:
        with signals_interrupt(), warnings.catch_warnings():
            warnings.showwarning = show  # one line per warning, no source line
            return int(body() or 0)
    except CflError as err:
        sys.stderr.write(f"{prog}: error: {_first_line(err)}\n")
        return 2
    except OSError as err:
        where = f" ({err.filename})" if getattr(err, "filename", None) else ""
        sys.stderr.write(f"{prog}: error: {err.strerror or err}{where}\n")
        return 2
    except MemoryError:
        sys.stderr.write(f"{prog}: error: out of memory (try fewer strings or a smaller count)\n")
        return 2
    except Interrupted as err:
        sys.stderr.write(f"{prog}: interrupted ({err})\n")
        return 128 + err.signum
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return 130


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__
