"""Language models trained against a PFSA's next-symbol distributions (Lightning modules).

Each architecture owns its stacked form (the forward of M members from stacked weights, which
ensembles train as one computation): :meth:`LanguageModel.stacked_network`.
"""

from cfl_lightning.models.base import LanguageModel, StackedNetwork
from cfl_lightning.models.lstm import LSTMLanguageModel
from cfl_lightning.models.stacked_lstm import StackedLSTM
from cfl_lightning.models.stacked_transformer import StackedTransformer
from cfl_lightning.models.transformer import TransformerLanguageModel

__all__ = [
    "LanguageModel",
    "LSTMLanguageModel",
    "TransformerLanguageModel",
    "StackedNetwork",
    "StackedLSTM",
    "StackedTransformer",
]
