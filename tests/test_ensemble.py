"""Ensembles: batched members must train exactly as their own sequential runs.

The reference is always the shipped path: the real model class and ``PFADataModule`` driven by a
Lightning ``Trainer`` with the CLI's clipping, early stopping and checkpointing.
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
    EnsembleTrainer,
    PackedCorpora,
    ParameterLayout,
    StackedAdam,
    TrainSettings,
    clip_rows_,
    stacked_network,
)
from cfl_lightning.ensemble.loop import LoopTrainer
from cfl_lightning.ensemble.ticks import by_width, lockstep
from cfl_lightning.losses import kl_per_position
from cfl_lightning.models import LSTMLanguageModel, TransformerLanguageModel

logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
MODELS = {"lstm": LSTMLanguageModel, "transformer": TransformerLanguageModel}
# members differ in corpus (data seed, count, size: different numbers of batches per epoch)
DATA = [
    dict(seed=0, count=30, num_strings=40),
    dict(seed=1, count=60, num_strings=90),
    dict(seed=0, count=45, num_strings=25),
]


def build(arch: str, seed: int, data: dict, dropout: float = 0.0, lr: float = 0.01):
    """Seed, data module, model: the order in which ``python -m cfl_lightning fit`` builds them."""
    lightning.seed_everything(seed, verbose=False)
    dm = PFADataModule(
        generator="parity", eta=0.3, intervention="exact", event="state:odd", val_strings=20,
        test_strings=0, cache_dir="none", device="cpu", **data,
    )
    model = MODELS[arch](
        num_symbols=dm.num_symbols, param_budget=8000, dropout=dropout, lr=lr, lr_patience=1
    )
    return model, dm


class _Record(Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []
        self.vals: list[float] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))

    def on_train_epoch_end(self, trainer, module) -> None:
        self.vals.append(float(trainer.callback_metrics["val/kl_per_string"]))


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


@pytest.mark.parametrize("arch", ["lstm", "transformer"])
def test_packed_forward_matches_each_model(arch):
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
    rng = np.random.default_rng(0)
    for trial in range(5):
        local = [int(rng.integers(packed.num_batches[m])) for m in range(len(dms))]
        local[1] = -1 if trial == 4 else local[1]  # an idle member
        ids = np.array([packed.first_batch[m] + b if b >= 0 else -1 for m, b in enumerate(local)])
        batch = packed.step(ids)
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


@pytest.mark.parametrize(
    "arch,pacing",
    [("lstm", "lockstep"), ("lstm", "width"), ("transformer", "width"), ("lstm", "loop"),
     ("transformer", "loop")],
)
def test_members_train_exactly_as_sequential_runs(arch, pacing, tmp_path):
    """float64, dropout 0: step losses, validation, LR plateaus, stops, best checkpoints."""
    epochs, patience = 6, 1
    refs = [
        sequential(*build(arch, i, d, lr=0.05), tmp_path / str(i), epochs=epochs, patience=patience)
        for i, d in enumerate(DATA)
    ]
    models, dms = zip(*(build(arch, i, d, lr=0.05) for i, d in enumerate(DATA)))
    settings = TrainSettings(max_epochs=epochs, patience=patience)
    if pacing == "loop":  # members one after another, each with its own shipped model
        trainer = LoopTrainer([m.double() for m in models], list(dms), settings, record_steps=True)
    else:
        trainer = EnsembleTrainer(
            [m.double() for m in models], list(dms), settings, record_steps=True, pacing=pacing
        )
    outcomes = trainer.fit()
    assert len({len(r[0].losses) for r in refs}) > 1  # members had different step counts
    assert any(r[1] < epochs for r in refs)  # some member stopped early (compaction ran)
    for (record, ep, best_score, best_state), out in zip(refs, outcomes):
        assert len(out.step_losses) == len(record.losses)
        np.testing.assert_allclose(out.step_losses, record.losses, rtol=1e-10, atol=1e-12)
        # validation values are logged (and compared) as float32, in both
        np.testing.assert_allclose(out.val_history, record.vals, rtol=1e-6)
        assert out.epochs == ep
        assert out.best_val_loss == pytest.approx(best_score, rel=1e-6)
        for name, value in out.best_state.items():
            # Adam divides by sqrt(v): rounding in near-zero gradients grows to ~1e-9
            torch.testing.assert_close(value, best_state[name], rtol=1e-6, atol=1e-7)


def test_negative_control_other_seed_changes_the_losses(tmp_path):
    record = sequential(*build("lstm", 0, DATA[0]), tmp_path, epochs=1, patience=10)[0]
    model, dm = build("lstm", 5, DATA[0])  # the wrong seed_everything
    out = EnsembleTrainer([model.double()], [dm], TrainSettings(max_epochs=1), record_steps=True).fit()
    assert len(out[0].step_losses) == len(record.losses)
    assert not np.allclose(out[0].step_losses, record.losses, rtol=1e-6)


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


def test_stacked_adam_matches_torch_adam_and_freezes_inactive_rows():
    torch.manual_seed(0)
    start = torch.randn(2, 20, dtype=torch.float64)
    stacked = start.clone().requires_grad_(True)
    adam = StackedAdam(stacked, torch.tensor([0.01, 0.003], dtype=torch.float64))
    refs = [torch.nn.Parameter(start[i].clone()) for i in range(2)]
    opts = [torch.optim.Adam([refs[i]], lr=lr) for i, lr in enumerate((0.01, 0.003))]
    for step in range(6):
        grads = torch.randn(2, 20, dtype=torch.float64)
        active = torch.tensor([True, step % 2 == 0])
        rows = None if bool(active.all()) else torch.nonzero(active)[:, 0]
        adam.step(grads.clone() if rows is None else grads[rows].clone(), rows)
        for i in range(2):
            if active[i]:
                refs[i].grad = grads[i].clone()
                opts[i].step()
    for i in range(2):
        torch.testing.assert_close(stacked.detach()[i], refs[i].detach(), rtol=1e-12, atol=1e-14)
    assert not torch.allclose(stacked.detach()[1], start[1])


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
    ens = [o.best_val_loss for o in EnsembleTrainer(list(models), list(dms), TrainSettings(max_epochs=epochs)).fit()]

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
    from cfl_lightning.ensemble.lstm import StackedLSTM

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
    from cfl_lightning.ensemble.members import NotEnsembleable, build_member

    args = ["--config", "configs/parity_starfree.yaml", "--seed_everything=3",
            "--data.cache_dir=none", f"--trainer.default_root_dir={tmp_path}", f"--model={model}",
            "--trainer.logger=false"]
    member = build_member("m", args)
    hparams = {k: v for k, v in member.model.hparams.items() if not k.startswith("_")}
    lightning.seed_everything(3, verbose=False)
    dm = PFADataModule(generator="parity_resampled", weight_seed=1, intervention="exact",
                       event="state:odd", count=1500, cache_dir="none")
    ref = MODELS["lstm" if model.startswith("LSTM") else "transformer"](**hparams)
    assert dm.num_symbols == hparams["num_symbols"]
    for (name, a), b in zip(ref.state_dict().items(), member.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert member.settings == TrainSettings(max_epochs=1000, gradient_clip_val=5.0, patience=10)
    with pytest.raises(NotEnsembleable, match="accumulate_grad_batches"):
        build_member("m", [*args, "--trainer.accumulate_grad_batches=2"])


def test_predict_feeds_the_decomposed_kl_the_same_as_the_model():
    from cfl_lightning.metrics import DecomposedKL

    data = [dict(seed=0, count=30, num_strings=40), dict(seed=1, count=60, num_strings=90)]
    models, dms = zip(*(build("lstm", i, d) for i, d in enumerate(data)))
    for dm in dms:  # some test strings
        dm.hparams.test_strings = 30 + 20 * int(dm.hparams.seed)
    trainer = EnsembleTrainer([m.double() for m in models], list(dms))
    metrics = [DecomposedKL(dm.pfsa) for dm in dms]
    trainer.predict(
        "test", [m.state_dict() for m in models],
        lambda i, lp, st, mask: metrics[i].update(lp, st, mask),
    )
    for model, dm, metric in zip(models, dms, metrics):
        ref = DecomposedKL(dm.pfsa)
        model.eval()
        with torch.no_grad():
            for batch in dm.test_dataloader():
                ref.update(model(batch["input_ids"]), batch["states"], batch["mask"].bool())
        got, want = metric.compute(), ref.compute()
        assert float(want["total"]) > 0
        for key in want:
            torch.testing.assert_close(got[key], want[key], rtol=1e-10, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("backend", ["batched", "loop"])
def test_ensemble_members_write_the_results_their_own_fit_writes(backend, tmp_path, monkeypatch):
    """run_members vs ``python -m cfl_lightning fit`` (in-process) on the same arguments."""
    import json

    from cfl_lightning.cli.train import main as fit_main
    from cfl_lightning.ensemble.run import BACKEND_ENV, run_members

    monkeypatch.setenv(BACKEND_ENV, backend)

    def args(seed: int, root) -> list[str]:
        return ["--config", "configs/parity_starfree.yaml", f"--seed_everything={seed}",
                "--data.num_strings=40", "--data.count=80", "--data.val_strings=20",
                "--data.test_strings=30", "--data.cache_dir=none", "--trainer.max_epochs=3",
                "--model.init_args.dropout=0", "--model.init_args.param_budget=8000",
                f"--trainer.default_root_dir={root}"]

    seeds = (0, 1)
    for seed in seeds:
        assert fit_main(["fit", *args(seed, tmp_path / "plain" / str(seed))]) == 0
    status = run_members(
        [{"name": f"s{seed}", "args": args(seed, tmp_path / "ens" / str(seed))} for seed in seeds]
    )
    assert status == {"s0": None, "s1": None}
    for seed in seeds:
        (plain,) = (tmp_path / "plain" / str(seed)).rglob("results.json")
        (ens,) = (tmp_path / "ens" / str(seed)).rglob("results.json")
        assert plain.relative_to(tmp_path / "plain" / str(seed)) == ens.relative_to(
            tmp_path / "ens" / str(seed)
        )
        a, b = json.loads(plain.read_text()), json.loads(ens.read_text())
        assert list(a) == list(b)
        for key in ("model", "intervention", "event", "count", "realized_count", "num_strings",
                    "num_parameters", "seed", "automaton_id", "epochs", "occurrences"):
            assert a[key] == b[key], key
        assert b["kl_total"] == pytest.approx(a["kl_total"], rel=1e-4)
        assert b["best_val_loss"] == pytest.approx(a["best_val_loss"], rel=1e-5)
        assert b["kl"]["state"] == pytest.approx(a["kl"]["state"], rel=1e-3, abs=1e-7)
        # the same config but for the run directory
        moved = json.dumps(a["config"]).replace(str(tmp_path / "plain"), str(tmp_path / "ens"))
        assert json.loads(moved) == b["config"]
