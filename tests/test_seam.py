"""The automaton seam (issue 38): every layer above the core reaches an automaton through the
``Automaton`` protocol only, and a new kind plugs in by registration.

* structure: no read of a PFSA's ``next_state`` outside ``automata/``, ``sampling/`` and
  ``semiring/``; no ``isinstance`` on an automaton class or on ``PFADataModule`` outside
  ``automata/``;
* the PFSA as the protocol's first implementation (classes = states, annotate = the state walk,
  JSON ``kind``);
* a toy second kind (a PFSA behind another ``kind``, exposing the protocol's names only, one
  registration for loading, sampling and events) runs through sampling, the data module, the
  decomposed KL and ``results.json`` unchanged: nothing above the core dispatches on the class
  or reads what only a PFSA has (the negative control plants such a read and sees it caught).
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
from cfl_lightning.errors import EventError, PFSAError
from cfl_lightning.kinds import AUTOMATON_KINDS, AutomatonKind, automaton_kind
from cfl_lightning.sampling import backend_for, sample_corpus
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
    """A PFSA behind another kind: the protocol's names and nothing else, each one delegated
    explicitly (no attribute forwarding), so a PFSA-only read above the core fails on it."""

    kind = "toy"

    def __init__(self, inner: PFSA) -> None:
        self._inner = inner
        self.alphabet, self.source = inner.alphabet, inner.source

    num_symbols = property(lambda self: self._inner.num_symbols)
    eos = property(lambda self: self._inner.eos)
    device = property(lambda self: self._inner.device)
    class_label = property(lambda self: self._inner.class_label)
    class_names = property(lambda self: self._inner.class_names)

    def to(self, device):
        return ToyAutomaton(self._inner.to(device))

    def class_probs(self):
        return self._inner.class_probs()

    def class_transitions(self):
        return self._inner.class_transitions()

    def expected_class_visits(self):
        return self._inner.expected_class_visits()

    def expected_length(self):
        return self._inner.expected_length()

    def annotate(self, tokens, offsets, device=None):
        return self._inner.annotate(tokens, offsets, device)

    def event_table(self, event):
        return event.table(self)  # the toy kind's registered table

    def expected_occurrences(self):
        return self._inner.expected_occurrences()

    def event_location(self, event):
        return self._inner.event_location(event)

    def diagram(self):
        return self._inner.diagram()

    def validate(self):
        self._inner.validate()

    def to_dict(self):
        return {**self._inner.to_dict(), "kind": "toy"}

    def to_json(self, path):
        Path(path).write_text(json.dumps(self.to_dict()))



def _load_toy(data, *, source=None) -> ToyAutomaton:
    data = {k: v for k, v in data.items() if k != "kind"}
    return ToyAutomaton(PFSA.from_dict(data, source=source))


def _toy_table(event, toy):
    return toy._inner.event_table(event)


TOY_KIND = AutomatonKind(
    "toy",
    "a PFSA under another name",
    loader=_load_toy,
    backend=lambda toy: PFSABackend(toy._inner),
    events={name: _toy_table for name in ("state", "symbol", "transition")},
)


@pytest.fixture
def toy_kind():
    with AUTOMATON_KINDS.registered(TOY_KIND):
        yield
    assert "toy" not in AUTOMATON_KINDS


def _public(obj) -> set[str]:
    return {n for n in dir(obj) if not n.startswith("_")}


def test_the_toy_exposes_only_the_protocols_names():
    protocol = _public(Automaton) | set(Automaton.__annotations__)
    toy = ToyAutomaton(parity_starfree_pfsa(0.3))
    assert _public(toy) == protocol
    assert not hasattr(toy, "expected_visits") and not hasattr(toy, "next_state")  # no forwarding
    assert "expected_visits" in _public(PFSA) - protocol  # the PFSA has more: the toy hides it


def test_an_automaton_kind_is_registered_once(toy_kind):
    with pytest.raises(PFSAError, match="automaton kind 'toy' is already registered"):
        register_automaton_kind(TOY_KIND)
    with pytest.raises(EventError, match="push event kind already has a table"):
        register_automaton_kind(
            AutomatonKind("pushdown", "again", loader=_load_toy,
                          events={"push": _toy_table}), replace=True)
    assert automaton_kind("pushdown").loader != _load_toy  # nothing replaced


def test_a_kind_without_position_classes_is_refused_by_the_decomposed_kl(tmp_path):
    """``position_classes=False`` in a registration (a PCFG's) is what the callback reads: the
    same toy automaton is evaluated under a kind that has them and refused under one without."""
    import dataclasses

    from cfl_lightning.callbacks import DecomposedKLCallback

    toy = ToyAutomaton(parity_starfree_pfsa(0.3))
    flat = dataclasses.replace(TOY_KIND, position_classes=False)
    with AUTOMATON_KINDS.registered(flat):
        with pytest.raises(PFSAError, match="kind 'toy' have none") as err:
            DecomposedKLCallback(automaton=toy).resolve(None)
        assert "\n" not in str(err.value)
    with AUTOMATON_KINDS.registered(TOY_KIND):
        assert DecomposedKLCallback(automaton=toy).resolve(None) == (toy, None)


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


def _test_run(automaton, path) -> dict:
    """``trainer.test`` of a bag-of-symbols model with the decomposed KL and the results writer,
    on an exact intervention: the written ``results.json``."""
    import lightning as L

    from cfl_lightning.callbacks import DecomposedKLCallback, ResultsWriter
    from cfl_lightning.data import PFADataModule
    from tests.cli_models import Bag

    args = dict(intervention="exact", event="state:odd", count=60, num_strings=40,
                val_strings=10, test_strings=30, seed=0, cache_dir="none", device="cpu")
    dm = PFADataModule(automaton=automaton, **args)
    assert dm.automaton.kind == automaton.kind
    writer = ResultsWriter(str(path))
    trainer = L.Trainer(callbacks=[DecomposedKLCallback(), writer], logger=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False)
    L.seed_everything(0, verbose=False)
    trainer.test(Bag(2), datamodule=dm, verbose=False)
    return json.loads(writer.written.read_text())


def test_a_second_kind_trains_evaluates_and_writes_results(toy_kind, tmp_path):
    a = parity_starfree_pfsa(0.3)
    pfsa = _test_run(a, tmp_path / "pfsa.json")
    toy = _test_run(ToyAutomaton(a), tmp_path / "toy.json")
    assert toy["automaton"]["kind"] == "toy"
    for key in ("kl_total", "kl", "kl_target", "realized_count", "occurrences",
                "expected_occurrences", "test_visits"):
        assert toy[key] == pfsa[key], key


def test_a_pfsa_only_read_in_the_pipeline_is_caught(toy_kind, tmp_path, monkeypatch):
    """Negative control: plant a read of what only a PFSA has (its ``expected_visits``) in the
    decomposed KL's targets; the PFSA still runs, the toy fails on it."""
    import importlib

    dkl = importlib.import_module("cfl_lightning.metrics.decomposed_kl")  # not the function

    def pfsa_only(automaton):
        probs = automaton.class_probs().double()
        return probs, automaton.expected_visits().clamp_min(0).double()

    monkeypatch.setattr(dkl, "class_tables", pfsa_only)
    a = parity_starfree_pfsa(0.3)
    assert _test_run(a, tmp_path / "pfsa.json")["kl_total"] > 0
    with pytest.raises(AttributeError, match="expected_visits"):
        _test_run(ToyAutomaton(a), tmp_path / "toy.json")


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
