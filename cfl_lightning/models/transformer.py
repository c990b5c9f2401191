"""Causal (decoder-only) transformer language model sized from a parameter budget."""

from __future__ import annotations

import functools
import math
from typing import Any, Optional

import torch
from torch import Tensor, nn

from cfl_lightning.models.base import LanguageModel, sinusoidal_positions
from cfl_lightning.models.sizing import count_parameters, largest_within_budget
from cfl_lightning.models.stacked_transformer import StackedTransformer

__all__ = ["TransformerLanguageModel"]


class _TransformerNet(nn.Module):
    """Scaled embedding + sinusoidal positions -> pre-LN causal encoder stack -> LN -> linear."""

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        d_model: int,
        num_heads: int,
        feedforward_size: int,
        num_layers: int,
        dropout: float,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model, device=device)
        layer = nn.TransformerEncoderLayer(
            d_model,
            num_heads,
            dim_feedforward=feedforward_size,
            dropout=dropout,
            batch_first=True,
            norm_first=True,
            device=device,
        )
        self.layers = nn.TransformerEncoder(
            layer, num_layers, enable_nested_tensor=False
        )
        self.norm = nn.LayerNorm(d_model, device=device)
        self.dropout = nn.Dropout(dropout)
        self.output = nn.Linear(d_model, num_classes, device=device)

    def forward(self, input_ids: Tensor) -> Tensor:
        length = input_ids.shape[1]
        x = self.embedding(input_ids) * math.sqrt(self.d_model)
        x = self.dropout(x + sinusoidal_positions(length, self.d_model, device=x.device))
        causal = nn.Transformer.generate_square_subsequent_mask(length, device=x.device)
        hidden = self.layers(x, mask=causal, is_causal=True)
        return self.output(self.norm(hidden))


@functools.lru_cache(maxsize=256)
def _sizes(
    vocab_size: int, num_classes: int, num_heads: int, num_layers: int, budget: int,
    d_model: int | None, feedforward_size: int | None,
) -> tuple[int, int]:
    """``(d_model, feedforward_size)`` within ``budget`` (cached: ensemble members share their
    sizing); explicit values are kept."""

    def count(width: int, ff: int) -> int:
        net = _TransformerNet(vocab_size, num_classes, width, num_heads, ff, num_layers, 0.0, "meta")
        return count_parameters(net)

    width = d_model
    if width is None:
        fixed_ff = feedforward_size
        width = largest_within_budget(
            lambda w: count(w, 4 * w if fixed_ff is None else fixed_ff),
            budget,
            low=num_heads,
            step=num_heads,
        )
    ff = feedforward_size
    if ff is None:
        if count(width, 4 * width) <= budget:
            ff = largest_within_budget(lambda f: count(width, f), budget, low=4 * width)
        else:  # an explicit d_model over the budget: keep the conventional 4x
            ff = 4 * width
    return int(width), int(ff)


class TransformerLanguageModel(LanguageModel):
    """A causal transformer next-symbol model (Vaswani et al., 2017), decoder-only.

    Architecture: token embedding (``S+3`` ids) scaled by ``sqrt(d_model)`` plus fixed sinusoidal
    position encodings (no length limit: strings longer than any seen in training work), dropout,
    ``num_layers`` **pre-LN** encoder layers (``LN -> causal self-attention -> residual``,
    ``LN -> ReLU feed-forward -> residual``, dropout inside) under a causal mask, a final layer
    norm, and a linear layer to ``S+1`` logits, log-softmax. Position ``t`` attends to positions
    ``<= t`` only; padding (always after the real positions) therefore never affects them, and
    no key-padding mask is needed.

    Sizing: ``d_model`` is the largest multiple of ``num_heads`` for which the model with
    ``feedforward_size = 4 * d_model`` fits ``param_budget``; the feed-forward size is then
    increased as far as the budget allows, so the count lands within a few hundred parameters
    of the budget (e.g. ``|S| = 2``, 2 layers, 4 heads at 128k: ``d_model`` 72, feed-forward 291,
    127,881 parameters). Explicit ``d_model`` / ``feedforward_size`` win over the budget.

    Args:
        num_symbols: alphabet size ``|S|`` (linked from ``data.num_symbols`` by the CLI).
        param_budget: parameter budget (used for whatever of ``d_model`` / ``feedforward_size``
            is not given).
        num_layers: transformer layers.
        num_heads: attention heads (``d_model`` is a multiple of it).
        d_model: explicit model width.
        feedforward_size: explicit feed-forward width.
        **training: ``dropout`` (on the embeddings, attention weights and residual branches),
            ``lr``, ``lr_factor``, ``lr_patience``, ``loss``: see
            :class:`~cfl_lightning.models.base.LanguageModel`.
    """

    def __init__(
        self,
        num_symbols: int = 2,
        param_budget: int = 128_000,
        num_layers: int = 2,
        num_heads: int = 4,
        d_model: Optional[int] = None,
        feedforward_size: Optional[int] = None,
        **training: Any,
    ) -> None:
        super().__init__(
            num_symbols=num_symbols, param_budget=param_budget, num_layers=num_layers, **training
        )
        if num_heads < 1:
            raise ValueError(f"num_heads must be >= 1, got {num_heads}")
        if d_model is not None and (d_model < 1 or d_model % num_heads):
            raise ValueError(
                f"d_model ({d_model}) must be a positive multiple of num_heads ({num_heads})"
            )
        if feedforward_size is not None and feedforward_size < 1:
            raise ValueError(f"feedforward_size must be >= 1, got {feedforward_size}")

        width, ff = _sizes(
            self.vocab_size, self.num_classes, num_heads, num_layers, param_budget, d_model,
            feedforward_size,
        )
        self.d_model, self.feedforward_size, self.num_heads = int(width), int(ff), int(num_heads)
        self.net = _TransformerNet(
            self.vocab_size, self.num_classes, self.d_model, num_heads, self.feedforward_size,
            num_layers, self.dropout_p,
        )
        self._finish_init(
            d_model_actual=self.d_model, feedforward_size_actual=self.feedforward_size
        )

    def forward(self, input_ids: Tensor) -> Tensor:
        """``[B, T]`` token ids -> ``[B, T, S+1]`` next-symbol log-probabilities."""
        return torch.log_softmax(self.net(input_ids), dim=-1)

    def stacked_network(self) -> StackedTransformer:
        """M of these transformers at once on packed rows (block-causal attention):
        :class:`~cfl_lightning.models.stacked_transformer.StackedTransformer`."""
        return StackedTransformer(
            len(self.net.layers.layers), self.num_heads, self.net.dropout.p,
            self.net.layers.layers[0].norm1.eps, pad_id=self.pad_id,
        )
