"""The parameters of M same-shaped models as one ``[M, P]`` tensor, with named views.

Keeping every member's parameters in one row of a single flat tensor makes the per-member
operations of training single kernels whatever the number of parameter tensors: the gradient
norm for clipping is ``grad.pow(2).sum(1)``, Adam is a few element-wise operations on ``[M, P]``,
a best-checkpoint copy is one ``torch.where``, and dropping stopped members is one
``index_select``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

__all__ = ["ParameterLayout"]


@dataclass(frozen=True)
class ParameterLayout:
    """Names, shapes and offsets of a model's parameters inside a flat row of ``P`` numbers.

    Attributes:
        names: parameter names, as in the model's ``state_dict`` (e.g. ``net.lstm.weight_ih_l0``).
        shapes: their shapes.
        offsets: start of each inside the row; ``offsets[-1] == size``.
    """

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]

    @classmethod
    def of(cls, model: nn.Module) -> ParameterLayout:
        """The layout of ``model.named_parameters()`` (buffers are not trained; none exist)."""
        names, shapes, offsets = [], [], [0]
        for name, parameter in model.named_parameters():
            names.append(name)
            shapes.append(tuple(parameter.shape))
            offsets.append(offsets[-1] + parameter.numel())
        return cls(tuple(names), tuple(shapes), tuple(offsets))

    @property
    def size(self) -> int:
        """``P``, the number of parameters of one member."""
        return self.offsets[-1]

    def stack(self, models: list[nn.Module]) -> Tensor:
        """``[M, P]`` copy of the members' parameters (their dtype and device)."""
        rows = []
        for model in models:
            named = dict(model.named_parameters())
            if tuple(named) != self.names:
                raise ValueError("members do not share one architecture (parameter names differ)")
            rows.append(torch.cat([named[n].detach().reshape(-1) for n in self.names]))
        return torch.stack(rows)

    def stack_states(self, states: list[dict[str, Tensor]]) -> Tensor:
        """``[M, P]`` from state dicts (as :meth:`state_dict` returns them)."""
        return torch.stack([torch.cat([s[n].reshape(-1) for n in self.names]) for s in states])

    def views(self, flat: Tensor) -> dict[str, Tensor]:
        """Named ``[M, *shape]`` views of ``flat`` ``[M, P]`` (differentiable, no copies).

        One ``split`` (whose backward is a single ``cat`` into the ``[M, P]`` gradient), not a
        slice per parameter (each of whose backwards would zero-fill a whole ``[M, P]``).
        """
        sizes = [end - start for start, end in zip(self.offsets, self.offsets[1:])]
        parts = flat.split(sizes, dim=1)
        return {
            name: part.view(flat.shape[0], *shape)
            for name, shape, part in zip(self.names, self.shapes, parts)
        }

    def row_views(self, row: Tensor) -> dict[str, Tensor]:
        """Named views of one member's ``[P]`` row, shaped as the model's parameters."""
        return {name: part[0] for name, part in self.views(row.unsqueeze(0)).items()}

    def state_dict(self, row: Tensor) -> dict[str, Tensor]:
        """One member's ``{name: tensor}`` from its ``[P]`` row (for ``load_state_dict``)."""
        return {
            name: row[start:end].reshape(shape).clone()
            for name, shape, start, end in zip(self.names, self.shapes, self.offsets, self.offsets[1:])
        }
