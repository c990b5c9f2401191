"""LSTM language model sized from a parameter budget."""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch
from torch import Tensor, nn

from cfl_lightning.models.base import LanguageModel
from cfl_lightning.models.sizing import count_parameters, largest_within_budget
from cfl_lightning.models.stacked_lstm import StackedLSTM

__all__ = ["LSTMLanguageModel"]


class _LSTMNet(nn.Module):
    """Embedding -> dropout -> LSTM -> dropout -> linear output (log-softmax in the caller)."""

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        hidden_size: int,
        num_layers: int,
        dropout: float,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, hidden_size, device=device)
        self.lstm = nn.LSTM(
            hidden_size,
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
            device=device,
        )
        self.dropout = nn.Dropout(dropout)
        self.output = nn.Linear(hidden_size, num_classes, device=device)

    def forward(self, input_ids: Tensor) -> Tensor:
        hidden, _ = self.lstm(self.dropout(self.embedding(input_ids)))
        return self.output(self.dropout(hidden))


@functools.lru_cache(maxsize=256)
def _hidden_size(vocab_size: int, num_classes: int, num_layers: int, budget: int) -> int:
    """The largest hidden size within ``budget`` (cached: ensemble members share their sizing)."""

    def count(size: int) -> int:
        return count_parameters(_LSTMNet(vocab_size, num_classes, size, num_layers, 0.0, "meta"))

    return largest_within_budget(count, budget)


class LSTMLanguageModel(LanguageModel):
    """An LSTM next-symbol model (Hochreiter & Schmidhuber, 1997).

    Architecture: embedding of the ``S+3`` token ids (width = hidden size), dropout, a
    ``num_layers``-layer LSTM (dropout between layers), dropout, a linear layer to ``S+1`` logits,
    log-softmax. Padding needs no packing: the LSTM reads left to right and every padding position
    comes after the real ones and is masked out of the loss.

    Sizing: the hidden size is the largest one whose total parameter count does not exceed
    ``param_budget`` (e.g. 125 for ``|S| = 2`` at 128k: 127,003 parameters), unless
    ``hidden_size`` is given, which then wins over the budget.

    Args:
        num_symbols: alphabet size ``|S|`` (linked from ``data.num_symbols`` by the CLI).
        param_budget: parameter budget (ignored when ``hidden_size`` is given).
        num_layers: LSTM layers.
        hidden_size: explicit hidden size (default: chosen from ``param_budget``).
        **training: ``dropout``, ``lr``, ``lr_factor``, ``lr_patience``, ``loss``: see
            :class:`~cfl_lightning.models.base.LanguageModel`.
    """

    def __init__(
        self,
        num_symbols: int = 2,
        param_budget: int = 128_000,
        num_layers: int = 1,
        hidden_size: Optional[int] = None,
        **training: Any,
    ) -> None:
        super().__init__(
            num_symbols=num_symbols, param_budget=param_budget, num_layers=num_layers, **training
        )

        if hidden_size is not None and hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1, got {hidden_size}")
        size = hidden_size
        if size is None:
            size = _hidden_size(self.vocab_size, self.num_classes, num_layers, param_budget)
        self.hidden_size = int(size)
        self.net = _LSTMNet(
            self.vocab_size, self.num_classes, self.hidden_size, num_layers, self.dropout_p
        )
        self._finish_init(hidden_size_actual=self.hidden_size)

    def forward(self, input_ids: Tensor) -> Tensor:
        """``[B, T]`` token ids -> ``[B, T, S+1]`` next-symbol log-probabilities."""
        return torch.log_softmax(self.net(input_ids), dim=-1)

    #: on a CPU oneDNN's fused LSTM kernel, one member at a time, beats the batched recurrence
    #: per token (``benchmarks/bench_ensemble.py``)
    ENSEMBLE_CPU_ENGINE = "loop"

    def stacked_network(self) -> StackedLSTM:
        """M of these LSTMs at once: :class:`~cfl_lightning.models.stacked_lstm.StackedLSTM`."""
        return StackedLSTM(self.net.lstm.num_layers, self.net.dropout.p)
