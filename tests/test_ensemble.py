"""Ensembles: members of an ``EnsembleLanguageModel`` must train exactly as their own runs.

The reference is always the shipped path: the real model class and ``PFADataModule`` driven by a
Lightning ``Trainer`` with the CLI's clipping, early stopping and checkpointing. The ensemble is
driven by a plain Lightning ``Trainer`` too. (The job entry: ``tests/test_ensemble_job.py``.)
"""

from __future__ import annotations

import logging
import math
import warnings

import lightning
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint

from cfl_lightning.data import PFADataModule
from cfl_lightning.data.batching import collate
from cfl_lightning.ensemble import (
    EnsembleLanguageModel,
    LastCheckpoint,
    PackedCorpora,
    ParameterLayout,
    StackedAdam,
    TrainSettings,
    clip_rows_,
    stacked_network,
)
from cfl_lightning.ensemble.packing import bucket
from cfl_lightning.ensemble.ticks import by_width, lockstep
from cfl_lightning.losses import kl_per_position
from cfl_lightning.models import LSTMLanguageModel, TransformerLanguageModel
from tests.user_models import GRULanguageModel

logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
MODELS = {"lstm": LSTMLanguageModel, "transformer": TransformerLanguageModel,
          "gru": GRULanguageModel}  # a user's model: no stacked network
# members differ in corpus (data seed, count, size: different numbers of batches per epoch)
DATA = [
    dict(seed=0, count=30, num_strings=40),
    dict(seed=1, count=60, num_strings=90),
    dict(seed=0, count=45, num_strings=25),
]


def build(arch: str, seed: int, data: dict, dropout: float = 0.0, lr: float = 0.01):
    """Seed, data module, model: the order in which ``python -m cfl_lightning fit`` builds them."""
    lightning.seed_everything(seed, verbose=False)
    settings = dict(generator="parity", eta=0.3, intervention="exact", event="state:odd",
                    val_strings=20, test_strings=0, cache_dir="none", device="cpu")
    dm = PFADataModule(**{**settings, **data})
    model = MODELS[arch](
        num_symbols=dm.num_symbols, param_budget=8000, dropout=dropout, lr=lr, lr_patience=1
    )
    return model, dm


class _Record(Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []
        self.vals: list[float] = []
        self.epochs: list[dict[str, float]] = []  # the train/* and val/* a plain fit logs

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))

    def on_train_epoch_end(self, trainer, module) -> None:
        self.vals.append(float(trainer.callback_metrics["val/kl_per_string"]))

    def on_train_epoch_start(self, trainer, module) -> None:
        if trainer.current_epoch > 0:  # the last epoch's, complete (the module logs train/* last)
            self._epoch(trainer)

    def on_train_end(self, trainer, module) -> None:
        self._epoch(trainer)

    def _epoch(self, trainer) -> None:
        self.epochs.append({k: float(v) for k, v in trainer.callback_metrics.items()
                            if k.startswith(("train/", "val/"))})


def sequential(model, dm, tmp_path, *, epochs: int, patience: int, precision: str = "64-true"):
    """Train like the CLI (clip 5, early stopping, best checkpoint); returns what it saw."""
    record = _Record()
    checkpoint = ModelCheckpoint(monitor="val/kl_per_string", dirpath=tmp_path, save_top_k=1)
    trainer = lightning.Trainer(
        max_epochs=epochs, precision=precision, gradient_clip_val=5.0, logger=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
        callbacks=[record, EarlyStopping("val/kl_per_string", patience=patience), checkpoint],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, datamodule=dm)
    best = torch.load(checkpoint.best_model_path, weights_only=True)["state_dict"]
    return record, trainer.current_epoch, float(checkpoint.best_model_score), best


@pytest.mark.parametrize("arch,compact", [("lstm", None), ("transformer", True),
                                          ("transformer", False)])
def test_packed_forward_matches_each_model(arch, compact, monkeypatch):
    """Each member's packed predictions are its own model's; for the transformer both forms
    (compact, here on every batch: the CPU's where padding is plenty; dense: CUDA's)."""
    from cfl_lightning.models import transformer

    monkeypatch.setattr(transformer, "COMPACT_FILL", 1.0)
    models, dms = zip(*(build(arch, i, d) for i, d in enumerate(DATA)))
    models = [m.double().eval() for m in models]
    for dm in dms:
        dm.setup("fit")
    layout = ParameterLayout.of(models[0])
    params = layout.stack(models)
    packed = PackedCorpora(
        [d.tokenized("train") for d in dms], [d.batches("train") for d in dms],
        [d.pfsa.next_symbol_probs() for d in dms], dms[0].pad_id,
    )
    net = stacked_network(models[0])
    if compact is not None:
        net.compact = compact
    rng = np.random.default_rng(0)
    for trial in range(5):
        local = [int(rng.integers(packed.num_batches[m])) for m in range(len(dms))]
        local[1] = -1 if trial == 4 else local[1]  # an idle member
        ids = np.array([packed.first_batch[m] + b if b >= 0 else -1 for m, b in enumerate(local)])
        batch = packed.step(ids)
        if compact is not None:
            assert (net.compact_cells(batch.input_ids) is None) == (not compact)
        log_probs = net(layout.views(params), batch.input_ids, batch.position, batch.slot, False)
        for m, b in enumerate(local):
            if b < 0:
                assert not batch.mask[m].any() and batch.strings[m] == 0
                continue
            ref = collate(
                dms[m].tokenized("train"), dms[m].batches("train")[b],
                dms[m].pfsa.next_symbol_probs().float(), dms[m].pad_id,
            )
            real = batch.mask[m]
            assert int(batch.strings[m]) == ref["input_ids"].shape[0]
            assert torch.equal(batch.target_ids[m][real], ref["target_ids"][ref["mask"]])
            assert torch.equal(batch.states[m][real], ref["states"][ref["mask"]])
            assert torch.equal(batch.target_probs[m][real], ref["target_probs"][ref["mask"]])
            want = models[m](ref["input_ids"])[ref["mask"]]
            torch.testing.assert_close(log_probs[m][real], want, rtol=0, atol=1e-12)


