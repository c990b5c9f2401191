"""Tests of PFADataModule: batches vs. the automaton, interventions, cache, determinism."""

from __future__ import annotations

import types
import warnings

import lightning as L
import pytest
import torch

from cfl_lightning import sampling
from cfl_lightning.data import splits
from cfl_lightning.automata import Event, parity_starfree_pfsa, random_pfsa
from cfl_lightning.data import (
    BATCH_KEYS,
    BatchOrderSampler,
    CorruptCacheWarning,
    PFADataModule,
    length_batches,
    resolve_cache_dir,
)
from cfl_lightning.errors import CflError, EventError, InterventionError, PFSAError

SMALL = dict(num_strings=120, val_strings=40, test_strings=40, device="cpu")


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def calls(monkeypatch):
    """Count the calls to the real sampler (by split size and intervention)."""
    log: list[tuple[int, str]] = []
    real = splits.draw

    def counting(pfsa, request, **kwargs):
        log.append((request.num_strings, request.intervention.kind))
        return real(pfsa, request, **kwargs)

    monkeypatch.setattr(splits, "draw", counting)
    return log


def random_dm(cache_dir, **kwargs) -> PFADataModule:
    args = dict(generator="random", num_states=12, num_symbols=4, topology_seed=3, weight_seed=4)
    args.update(SMALL)
    args.update(kwargs)
    return PFADataModule(cache_dir=None if cache_dir is None else str(cache_dir), **args)


def order(loader, epoch: int = 0) -> list[int]:
    """The batch indices a loader yields in ``epoch`` (on this rank)."""
    return loader.sampler.order(epoch)


def all_batches(loader) -> list[dict[str, torch.Tensor]]:
    return [batch for batch in loader]


def reference_states(pfsa, string: list[int]) -> list[int]:
    """Plain Python walk: the state after each prefix of ``string``."""
    states = [pfsa.initial]
    for symbol in string:
        states.append(int(pfsa.next_state[states[-1], symbol]))
    return states


# ---------------------------------------------------------------------------- construction
def test_vocabulary_is_known_before_setup(tmp_path, monkeypatch):
    def no_sampling(*args, **kwargs):
        raise AssertionError("__init__ must not sample")

    monkeypatch.setattr(splits, "draw", no_sampling)
    path = tmp_path / "a.json"
    parity_starfree_pfsa(0.3).to_json(path)
    dm = PFADataModule(
        automaton=str(path), intervention="exact", event="state:odd", count=1200,
        num_strings=300, seed=0, cache_dir="none",
    )
    assert dm.pfsa == parity_starfree_pfsa(0.3)
    assert (dm.num_symbols, dm.vocab_size, dm.eos_id, dm.bos_id, dm.pad_id) == (2, 5, 2, 3, 4)
    rnd = PFADataModule(generator="random", num_states=7, num_symbols=5, cache_dir="none")
    assert rnd.num_symbols == 5 == len(rnd.pfsa.alphabet) and rnd.pfsa.num_states == 7
    # the generator's num_symbols does not leak into a file-based automaton
    assert PFADataModule(automaton=str(path), num_symbols=9, cache_dir="none").num_symbols == 2
    assert PFADataModule(generator="parity_resampled", weight_seed=2).num_symbols == 2
    assert len(dm.automaton_id) == 16


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(event="state:nowhere"), EventError),
        (dict(event="color:red"), EventError),
        (dict(event="transition:rep:b"), EventError),
        (dict(intervention="exact", event="state:odd", count=-1), InterventionError),
        (dict(intervention="exact", event="state:odd"), InterventionError),
        (dict(intervention="exact", count=3), InterventionError),
        (dict(event="state:odd", count=3), InterventionError),
        (dict(intervention="sometimes", event="state:odd", count=3), InterventionError),
        (dict(intervention="at_least_once", event="state:odd", count=11, num_strings=10),
         InterventionError),
        (dict(eta=0.0, intervention="exact", event="transition:init:a", count=1),
         InterventionError),  # probability zero
        (dict(intervention="exact", event="transition:init:b", count=11, num_strings=10),
         InterventionError),  # at most once per string
        (dict(generator="nope"), PFSAError),
        (dict(eta=1.5), PFSAError),
        (dict(automaton="/nonexistent/a.json"), PFSAError),
        (dict(num_strings=0), CflError),
        (dict(val_strings=-1), CflError),
        (dict(max_tokens=0), CflError),
        (dict(device="gpu!"), CflError),
    ],
)
def test_invalid_arguments_raise_cfl_errors(kwargs, error):
    with pytest.raises(error) as info:
        PFADataModule(cache_dir="none", **kwargs)
    assert isinstance(info.value, CflError) and str(info.value)


