"""The host's available memory and the one refusal of a size that does not fit (bottom floor).

Read by the automaton loader (a pushdown automaton's fixed point is sized before it is solved)
and by the sampler's budget (:mod:`cfl_lightning.sampling.budget`, which adds CUDA devices).
``CFL_LIGHTNING_MEMORY_LIMIT`` (bytes, or with a ``K``/``M``/``G``/``T`` suffix) overrides the
memory available; ``0`` or ``off`` turns the check off. No torch import.
"""

from __future__ import annotations

import math
import os
import re

from cfl_lightning.errors import SizeError

__all__ = [
    "MEMORY_LIMIT_ENV",
    "format_bytes",
    "limit_from_env",
    "host_available",
    "check_host_bytes",
]

MEMORY_LIMIT_ENV = "CFL_LIGHTNING_MEMORY_LIMIT"
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgtKMGT]?)i?[bB]?\s*$")


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KB"`` (powers of 1024); ``inf`` -> ``"inf B"``."""
    if not math.isfinite(n):
        return "inf B"
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1024 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PB"  # pragma: no cover


def limit_from_env() -> int | None:
    """The override in ``CFL_LIGHTNING_MEMORY_LIMIT``: bytes, ``-1`` for off, None if unset."""
    text = os.environ.get(MEMORY_LIMIT_ENV, "").strip()
    if not text:
        return None
    if text.lower() in ("0", "off", "none", "inf"):
        return -1
    match = _SIZE.match(text)
    if not match:
        raise SizeError(f"{MEMORY_LIMIT_ENV}={text!r}: expected bytes such as 4G, 512M or 0 (off)")
    scale = 1024 ** " KMGT".index(match.group(2).upper() or " ")
    return int(float(match.group(1)) * scale)


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def host_available() -> int | None:
    """Bytes available to this process: the smaller of ``MemAvailable`` and the cgroup's limit
    minus its usage (None if neither is known). Ignores the override."""
    candidates = []
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    candidates.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit, usage in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        cap, used = _read_int(limit), _read_int(usage)
        if cap is not None and used is not None and cap < 2**60:
            candidates.append(max(cap - used, 0))
    return min(candidates) if candidates else None


def check_host_bytes(need: float, *, what: str) -> None:
    """Raise :class:`SizeError` when ``need`` bytes exceed the host memory available.

    The message: ``WHAT needs ~1.2 TB, more than the 22.1 GB of memory available
    (CFL_LIGHTNING_MEMORY_LIMIT overrides the limit)``.
    """
    override = limit_from_env()
    have = host_available() if override is None else override
    if have is not None and have >= 0 and need > have:
        raise SizeError(
            f"{what} needs ~{format_bytes(need)}, more than the {format_bytes(have)} of memory "
            f"available ({MEMORY_LIMIT_ENV} overrides the limit)"
        )
