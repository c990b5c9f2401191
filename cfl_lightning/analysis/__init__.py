"""Sweeps, aggregation, figures and automaton drawings.

* :mod:`cfl_lightning.analysis.sweeps`: W&B grid sweeps expanded with W&B's engine and run
  offline (``python -m cfl_lightning sweep``);
* :mod:`cfl_lightning.analysis.aggregate`: read ``results.json`` files or W&B runs, keep the best
  repeat, build causal and (binned) correlational curves with standard errors;
* :mod:`cfl_lightning.analysis.plot`: draw the curves (matplotlib);
* :mod:`cfl_lightning.analysis.draw`: render an automaton (graphviz).

The submodules import matplotlib, graphviz, the ``sweeps`` engine and wandb only when used.
"""

__all__ = ["sweeps", "aggregate", "plot", "draw"]