# ---------------------------------------------------------------------------- batch contents
def test_batches_agree_with_the_automaton(tmp_path):
    dm = random_dm(tmp_path, max_tokens=64)
    dm.setup()
    pfsa = dm.pfsa
    probs = pfsa.next_symbol_probs().float()
    S = pfsa.num_symbols
    for split, loader in (
        ("train", dm.train_dataloader()),
        ("val", dm.val_dataloader()),
        ("test", dm.test_dataloader()),
    ):
        strings = dm.corpus(split).to_lists()
        seen = []
        for i, batch in zip(order(loader), all_batches(loader)):
            assert tuple(batch) == BATCH_KEYS
            index = dm.batches(split)[i].tolist()
            seen += index
            B, T = batch["input_ids"].shape
            assert batch["target_probs"].shape == (B, T, S + 1)
            assert batch["target_probs"].dtype == torch.float32
            assert batch["mask"].dtype == torch.bool
            for b, k in enumerate(index):
                s, n = strings[k], len(strings[k])
                assert int(batch["mask"][b].sum()) == n + 1
                assert bool(batch["mask"][b, : n + 1].all())
                assert batch["input_ids"][b].tolist() == [S + 1] + s + [S + 2] * (T - n - 1)
                assert batch["target_ids"][b].tolist() == s + [S] + [S + 2] * (T - n - 1)
                walk = reference_states(pfsa, s)
                assert batch["states"][b, : n + 1].tolist() == walk
                assert torch.equal(batch["target_probs"][b, : n + 1], probs[walk])
                assert not batch["target_probs"][b, n + 1 :].any()
        assert sorted(seen) == list(range(len(strings)))


def test_intervention_none_with_event_records_the_count(tmp_path):
    dm = random_dm(tmp_path, event="symbol:b")
    plain = random_dm(tmp_path)
    assert torch.equal(dm.corpus().tokens, plain.corpus().tokens)  # unconstrained either way
    b = dm.pfsa.alphabet.index("b")
    assert dm.realized_count == int((dm.corpus().tokens == b).sum())
    expected = dm.hparams.num_strings * Event.parse("symbol:b").expected_count(dm.pfsa)
    assert dm.expected_count == pytest.approx(expected)
    assert plain.realized_count is None and plain.expected_count is None


def test_exact_intervention_realizes_the_count(tmp_path):
    dm = PFADataModule(
        generator="parity", eta=0.3, intervention="exact", event="state:odd", count=1200,
        num_strings=300, val_strings=20, test_strings=20, seed=0, device="cpu",
        cache_dir=str(tmp_path),
    )
    dm.setup("fit")
    assert dm.realized_count == 1200
    corpus = dm.corpus("train")  # the sampler's own per-string counts agree with the walk
    assert corpus.total_count == 1200
    assert torch.equal(corpus.counts, dm.tokenized("train").counts)
    per_string = Event.parse("state:odd").expected_count(dm.pfsa)
    assert dm.expected_count == pytest.approx(300 * per_string)
    summary = dm.summary()
    assert summary["realized_count"] == 1200 and summary["count"] == 1200
    assert summary["automaton_states"] == 4 and summary["alphabet_size"] == 2
    assert summary["automaton_id"] == dm.automaton_id


def test_at_least_once_intervention(tmp_path):
    dm = random_dm(
        tmp_path, intervention="at_least_once", event="symbol:a", count=30, num_strings=60
    )
    assert dm.realized_strings == 30


