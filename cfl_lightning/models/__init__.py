"""Language models trained against a PFSA's next-symbol distributions (Lightning modules).

One module per architecture holds all of it: :mod:`cfl_lightning.models.lstm` and
:mod:`cfl_lightning.models.transformer` each define the network, its sizing from a parameter
budget, the model, and its stacked form (the forward of M members from stacked weights, which
ensembles train as one computation: :meth:`LanguageModel.stacked_network`).
"""

from cfl_lightning.models.base import LanguageModel, StackedNetwork
from cfl_lightning.models.lstm import LSTMLanguageModel, StackedLSTM
from cfl_lightning.models.transformer import StackedTransformer, TransformerLanguageModel

__all__ = [
    "LanguageModel",
    "LSTMLanguageModel",
    "TransformerLanguageModel",
    "StackedNetwork",
    "StackedLSTM",
    "StackedTransformer",
]
