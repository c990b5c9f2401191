"""Lightning callbacks that evaluate any next-symbol model against its automaton.

* :class:`DecomposedKLCallback`: validation/test losses and the decomposed KL, for any
  ``LightningModule`` that follows the prediction protocol (see its module docstring);
* :class:`ResultsWriter`: ``results.json`` at the end of every test run, gathered by
  :func:`build_results` from a :class:`FinishedRun` (also the ensemble's writer);
* :class:`EpochProgress`: one line per training epoch (the CLI's progress without a terminal);
* :class:`CheckedEarlyStopping` and :func:`check_monitors`: monitored metrics that exist.
"""

from cfl_lightning.callbacks.decomposed_kl import MONITOR, DecomposedKLCallback, predict_log_probs
from cfl_lightning.callbacks.epoch_progress import EpochProgress
from cfl_lightning.callbacks.finished_run import FinishedRun, build_results
from cfl_lightning.callbacks.monitors import CheckedEarlyStopping, check_monitors
from cfl_lightning.callbacks.results_writer import ResultsWriter, run_log_dir

__all__ = [
    "DecomposedKLCallback",
    "ResultsWriter",
    "EpochProgress",
    "CheckedEarlyStopping",
    "check_monitors",
    "MONITOR",
    "predict_log_probs",
    "run_log_dir",
    "FinishedRun",
    "build_results",
]