# ---------------------------------------------------------------------------- batching
def test_max_tokens_bound_and_length_grouping(tmp_path):
    dm = random_dm(tmp_path, max_tokens=6)
    dm.setup("fit")
    positions = dm.tokenized("train").positions
    assert int(positions.max()) > 6  # some strings exceed the bound
    sizes = []
    for index in dm.batches("train"):
        real = int(positions[index].sum())
        assert real <= 6 or len(index) == 1
        sizes.append(positions[index].tolist())
    flat = [p for batch in sizes for p in batch]
    assert flat == sorted(flat)  # grouped by length
    for batch in all_batches(dm.train_dataloader()):
        assert int(batch["mask"].sum()) <= 6 or batch["mask"].shape[0] == 1
    assert [t.tolist() for t in length_batches(torch.tensor([3, 1, 5, 2, 9, 1]), 6)] == [
        [1, 5, 3], [0], [2], [4]
    ]


def test_batch_order_sampler_epochs_and_ranks():
    a = BatchOrderSampler(10, shuffle=True, seed=5)
    assert a.order(0) == a.order(0) and sorted(a.order(0)) == list(range(10))
    assert a.order(0) != a.order(1)
    assert list(a) == a.order(0) == list(a)  # iterating does not change the epoch
    a.set_epoch(3)
    assert list(a) == a.order(3) == list(a)
    assert list(BatchOrderSampler(4, shuffle=False, seed=5)) == [0, 1, 2, 3]
    shares = [
        BatchOrderSampler(7, shuffle=True, seed=1, num_replicas=3, rank=r).order(2)
        for r in range(3)
    ]
    assert all(len(s) == 3 for s in shares)
    assert sorted(set(sum(shares, []))) == list(range(7))


