"""The length-generalization split (issue 51, item 9): strings conditioned on ``length >= L``.

Against brute force: enumerated strings of small automata (a PFSA, Dyck and a^n b^n pushdown
automata) give ``P(length >= L)`` and the conditional law ``P(y | length >= L)``; the sampler's
draws pass a chi-square test with fixed seeds, and a negative control (the unconditioned law, or
the law conditioned on ``L - 1``) is rejected on the same draws. The data module's long split,
its refusal and its evaluation beside the test set are checked too.
"""

from __future__ import annotations

import os

os.environ["WANDB_MODE"] = "disabled"  # before anything imports wandb

import functools
import json
import math
from collections import Counter

import lightning as L
import pytest
import torch

from cfl_lightning.automata import resampled_parity_starfree_pfsa
from cfl_lightning.automata.pushdown_generators import anbn_pda, dyck_pda
from cfl_lightning.data import PFADataModule
from cfl_lightning.errors import CflError
from cfl_lightning.results import split_view
from cfl_lightning.sampling import length
from cfl_lightning.sampling.length import length_tail, pilot_length_tail, sample_min_length
from tests.helpers import short_pfsa
from tests.pushdown_reference import enumerate_pda
from tests.reference import chi_square_pvalue, enumerate_strings

ALPHA = 1e-3


def _pfsa_law(pfsa, max_len: int) -> dict[tuple[str, ...], float]:
    zero = torch.zeros(pfsa.num_states, pfsa.num_symbols, dtype=torch.long)
    names = pfsa.alphabet
    return {tuple(names[s] for s in k): p for k, (p, _) in
            enumerate_strings(pfsa, zero, max_len).items()}


@functools.lru_cache(maxsize=None)
def _reference(kind: str):
    """``(automaton, {string: P(string)})`` enumerated far enough for the tests below."""
    if kind == "pfsa":
        pfsa = short_pfsa()
        return pfsa, _pfsa_law(pfsa, 13)
    pda = dyck_pda() if kind == "dyck" else anbn_pda()
    return pda, enumerate_pda(pda.to_dict(), 10, 1e-8).law()


def _conditional(law: dict, min_length: int) -> dict:
    """``P(y | length >= L)`` over the enumerated strings (their missing mass is long strings)."""
    tail = 1.0 - math.fsum(p for y, p in law.items() if len(y) < min_length)
    return {y: p / tail for y, p in law.items() if len(y) >= min_length}


@pytest.mark.parametrize("kind", ["pfsa", "dyck", "anbn"])
def test_the_tail_probability_is_exact(kind):
    automaton, law = _reference(kind)
    for min_length in (0, 1, 2, 3, 5, 8):
        short = math.fsum(p for y, p in law.items() if len(y) < min_length)
        assert length_tail(automaton, min_length) == pytest.approx(1 - short, abs=1e-12)
    # the pilot (for kinds without an exact law) estimates the same number
    assert pilot_length_tail(automaton, 3) == pytest.approx(length_tail(automaton, 3), abs=0.02)


# ``shorter``: the negative control's length (Dyck and a^n b^n strings have even lengths)
@pytest.mark.parametrize("kind, min_length, shorter", [
    ("pfsa", 4, 3), ("dyck", 4, 2), ("anbn", 4, 2),
])
def test_draws_follow_the_conditional_law(kind, min_length, shorter):
    automaton, law = _reference(kind)
    num = 4000
    corpus = sample_min_length(automaton, num, min_length, seed=11)
    assert len(corpus) == num and int(corpus.lengths.min()) >= min_length
    names = automaton.alphabet
    observed = Counter(tuple(names[s] for s in y) for y in corpus.to_lists())
    exact = _conditional(law, min_length)
    assert chi_square_pvalue(observed, exact, num) > ALPHA
    # negative control: the law conditioned on a shorter length is rejected on the same draws
    wrong = _conditional(law, shorter)
    assert chi_square_pvalue(observed, wrong, num) < ALPHA


def test_the_draw_is_determined_by_its_seed():
    pda = dyck_pda()
    first = sample_min_length(pda, 50, 6, seed=3)
    assert first.to_lists() == sample_min_length(pda, 50, 6, seed=3).to_lists()
    assert first.to_lists() != sample_min_length(pda, 50, 6, seed=4).to_lists()


def test_unreachable_and_too_rare_lengths_are_refused_before_drawing(monkeypatch):
    pfsa = short_pfsa()
    tail = length_tail(pfsa, 30)
    assert 0 < tail < 1e-5
    with pytest.raises(CflError, match=r"the long split: P\(length >= 30\) = .* over the limit"):
        sample_min_length(pfsa, 1000, 30, seed=0)
    monkeypatch.setattr(length, "MAX_DRAWS", 10)  # 8 strings need about 8 / 0.7 draws
    with pytest.raises(CflError, match="over the limit of 10"):
        sample_min_length(pfsa, 8, 1, seed=0)
    assert len(sample_min_length(pfsa, 7, 1, seed=0)) == 7  # 7 / 0.7 = 10 draws
    finite = resampled_parity_starfree_pfsa(9)
    # a PFSA whose strings are all short: no string of length L at all
    from cfl_lightning.automata import PFSA

    two = PFSA.from_dict({
        "alphabet": ["a"], "states": ["s", "t"], "initial": "s", "final": {"t": 1.0},
        "transitions": [{"source": "s", "symbol": "a", "target": "t", "weight": 1.0}],
    })
    assert length_tail(two, 2) == 0.0 and length_tail(finite, 2) > 0
    with pytest.raises(CflError, match="no string of this automaton has 2 symbols or more"):
        sample_min_length(two, 5, 2, seed=0)


