"""Language models: the KL-to-automaton loss, sizing, causality, initialization, Lightning hooks."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from cfl_lightning.data import PFADataModule
from cfl_lightning.models import LanguageModel, LSTMLanguageModel, TransformerLanguageModel
from cfl_lightning.models import __all__ as models_all
from cfl_lightning.models.losses import cross_entropy_per_position, kl_per_position, per_string
from cfl_lightning.models.sizing import count_parameters, largest_within_budget

ARCHS = [LSTMLanguageModel, TransformerLanguageModel]


def _random_case(seed: int = 0, batch: int = 3, length: int = 6, classes: int = 4):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(batch, length, classes, generator=g)
    p[..., 1] = 0.0  # a zero-probability symbol everywhere
    p = p / p.sum(-1, keepdim=True)
    logits = torch.randn(batch, length, classes, generator=g)
    mask = torch.ones(batch, length, dtype=torch.bool)
    mask[0, 4:] = False
    mask[2, 1:] = False
    p = torch.where(mask[..., None], p, torch.zeros_like(p))
    return p, torch.log_softmax(logits, -1), mask


@pytest.fixture(scope="module")
def parity_batches():
    dm = PFADataModule(generator="parity", eta=0.3, num_strings=40, val_strings=20,
                       test_strings=20, cache_dir="none", device="cpu")
    dm.setup("fit")
    return dm, list(dm.train_dataloader())


# ---------------------------------------------------------------------------- losses
def test_kl_is_zero_when_model_outputs_target_probs():
    p, _, mask = _random_case()
    kl = kl_per_position(p, p.log(), mask)  # log 0 = -inf where p = 0
    assert torch.isfinite(kl).all()
    assert torch.allclose(kl, torch.zeros_like(kl), atol=1e-6)


def test_kl_matches_torch_kl_div_on_real_positions():
    p, log_q, mask = _random_case(1)
    ours = kl_per_position(p, log_q, mask)
    ref = F.kl_div(log_q, p, reduction="none").sum(-1) * mask
    assert torch.allclose(ours, ref, atol=1e-6)
    assert (ours[mask] > 0).all()


def test_kl_never_nan_with_zero_targets_and_minus_inf_log_probs():
    p, _, mask = _random_case(2)
    logits = torch.randn(p.shape, requires_grad=True)
    blocked = torch.zeros_like(p, dtype=torch.bool)
    blocked[..., 1] = True  # the model gives -inf exactly where p_A = 0 ...
    blocked[2, 3:, :] = True  # ... and -inf everywhere at some padding positions
    log_q = torch.log_softmax(logits.masked_fill(blocked, float("-inf")), -1)
    kl = kl_per_position(p, log_q, mask)
    assert not torch.isnan(kl).any()
    assert torch.isfinite(kl).all()
    sums, per_token = per_string(kl, mask)
    sums.mean().backward()
    assert torch.isfinite(logits.grad).all()
    assert torch.isfinite(per_token)


def test_kl_is_inf_not_nan_when_model_excludes_a_possible_symbol():
    p = torch.tensor([[[0.5, 0.5, 0.0]]])
    log_q = torch.tensor([[[0.0, float("-inf"), float("-inf")]]])
    kl = kl_per_position(p, log_q, torch.ones(1, 1, dtype=torch.bool))
    assert torch.isinf(kl).all() and not torch.isnan(kl).any()


def test_padding_is_masked():
    p, log_q, mask = _random_case(3)
    base = kl_per_position(p, log_q, mask)
    p2, log_q2 = p.clone(), log_q.clone()
    p2[~mask] = 1.0 / p.shape[-1]
    log_q2[~mask] = float("-inf")
    other = kl_per_position(p2, log_q2, mask)
    assert torch.equal(base, other)
    assert (base[~mask] == 0).all()
    sums, per_token = per_string(base, mask)
    assert torch.allclose(sums, base.sum(1))
    assert torch.allclose(per_token, base.sum() / mask.sum())


def test_cross_entropy_matches_nll_loss_and_ignores_pad_ids():
    _, log_q, mask = _random_case(4)
    targets = torch.randint(0, 4, mask.shape)
    targets[~mask] = 6  # PAD id, out of range of the classes
    ce = cross_entropy_per_position(log_q, targets, mask)
    ref = F.nll_loss(log_q[mask], targets[mask], reduction="none")
    assert torch.allclose(ce[mask], ref)
    assert (ce[~mask] == 0).all()


# ---------------------------------------------------------------------------- sizing
def test_largest_within_budget():
    assert largest_within_budget(lambda h: h * h, 1000) == 31
    assert largest_within_budget(lambda h: h * h, 1000, low=4, step=4) == 28
    assert largest_within_budget(lambda h: h * h, 1000, high=40) == 31
    with pytest.raises(ValueError, match="too small"):
        largest_within_budget(lambda h: 10 * h, 5)


def test_public_api():
    assert models_all == [
        "LanguageModel", "LSTMLanguageModel", "TransformerLanguageModel", "StackedNetwork",
        "StackedLSTM", "StackedTransformer",
    ]
    assert issubclass(LSTMLanguageModel, LanguageModel)
    assert issubclass(TransformerLanguageModel, LanguageModel)


#: the state-dict keys of checkpoints written by the shipped models (issue 37 moved the code;
#: a checkpoint written before must still load with ``weights_only=True``)
CHECKPOINT_KEYS = {
    "LSTMLanguageModel": ["net.embedding.weight"] + [
        f"net.lstm.{kind}_l{layer}" for layer in (0, 1)
        for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    ] + ["net.output.weight", "net.output.bias"],
    "TransformerLanguageModel": ["net.embedding.weight"] + [
        f"net.layers.layers.{layer}.{name}" for layer in (0, 1) for name in (
            "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
            "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
            "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias",
        )
    ] + ["net.norm.weight", "net.norm.bias", "net.output.weight", "net.output.bias"],
}


@pytest.mark.parametrize("cls", ARCHS)
def test_checkpoint_keys_are_stable_and_stacked_forms_read_them(cls, tmp_path):
    """The state-dict keys are the checkpoints' (a saved state dict loads back with
    ``weights_only=True``), and the stacked form reads its weights by exactly these names."""
    model = cls(num_symbols=2, param_budget=5000, num_layers=2)
    assert list(model.state_dict()) == CHECKPOINT_KEYS[cls.__name__]
    torch.save({"state_dict": model.state_dict()}, tmp_path / "m.ckpt")
    other = cls(num_symbols=2, param_budget=5000, num_layers=2)
    other.load_state_dict(torch.load(tmp_path / "m.ckpt", weights_only=True)["state_dict"])
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), other.parameters()))
    read: set[str] = set()

    class Recording(dict):
        def __getitem__(self, key: str) -> torch.Tensor:
            read.add(key)
            return super().__getitem__(key)

    weights = Recording({k: v.detach()[None] for k, v in model.named_parameters()})
    ids = torch.zeros(1, 1, 3, dtype=torch.long)
    position = torch.arange(3).view(1, 1, 3)
    model.stacked_network()(weights, ids, position, torch.zeros_like(ids), False)
    assert read == set(CHECKPOINT_KEYS[cls.__name__])
    with pytest.raises(KeyError):  # negative control: a renamed parameter is not found
        weights.pop("net.output.bias")
        model.stacked_network()(weights, ids, position, torch.zeros_like(ids), False)


@pytest.mark.parametrize("cls", ARCHS)
@pytest.mark.parametrize("num_symbols", [2, 10])
def test_parameter_count_close_to_and_within_budget(cls, num_symbols):
    budget = 128_000
    model = cls(num_symbols=num_symbols, param_budget=budget)
    assert model.num_parameters == sum(p.numel() for p in model.parameters())
    assert 0.97 * budget <= model.num_parameters <= budget
    assert model.size_summary["num_parameters"] == model.num_parameters
    assert "num_parameters" not in model.hparams  # hparams hold init args only
    # one step wider would exceed the budget
    if cls is LSTMLanguageModel:
        wider = cls(num_symbols=num_symbols, hidden_size=model.hidden_size + 1)
    else:
        wider = cls(num_symbols=num_symbols, d_model=model.d_model,
                    feedforward_size=model.feedforward_size + 1)
    assert wider.num_parameters > budget


@pytest.mark.parametrize("cls", ARCHS)
def test_small_budget_and_explicit_sizes(cls):
    model = cls(num_symbols=3, param_budget=20_000)
    assert 0.9 * 20_000 <= model.num_parameters <= 20_000
    with pytest.raises(ValueError, match="too small"):
        cls(num_symbols=3, param_budget=10)


@pytest.mark.parametrize("cls", ARCHS)
def test_output_shape_and_normalization(cls):
    model = cls(num_symbols=3, param_budget=20_000).eval()
    ids = torch.randint(0, model.vocab_size, (2, 9))
    out = model(ids)
    assert out.shape == (2, 9, 4)
    assert model.vocab_size == 6 and (model.eos_id, model.bos_id, model.pad_id) == (3, 4, 5)
    assert torch.allclose(out.exp().sum(-1), torch.ones(2, 9), atol=1e-5)


# ---------------------------------------------------------------------------- architecture
@pytest.mark.parametrize("cls", ARCHS)
def test_causal_no_lookahead(cls):
    torch.manual_seed(0)
    model = cls(num_symbols=2, param_budget=20_000).eval()
    ids = torch.randint(0, 3, (2, 12))
    ids[:, 0] = model.bos_id
    changed = ids.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % 3
    with torch.no_grad():
        a, b = model(ids), model(changed)
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_transformer_handles_strings_longer_than_training():
    model = TransformerLanguageModel(num_symbols=2, param_budget=20_000).eval()
    with torch.no_grad():
        out = model(torch.randint(0, 3, (1, 1200)))
    assert out.shape == (1, 1200, 3) and torch.isfinite(out).all()


@pytest.mark.parametrize("cls", ARCHS)
def test_init_ranges(cls):
    model = cls(num_symbols=2)
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    norm_params = {id(p) for m in norms for p in m.parameters()}
    for name, p in model.named_parameters():
        if id(p) in norm_params:
            continue
        assert p.abs().max() <= 0.1, name
        assert p.abs().max() > 0.05, name  # actually uniform, not a default small init
    for m in norms:
        assert torch.all(m.weight == 1) and torch.all(m.bias == 0)
    if cls is TransformerLanguageModel:
        assert len(norms) == 2 * 2 + 1
    dropouts = [m.p for m in model.modules() if isinstance(m, nn.Dropout)]
    assert dropouts and all(p == 0.1 for p in dropouts)


# ---------------------------------------------------------------------------- Lightning
@pytest.mark.filterwarnings("ignore:You are trying to `self.log")
@pytest.mark.parametrize("loss", ["kl", "ce"])
def test_training_step_and_loss_choice(parity_batches, loss):
    dm, batches = parity_batches
    model = LSTMLanguageModel(num_symbols=dm.num_symbols, param_budget=20_000, loss=loss,
                              dropout=0.0)
    batch = batches[0]
    with torch.no_grad():
        log_probs = model(batch["input_ids"])
    per_position = (kl_per_position(batch["target_probs"], log_probs, batch["mask"]) if loss == "kl"
                    else cross_entropy_per_position(log_probs, batch["target_ids"], batch["mask"]))
    expected = per_position.sum() / batch["mask"].shape[0]
    out = model.training_step(batch, 0)
    assert torch.isfinite(out) and torch.allclose(out, expected, rtol=1e-5)
    out.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    with pytest.raises(ValueError, match="loss"):
        LSTMLanguageModel(loss="mse")


def test_optimizer_and_scheduler_configuration():
    model = LSTMLanguageModel(num_symbols=2, param_budget=20_000, lr=0.02, lr_factor=0.25,
                              lr_patience=3)
    config = model.configure_optimizers()
    assert isinstance(config["optimizer"], torch.optim.Adam)
    assert config["optimizer"].param_groups[0]["lr"] == 0.02
    scheduler = config["lr_scheduler"]["scheduler"]
    assert isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
    # torch reduces when its bad count exceeds patience: lr_patience 3 halves at the 3rd
    assert scheduler.factor == 0.25 and scheduler.patience == 2 and scheduler.threshold == 0
    assert config["lr_scheduler"]["monitor"] == "val/kl_per_string"


@pytest.mark.parametrize("value", [0, -1, True, 2.5])
def test_lr_patience_has_one_rule(value):
    """One rule, one message: an integer >= 1 (the LR is reduced at the lr_patience-th
    validation without improvement)."""
    with pytest.raises(ValueError, match=r"^lr_patience must be an integer >= 1 \(validations"):
        LSTMLanguageModel(num_symbols=2, param_budget=5_000, lr_patience=value)
    assert LSTMLanguageModel(num_symbols=2, param_budget=5_000, lr_patience=1).lr_patience == 1


def _trainer(tmp_path, epochs=1):
    return pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path, gradient_clip_val=5)


def test_fit_without_datamodule_skips_decomposed_kl(parity_batches, tmp_path):
    _, batches = parity_batches
    model = LSTMLanguageModel(num_symbols=2, param_budget=20_000)
    trainer = _trainer(tmp_path)
    val = DataLoader(batches[:3], batch_size=None)
    trainer.fit(model, train_dataloaders=DataLoader(batches, batch_size=None), val_dataloaders=val)
    assert "val/kl_per_string" in trainer.callback_metrics
    assert "train/loss" in trainer.callback_metrics
    assert "val/kl_total" not in trainer.callback_metrics
    (metrics,) = trainer.validate(model, dataloaders=val, verbose=False)
    # epoch aggregates are exact: per string and per real position over the whole epoch
    model.eval()
    with torch.no_grad():
        kl = [kl_per_position(b["target_probs"], model(b["input_ids"]), b["mask"])
              for b in batches[:3]]
    total = sum(float(k.sum()) for k in kl)
    strings = sum(int(b["mask"].shape[0]) for b in batches[:3])
    tokens = sum(int(b["mask"].sum()) for b in batches[:3])
    assert metrics["val/kl_per_string"] == pytest.approx(total / strings, rel=1e-5)
    assert metrics["val/kl_per_token"] == pytest.approx(total / tokens, rel=1e-5)
    trainer.test(model, dataloaders=val, verbose=False)
    assert model.test_kl_result is None and "test/kl_per_string" in trainer.callback_metrics


def test_test_logs_decomposed_contributions(parity_batches, tmp_path):
    dm = PFADataModule(generator="parity", eta=0.3, intervention="exact", event="state:odd",
                       count=20, num_strings=20, val_strings=10, test_strings=20,
                       cache_dir="none", device="cpu")
    model = TransformerLanguageModel(num_symbols=dm.num_symbols, param_budget=20_000)
    trainer = _trainer(tmp_path)
    trainer.fit(model, datamodule=dm)
    assert {"val/kl_total", "val/kl_target"} <= set(trainer.callback_metrics)
    (metrics,) = trainer.test(model, datamodule=dm, verbose=False)
    for key in ("kl_total", "kl_target", "kl_target_unweighted", "kl/state/odd",
                "kl_unweighted/state/odd", "kl/symbol/a", "kl/symbol/EOS", "kl/transition/odd:b",
                "test/kl_per_string", "test/kl_per_token"):
        assert key in metrics, key
    assert metrics["kl_target"] == pytest.approx(metrics["kl/state/odd"])
    assert metrics["kl_total"] == pytest.approx(
        sum(metrics[f"kl/state/{q}"] for q in dm.pfsa.states), rel=1e-4)
    assert model.test_kl_result is not None
    assert count_parameters(model) == model.num_parameters


# --------------------------------------------------------------------------- shared arguments

# LanguageModel's own signature is the one place of these; the subclasses pass them on
TRAINING_ARGS = {"dropout": 0.1, "lr": 0.01, "lr_factor": 0.5, "lr_patience": 5, "loss": "kl"}


def _signature(cls):
    import inspect

    return inspect.signature(cls.__init__).parameters


@pytest.mark.parametrize("cls", ARCHS)
def test_shared_training_arguments_are_declared_once(cls):
    """The subclasses name none of the shared training arguments: they forward ``**training``."""
    import inspect

    assert not set(TRAINING_ARGS) & set(_signature(cls))
    assert [p.kind for p in _signature(cls).values()][-1] is inspect.Parameter.VAR_KEYWORD
    base = _signature(LanguageModel)
    assert {name: base[name].default for name in TRAINING_ARGS} == TRAINING_ARGS


@pytest.mark.parametrize("cls", ARCHS)
def test_the_cli_sees_every_model_argument_typed_with_its_default(cls):
    """jsonargparse follows ``super().__init__(..., **training)``: ``model.init_args.*`` keeps
    every key, typed, with the base's default, in the order the explicit signatures had."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, "model")
    defaults = vars(parser.get_defaults().model)
    own = [name for name in _signature(cls) if name not in ("self", "training")]
    assert list(defaults) == [*own, *TRAINING_ARGS]
    assert {k: defaults[k] for k in TRAINING_ARGS} == TRAINING_ARGS
    parsed = parser.parse_args(["--model.lr_patience", "3", "--model.dropout", "0.25"])
    assert (parsed.model.lr_patience, parsed.model.dropout) == (3, 0.25)
    with pytest.raises(Exception, match="lr_patience"):  # typed: an int
        parser.parse_args(["--model.lr_patience", "three"])
    with pytest.raises(Exception, match="loss"):  # a Literal
        parser.parse_args(["--model.loss", "mse"])