def test_ranks_split_the_same_batches(tmp_path):
    dm = random_dm(tmp_path)
    dm.setup("fit")
    full = [b["input_ids"] for b in dm.train_dataloader()]
    parts = []
    for rank in range(2):
        dm.trainer = types.SimpleNamespace(world_size=2, global_rank=rank)
        loader = dm.train_dataloader()
        parts.append(order(loader))
        assert len(loader) == -(-len(full) // 2)
    dm.trainer = None
    assert set(parts[0]) | set(parts[1]) == set(range(len(full)))


# ---------------------------------------------------------------------------- cache
def test_cache_hit_miss_and_disabled(tmp_path, calls, monkeypatch):
    first = random_dm(tmp_path, seed=1)
    first.setup()
    assert first.cache_hits == {"train": False, "val": False, "test": False}
    assert len(calls) == 3 and len(list((tmp_path / "corpora").glob("*.pt"))) == 3
    second = random_dm(tmp_path, seed=1)
    second.setup()
    assert second.cache_hits == {"train": True, "val": True, "test": True} and len(calls) == 3
    for split in ("train", "val", "test"):
        assert torch.equal(first.corpus(split).tokens, second.corpus(split).tokens)
        assert torch.equal(first.corpus(split).offsets, second.corpus(split).offsets)
    # val/test do not depend on the intervention: a count sweep reuses them
    third = random_dm(tmp_path, seed=1, intervention="exact", event="symbol:a", count=100)
    third.setup()
    assert third.cache_hits == {"train": False, "val": True, "test": True}
    # disabled cache (by the environment variable): nothing written anywhere
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CFL_LIGHTNING_CACHE", "none")
    random_dm(None, seed=2).setup("fit")
    assert resolve_cache_dir(None) is None and not home.exists()
    assert len(list((tmp_path / "corpora").glob("*.pt"))) == 4
    monkeypatch.setenv("CFL_LIGHTNING_CACHE", str(tmp_path / "env"))
    assert resolve_cache_dir(None) == tmp_path / "env" and resolve_cache_dir("NONE") is None
    monkeypatch.delenv("CFL_LIGHTNING_CACHE")
    assert resolve_cache_dir(None) == home / ".cache" / "cfl_lightning"


def test_prepare_data_fills_the_cache(tmp_path, calls):
    dm = random_dm(tmp_path)
    dm.prepare_data()
    assert len(calls) == 3
    dm.setup()
    assert all(dm.cache_hits.values()) and len(calls) == 3


@pytest.mark.parametrize("damage", ["truncate", "tamper"])
def test_corrupt_cache_is_resampled(tmp_path, calls, damage):
    dm = random_dm(tmp_path, val_strings=0, test_strings=0)
    dm.setup("fit")
    (path,) = (tmp_path / "corpora").glob("*.pt")
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        payload = torch.load(path, weights_only=True)
        payload["tokens"][0] = (payload["tokens"][0] + 1) % 4
        torch.save(payload, path)
    with pytest.warns(CorruptCacheWarning, match=path.name):
        again = random_dm(tmp_path, val_strings=0, test_strings=0)
        again.setup("fit")
    assert again.cache_hits["train"] is False
    assert torch.equal(again.corpus().tokens, dm.corpus().tokens)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        healed = random_dm(tmp_path, val_strings=0, test_strings=0)
        healed.setup("fit")
    assert healed.cache_hits["train"] is True


# ---------------------------------------------------------------------------- determinism
def test_determinism_and_idempotent_setup(tmp_path, calls):
    a, b = random_dm("none", seed=7), random_dm("none", seed=7)
    a.setup("fit")
    corpus = a.corpus()
    a.setup("fit")
    a.setup()
    assert a.corpus() is corpus and len(calls) == 3  # train, val, test each once
    b.setup("fit")
    loaders = a.train_dataloader(), b.train_dataloader()
    for epoch in range(2):
        for loader in loaders:
            loader.sampler.set_epoch(epoch)
        for x, y in zip(*map(all_batches, loaders)):
            assert all(torch.equal(x[k], y[k]) for k in BATCH_KEYS)
    other = random_dm("none", seed=8)
    assert not torch.equal(other.corpus().tokens, corpus.tokens)
    assert not torch.equal(other.corpus("val").tokens, a.corpus("val").tokens)
    assert not torch.equal(a.corpus("val").tokens[:50], a.corpus("test").tokens[:50])
    loader = a.train_dataloader()
    assert order(loader, 0) != order(loader, 1)


def test_worker_processes_give_the_same_batches(tmp_path):
    dm = random_dm(tmp_path, num_strings=40, val_strings=0, test_strings=0)
    workers = random_dm(tmp_path, num_strings=40, val_strings=0, test_strings=0, num_workers=1)
    for x, y in zip(all_batches(dm.train_dataloader()), all_batches(workers.train_dataloader())):
        assert all(torch.equal(x[k], y[k]) for k in BATCH_KEYS)


# ---------------------------------------------------------------------------- Lightning
class TinyLM(L.LightningModule):
    def __init__(self, num_symbols: int, hidden: int = 16) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(num_symbols + 3, hidden)
        self.out = torch.nn.Linear(hidden, num_symbols + 1)
        self.seen = 0
        self.inputs: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        logits = self.out(self.embed(batch["input_ids"]))
        mask = batch["mask"]
        self.seen += int(mask.shape[0])
        self.inputs.append(batch["input_ids"])
        return torch.nn.functional.cross_entropy(logits[mask], batch["target_ids"][mask])

    def validation_step(self, batch, batch_idx):
        logp = self.out(self.embed(batch["input_ids"])).log_softmax(-1)
        kl = (batch["target_probs"] * (batch["target_probs"].clamp_min(1e-30).log() - logp)).sum(-1)
        self.log("val_kl", kl[batch["mask"]].mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def test_trains_one_epoch_with_a_plain_lightning_module(tmp_path):
    dm = random_dm(tmp_path)
    model = TinyLM(dm.num_symbols)
    trainer = L.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path,
    )
    trainer.fit(model, datamodule=dm)
    assert model.seen == dm.hparams.num_strings
    assert "val_kl" in trainer.callback_metrics
    # Lightning sets the epoch of the batch order: two epochs follow order(0) then order(1)
    model = TinyLM(dm.num_symbols)
    L.Trainer(
        max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path, limit_val_batches=0,
    ).fit(model, datamodule=dm)
    loader = dm.train_dataloader()
    expected = []
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        expected += [batch["input_ids"] for batch in loader]
    assert len(model.inputs) == len(expected)
    assert all(torch.equal(x, y) for x, y in zip(model.inputs, expected))


def test_cli_arguments_and_linking(tmp_path, monkeypatch):
    from lightning.pytorch.cli import LightningCLI

    monkeypatch.setattr("sys.argv", ["fit"])
    # this test is about argument linking; its corpora's memory estimate (~8 GB for the random
    # automaton's long strings at the sampler's peak) must not depend on the host's free memory
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "64G")

    class CLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.link_arguments("data.num_symbols", "model.num_symbols", apply_on="instantiate")

    cli = CLI(
        TinyLM, PFADataModule, run=False,
        args=["--data.generator=random", "--data.num_symbols=6", "--data.num_states=5",
              "--data.intervention=exact", "--data.event=symbol:a", "--data.count=40",
              f"--data.cache_dir={tmp_path}", "--trainer.logger=false", "--seed_everything=0"],
    )
    assert cli.datamodule.hparams.count == 40 and cli.datamodule.num_symbols == 6
    assert cli.model.out.out_features == 7


