"""Small user models for the CLI's fault tests (``--model=tests.cli_models.X``)."""

from __future__ import annotations

import lightning as L
import torch

from cfl_lightning import kl_to_automaton_loss


class _Core(L.LightningModule):
    """A cumulative bag of embeddings: tiny and fast; no evaluation steps."""

    def __init__(self, num_symbols: int = 2, width: int = 8, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.lr = lr
        self.embed = torch.nn.Embedding(num_symbols + 3, width)
        self.out = torch.nn.Linear(width, num_symbols + 1)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.out(torch.cumsum(self.embed(input_ids), 1))

    def training_step(self, batch, batch_idx):
        return kl_to_automaton_loss(self(batch["input_ids"]), batch)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def test_step(self, batch, batch_idx):
        pass


class Bag(_Core):
    """:class:`_Core` with an empty ``validation_step`` (the callback evaluates)."""

    def validation_step(self, batch, batch_idx):
        pass


class NaNAfter(Bag):
    """Predicts NaN from optimizer step ``after`` on (a diverged model)."""

    def __init__(self, num_symbols: int = 2, after: int = 2) -> None:
        super().__init__(num_symbols)
        self.after = after

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        scores = super().forward(input_ids)
        return scores * float("nan") if self.global_step >= self.after else scores


class NoValidation(_Core):
    """Without ``validation_step`` (Lightning then runs no validation loop)."""
