"""The package's version, in a module of its own so that any layer may record it.

(``cfl_lightning/__init__`` re-exports it; a module that imported the package root for it would
sit above everything the root imports: one floor too high.)
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.2.0"