@pytest.mark.parametrize("cls", ARCHS)
def test_hparams_hold_every_argument_in_signature_order(cls):
    """Defaults of the forwarded arguments are saved too (a checkpoint rebuilds the same model)."""
    model = cls(num_symbols=3, param_budget=5_000, lr=0.02, dropout=0.2)
    own = {name: _signature(cls)[name].default for name in _signature(cls)
           if name not in ("self", "training")}
    expected = {**own, "num_symbols": 3, "param_budget": 5_000,
                **TRAINING_ARGS, "lr": 0.02, "dropout": 0.2}
    assert list(model.hparams.items()) == list(expected.items())
    assert model.hparams_initial == expected and model.dropout_p == 0.2
    assert {m.p for m in model.modules() if isinstance(m, nn.Dropout)} == {0.2}
    with pytest.raises(TypeError, match="unexpected keyword argument 'learning_rate'"):
        cls(learning_rate=0.1)


def test_hparams_completion_is_needed():
    """Negative control: Lightning alone saves only the forwarded arguments that were given."""
    model = LSTMLanguageModel(num_symbols=3, param_budget=5_000, lr=0.02)
    model._hparams.pop("lr_patience")
    model._add_shared_defaults()
    assert model.hparams["lr_patience"] == 5 and list(model.hparams)[-1] == "loss"

    class Bare(LSTMLanguageModel):
        def _add_shared_defaults(self):
            pass

    assert "lr_patience" not in Bare(num_symbols=3, param_budget=5_000).hparams


@pytest.mark.slow  # builds the training CLI (imports and parses: seconds, cold)
def test_under_lightningcli_the_hparams_are_its_parsed_init_args():
    """LightningCLI's record of the call is kept as it is (every ``init_args`` key in its order,
    and the instantiator that lets ``LanguageModel.load_from_checkpoint`` rebuild the subclass),
    though the model is finished after its ``__init__``."""
    from cfl_lightning.cli.train import build_cli

    cli = build_cli(["--config", "configs/parity_starfree.yaml", "--data.cache_dir=none",
                     "--model.init_args.lr=0.3"], run=False)
    keys = list(cli.model.hparams)
    assert keys[0] == "_class_path" and keys[-1] == "_instantiator"
    assert keys[1:-1] == ["num_symbols", "param_budget", "num_layers", "hidden_size",
                          *TRAINING_ARGS]
    assert cli.model.hparams["lr"] == 0.3 and cli.model.hparams["_instantiator"].startswith(
        "lightning.pytorch.cli")
    assert cli.model.size_summary["num_parameters"] == cli.model.num_parameters > 0
