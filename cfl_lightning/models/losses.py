"""The training losses, re-exported from the pure :mod:`cfl_lightning.losses` (kept for imports)."""

from cfl_lightning.losses import (
    cross_entropy_per_position,
    kl_per_position,
    kl_to_automaton_loss,
    per_string,
)

__all__ = ["kl_to_automaton_loss", "kl_per_position", "cross_entropy_per_position", "per_string"]