def test_occurrences_agree_with_sampler_counts(tmp_path):
    """Every event's realized count from one corpus; the intervened one matches the sampler."""
    from cfl_lightning.data import PFADataModule

    dm = PFADataModule(
        generator="parity", eta=0.3, intervention="exact", event="state:odd", count=300,
        num_strings=80, val_strings=5, test_strings=5, cache_dir="none", device="cpu",
    )
    dm.setup("fit")
    occ = dm.occurrences()
    assert occ["count"]["state:odd"] == 300 == dm.realized_count
    assert occ["strings"]["state:odd"] == dm.realized_strings
    corpus = dm.corpus("train")
    symbols = corpus.tokens
    assert occ["count"]["symbol:a"] == int((symbols == 0).sum())
    assert occ["count"]["symbol:b"] == int((symbols == 1).sum())
    # state totals add up to the number of symbols; transitions refine states
    states = [k for k in occ["count"] if k.startswith("state:")]
    assert sum(occ["count"][k] for k in states) == symbols.numel()
    assert occ["count"]["transition:odd:a"] + occ["count"]["transition:odd:b"] == 300
    assert occ["count"]["state:init"] == occ["strings"]["state:init"] == 80  # one arc per string
    assert "transition:rep:b" not in occ["count"]  # no such transition
    expected = dm.expected_occurrences()
    assert expected["state:rep"] == pytest.approx(80 * 0.3 * 9)


def test_evaluation_shares_are_disjoint_and_cover_every_batch(tmp_path):
    """Under DDP, val/test batches are split without repeats (uneven shares are fine)."""
    dm = random_dm(tmp_path)
    dm.setup("fit")
    full = [b["input_ids"] for b in dm.val_dataloader()]
    for world in (2, 3):
        seen = []
        for rank in range(world):
            dm.trainer = types.SimpleNamespace(world_size=world, global_rank=rank)
            seen += [b["input_ids"] for b in dm.val_dataloader()]
        dm.trainer = None
        assert len(seen) == len(full)  # nothing repeated, nothing left out
        key = lambda t: (tuple(t.shape), t.flatten().tolist())  # noqa: E731
        assert sorted(map(key, seen)) == sorted(map(key, full))


def greedy_reference(positions: torch.Tensor, max_tokens: int) -> list[list[int]]:
    """The greedy cut in plain Python (one string at a time)."""
    order = torch.sort(positions, stable=True).indices.tolist()
    batches, current, used = [], [], 0
    for i in order:
        size = int(positions[i])
        if current and used + size > max_tokens:
            batches.append(current)
            current, used = [], 0
        current.append(i)
        used += size
    return batches + ([current] if current else [])


