"""Shared helpers of the light-weight commands: one-line errors, no tracebacks, clean signals."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from cfl_lightning.errors import CflError

__all__ = [
    "run_command",
    "ArgumentParser",
    "command_args",
    "seed_type",
    "positive_type",
    "probability_type",
    "edges_type",
]

SEED_MAX = 2**64 - 1


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line on stderr and exits with status 2."""

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
