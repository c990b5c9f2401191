"""A user's own ``LanguageModel`` (no stacked network), for the ensemble tests
(``--model=tests.user_models.GRULanguageModel``)."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from cfl_lightning.models import LanguageModel


class GRULanguageModel(LanguageModel):
    """Embedding -> dropout -> GRU -> dropout -> linear logits: written as a user would, with
    no ``stacked_network`` (an ensemble runs each member's own forward)."""

    def __init__(
        self,
        num_symbols: int = 2,
        param_budget: int = 128_000,
        num_layers: int = 1,
        hidden_size: int = 12,
        **training: Any,
    ) -> None:
        super().__init__(
            num_symbols=num_symbols, param_budget=param_budget, num_layers=num_layers, **training
        )
        self.embedding = nn.Embedding(self.vocab_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, num_layers, batch_first=True)
        self.dropout = nn.Dropout(self.dropout_p)
        self.output = nn.Linear(hidden_size, self.num_classes)
        self._finish_init(hidden_size_actual=hidden_size)

    def forward(self, input_ids: Tensor) -> Tensor:
        """``[B, T]`` token ids -> ``[B, T, S+1]`` logits."""
        hidden, _ = self.gru(self.dropout(self.embedding(input_ids)))
        return self.output(self.dropout(hidden))