@pytest.mark.parametrize("max_tokens", [1, 7, 64, 10_000])
def test_length_batches_match_the_plain_greedy_cut(max_tokens):
    positions = torch.randint(1, 40, (3000,), generator=torch.Generator().manual_seed(max_tokens))
    got = [b.tolist() for b in length_batches(positions, max_tokens)]
    assert got == greedy_reference(positions, max_tokens)
    assert length_batches(torch.zeros(0, dtype=torch.long), 5) == []


def test_tensorize_on_the_sampling_device_equals_the_cpu(device):
    from cfl_lightning.data.batching import tensorize

    pfsa = random_pfsa(12, 4, 3, 4)
    fn = Event.parse("state:q2").function(pfsa)
    corpus = sampling.sample_corpus(pfsa, 500, seed=0, event="state:q2", device=device)
    cpu = tensorize(corpus, pfsa, fn)
    here = tensorize(corpus, pfsa.to(device), fn, device=device)
    for name in ("inputs", "targets", "states", "offsets", "counts"):
        assert getattr(here, name).device.type == "cpu"
        assert torch.equal(getattr(here, name), getattr(cpu, name)), name
    assert torch.equal(cpu.counts, corpus.counts)
    for k in (0, 1, 499):
        lo, hi = int(cpu.offsets[k]), int(cpu.offsets[k + 1])
        assert cpu.states[lo:hi].tolist() == reference_states(pfsa, corpus.string(k))


@pytest.mark.parametrize(
    "kwargs, source",
    [
        (dict(generator="parity", eta=0.3), {"generator", "eta"}),
        (dict(generator="parity_resampled", weight_seed=2), {"generator", "weight_seed"}),
        (dict(generator="random", num_states=6, num_symbols=3),
         {"generator", "num_states", "num_symbols", "topology_seed", "weight_seed"}),
    ],
)
def test_summary_lists_only_the_arguments_of_the_automaton_source(kwargs, source):
    all_source = {"automaton", "generator", "eta", "num_states", "num_symbols", "topology_seed",
                  "weight_seed"}
    dm = PFADataModule(cache_dir="none", device="cpu", num_strings=5, val_strings=0,
                       test_strings=0, **kwargs)
    summary = dm.summary()
    assert set(summary) & all_source == source
    assert {"intervention", "seed", "max_tokens", "alphabet_size"} <= set(summary)


def test_spread_batches_gives_every_rank_a_batch_and_counts_each_string_once():
    from cfl_lightning.data.datamodule import spread_batches
    from cfl_lightning.errors import CflError

    batches = [torch.tensor([0, 1, 2, 3, 4]), torch.tensor([5, 6])]
    for ranks in (1, 2, 3, 4, 7):
        spread = spread_batches(batches, ranks, "val")
        assert len(spread) == max(ranks, 2) and all(len(b) > 0 for b in spread)
        assert torch.cat(spread).tolist() == list(range(7))  # every string once, order kept
    assert spread_batches(batches, 2, "val") == batches  # enough batches: unchanged
    with pytest.raises(CflError, match="val split has 7 strings, fewer than the 8 processes"):
        spread_batches(batches, 8, "val")


def test_numpy_integers_are_accepted_and_seeds_are_in_range():
    import numpy as np

    from cfl_lightning.errors import CflError

    dm = PFADataModule(generator="parity", eta=0.3, num_strings=np.int32(12),
                       val_strings=np.int16(3), test_strings=np.int64(4), max_tokens=np.int64(64),
                       seed=np.uint64(2**64 - 1), cache_dir="none", device="cpu")
    assert dm.hparams.num_strings == 12 and type(dm.hparams.num_strings) is int
    assert type(dm.hparams.seed) is int and type(dm.hparams.max_tokens) is int
    dm.setup("fit")
    assert len(dm.train_dataloader().dataset.batches) > 0
    for bad, match in [(dict(seed=-1), "seed must be an integer in 0..18446744073709551615"),
                       (dict(seed=2**64), "seed must be"), (dict(weight_seed=-3), "weight_seed"),
                       (dict(num_strings=5.0), "num_strings must be an integer >= 1"),
                       (dict(max_tokens=True), "max_tokens")]:
        with pytest.raises(CflError, match=match):
            PFADataModule(**{"generator": "parity", "cache_dir": "none", **bad})
