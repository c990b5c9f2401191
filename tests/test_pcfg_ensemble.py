"""Ensembles of grammar runs (issue 50 item 5): a PCFG has no position classes, so an ensemble
packs the exact law of every position (the corpus's ``target_probs``) instead of a class table's
rows, evaluates each member per symbol (``MemberSymbolKL``: ``SymbolKL``'s rule) and writes its
``results.json`` with the callback's ``classless_entries``. Each member must equal its own
``fit``; the packed laws are checked cell by cell against the grammar's laws of the string the
cell reads, recomputed from that string alone.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cfl_lightning import PFADataModule
from cfl_lightning.ensemble.data import EnsembleData
from cfl_lightning.ensemble.metrics import MemberSymbolKL, member_kl
from cfl_lightning.ensemble.packing import PackedCorpora
from cfl_lightning.ensemble.settings import NotEnsembleable
from cfl_lightning.data.batching import collate
from cfl_lightning.metrics import SymbolKL
from tests.pcfg_reference import EXPR

BASE = """seed_everything: 0
trainer:
  max_epochs: 2
  logger:
    - class_path: lightning.pytorch.loggers.CSVLogger
      init_args: {save_dir: ., name: csv}
  enable_progress_bar: false
model:
  class_path: cfl_lightning.models.LSTMLanguageModel
  init_args:
    param_budget: 3000
    dropout: 0.0
    loss: kl
data:
  intervention: exact
  num_strings: 30
  val_strings: 12
  test_strings: 20
  cache_dir: none
