"""The causal transformer language model, in its forms: one model, and M models from stacked
weights (dense and compact).

Everything about the transformer is written here once: the position encodings
(:func:`sinusoidal_positions`), the scaled input (:func:`_scaled_input`), the network's layers
and their parameter names (:class:`_TransformerNet`), the widths chosen from a parameter budget,
the model (:class:`TransformerLanguageModel`, whose forward is ``nn.TransformerEncoder``) and its
stacked form (:class:`StackedTransformer`, the forward of M members from stacked ``[M, ...]``
weights, which ensembles train as one computation:
:meth:`TransformerLanguageModel.stacked_network`).

The stacked form computes the network of :class:`_TransformerNet`: scaled embedding plus
sinusoidal positions, dropout, pre-LN encoder layers (``x + Dropout(SelfAttn(LN(x)))``,
``x + Dropout(W2 Dropout(ReLU(W1 LN(x))))``, attention-weight dropout inside), final layer norm,
linear, log-softmax. Linear layers are ``baddbmm`` over the member axis; attention is one
``scaled_dot_product_attention`` over ``[M * R]`` packed rows with a block-causal mask: a cell
attends to the cells of its own slot (its own string) at or before it, which is exactly what the
causal mask of a string's own run lets it see. Positions restart at every slot.

Two forms of the same stacked computation (the same values on every real position; tests hold
them against each model's own forward):

* **dense**: every cell of the ``[M, R, L]`` layout goes through every layer. Its shapes depend
  only on ``(M, R, L)``, so a step can be captured in a CUDA graph: the form on CUDA.
* **compact** (elsewhere, e.g. on the CPU, when the compact cells are at most
  :data:`COMPACT_FILL` of the layout's): the position-wise work (embedding, layer norms,
  linear layers, dropout, output) runs on each member's real cells only, ``[M, N, d]`` with
  ``N`` the most real cells of any member; only attention scatters ``q, k, v`` back to the
  packed layout (zeros or padding values on padding cells: a padding cell always follows its
  slot's real cells, so no real query sees it) and gathers its output. ``N`` is read on the
  host, which a CUDA graph cannot do. Dropout then draws random numbers for ``[M, N]`` cells
  instead of ``[M, R*L]``, so the two forms' dropout streams differ (each is dropout with
  probability ``p`` on every real cell).

On the CPU at the headline recipe's batches, evaluation's merged batches are about half padding
(the compact form then runs) and training ticks under width pacing under a tenth (the dense
form runs; compacting them cost more than it saved): docs/benchmarks_cpu.md.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cfl_lightning.models.base import LanguageModel
from cfl_lightning.models.sizing import count_parameters, largest_within_budget

__all__ = ["TransformerLanguageModel", "StackedTransformer", "COMPACT_FILL", "sinusoidal_positions"]

#: the compact form is used when its ``[M, N]`` cells are at most this fraction of the packed
#: layout's (above it the gathers and scatters cost more than the padding they skip). Set between
#: the two fills measured (docs/benchmarks_cpu.md): 0.49, where compact was faster, and 0.93,
#: where it was slower; not tuned further.
COMPACT_FILL = 0.8


# ---------------------------------------------------------------------- the network and its size
def sinusoidal_positions(length: int, dim: int, *, device: torch.device | None = None) -> Tensor:
    """``[length, dim]`` sinusoidal position encodings (Vaswani et al., 2017), for any length."""
    position = torch.arange(length, dtype=torch.float32, device=device)[:, None]
    half = (dim + 1) // 2
    freq = torch.exp(
        torch.arange(half, dtype=torch.float32, device=device) * (-math.log(10000.0) * 2 / dim)
    )
    angles = position * freq[None, :]
    table = torch.zeros(length, 2 * half, device=device)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table[:, :dim]


def _scaled_input(embedded: Tensor, positions: Tensor) -> Tensor:
    """``[..., d]`` token embeddings scaled by ``sqrt(d)`` plus their ``[..., d]`` positions'
    encodings (before dropout): both forms' first step."""
    return embedded * math.sqrt(embedded.shape[-1]) + positions


