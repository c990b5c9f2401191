"""A minimal progress bar on stderr, silent unless stderr is a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Counts finished items out of ``total``; redraws at most every 0.2 s.

    Args:
        total: number of items.
        label: text before the bar.
        stream: where to draw (stderr by default).
        enabled: force on/off; by default on only when ``stream`` is a terminal.
    """

    def __init__(
        self, total: int, label: str = "", stream: TextIO | None = None, enabled: bool | None = None
    ) -> None:
        self.total = max(int(total), 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", lambda: False)
        self.enabled = isatty() if enabled is None else enabled
        self.done = 0
        self._last = 0.0
        self._start = time.monotonic()

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and (now - self._last > 0.2 or self.done >= self.total):
            self._last = now
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(frac * 30)
            self.stream.write(
                f"\r{self.label} [{bar:<30}] {self.done}/{self.total} {now - self._start:.1f}s"
            )
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
