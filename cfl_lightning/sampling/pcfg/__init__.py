"""Sampling from probabilistic context-free grammars (the pure core: no Lightning)."""

from cfl_lightning.sampling.pcfg.generate import generate_strings

__all__ = ["generate_strings"]