def test_the_data_module_refuses_at_construction(tmp_path):
    with pytest.raises(CflError, match=r"^data.long_min_length 400: P\(length >= 400\)"):
        PFADataModule(generator="parity", eta=0.3, long_min_length=400, cache_dir="none",
                      device="cpu")


def test_the_long_split_is_its_own_cached_corpus(tmp_path):
    args = dict(generator="parity", eta=0.3, num_strings=10, val_strings=5, test_strings=20,
                long_min_length=12, long_test_strings=30, cache_dir=str(tmp_path), device="cpu")
    dm = PFADataModule(**args)
    dm.setup("test")
    long = dm.corpus("long_test")
    assert len(long) == 30 and int(long.lengths.min()) >= 12
    assert dm.long_probability == pytest.approx(length_tail(dm.automaton, 12))
    # the ordinary splits keep their cache keys (min_length only in the long split's record)
    assert "min_length" not in dm._plan("test").key_arguments(dm.device)
    assert dm._plan("long_test").key_arguments(dm.device)["min_length"] == 12
    again = PFADataModule(**args)
    assert again.corpus("long_test").to_lists() == long.to_lists()
    assert again.cache_hits["long_test"] is True
    plain = PFADataModule(**{**args, "long_min_length": None})
    assert plain.long_test_dataloader() is None
    with pytest.raises(CflError, match="unknown split 'long_test'"):
        plain.corpus("long_test")


class StateModel(L.LightningModule):
    """Predicts ``(1 - eps) p_A(.|q) + eps / (S + 1)`` from the batch's states."""

    def __init__(self, pfsa, eps: float) -> None:
        super().__init__()
        probs = pfsa.next_symbol_probs().double()
        self.register_buffer("log_p", ((1 - eps) * probs + eps / probs.shape[1]).log())
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def next_symbol_logits(self, batch):
        return self.log_p[batch["states"]]

    def test_step(self, batch, batch_idx):
        pass


def test_the_long_split_is_evaluated_beside_the_test(tmp_path):
    """results.json's long_test: the test's evaluation on the long strings (same code)."""
    from cfl_lightning.callbacks import DecomposedKLCallback, ResultsWriter

    pfsa, eps = resampled_parity_starfree_pfsa(9), 0.2
    path = tmp_path / "a.json"
    pfsa.to_json(path)
    dm = PFADataModule(automaton=str(path), event="state:odd", num_strings=10, val_strings=0,
                       test_strings=40, long_min_length=6, long_test_strings=60,
                       cache_dir="none", device="cpu")
    writer = ResultsWriter(str(tmp_path / "out" / "results.json"))
    trainer = L.Trainer(callbacks=[DecomposedKLCallback(), writer], logger=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False)
    (metrics,) = trainer.test(StateModel(pfsa, eps), datamodule=dm, verbose=False)
    results = json.loads(writer.written.read_text())
    long = results["long_test"]
    assert long["min_length"] == 6 and long["num_strings"] == 60
    # independent: the per-string KL is the sum over the long strings' positions of each
    # state's KL (the model depends on the state only), over the number of strings
    p = pfsa.next_symbol_probs().double()
    per_state = (torch.xlogy(p, p) - p * ((1 - eps) * p + eps / p.shape[1]).log()).sum(1)
    states = dm.tokenized("long_test").states
    assert long["kl_per_string"] == pytest.approx(float(per_state[states].sum()) / 60, rel=1e-6)
    assert metrics["long_test/kl_per_string"] == pytest.approx(long["kl_per_string"], rel=1e-5)
    # per visit, a state-only model's KL is the same on any strings that visit the state
    for i, name in enumerate(pfsa.states):
        if long["test_visits"]["state"][name]:
            assert long["kl_unweighted"]["state"][name] == pytest.approx(float(per_state[i]))
    assert long["kl_target_unweighted"] == pytest.approx(float(per_state[1]))
    assert long["target_test_visits"] == int((states == 1).sum())
    # the long strings are longer: more KL per string than the ordinary test strings
    assert long["kl_per_string"] > metrics["test/kl_per_string"]
    view = split_view(results, "long")
    assert view["kl_total"] == long["kl_total"] and view["kl"] == long["kl"]
    assert split_view(results, "test")["kl_total"] == results["kl_total"]
    assert split_view({**results, "long_test": None}, "long") is None
