"""Language models trained against a PFSA's next-symbol distributions (Lightning modules)."""

from cfl_lightning.models.base import LanguageModel
from cfl_lightning.models.lstm import LSTMLanguageModel
from cfl_lightning.models.transformer import TransformerLanguageModel

__all__ = ["LanguageModel", "LSTMLanguageModel", "TransformerLanguageModel"]
