"""Pick a Weights & Biases mode that never prompts and never hangs.

With no mode and no credentials, ``wandb`` fails after a few seconds without a TTY, prompts (and
blocks) with one, and with a key but no network it hangs for minutes. The training CLI therefore
calls :func:`ensure_wandb_mode` before anything imports ``wandb``: when the user configured
nothing (no ``WANDB_MODE``, no ``WANDB_API_KEY``, no ``~/.netrc`` entry for the W&B host), runs
are logged offline (``<save_dir>/wandb/offline-run-*``; upload later with ``wandb sync``).
An explicit ``WANDB_MODE`` (``online``, ``offline``, ``disabled``) is always respected.
"""

from __future__ import annotations

import netrc
import os
from collections.abc import MutableMapping
from pathlib import Path
from urllib.parse import urlparse

__all__ = ["ensure_wandb_mode", "has_wandb_credentials", "DEFAULT_HOST"]

DEFAULT_HOST = "api.wandb.ai"


def _host(environ: MutableMapping[str, str]) -> str:
    base = environ.get("WANDB_BASE_URL", "")
    return (urlparse(base).hostname or DEFAULT_HOST) if base else DEFAULT_HOST


def has_wandb_credentials(environ: MutableMapping[str, str] | None = None) -> bool:
    """Whether an API key is configured (``WANDB_API_KEY`` or a netrc entry for the W&B host)."""
    environ = os.environ if environ is None else environ
    if environ.get("WANDB_API_KEY"):
        return True
    path = Path(environ.get("NETRC") or Path.home() / ".netrc").expanduser()
    try:
        if not path.is_file():
            return False
        return netrc.netrc(str(path)).authenticators(_host(environ)) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def ensure_wandb_mode(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Set ``WANDB_MODE=offline`` unless a mode or credentials are configured.

    Must run before ``wandb`` is imported (the first mode used sticks for the process).

    Args:
        environ: the environment to read and update (default ``os.environ``).

    Returns:
        the effective ``WANDB_MODE`` (None when unset because credentials exist: W&B's default,
        online).
    """
    environ = os.environ if environ is None else environ
    if environ.get("WANDB_MODE"):
        return environ["WANDB_MODE"]
    if has_wandb_credentials(environ):
        return None
    environ["WANDB_MODE"] = "offline"
    return "offline"
