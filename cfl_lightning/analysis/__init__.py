"""Aggregation, figures, pre-registered contrasts and automaton drawings.

* :mod:`cfl_lightning.analysis.records`: read runs from ``results.json`` files, W&B sweeps or
  JSON Lines files (type-checked), and write compact JSON Lines;
* :mod:`cfl_lightning.analysis.stats`: Student-t intervals of means over automata and of the
  causal/correlational gap;
* :mod:`cfl_lightning.analysis.pooling`: pooled targets (``symbol:*``): every event of a kind,
  reduced to one mean per automaton before any interval;
* :mod:`cfl_lightning.analysis.control`: non-target controls (a run's other events of the
  target's kind) and the target-minus-control difference ``did``;
* :mod:`cfl_lightning.analysis.aggregate`: keep the best repeat, build causal and (binned)
  correlational curves with standard errors, 95% intervals and the gap;
* :mod:`cfl_lightning.analysis.verdicts`: the decision rules of a plan's contrasts and claims;
* :mod:`cfl_lightning.analysis.report`: the ``analyze`` pipeline (inputs, targets, export
  selection, curves, gap table) without the command line;
* :mod:`cfl_lightning.analysis.plan` and :mod:`cfl_lightning.analysis.plan_table`: a plan file of
  pre-registered contrasts evaluated into tables and a verdict, under both measures;
* :mod:`cfl_lightning.analysis.plot`: draw the curves (matplotlib);
* :mod:`cfl_lightning.analysis.draw`: render an automaton (graphviz).

The submodules import matplotlib, graphviz, yaml and wandb only when used. Sweeps (grid planning
and the runner) are :mod:`cfl_lightning.sweep`.
"""

__all__ = [
    "records", "stats", "pooling", "control", "aggregate", "report", "plan", "verdicts",
    "plan_table", "plot", "draw",
]