def test_compact_and_dense_transformer_forms_give_the_same_loss_and_gradients(monkeypatch):
    """Without dropout the two forms of the stacked transformer are one computation: the same
    per-member loss sums and the same gradient of every member's parameters; with dropout
    both train (finite, different streams). The compact form runs where padding is plenty."""
    from cfl_lightning.ensemble.step import loss_sums
    from cfl_lightning.models import transformer

    models, dms = zip(*(build("transformer", i, d) for i, d in enumerate(DATA)))
    models = [m.double() for m in models]
    for dm in dms:
        dm.setup("fit")
    layout = ParameterLayout.of(models[0])
    packed = PackedCorpora(
        [d.tokenized("train") for d in dms], [d.batches("train") for d in dms],
        [d.pfsa.next_symbol_probs() for d in dms], dms[0].pad_id,
    )
    net = stacked_network(models[0])
    pad = dms[0].pad_id
    half = torch.tensor([[[1, 2, pad, pad]]])  # half padding: compact on the CPU by default
    assert net.compact_cells(half).tolist() == [[0, 1]]
    assert net.compact_cells(torch.tensor([[[1, 2, 3, 1, 2, pad]]])) is None  # 5/6 > 0.8
    net.compact = False
    assert net.compact_cells(half) is None
    monkeypatch.setattr(transformer, "COMPACT_FILL", 1.0)  # compact on every batch
    rng = np.random.default_rng(1)
    for trial in range(4):
        ids = np.array([packed.first_batch[m] + int(rng.integers(packed.num_batches[m]))
                        for m in range(len(dms))])
        ids[2] = -1 if trial == 3 else ids[2]  # an idle member
        batch = packed.step(ids, (bucket(packed.shape(ids)[0] + 1), packed.shape(ids)[1]))
        out = {}
        for compact in (True, False):
            net.compact = compact
            assert (net.compact_cells(batch.input_ids) is None) == (not compact)
            param = torch.nn.Parameter(layout.stack(models))
            sums = loss_sums(net, layout, param, batch, "kl", False)
            (grad,) = torch.autograd.grad(sums.sum(), param)
            out[compact] = (sums.detach(), grad)
        torch.testing.assert_close(out[True][0], out[False][0], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(out[True][1], out[False][1], rtol=1e-10, atol=1e-12)
        assert out[True][1].abs().sum() > 0
    net.dropout = 0.1  # the test's models have no dropout of their own
    seen: list[tuple[int, ...]] = []
    dropout = torch.nn.functional.dropout

    def recorded(x, p=0.5, training=True, inplace=False):
        seen.append(tuple(x.shape))
        return dropout(x, p, training, inplace)

    monkeypatch.setattr(torch.nn.functional, "dropout", recorded)
    cells = batch.input_ids[0].numel()
    for compact in (True, False):  # both forms drop out the embedding and every residual branch
        net.compact, seen[:] = compact, []
        torch.manual_seed(0)
        param = torch.nn.Parameter(layout.stack(models))
        sums = loss_sums(net, layout, param, batch, "kl", True)
        assert torch.isfinite(sums).all() and not torch.equal(sums.detach(), out[compact][0])
        assert len(seen) == 1 + 3 * net.num_layers
        width = net.compact_cells(batch.input_ids).shape[1] if compact else cells
        assert all(shape[:2] == (len(ids), width) for shape in seen), (seen, width)
        assert width < cells or not compact


@pytest.mark.parametrize("arch,engine", [("lstm", "stacked"), ("lstm", "loop"),
                                         ("transformer", "stacked"), ("transformer", "loop"),
                                         ("gru", "loop")])
def test_every_architecture_evaluates_each_member_as_its_own_forward(arch, engine):
    """Forward parity of every architecture and engine: each member's predictions on its own
    validation batch are its own model's (the user's GRU has only the loop engine)."""
    models, dms = zip(*(build(arch, i, d) for i, d in enumerate(DATA)))
    models = [m.double().eval() for m in models]
    module = EnsembleLanguageModel(models, list(dms), engine=engine)
    for dm in dms:
        dm.setup("fit")
    # evaluation batches are the data module's merged (EnsembleData.batches): member 1 takes
    # its last one
    last = [len(module.data.batches("val", m)) - 1 for m in range(len(dms))]
    ids = np.array(module.data.first_batch("val")) + np.array([0, last[1], 0])
    seen = []
    for out in module.engine().evaluate("val", module.flat.detach(), ids):
        for k, m in enumerate(out.members.tolist()):
            index = module.data.batches("val", m)[int(ids[m]) - module.data.first_batch("val")[m]]
            ref = collate(dms[m].tokenized("val"), index,
                          dms[m].pfsa.next_symbol_probs().float(), dms[m].pad_id)
            want = torch.log_softmax(models[m](ref["input_ids"]), -1)[ref["mask"]]
            torch.testing.assert_close(out.log_probs[k][out.mask[k]], want, rtol=0, atol=1e-12)
            seen.append(m)
    assert sorted(seen) == [0, 1, 2]


def test_packing_wastes_at_most_about_twice_the_real_positions():
    dm = build("lstm", 0, dict(seed=0, count=300, num_strings=400))[1]
    other = build("lstm", 1, dict(seed=1, count=300, num_strings=400))[1]
    packed = PackedCorpora(
        [d.tokenized("train") for d in (dm, other)], [d.batches("train") for d in (dm, other)],
        [d.pfsa.next_symbol_probs() for d in (dm, other)], dm.pad_id,
    )
    # shortest batch of one member against the longest of the other: the worst pairing
    ids = np.array([packed.first_batch[0], packed.first_batch[1] + packed.num_batches[1] - 1])
    batch = packed.step(ids)
    widths = [int(packed.batch_width[g]) for g in ids]
    padded = len(ids) * max(int(packed.batch_size[g]) for g in ids) * max(widths)
    cells = batch.mask.numel()
    real = int(batch.mask.sum())
    assert real == int(dm.tokenized("train").positions[dm.batches("train")[0]].sum()) + int(
        other.tokenized("train").positions[other.batches("train")[-1]].sum()
    )
    assert cells <= 2 * len(ids) * max(widths) + 2 * real  # packed: about 2x the real positions
    assert cells * 4 < padded  # naive padding of this pairing is several times larger


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """Each architecture's three sequential runs (float64, dropout 0), computed once."""
    cache = {}

    def get(arch):
        if arch not in cache:
            root = tmp_path_factory.mktemp(arch)
            cache[arch] = [
                sequential(*build(arch, i, d, lr=0.05), root / str(i), epochs=EPOCHS, patience=1)
                for i, d in enumerate(DATA)
            ]
        return cache[arch]

    return get


EPOCHS = 6


def fit_ensemble(models, dms, *, epochs=EPOCHS, patience=1, callbacks=(), ckpt_path=None,
                 member_log=None, **kwargs):
    """Train an ``EnsembleLanguageModel`` with a plain Lightning ``Trainer`` (as the job does)."""
    module = EnsembleLanguageModel(
        list(models), list(dms), TrainSettings(max_epochs=epochs, patience=patience),
        record_steps=True, **kwargs,
    )
    module.member_log = member_log
    trainer = lightning.Trainer(
        max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, reload_dataloaders_every_n_epochs=1, num_sanity_val_steps=0,
        accelerator="cpu", callbacks=list(callbacks),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, ckpt_path=ckpt_path, weights_only=True)
    return module, trainer


@pytest.mark.parametrize(
    "arch,engine,mode,pacing",
    [("lstm", "stacked", "static", "width"),  # the quick lane's case (the code CUDA captures)
     *(pytest.param(*case, marks=pytest.mark.slow) for case in [
         ("lstm", "stacked", "gather", "lockstep"), ("lstm", "stacked", "gather", "width"),
         ("lstm", "loop", "auto", "width"), ("transformer", "stacked", "gather", "width"),
         ("transformer", "stacked", "static", "width"), ("transformer", "loop", "auto", "width"),
     ])],
)
def test_members_train_exactly_as_sequential_runs(arch, engine, mode, pacing, references):
    """float64, dropout 0: step losses, validation, LR plateaus, stops, best weights."""
    refs = references(arch)
    models, dms = zip(*(build(arch, i, d, lr=0.05) for i, d in enumerate(DATA)))
    logged: list[list[dict[str, float]]] = [[] for _ in models]

    def member_log(epoch, live, values, steps):
        for m in live:
            logged[m].append(dict(values[m]))

    module, trainer = fit_ensemble(
        [m.double() for m in models], dms, engine=engine, mode=mode, pacing=pacing,
        member_log=member_log,
    )
    assert len({len(r[0].losses) for r in refs}) > 1  # members had different step counts
    assert any(r[1] < EPOCHS for r in refs)  # some member stopped early (then masked)
    assert trainer.current_epoch == max(r[1] for r in refs)  # should_stop once all stopped
    last = [  # train/loss of the last epoch: the mean over its members of their mean step loss
        np.mean(o.step_losses[-(o.steps // o.epochs):]) for o in module.outcomes()
        if o.epochs == trainer.current_epoch
    ]
    assert float(trainer.callback_metrics["train/loss"]) == pytest.approx(np.mean(last), rel=1e-6)
    for m, ((record, ep, best_score, best_state), out) in enumerate(zip(refs, module.outcomes())):
        assert len(out.step_losses) == len(record.losses)
        np.testing.assert_allclose(out.step_losses, record.losses, rtol=1e-10, atol=1e-12)
        # validation values are logged (and compared) as float32, in both
        np.testing.assert_allclose(out.val_history, record.vals, rtol=1e-6)
        assert out.epochs == ep
        assert out.steps == len(record.losses)
        assert out.best_val_loss == pytest.approx(best_score, rel=1e-6)
        # each member's loggers get its plain fit's per-epoch keys and values (issue 39)
        member = logged[m]
        assert len(member) == len(record.epochs) == ep
        for mine, theirs in zip(member, record.epochs):
            assert set(mine) == set(theirs), set(mine) ^ set(theirs)
            for key, value in theirs.items():  # logged as float32 by Lightning
                assert mine[key] == pytest.approx(value, rel=1e-6, abs=1e-7), key
        for name, value in out.best_state.items():
            # Adam divides by sqrt(v): rounding in near-zero gradients grows to ~1e-9
            torch.testing.assert_close(value, best_state[name], rtol=1e-6, atol=1e-7)


def test_negative_control_other_seed_changes_the_losses(tmp_path):
    record = sequential(*build("lstm", 0, DATA[0]), tmp_path, epochs=1, patience=10)[0]
    model, dm = build("lstm", 5, DATA[0])  # the wrong seed_everything
    out = fit_ensemble([model.double()], [dm], epochs=1, patience=10)[0].outcomes()
    assert len(out[0].step_losses) == len(record.losses)
    assert not np.allclose(out[0].step_losses, record.losses, rtol=1e-6)


def test_members_of_one_architecture_are_sized_once():
    """Sizing builds ~15 candidate networks: ensemble members share one search per architecture."""
    from cfl_lightning.models import lstm, transformer

    for cached, cls in ((lstm._hidden_size, LSTMLanguageModel),
                        (transformer._sizes, TransformerLanguageModel)):
        cached.cache_clear()
        models = [cls(num_symbols=2, param_budget=9000 + 7, dropout=d) for d in (0.0, 0.1, 0.2)]
        assert cached.cache_info().misses == 1 and cached.cache_info().hits == 2
        assert len({m.num_parameters for m in models}) == 1
        cls(num_symbols=3, param_budget=9000 + 7)  # negative control: another vocabulary
        assert cached.cache_info().misses == 2


def test_the_ensemble_layer_imports_no_cli():
    """Building members from ``fit`` command lines is the CLI layer's (cli/ensemble_job.py)."""
    from tests.helpers import offenders

    assert offenders("ensemble", "cfl_lightning.cli") == []


def test_clip_rows_matches_clip_grad_norm():
    rows = torch.randn(3, 50, dtype=torch.float64) * torch.tensor([[0.1], [3.0], [40.0]])
    clipped = rows.clone()
    norms = clip_rows_(clipped, 5.0)
    for i in range(3):
        p = torch.nn.Parameter(torch.zeros(50, dtype=torch.float64))
        p.grad = rows[i].clone()
        ref = torch.nn.utils.clip_grad_norm_([p], 5.0)
        torch.testing.assert_close(norms[i], ref)
        torch.testing.assert_close(clipped[i], p.grad)


@pytest.mark.parametrize("how,per_row", [("rows", True), ("rows", False), ("active", False)])
def test_stacked_adam_matches_torch_adam_and_freezes_inactive_rows(how, per_row):
    torch.manual_seed(0)
    start = torch.randn(2, 20, dtype=torch.float64)
    stacked = torch.nn.Parameter(start.clone())
    adam = StackedAdam(stacked, torch.tensor([0.01, 0.003], dtype=torch.float64), per_row=per_row)
    refs = [torch.nn.Parameter(start[i].clone()) for i in range(2)]
    opts = [torch.optim.Adam([refs[i]], lr=lr) for i, lr in enumerate((0.01, 0.003))]
    for step in range(6):
        grads = torch.randn(2, 20, dtype=torch.float64)
        active = torch.tensor([True, step % 2 == 0])
        if how == "active":  # fixed shapes: every row computed, inactive ones masked
            adam.update(torch.where(active[:, None], grads, 0.0), active=active)
        else:
            rows = None if bool(active.all()) else torch.nonzero(active)[:, 0]
            adam.update(grads.clone() if rows is None else grads[rows].clone(), rows=rows)
        for i in range(2):
            if active[i]:
                refs[i].grad = grads[i].clone()
                opts[i].step()
    for i in range(2):
        torch.testing.assert_close(stacked.detach()[i], refs[i].detach(), rtol=1e-12, atol=1e-14)
    assert adam.steps.tolist() == [6.0, 3.0]
    assert not torch.allclose(stacked.detach()[1], start[1])


def test_stacked_adam_state_round_trips_in_place_and_keeps_float64_rates():
    """Checkpointed state comes back into the same tensors (a CUDA graph holds their addresses),
    with the learning rates in float64 (``Optimizer.load_state_dict`` would cast them)."""
    param = torch.nn.Parameter(torch.zeros(2, 3))
    lr = torch.tensor([0.01, 1e-3 / 3], dtype=torch.float64)
    adam = StackedAdam(param, lr)
    param.grad = torch.ones(2, 3)
    adam.step()
    saved = adam.state_dict()
    other = StackedAdam(torch.nn.Parameter(torch.zeros(2, 3)), torch.zeros(2, dtype=torch.float64))
    before = {k: v.data_ptr() for k, v in other.state[other.param].items()}
    other.load_state_dict(saved)
    state = other.state[other.param]
    assert {k: v.data_ptr() for k, v in state.items()} == before
    assert state["lr"].dtype == torch.float64 and torch.equal(state["lr"], lr)
    assert torch.equal(state["exp_avg"], adam.state[adam.param]["exp_avg"])
    with pytest.raises(ValueError, match="shape"):  # another ensemble's state
        StackedAdam(torch.nn.Parameter(torch.zeros(3, 3)), torch.zeros(3)).load_state_dict(saved)


@pytest.mark.parametrize(
    "settings",
    [dict(factor=0.5, plateau_patience=0, threshold=0.0, patience=3, min_delta=0.0),
     dict(factor=0.3, plateau_patience=2, threshold=0.05, cooldown=2, patience=4, min_delta=0.02),
     dict(factor=0.5, plateau_patience=1, threshold=0.01, threshold_mode="abs", min_lr=2e-3,
          patience=5, min_delta=0.0)],
)
def test_member_schedules_decide_as_torch_and_lightning(settings):
    """Plateau LR (torch's scheduler), best score and early stop (Lightning's callback) of
    random validation curves with ties, rises and NaN, one member per curve."""
    from lightning.pytorch.callbacks import EarlyStopping

    from cfl_lightning.ensemble import MemberSchedules

    rng = np.random.default_rng(0)
    curves = np.round(rng.uniform(0.5, 1.0, size=(6, 14)).cumsum(1)[:, ::-1] / 14, 1)
    curves = curves.astype(np.float32)
    curves[2, 5] = np.nan
    curves[3, :] = curves[3, 0]  # flat: ties only
    m, epochs = curves.shape
    ours = MemberSchedules(m, **settings)
    lr = torch.full((m,), 0.01, dtype=torch.float64)
    expected = []  # per curve: (member, best score, stop epoch or None, LR after each epoch)
    for i in range(m):
        param = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.Adam([param], lr=0.01)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(
            opt, factor=settings["factor"], patience=settings["plateau_patience"],
            threshold=settings["threshold"], threshold_mode=settings.get("threshold_mode", "rel"),
            cooldown=settings.get("cooldown", 0), min_lr=settings.get("min_lr", 0.0),
        )
        stopper = EarlyStopping("v", patience=settings["patience"], min_delta=settings["min_delta"])
        best, stopped_at, lrs = math.inf, None, []
        for e in range(epochs):
            value = torch.tensor(curves[i, e])
            plateau.step(float(value))
            lrs.append(opt.param_groups[0]["lr"])
            if math.isfinite(float(value)) and float(value) < best:
                best = float(value)
            if stopper._evaluate_stopping_criteria(value)[0]:
                stopped_at = e
                break
        expected.append((i, best, stopped_at, lrs))
    seen_lr = [[] for _ in range(m)]
    for e in range(epochs):
        live = ~ours.stopped
        _, lr = ours.update(torch.from_numpy(curves[:, e]), lr, live)
        for i in range(m):
            if live[i]:
                seen_lr[i].append(float(lr[i]))
    for i, best, stopped_at, lrs in expected:
        assert seen_lr[i] == lrs, i
        assert bool(ours.stopped[i]) == (stopped_at is not None), i
        assert int(ours.epochs[i]) == (epochs if stopped_at is None else stopped_at + 1), i
        assert float(ours.best[i]) == best, i
    assert any(s is not None for _, _, s, _ in expected)  # some stopped
    assert any(len(set(x)) > 1 for x in seen_lr)  # some LR was reduced
    # negative control: one more patience changes the decisions
    other = MemberSchedules(m, **{**settings, "patience": settings["patience"] + 1})
    for e in range(epochs):
        other.update(torch.from_numpy(curves[:, e]), lr, ~other.stopped)
    assert not torch.equal(other.epochs, ours.epochs)


@pytest.mark.slow
def test_final_validation_kl_agrees_with_sequential_runs_across_seeds(tmp_path):
    """With dropout (float32, as the CLI), the ensemble is statistically the sequential runs.

    Six seeds each; the two samples of final best ``val/kl_per_string`` must agree within a
    Welch z of 3. Negative control: the untrained models' values are rejected by the same test.
    """
    seeds, epochs = range(6), 4
    data = dict(seed=0, count=30, num_strings=40)
    seq = [
        sequential(*build("lstm", s, data, dropout=0.1), tmp_path / str(s), epochs=epochs,
                   patience=10, precision="32-true")[2]
        for s in seeds
    ]
    models, dms = zip(*(build("lstm", s, data, dropout=0.1) for s in seeds))
    module = fit_ensemble(models, dms, epochs=epochs, patience=10, engine="stacked")[0]
    ens = [o.best_val_loss for o in module.outcomes()]

    def welch_z(a, b):
        a, b = np.asarray(a), np.asarray(b)
        se = math.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
        return abs(a.mean() - b.mean()) / max(se, 1e-12)

    assert welch_z(ens, seq) < 3.0
    baseline = _untrained_val(seeds, data)
    assert welch_z(baseline, seq) > 3.0


def _untrained_val(seeds, data):
    """``val/kl_per_string`` of the freshly initialised models (the negative control)."""
    out = []
    for s in seeds:
        model, dm = build("lstm", s, data, dropout=0.1)
        dm.setup("fit")
        model.eval()
        kl = strings = 0.0
        with torch.no_grad():
            for batch in dm.val_dataloader():
                mask = batch["mask"].bool()
                kl += float(kl_per_position(batch["target_probs"], model(batch["input_ids"]), mask).sum())
                strings += mask.shape[0]
        out.append(kl / strings)
    return out


@pytest.mark.parametrize("pace", ["lockstep", "width"])
def test_ticks_keep_each_members_order(pace):
    rng = np.random.default_rng(1)
    widths = rng.integers(1, 60, size=200)
    orders = [rng.permutation(np.arange(40 * m, 40 * m + int(n)))
              for m, n in enumerate(rng.integers(20, 41, size=5))]
    sizes = rng.integers(1, 40, size=200)
    ticks = lockstep(orders) if pace == "lockstep" else by_width(orders, widths, sizes)
    for m, order in enumerate(orders):
        row = ticks[m]
        assert row[row >= 0].tolist() == order.tolist()
    if pace == "width":  # fewer time steps than lockstep, whose ticks take the widest batch
        cost = lambda t: sum(int(widths[c[c >= 0]].max()) for c in t.T)  # noqa: E731
        assert cost(ticks) < cost(lockstep(orders))


def test_hand_written_lstm_backward_equals_autograd():
    from cfl_lightning.models import StackedLSTM

    torch.manual_seed(0)
    m, r, length, h = 3, 2, 7, 5
    w = {
        "net.embedding.weight": torch.randn(m, 6, h, dtype=torch.float64),
        "net.lstm.weight_ih_l0": torch.randn(m, 4 * h, h, dtype=torch.float64),
        "net.lstm.weight_hh_l0": torch.randn(m, 4 * h, h, dtype=torch.float64),
        "net.lstm.bias_ih_l0": torch.randn(m, 4 * h, dtype=torch.float64),
        "net.lstm.bias_hh_l0": torch.randn(m, 4 * h, dtype=torch.float64),
        "net.lstm.weight_ih_l1": torch.randn(m, 4 * h, h, dtype=torch.float64),
        "net.lstm.weight_hh_l1": torch.randn(m, 4 * h, h, dtype=torch.float64),
        "net.lstm.bias_ih_l1": torch.randn(m, 4 * h, dtype=torch.float64),
        "net.lstm.bias_hh_l1": torch.randn(m, 4 * h, dtype=torch.float64),
        "net.output.weight": torch.randn(m, 3, h, dtype=torch.float64),
        "net.output.bias": torch.randn(m, 3, dtype=torch.float64),
    }
    ids = torch.randint(0, 6, (m, r, length))
    position = torch.tensor([0, 1, 2, 0, 1, 0, 1]).expand(m, r, length)  # three strings per row
    weights = torch.randn(m, r, length, 3, dtype=torch.float64)
    grads = {}
    for kind in ("function", "autograd"):
        leaves = {k: v.clone().requires_grad_(True) for k, v in w.items()}
        out = StackedLSTM(2, 0.0, kind)(leaves, ids, position, position, False)
        (out * weights).sum().backward()
        grads[kind] = (out.detach(), {k: v.grad for k, v in leaves.items()})
    torch.testing.assert_close(grads["function"][0], grads["autograd"][0], rtol=1e-12, atol=1e-12)
    for name in w:
        torch.testing.assert_close(
            grads["function"][1][name], grads["autograd"][1][name], rtol=1e-10, atol=1e-12
        )
    # negative control: without the resets the states (and outputs) differ
    flat = StackedLSTM(2, 0.0)(w, ids, torch.ones_like(position), position, False)
    assert not torch.allclose(flat, grads["function"][0])


@pytest.mark.parametrize("model", ["LSTMLanguageModel", "TransformerLanguageModel"])
def test_cli_built_member_has_the_sequential_runs_initialisation(model, tmp_path):
    from cfl_lightning.cli.ensemble_job import build_member
    from cfl_lightning.ensemble import NotEnsembleable

    args = ["--config", "configs/parity_starfree.yaml", "--seed_everything=3",
            "--data.cache_dir=none", f"--trainer.default_root_dir={tmp_path}", f"--model={model}",
            "--trainer.logger=false"]
    member, settings = build_member("m", args)
    hparams = {k: v for k, v in member.model.hparams.items() if not k.startswith("_")}
    lightning.seed_everything(3, verbose=False)
    dm = PFADataModule(generator="parity_resampled", weight_seed=1, intervention="exact",
                       event="state:odd", count=1500, cache_dir="none")
    ref = MODELS["lstm" if model.startswith("LSTM") else "transformer"](**hparams)
    assert dm.num_symbols == hparams["num_symbols"]
    for (name, a), b in zip(ref.state_dict().items(), member.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert settings == TrainSettings(max_epochs=1000, gradient_clip_val=5.0, patience=10)
    _, refused = build_member("m", [*args, "--trainer.accumulate_grad_batches=2"])
    assert isinstance(refused, NotEnsembleable) and "accumulate_grad_batches" in str(refused)


@pytest.mark.parametrize("engine", ["stacked", "loop"])
def test_test_step_gives_each_member_its_own_decomposed_kl(engine):
    """One metric for all members (packed or looped) = each model's own ``DecomposedKL`` and
    ``StateVisits`` on its own test batches, importance weights included."""
    from cfl_lightning.metrics import DecomposedKL, StateVisits

    data = [dict(seed=0, count=30, num_strings=40, test_strings=30),
            dict(seed=1, count=60, num_strings=90, test_strings=50, test_target_strings=20),
            dict(seed=2, count=30, num_strings=20, test_strings=0)]
    models, dms = zip(*(build("lstm", i, d) for i, d in enumerate(data)))
    module = EnsembleLanguageModel([m.double() for m in models], list(dms), engine=engine)
    trainer = lightning.Trainer(logger=False, enable_progress_bar=False, accelerator="cpu",
                                enable_model_summary=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.test(module, verbose=False)
    assert module.test_results[2] == (None, None)  # no test strings: nothing measured
    for model, dm, (got, visits) in zip(models[:2], dms[:2], module.test_results[:2]):
        ref, ref_visits = DecomposedKL(dm.pfsa), StateVisits(dm.pfsa.num_states)
        model.eval()
        with torch.no_grad():
            for batch in dm.test_dataloader():
                mask = batch["mask"].bool()
                ref.update(model(batch["input_ids"]), batch["states"], mask, batch.get("weights"))
                ref_visits.update(batch["states"], mask)
        want = ref.compute()
        assert float(want["total"]) > 0
        for key in want:
            torch.testing.assert_close(got[key], want[key], rtol=1e-10, atol=1e-12, equal_nan=True)
        assert torch.equal(visits, ref_visits.compute())
    assert dms[1].test_weights() is not None  # the weighted case was exercised
    # negative control: another member's numbers are not these
    assert float(module.test_results[0][0]["total"]) != float(module.test_results[1][0]["total"])


@pytest.mark.parametrize("arch", ["lstm", "transformer"])
def test_bucketed_shapes_leave_every_real_position_unchanged(arch):
    """Padding a packed step to a bucket (more rows, longer rows) changes no real position."""
    models, dms = zip(*(build(arch, i, d) for i, d in enumerate(DATA)))
    models = [m.double().eval() for m in models]
    packed = PackedCorpora(
        [d.tokenized("train") for d in dms], [d.batches("train") for d in dms],
        [d.pfsa.next_symbol_probs() for d in dms], dms[0].pad_id,
    )
    layout, net = ParameterLayout.of(models[0]), stacked_network(models[0])
    views = layout.views(layout.stack(models))
    ids = np.array([packed.first_batch[0] + 1, -1, packed.first_batch[2]])
    rows, length = packed.shape(ids)
    out = {}
    for shape in ((rows, length), (bucket(rows + 1), bucket(length + 3))):
        batch = packed.step(ids, shape)
        log_probs = net(views, batch.input_ids, batch.position, batch.slot, False)
        out[shape] = (log_probs[batch.mask], batch.target_probs[batch.mask], batch.strings)
    small, big = out.values()
    assert big[0].shape == small[0].shape and torch.equal(big[2], small[2])
    torch.testing.assert_close(big[0], small[0], rtol=1e-12, atol=1e-12)
    assert torch.equal(big[1], small[1])
    assert [bucket(n) for n in (1, 5, 7, 9, 13, 33, 100)] == [1, 6, 8, 12, 16, 48, 128]


def test_a_step_with_every_member_idle_changes_nothing():
    """The CUDA graph warm-up trains no member: every parameter and Adam state stays bitwise."""
    from cfl_lightning.ensemble.step import TrainStep

    models, dms = zip(*(build("lstm", i, d) for i, d in enumerate(DATA)))
    for dm in dms:
        dm.setup("fit")
    layout = ParameterLayout.of(models[0])
    param = torch.nn.Parameter(layout.stack(models))
    adam = StackedAdam(param, torch.full((3,), 0.01, dtype=torch.float64))
    packed = PackedCorpora(
        [d.tokenized("train") for d in dms], [d.batches("train") for d in dms],
        [d.pfsa.next_symbol_probs() for d in dms], dms[0].pad_id,
    )
    step = TrainStep(stacked_network(models[0]), layout, param, adam, packed, "kl", 5.0, "static")
    step(np.array([packed.first_batch[0], -1, packed.first_batch[2]]))  # a real step first
    before = [t.clone() for t in (param.detach(), *adam.state[param].values())]
    step(np.array([-1, -1, -1]))
    after = [param.detach(), *adam.state[param].values()]
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    step(np.array([packed.first_batch[0], -1, -1]))  # negative control: a real step moves
    assert not torch.equal(before[0][0], param.detach()[0])
    assert torch.equal(before[0][1], param.detach()[1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch", ["lstm", "transformer"])
def test_cuda_graph_steps_equal_the_eager_fixed_shape_steps(arch):
    """Captured and replayed per bucket, the step updates every member as the eager one does."""
    from cfl_lightning.ensemble.step import TrainStep

    models, dms = zip(*(build(arch, i, d) for i, d in enumerate(DATA)))
    for dm in dms:
        dm.setup("fit")
    layout = ParameterLayout.of(models[0])
    packed = PackedCorpora(
        [d.tokenized("train") for d in dms], [d.batches("train") for d in dms],
        [d.pfsa.next_symbol_probs() for d in dms], dms[0].pad_id, device="cuda",
    )
    rng = np.random.default_rng(0)
    plan = [np.array([packed.first_batch[m] + int(rng.integers(packed.num_batches[m]))
                      if rng.random() < 0.8 else -1 for m in range(3)]) for _ in range(12)]
    out = {}
    for mode in ("static", "graph"):
        param = torch.nn.Parameter(layout.stack([m.double() for m in models]).cuda())
        adam = StackedAdam(param, torch.full((3,), 0.01, dtype=torch.float64))
        step = TrainStep(stacked_network(models[0]), layout, param, adam, packed, "kl", 5.0, mode)
        losses = [step(ids, record=True) for ids in plan]
        out[mode] = (param.detach().cpu(), torch.stack(losses), step.captures)
    torch.testing.assert_close(out["graph"][0], out["static"][0], rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(out["graph"][1], out["static"][1], rtol=1e-9, atol=1e-12,
                               equal_nan=True)
    assert out["graph"][2] >= 1 and out["static"][2] == 0


@pytest.mark.slow
def test_a_resumed_fit_equals_the_uninterrupted_one(tmp_path):
    """Stop after 2 epochs with a checkpoint, resume to 6 in a new module: the same run."""
    def members():
        models, dms = zip(*(build("lstm", i, d, lr=0.05) for i, d in enumerate(DATA)))
        return [m.double() for m in models], dms

    whole = fit_ensemble(*members(), patience=3)[0]
    first, _ = fit_ensemble(*members(), epochs=2, patience=3,
                            callbacks=[LastCheckpoint(tmp_path)])
    path = tmp_path / "last.ckpt"
    assert path.is_file() and not list(tmp_path.glob(".*tmp"))
    torch.load(path, weights_only=True)  # plain tensors and containers
    rest, trainer = fit_ensemble(*members(), patience=3, ckpt_path=path)
    for a, b, c in zip(whole.outcomes(), rest.outcomes(), first.outcomes()):
        assert b.epochs == a.epochs and b.steps == a.steps and b.stopped_early == a.stopped_early
        assert b.best_val_loss == a.best_val_loss
        assert c.val_history + b.val_history == a.val_history
        assert c.step_losses + b.step_losses == a.step_losses
        for name in a.best_state:
            assert torch.equal(a.best_state[name], b.best_state[name]), name
    # the checkpoint belongs to these members only
    models, dms = members()
    other = EnsembleLanguageModel(models, dms, names=["x", "y", "z"])
    trainer = lightning.Trainer(max_epochs=3, logger=False, enable_progress_bar=False,
                                reload_dataloaders_every_n_epochs=1, num_sanity_val_steps=0,
                                enable_checkpointing=False, accelerator="cpu")
    with pytest.raises(ValueError, match="not of this ensemble"):
        trainer.fit(other, ckpt_path=path, weights_only=True)


def test_trainer_settings_the_ensemble_cannot_honour_are_refused():
    models, dms = zip(*(build("lstm", i, d) for i, d in enumerate(DATA[:1])))
    trainer = lightning.Trainer(max_epochs=1, logger=False, enable_progress_bar=False,
                                enable_checkpointing=False, accelerator="cpu")
    with pytest.raises(ValueError, match="reload_dataloaders_every_n_epochs=1"):
        trainer.fit(EnsembleLanguageModel(list(models), list(dms)))
