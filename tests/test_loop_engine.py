"""The loop engine's training tick against an independent per-member ``functional_call`` step.

:class:`~cfl_lightning.ensemble.engines.LoopEngine` points the model's parameters (and their
``.grad``) at each member's rows and lets the backward accumulate into an ``[M, P]`` buffer. The
reference here computes each member's gradient the straightforward way, from a fresh leaf row
through ``torch.func.functional_call``, with the same random state, so dropout masks agree and
the gradients must be bitwise equal; with dropout, an idle member, an unused parameter and
three ticks in a row (the buffer is reused, Adam moves the rows between ticks).
"""

from __future__ import annotations

import lightning
import numpy as np
import pytest
import torch
from torch import nn

from cfl_lightning.data import PFADataModule
from cfl_lightning.ensemble.data import EnsembleData
from cfl_lightning.ensemble.engines import LoopEngine
from cfl_lightning.ensemble.optim import StackedAdam, clip_rows_
from cfl_lightning.ensemble.stacking import ParameterLayout
from cfl_lightning.losses import training_loss
from cfl_lightning.models import LSTMLanguageModel
from tests.user_models import GRULanguageModel

DATA = [dict(seed=0, count=30, num_strings=40), dict(seed=1, count=60, num_strings=70),
        dict(seed=2, count=45, num_strings=25)]


class GRUWithUnused(GRULanguageModel):
    """A user's model with a parameter its forward never reads (its gradient is 0)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.unused = nn.Parameter(torch.ones(3))


MODELS = {"lstm": lambda n: LSTMLanguageModel(num_symbols=n, param_budget=8000, dropout=0.2),
          "gru": lambda n: GRUWithUnused(num_symbols=n, dropout=0.2)}


class Recorder(StackedAdam):
    """Adam that also keeps the gradients it was given."""

    def update(self, grad, *, rows=None, active=None):
        self.seen.append((grad.clone(), None if rows is None else rows.clone()))
        super().update(grad, rows=rows, active=active)


def setup(arch):
    models, dms = [], []
    for i, data in enumerate(DATA):
        lightning.seed_everything(i, verbose=False)
        dm = PFADataModule(generator="parity", eta=0.3, intervention="exact", event="state:odd",
                           val_strings=10, test_strings=0, cache_dir="none", device="cpu", **data)
        dm.setup("fit")
        models.append(MODELS[arch](dm.num_symbols).double())
        dms.append(dm)
    layout = ParameterLayout.of(models[0])
    return models, EnsembleData(dms), layout


@pytest.mark.parametrize("arch", ["lstm", "gru"])
def test_loop_engine_gradients_equal_functional_call_gradients(arch):
    models, data, layout = setup(arch)
    param = nn.Parameter(layout.stack(models))
    engine = LoopEngine(models[0], layout, data, param, "kl", clip=1.0)
    adam = Recorder(param, torch.full((len(DATA),), 0.01, dtype=torch.float64))
    adam.seen = []
    reference_param = param.detach().clone()
    reference_model = engine.model
    first = data.first_batch("train")
    ticks = [np.array([first[0], -1, first[2]]), np.array([first[0] + 1, first[1], first[2] + 1]),
             np.array([-1, first[1] + 1, -1])]
    for t, ids in enumerate(ticks):
        torch.manual_seed(100 + t)
        engine.train(ids, None, False, adam)
        grad, rows = adam.seen[-1]
        # the reference: each member's gradient from a fresh leaf, in the same order
        torch.manual_seed(100 + t)
        taking = np.nonzero(ids >= 0)[0]
        want = []
        for m in taking:
            batch = engine._batch("train", int(m), int(ids[m]))
            leaf = reference_param[m].clone().requires_grad_(True)
            scores = torch.func.functional_call(
                reference_model, layout.row_views(leaf), (batch["input_ids"],)
            )
            (g,) = torch.autograd.grad(training_loss("kl", scores, batch), leaf)
            want.append(g)
        want = torch.stack(want)
        clip_rows_(want, 1.0)  # the engine's clipping (its rule is tested elsewhere)
        if rows is not None:
            assert rows.tolist() == taking.tolist()
        torch.testing.assert_close(grad, want, rtol=1e-12, atol=0)
        assert want.abs().sum() > 0
        if arch == "gru":  # the unused parameter's slice has a zero gradient
            start = layout.offsets[layout.names.index("unused")]
            assert torch.equal(grad[:, start:start + 3], torch.zeros_like(grad[:, start:start + 3]))
        reference_param.copy_(param.detach())  # Adam moved the rows: follow them
        # the model holds no gradient between ticks; its parameters read the live rows
        assert all(p.grad is None for p in engine.model.parameters())
    assert len(adam.seen) == len(ticks)


def test_loop_engine_follows_a_replaced_parameter_storage():
    """A move (``.to``) replaces the ``[M, P]`` storage: the views are rebuilt, not stale."""
    models, data, layout = setup("lstm")
    param = nn.Parameter(layout.stack(models))
    engine = LoopEngine(models[0], layout, data, param, "kl", clip=None)
    adam = StackedAdam(param, torch.full((len(DATA),), 0.01, dtype=torch.float64))
    ids = np.array(data.first_batch("train"))
    engine.train(ids, None, False, adam)
    param.data = param.detach().clone() + 1.0  # new storage, as Module._apply does
    engine.train(ids, None, False, adam)
    for m in range(len(DATA)):
        for value, p in zip(engine._rows[m], layout.row_views(param.detach()[m]).values()):
            assert value.data_ptr() == p.data_ptr()
