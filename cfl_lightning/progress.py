"""Progress on stderr: a bar on a terminal, a line at intervals off one (logs, pipes, batch jobs).

On a terminal the bar is redrawn at most every 0.2 s. Off a terminal (stderr redirected) nothing
is written for the first ``interval`` seconds (``CFL_LIGHTNING_PROGRESS_INTERVAL``, default 30;
``0`` or ``off`` turns the lines off); after that a background timer writes one line per
interval, ``sampling: 12/50 done, 61 s elapsed``, even while the work is in a phase that reports
no item (a count law, a fixed point), so a long job is never silent. Short work writes nothing.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from typing import TextIO

__all__ = ["Progress", "PROGRESS_INTERVAL_ENV", "DEFAULT_INTERVAL", "progress_interval"]

PROGRESS_INTERVAL_ENV = "CFL_LIGHTNING_PROGRESS_INTERVAL"
DEFAULT_INTERVAL = 30.0


def progress_interval() -> float | None:
    """Seconds between progress lines off a terminal (None: off), from the environment."""
    text = os.environ.get(PROGRESS_INTERVAL_ENV, "").strip().lower()
    if not text:
        return DEFAULT_INTERVAL
    if text in ("0", "off", "none"):
        return None
    try:
        value = float(text)
    except ValueError:
        return DEFAULT_INTERVAL
    return value if value > 0 else None


class Progress:
    """Counts finished items out of ``total``.

    Args:
        total: number of items.
        label: text before the bar (and at the start of each line).
        stream: where to write (stderr by default).
        enabled: force the bar on/off; by default a bar on a terminal and lines at intervals
            off one (``False``: nothing at all).
        interval: seconds between lines off a terminal (default: :func:`progress_interval`).
    """

    def __init__(
        self,
        total: int,
        label: str = "",
        stream: TextIO | None = None,
        enabled: bool | None = None,
        interval: float | None = None,
    ) -> None:
        self.total = max(int(total), 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        isatty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = isatty if enabled is None else enabled
        self.done = 0
        self._last = 0.0
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        every = interval if interval is not None else progress_interval()
        if enabled is None and not isatty and every is not None:
            self._ticker = threading.Thread(
                target=_tick, args=(weakref.ref(self), self._stop, every), daemon=True
            )
            self._ticker.start()

    def line(self) -> str:
        """``sampling: 12/50 done, 61 s elapsed``."""
        elapsed = time.monotonic() - self._start
        return f"{self.label}: {min(self.done, self.total)}/{self.total} done, {elapsed:.0f} s elapsed"

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

    def __del__(self) -> None:
        self._stop.set()  # a bar dropped without close (the work raised): its timer ends

    def close(self) -> None:
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._ticker = None
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _tick(ref: weakref.ref, stop: threading.Event, every: float) -> None:
    """The timer off a terminal: a line per interval until closed (or the bar is dropped, as
    when the work raised before ``close``)."""
    while not stop.wait(every):
        bar = ref()
        if bar is None:
            return
        try:
            bar.stream.write(bar.line() + "\n")
            bar.stream.flush()
        except (OSError, ValueError):  # the stream was closed: stop quietly
            return
        del bar