"""


def _grammar(tmp_path: Path) -> Path:
    path = tmp_path / "expr.pcfg"
    path.write_text(EXPR)
    return path


def _dm(grammar: Path, seed: int, event: str = "symbol:x", count: int = 40) -> PFADataModule:
    dm = PFADataModule(automaton=str(grammar), num_strings=30, val_strings=12, test_strings=20,
                       intervention="exact", event=event, count=count, seed=seed,
                       cache_dir="none", device="cpu")
    dm.setup("fit")
    dm.setup("test")
    return dm


def _args(tmp_path: Path, grammar: Path, root: Path, seed: int, event: str) -> list[str]:
    config = tmp_path / "base.yaml"
    config.write_text(BASE)
    return ["--config", str(config), f"--seed_everything={seed}", f"--data.seed={seed}",
            f"--data.automaton={grammar}", f"--data.event={event}", "--data.count=40",
            f"--trainer.default_root_dir={root}"]


@pytest.mark.slow  # two plain fits and an ensemble job (about 3 s)
@pytest.mark.parametrize("engine", ["stacked", "loop"])
def test_grammar_members_write_the_results_their_own_fit_writes(engine, tmp_path):
    """``run_job`` (the process ``sweep --ensemble`` starts) vs ``fit`` on the same arguments:
    two grammar points (other seed, other event) give the same results.json."""
    from cfl_lightning.cli.ensemble_job import run_job
    from cfl_lightning.cli.train import main as fit_main

    grammar = _grammar(tmp_path)
    points = {"a": (0, "symbol:x"), "b": (1, "symbol:y")}
    for name, (seed, event) in points.items():
        args = _args(tmp_path, grammar, tmp_path / "plain" / name, seed, event)
        assert fit_main(["fit", *args]) == 0
    status = run_job(
        [(name, _args(tmp_path, grammar, tmp_path / "ens" / name, seed, event))
         for name, (seed, event) in points.items()],
        engine=engine, device="cpu",
    )
    assert status == {"a": None, "b": None}
    for name, (_, event) in points.items():
        (plain,) = (tmp_path / "plain" / name).rglob("results.json")
        (ens,) = (tmp_path / "ens" / name).rglob("results.json")
        a, b = json.loads(plain.read_text()), json.loads(ens.read_text())
        assert list(a) == list(b)
        assert a["event"] == b["event"] == event
        for key in ("num_parameters", "seed", "automaton_id", "epochs", "steps", "test_visits",
                    "target_test_visits", "stopped_early", "kl_target_unweighted"):
            if key == "kl_target_unweighted":
                assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-7), key
            else:
                assert a[key] == b[key], key
        assert a["target_test_visits"] > 0 and "state" not in (a["kl"] or {})
        assert b["kl_total"] == pytest.approx(a["kl_total"], rel=1e-4)
        assert b["kl_target"] == pytest.approx(a["kl_target"], rel=1e-3, abs=1e-7)
        assert b["best_val_loss"] == pytest.approx(a["best_val_loss"], rel=1e-5)
        for group in ("kl", "kl_unweighted"):
            assert b[group]["symbol"] == pytest.approx(a[group]["symbol"], rel=1e-3, abs=1e-7)
        # each epoch's validation values in the member's own CSV log: its plain fit's
        plain_val, ens_val = _val_rows(plain.parent), _val_rows(ens.parent)
        assert len(ens_val) == len(plain_val) == a["epochs"]
        for key in ("val/kl_per_string", "val/kl_total", "val/kl_target"):
            assert [row[key] for row in ens_val] == pytest.approx(
                [row[key] for row in plain_val], rel=1e-4), key


def _val_rows(log_dir: Path) -> list[dict[str, float]]:
    """The rows of a CSV log's ``metrics.csv`` with validation values (floats)."""
    with open(log_dir / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    return [{k: float(v) for k, v in row.items() if v not in ("", None)}
            for row in rows if row.get("val/kl_total")]


def _slots(batch, m: int) -> list[tuple[int, int, int]]:
    """``(row, start, end)`` of every string of member ``m`` in a packed batch."""
    out = []
    mask, position = batch.mask[m], batch.position[m]
    for r in range(mask.shape[0]):
        starts = torch.nonzero(mask[r] & (position[r] == 0)).flatten().tolist()
        for s in starts:
            end = s
            while end + 1 < mask.shape[1] and mask[r, end + 1] and position[r, end + 1] > 0:
                end += 1
            out.append((r, s, end + 1))
    return out


def test_packed_laws_are_the_laws_of_the_string_each_cell_reads(tmp_path):
    """Every real cell of every packed training and test tick carries the grammar's law after
    the prefix the cell has read, recomputed from that string alone (``position_laws`` of one
    string); off the real positions the laws are 0."""
    grammar = _grammar(tmp_path)
    dms = [_dm(grammar, 0), _dm(grammar, 1, "symbol:y")]
    data = EnsembleData(dms, pacing="lockstep")
    automaton = dms[0].automaton
    seen = 0
    for split in ("train", "test"):
        packed = data.packed(split, torch.device("cpu"))
        plan = data.eval_plan(split, np.ones(2, dtype=bool), torch.device("cpu"),
                              dict(overhead=2.0, cell_cost=0.5))
        for s in range(plan.shape[1]):
            batch = packed.step(plan[:, s])
            assert not batch.target_probs[~batch.mask].any()
            for m in range(2):
                for r, start, end in _slots(batch, m):
                    tokens = batch.target_ids[m, r, start:end - 1]  # the string (EOS dropped)
                    laws = automaton.position_laws(
                        tokens, torch.tensor([0, tokens.numel()]), "cpu"
                    ).to(torch.float32)
                    assert torch.equal(batch.input_ids[m, r, start + 1:end], tokens)
                    assert torch.allclose(batch.target_probs[m, r, start:end], laws, atol=1e-6)
                    seen += 1
    assert seen == sum(len(dm.tokenized(s)) for dm in dms for s in ("train", "test"))


def test_member_symbol_kl_is_each_members_symbol_kl_with_weights(tmp_path):
    """``MemberSymbolKL`` on packed batches (with string weights) equals each member's
    ``SymbolKL`` on its own collated batches with the same model scores."""
    grammar = _grammar(tmp_path)
    dms = [_dm(grammar, 0), _dm(grammar, 1, "symbol:y")]
    generator = torch.Generator().manual_seed(0)
    weights = [torch.rand(len(dm.tokenized("test")), generator=generator, dtype=torch.float64)
               for dm in dms]
    scores = [torch.randn(dm.tokenized("test").inputs.numel(), dms[0].num_symbols + 1,
                          generator=generator).log_softmax(-1) for dm in dms]
    packed = PackedCorpora([dm.tokenized("test") for dm in dms],
                           [dm.batches("test") for dm in dms], [None, None], dms[0].pad_id,
                           weights=weights)
    metric = MemberSymbolKL([dm.automaton for dm in dms])
    flat_scores = torch.cat(scores)
    for k in range(max(packed.num_batches)):
        ids = np.array([packed.first_batch[m] + k if k < packed.num_batches[m] else -1
                        for m in range(2)])
        batch = packed.step(ids)
        log_probs = flat_scores[_flat_index(packed, ids, batch)] * batch.mask[..., None]
        metric.update(log_probs, batch.target_probs, batch.mask, batch.strings, batch.weights,
                      batch.mask & (batch.position == 0))
    for m, ((result, visits), dm) in enumerate(zip(metric.compute(), dms)):
        own = SymbolKL(dm.num_symbols)
        corpus = dm.tokenized("test")
        for index in dm.batches("test"):
            b = collate(corpus, index, None, dm.pad_id)
            b["weights"] = weights[m][index]
            steps = torch.arange(b["mask"].shape[1])
            flat = torch.where(b["mask"], corpus.offsets[index][:, None] + steps[None, :], 0)
            own.update(scores[m][flat], b)
        expected = own.compute()
        assert visits is None
        assert torch.equal(result["stakes"], expected["stakes"])
        assert torch.allclose(result["symbol"], expected["symbol"], rtol=1e-10, atol=1e-12)
        assert float(result["total"]) == pytest.approx(float(expected["total"]), rel=1e-10)


def _flat_index(packed: PackedCorpora, ids: np.ndarray, batch) -> torch.Tensor:
    """``[M, R, L]`` the flat corpus position each packed cell holds (0 off the mask), found by
    matching the cell's string start and position (the packing's own rule, recomputed)."""
    out = torch.zeros_like(batch.input_ids)
    for m, gid in enumerate(ids):
        if gid < 0:
            continue
        start, size = int(packed.batch_start[gid]), int(packed.batch_size[gid])
        strings = packed.batch_strings[start:start + size].tolist()
        slots = _slots(batch, m)
        assert len(slots) == size
        for string, (r, s, e) in zip(strings, slots):
            offset = int(packed.string_offset[string])
            out[m, r, s:e] = offset + torch.arange(e - s)
    return out


def test_an_ensemble_does_not_mix_kinds_with_and_without_classes(tmp_path):
    """Their results are not of one form: refused (the job then fits the members one by one)."""
    from cfl_lightning import parity_starfree_pfsa
    from cfl_lightning.automata import load_automaton

    pcfg = load_automaton(_grammar(tmp_path))
    assert isinstance(member_kl([pcfg, pcfg]), MemberSymbolKL)
    with pytest.raises(NotEnsembleable, match="position classes"):
        member_kl([pcfg, parity_starfree_pfsa(0.3)])


def test_a_grammar_data_module_needs_no_class_table(tmp_path):
    """What an ensemble reads from a grammar's data module (``CLASSLESS_DATA``): everything but
    ``target_table``, which a grammar does not have; anything else missing is still refused."""
    import types

    from cfl_lightning.callbacks.requirements import RESULTS_ATTRIBUTES
    from cfl_lightning.ensemble import check_member_data
    from cfl_lightning.ensemble.requirements import CLASSLESS_DATA, ENSEMBLE_DATA

    assert set(ENSEMBLE_DATA) - set(CLASSLESS_DATA) == {"target_table"}
    dm = _dm(_grammar(tmp_path), 0)

    def without(missing: str) -> types.SimpleNamespace:
        fake = types.SimpleNamespace(**{n: getattr(dm, n) for n in
                                        {*CLASSLESS_DATA, *RESULTS_ATTRIBUTES} - {missing}})
        fake.hparams = dict(dm.hparams)
        return fake

    check_member_data(without("nothing"))
    with pytest.raises(NotEnsembleable, match="tokenized"):
        check_member_data(without("tokenized"))


@pytest.mark.slow  # two one-member ensembles
def test_a_job_trains_grammar_and_automaton_points_in_separate_ensembles(tmp_path, capfd):
    """A job given a grammar point and an automaton point of the same alphabet size (same model
    shapes) trains them as two ensembles, not one that is refused and retried member by member."""
    from cfl_lightning.cli.ensemble_job import run_job

    grammar = tmp_path / "ab.pcfg"
    grammar.write_text("S -> 'a' S 'b' [0.4] | 'a' 'b' [0.4] | 'b' [0.2]\n")
    config = tmp_path / "base.yaml"
    config.write_text(BASE.replace("max_epochs: 2", "max_epochs: 1"))
    common = ["--config", str(config), "--data.intervention=none"]
    status = run_job([
        ("g", [*common, f"--data.automaton={grammar}", f"--trainer.default_root_dir={tmp_path}/g"]),
        ("p", [*common, "--data.generator=parity", f"--trainer.default_root_dir={tmp_path}/p"]),
    ], device="cpu")
    assert status == {"g": None, "p": None}
    assert "one by one" not in capfd.readouterr().err
    (g,) = (tmp_path / "g").rglob("results.json")
    (p,) = (tmp_path / "p").rglob("results.json")
    assert "state" not in json.loads(g.read_text())["kl"]
    assert "state" in json.loads(p.read_text())["kl"]
