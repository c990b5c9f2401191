"""Shared helpers of the light-weight commands: one-line errors, no tracebacks."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from cfl_lightning.errors import CflError

__all__ = ["run_command", "ArgumentParser", "command_args"]


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line on stderr and exits with status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def command_args(argv: list[str] | None, command: str) -> list[str]:
    """The arguments after ``command`` (``argv`` as dispatched by ``__main__``, or ``sys.argv``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    return args[1:] if args and args[0] == command else args


def run_command(body: Callable[[], int | None], prog: str) -> int:
    """Run ``body``; turn user-facing errors into ``prog: error: ...`` and exit status 2."""
    try:
        return int(body() or 0)
    except CflError as err:
        sys.stderr.write(f"{prog}: error: {err}\n")
        return 2
    except OSError as err:
        where = f" ({err.filename})" if getattr(err, "filename", None) else ""
        sys.stderr.write(f"{prog}: error: {err.strerror or err}{where}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return 130
