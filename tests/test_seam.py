"""The automaton seam (issue 38): every layer above the core reaches an automaton through the
``Automaton`` protocol only, and a new kind plugs in by registration.

* structure: no read of a PFSA's ``next_state`` outside ``automata/``, ``sampling/`` and
  ``semiring/``; no ``isinstance`` on an automaton class or on ``PFADataModule`` outside
  ``automata/``;
* the PFSA as the protocol's first implementation (classes = states, annotate = the state walk,
  JSON ``kind``);
* a toy second kind (a PFSA behind another ``kind``, registered for loading and sampling) runs
  through sampling, the data module, the decomposed KL and ``results.json`` unchanged: nothing
  above the core dispatches on the class.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from cfl_lightning import CflError
from cfl_lightning.automata import (
    PFSA,
    Automaton,
    Event,
    class_tables,
    load_automaton,
    parity_starfree_pfsa,
    random_pfsa,
    register_automaton_kind,
)
from cfl_lightning.errors import PFSAError
from cfl_lightning.sampling import backend_for, register_backend, sample_corpus
from cfl_lightning.sampling.pfsa_backend import PFSABackend

PACKAGE = Path(__file__).resolve().parents[1] / "cfl_lightning"
CORE = ("automata", "sampling", "semiring")
AUTOMATON_CLASSES = r"PFSA|PushdownAutomaton|PFADataModule|ToyAutomaton"


def _sources(skip: tuple[str, ...]):
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] not in skip:
            yield rel, path.read_text()


def test_no_pfsa_tensor_read_above_the_core():
    found = [
        f"{rel}:{n}"
        for rel, text in _sources(CORE)
        for n, line in enumerate(text.splitlines(), 1)
        if re.search(r"\bnext_state\b", line)
    ]
    assert found == []


def test_no_isinstance_on_an_automaton_or_data_module_class_above_the_core():
    pattern = re.compile(rf"isinstance\([^)]*\b({AUTOMATON_CLASSES})\b")
    found = [f"{rel}" for rel, text in _sources(("automata",)) if pattern.search(text)]
    assert found == []


def test_the_structural_greps_can_fail(tmp_path):
    """Negative control: the patterns do match the code they forbid."""
    assert re.search(r"\bnext_state\b", "table = pfsa.next_state.cpu()")
    forbidden = rf"isinstance\([^)]*\b({AUTOMATON_CLASSES})\b"
    assert re.search(forbidden, "isinstance(dm, PFADataModule)")


# --------------------------------------------------------------------------- the PFSA's side


def test_pfsa_implements_the_protocol():
    a = random_pfsa(6, 3, 1, 2)
    assert isinstance(a, Automaton) and a.kind == "pfsa" and a.class_label == "state"
    assert a.class_names == a.states
    assert torch.equal(a.class_probs(), a.next_symbol_probs())
    exists = a.class_transitions()
    assert torch.equal(exists[:, :-1], a.next_state >= 0)
    assert torch.equal(exists[:, -1], a.final > 0)
    probs, visits = class_tables(a)
    assert probs.dtype == visits.dtype == torch.float64
    assert torch.allclose(visits, a.expected_visits().clamp_min(0))
    event = Event.parse(f"state:{a.states[1]}")
    assert torch.equal(a.event_table(event), event.function(a))
    assert set(a.expected_occurrences()) >= {f"state:{s}" for s in a.states}


def test_annotate_is_the_state_walk():
    a = parity_starfree_pfsa(0.3)
    corpus = sample_corpus(a, 30, seed=4)
    classes = a.annotate(corpus.tokens, corpus.offsets)
    for k, string in enumerate(corpus.to_lists()):
        state, start = a.initial, int(corpus.offsets[k]) + k
        assert int(classes[start]) == state
        for j, symbol in enumerate(string):
            state = int(a.next_state[state, symbol])
            assert int(classes[start + j + 1]) == state
    # negative control: a string the automaton cannot produce is refused, naming it
    with pytest.raises(CflError, match="string 0"):
        a.annotate(torch.tensor([0, 1]), torch.tensor([0, 2]))  # a then b: no transition


def test_load_automaton_dispatches_on_kind(tmp_path):
    a = parity_starfree_pfsa(0.3)
    path = tmp_path / "a.json"
    a.to_json(path)
    assert "kind" not in json.loads(path.read_text())  # a PFSA's file is unchanged
    assert load_automaton(path) == a
    assert load_automaton({**a.to_dict(), "kind": "pfsa"}) == a
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**a.to_dict(), "kind": "zebra"}))
    with pytest.raises(PFSAError, match=r"bad.json: unknown automaton kind 'zebra'") as err:
        load_automaton(bad)
    assert "\n" not in str(err.value)
    with pytest.raises(PFSAError, match="not a PFSA"):
        PFSA.from_dict({**a.to_dict(), "kind": "pushdown"})


# --------------------------------------------------------------------------- a second kind


class ToyAutomaton:
    """A PFSA behind another kind: the protocol by delegation, nothing else."""

    kind = "toy"

    def __init__(self, inner: PFSA) -> None:
        self.inner = inner
        self.alphabet, self.source = inner.alphabet, inner.source

    def __getattr__(self, name):  # num_symbols, eos, device, class_*, annotate, event_table...
        return getattr(self.inner, name)

    def to(self, device):
        return ToyAutomaton(self.inner.to(device))

    def to_dict(self):
        return {**self.inner.to_dict(), "kind": "toy"}

    @classmethod
    def from_dict(cls, data, *, source=None):
        data = {k: v for k, v in data.items() if k != "kind"}
        return cls(PFSA.from_dict(data, source=source))


@pytest.fixture
def toy_kind():
    register_automaton_kind("toy", ToyAutomaton.from_dict)
    register_backend("toy", lambda toy: PFSABackend(toy.inner))
    yield


def test_a_second_kind_samples_through_its_backend(toy_kind):
    a = parity_starfree_pfsa(0.3)
    toy = load_automaton({**a.to_dict(), "kind": "toy"})
    assert toy.kind == "toy" and isinstance(toy, Automaton)
    for iv, count in (("exact", 30), ("at_least_once", 4), ("none", None)):
        mine = sample_corpus(toy, 20, seed=3, intervention=iv, event="state:odd", count=count)
        ref = sample_corpus(a, 20, seed=3, intervention=iv, event="state:odd", count=count)
        assert torch.equal(mine.tokens, ref.tokens) and torch.equal(mine.counts, ref.counts)


def test_an_unregistered_kind_has_no_sampler():
    toy = ToyAutomaton(parity_starfree_pfsa(0.3))
    toy.kind = "unregistered"
    with pytest.raises(CflError, match="no sampler for automata of kind 'unregistered'"):
        backend_for(toy)


def test_a_second_kind_trains_evaluates_and_writes_results(toy_kind, tmp_path):
    import lightning as L

    from cfl_lightning.callbacks import DecomposedKLCallback, ResultsWriter
    from cfl_lightning.data import PFADataModule
    from tests.cli_models import Bag

    a = parity_starfree_pfsa(0.3)
    args = dict(intervention="exact", event="state:odd", count=60, num_strings=40,
                val_strings=10, test_strings=30, seed=0, cache_dir="none", device="cpu")
    written = {}
    for name, automaton in (("pfsa", a), ("toy", ToyAutomaton(a))):
        dm = PFADataModule(automaton=automaton, **args)
        assert dm.automaton.kind == name
        writer = ResultsWriter(str(tmp_path / f"{name}.json"))
        trainer = L.Trainer(callbacks=[DecomposedKLCallback(), writer], logger=False,
                            enable_progress_bar=False, enable_model_summary=False,
                            enable_checkpointing=False)
        L.seed_everything(0, verbose=False)
        trainer.test(Bag(2), datamodule=dm, verbose=False)
        written[name] = json.loads(writer.written.read_text())
    toy, pfsa = written["toy"], written["pfsa"]
    assert toy["automaton"]["kind"] == "toy"
    for key in ("kl_total", "kl", "kl_target", "realized_count", "occurrences",
                "expected_occurrences", "test_visits"):
        assert toy[key] == pfsa[key], key


def test_an_event_over_several_classes_sums_its_entries():
    """A pushdown automaton's state:NAME spans the classes NAME/TOP: the target's weighted value
    is the sum, the unweighted one the visits-weighted mean over visited classes."""
    from cfl_lightning.metrics import decomposed_kl, target_values
    from cfl_lightning.sampling.visits import stake_states

    a = parity_starfree_pfsa(0.3)
    merged = ToyAutomaton(a)
    merged.event_location = lambda event: ("state", (1, 2))  # "odd" and "even" as one
    corpus = sample_corpus(a, 40, seed=2)
    from cfl_lightning.data.batching import collate, tensorize

    tok = tensorize(corpus, a)
    batch = collate(tok, torch.arange(40), class_tables(a)[0].float(), a.num_symbols + 2)
    log_probs = torch.full(batch["target_probs"].shape, 1 / 3).log()
    result = decomposed_kl(a, log_probs, batch["states"], batch["mask"])
    weighted, unweighted = target_values(result, "state:odd", merged)
    visits = class_tables(a)[1]
    assert weighted == pytest.approx(float(result["state"][1] + result["state"][2]), rel=1e-12)
    mean = (visits[1] * result["state_unweighted"][1] + visits[2] * result["state_unweighted"][2])
    assert unweighted == pytest.approx(float(mean / (visits[1] + visits[2])), rel=1e-12)
    assert stake_states(merged, "state:odd").tolist() == [False, True, True, False]
    # negative control: the one-place event reads its own entry only
    assert target_values(result, "state:odd", a)[0] == pytest.approx(float(result["state"][1]))
    assert target_values(result, "state:odd", a)[0] != pytest.approx(weighted)