class _TransformerNet(nn.Module):
    """Scaled embedding + sinusoidal positions -> pre-LN causal encoder stack -> LN -> linear.

    Its parameters, under the model's ``net`` attribute, are the names the stacked form reads
    (:attr:`EMBEDDING`, :meth:`layer_prefix`, ...).
    """

    #: parameter names in the model: the embedding, the final norm's, the output layer's
    EMBEDDING, NORM, OUTPUT = "net.embedding.weight", "net.norm.", "net.output."

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
        positions = sinusoidal_positions(length, self.d_model, device=input_ids.device)
        x = self.dropout(_scaled_input(self.embedding(input_ids), positions))
        causal = nn.Transformer.generate_square_subsequent_mask(length, device=x.device)
        hidden = self.layers(x, mask=causal, is_causal=True)
        return self.output(self.norm(hidden))

    @staticmethod
    def layer_prefix(layer: int) -> str:
        """The prefix of layer ``layer``'s parameter names in the model (``norm1.weight``,
        ``self_attn.in_proj_weight``, ``linear1.bias``, ... follow it)."""
        return f"net.layers.layers.{layer}."


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


# ---------------------------------------------------------------------- the model
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

    def chosen_sizes(self) -> dict[str, int]:
        """``{"d_model_actual": ..., "feedforward_size_actual": ...}``: the widths, given or
        chosen from the budget."""
        return {"d_model_actual": self.d_model, "feedforward_size_actual": self.feedforward_size}

    def forward(self, input_ids: Tensor) -> Tensor:
        """``[B, T]`` token ids -> ``[B, T, S+1]`` next-symbol log-probabilities."""
        return torch.log_softmax(self.net(input_ids), dim=-1)

    def stacked_network(self) -> StackedTransformer:
        """M of these transformers at once on packed rows (block-causal attention):
        :class:`StackedTransformer`."""
        return StackedTransformer(
            len(self.net.layers.layers), self.num_heads, self.net.dropout.p,
            self.net.layers.layers[0].norm1.eps, pad_id=self.pad_id,
        )


