"""Re-export of :mod:`cfl_lightning.wandb_mode` (kept so older imports keep working).

The helper moved to the package root so that ``cfl_lightning.analysis`` needs nothing from
``cfl_lightning.cli``.
"""

from __future__ import annotations

from cfl_lightning.wandb_mode import DEFAULT_HOST, ensure_wandb_mode, has_wandb_credentials

__all__ = ["ensure_wandb_mode", "has_wandb_credentials", "DEFAULT_HOST"]