# ---------------------------------------------------------------------- the stacked form
class StackedTransformer:
    """Functional forward of M transformer language models sharing one architecture
    (:class:`_TransformerNet`'s layers, read from stacked weights).

    Args:
        num_layers: encoder layers.
        num_heads: attention heads.
        dropout: dropout probability.
        eps: layer-norm epsilon.
        pad_id: the padding token id of ``input_ids`` (real cells are the others); None: the
            dense form always.
        compact: the compact form where it skips enough padding (True), the dense one always
            (False), or None: the former unless the input is on CUDA (see the module
            docstring).
    """

    def __init__(
        self, num_layers: int, num_heads: int, dropout: float, eps: float = 1e-5,
        pad_id: int | None = None, compact: bool | None = None,
    ) -> None:
        self.num_layers, self.num_heads = int(num_layers), int(num_heads)
        self.dropout, self.eps = float(dropout), float(eps)
        self.pad_id = None if pad_id is None else int(pad_id)
        self.compact = compact
        if compact and pad_id is None:
            raise ValueError("the compact form needs pad_id")

    def _norm(self, x: Tensor, w: dict[str, Tensor], prefix: str) -> Tensor:
        """Layer norm of ``[M, ..., d]`` with the ``[M, d]`` weights ``prefix + weight/bias``."""
        weight, bias = w[prefix + "weight"], w[prefix + "bias"]
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        y = F.layer_norm(x, x.shape[-1:], eps=self.eps)
        return y * weight.view(shape) + bias.view(shape)

    @staticmethod
    def _linear(x: Tensor, w: dict[str, Tensor], prefix: str) -> Tensor:
        """``[M, N, in]`` -> ``[M, N, out]`` with the ``[M, out, in]`` weights ``prefix +
        "weight"`` and the ``[M, out]`` bias ``prefix + "bias"``."""
        weight, bias = w[prefix + "weight"], w[prefix + "bias"]
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    def compact_cells(self, input_ids: Tensor) -> Tensor | None:
        """``[M, N]`` the cells the compact form computes, or None for the dense form.

        Each member's real cells first, in layout order (a member with fewer than ``N`` real
        cells fills its tail with padding cells); None when the form is dense (on CUDA, without
        ``pad_id``, ``compact=False``) or ``N`` exceeds :data:`COMPACT_FILL` of the row cells.
        """
        if self.pad_id is None or self.compact is False:
            return None
        if self.compact is None and input_ids.device.type == "cuda":
            return None
        ids = input_ids.reshape(input_ids.shape[0], -1)
        real = ids != self.pad_id
        n = max(int(real.sum(1).max()), 1)
        if n > COMPACT_FILL * ids.shape[1]:
            return None
        return torch.argsort((~real).to(torch.int8), dim=1, stable=True)[:, :n]

    def __call__(
        self, w: dict[str, Tensor], input_ids: Tensor, position: Tensor, slot: Tensor, training: bool
    ) -> Tensor:
        """``[M, R, L]`` packed token ids -> ``[M, R, L, S+1]`` log-probabilities.

        The arguments are :meth:`StackedLSTM.__call__
        <cfl_lightning.models.lstm.StackedLSTM.__call__>`'s (``w``, ``input_ids``,
        ``training`` alike), except: ``position`` feeds the sinusoidal encodings, and ``slot``
        (``[M, R, L]``, the slot id inside the row) keeps attention inside a slot. Padding cells
        get finite log-probabilities that mean nothing.
        """
        members, rows, length = input_ids.shape
        cells = rows * length
        p = self.dropout if training else 0.0
        embedding = w[_TransformerNet.EMBEDDING]  # [M, V, d]
        d = embedding.shape[-1]
        ids, pos = input_ids.reshape(members, cells), position.reshape(members, cells)
        order = self.compact_cells(input_ids)
        if order is not None:
            ids, pos = ids.gather(1, order), pos.gather(1, order)
        index = torch.arange(members, device=input_ids.device)[:, None]
        table = sinusoidal_positions(length, d, device=input_ids.device).to(embedding.dtype)
        x = F.dropout(_scaled_input(embedding[index, ids], table[pos]), p, training)  # [M, N, d]
        allowed = (slot.unsqueeze(-1) == slot.unsqueeze(-2)) & (
            position.unsqueeze(-1) >= position.unsqueeze(-2)
        )  # [M, R, L, L]: same slot, key not after query
        allowed = allowed.reshape(members * rows, 1, length, length)
        for i in range(self.num_layers):
            pre = _TransformerNet.layer_prefix(i)
            attn = self._attention(self._norm(x, w, pre + "norm1."), w, pre, allowed, order, p)
            x = x + F.dropout(attn, p, training)
            y = self._norm(x, w, pre + "norm2.")
            y = F.dropout(torch.relu(self._linear(y, w, pre + "linear1.")), p, training)
            x = x + F.dropout(self._linear(y, w, pre + "linear2."), p, training)
        x = self._norm(x, w, _TransformerNet.NORM)
        out = torch.log_softmax(self._linear(x, w, _TransformerNet.OUTPUT), dim=-1)
        if order is not None:
            out = _scatter_cells(out, order, cells)
        return out.view(members, rows, length, -1)

    def _attention(
        self, y: Tensor, w: dict[str, Tensor], pre: str, allowed: Tensor, order: Tensor | None,
        p: float,
    ) -> Tensor:
        """Self-attention of one layer: ``[M, N, d]`` normed cells -> ``[M, N, d]`` (output
        projection included) under the ``[M*R, 1, L, L]`` mask ``allowed``; the compact form's
        cells (``order``) go to the packed layout and back."""
        members, rows, length = y.shape[0], allowed.shape[0] // y.shape[0], allowed.shape[-1]
        cells, d = rows * length, y.shape[-1]
        heads = self.num_heads
        qkv = self._linear(y, w, pre + "self_attn.in_proj_")
        if order is not None:  # to the packed layout (no real query sees a padding cell)
            qkv = _scatter_cells(qkv, order, cells)
        qkv = qkv.view(members * rows, length, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(
            qkv[0], qkv[1], qkv[2], attn_mask=allowed, dropout_p=p
        )  # [M*R, heads, L, head]
        attn = attn.transpose(1, 2).reshape(members, cells, d)
        if order is not None:  # back to the real cells
            attn = attn.gather(1, order[:, :, None].expand(-1, -1, d))
        return self._linear(attn, w, pre + "self_attn.out_proj.")


def _scatter_cells(values: Tensor, order: Tensor, cells: int) -> Tensor:
    """``[M, N, C]`` values of the compact cells -> ``[M, cells, C]``, zeros elsewhere.

    ``order`` is ``[M, N]``: each entry's cell (distinct within a member).
    """
    members, _, width = values.shape
    full = values.new_zeros(members, cells, width)
    return full.scatter(1, order[:, :, None].expand(-1, -1, width), values)
