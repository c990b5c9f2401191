"""The registries where the product varies (``cfl_lightning.kinds``): generators, event kinds and
intervention kinds.

A toy of each kind (a two-state generator, the event kind ``loop:NAME``, the intervention kind
``at_most``) is registered for one test and seen everywhere: the CLI's choices and help, the
configs' validation, the sampler (rejection), ``analyze``'s labels, a plan's kinds and the docs'
lists; then removed, and the registries are as before. The docs' lists are checked against the
registries, and every reference an entry holds resolves.
"""

from __future__ import annotations

import copy
import operator
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cfl_lightning import kinds
from cfl_lightning.automata import PFSA, Automaton, Event, expected_event_count, load_automaton
from cfl_lightning.errors import CflError, EventError, InterventionError, PFSAError
from cfl_lightning.kinds import (
    AUTOMATON_KINDS,
    AutomatonKind,
    EVENT_KIND_REGISTRY,
    GENERATOR_REGISTRY,
    INTERVENTION_KINDS,
    EventKind,
    Generator,
    GeneratorParam,
    InterventionKind,
    Registry,
    automaton_kind,
    event_kind,
    event_table_ref,
    resolve,
)
from cfl_lightning.kinds.docs import (
    TABLE_MARKERS,
    choice_list,
    choices_text,
    filled,
    markdown_tables,
)
from cfl_lightning.kinds.interventions import INTERVENTIONS
from cfl_lightning.kinds.registry import call

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- the toys


def two_state(p: float = 0.5) -> PFSA:
    """A toy generator: ``s0`` loops on ``a`` (weight ``p``) or moves to ``s1`` on ``b``."""
    next_state = torch.tensor([[0, 1], [-1, 1]])
    weights = torch.tensor([[p * 0.8, (1 - p) * 0.8], [0.0, 0.5]], dtype=torch.float64)
    final = torch.tensor([0.2, 0.5], dtype=torch.float64)
    return PFSA(["s0", "s1"], ["a", "b"], next_state, weights, final, 0)


def loop_table(event: Event, pfsa: PFSA) -> torch.Tensor:
    """A toy event kind's table: the self-loops of a state."""
    q = event._state(pfsa)
    mask = torch.zeros(pfsa.num_states, pfsa.num_symbols, dtype=torch.long)
    mask[q] = (pfsa.next_state[q] == q).long().cpu()
    return mask


TOY_GENERATOR = Generator(
    "two_state",
    "a toy: a self-loop and a second state",
    two_state,
    (GeneratorParam("p", "probability", 0.5, "weight of the loop", setting="eta"),),
)
TOY_EVENT = EventKind(
    "loop",
    ("state",),
    "every self-loop at state NAME",
    tables={"pfsa": loop_table},
    quantity="per-loop",
    weight="p_π(loop)",
    signed=True,
)
TOY_INTERVENTION = InterventionKind(
    "at_most",
    "the corpus traverses the event at most count times in total",
    takes_count=True,
    count_help="N: most total occurrences",
    accepts=operator.le,
    label="causal (at most N)",
)


@pytest.fixture
def toys():
    """The three toys registered for one test, then removed."""
    before = (GENERATOR_REGISTRY.names(), EVENT_KIND_REGISTRY.names(), INTERVENTION_KINDS.names())
    with GENERATOR_REGISTRY.registered(TOY_GENERATOR), EVENT_KIND_REGISTRY.registered(
        TOY_EVENT
    ), INTERVENTION_KINDS.registered(TOY_INTERVENTION):
        yield
    after = (GENERATOR_REGISTRY.names(), EVENT_KIND_REGISTRY.names(), INTERVENTION_KINDS.names())
    assert after == before


# ---------------------------------------------------------------------------- the registry


def test_registry_names_refuses_and_restores():
    reg = Registry("colour", ValueError)
    reg.register(TOY_INTERVENTION)
    view, units = reg.view(), reg.mapping("unit")
    with pytest.raises(ValueError, match="already registered"):
        reg.register(TOY_INTERVENTION)
    with pytest.raises(ValueError, match=r"^unknown colour 'red'; expected one of at_most$"):
        reg.get("red")
    with pytest.raises(ValueError, match="without ':'"):
        reg.register(InterventionKind("a:b", "bad", takes_count=False))
    with pytest.raises(ValueError, match="already registered"), reg.registered(
        InterventionKind("other", "x", takes_count=False), TOY_INTERVENTION
    ):
        pass  # pragma: no cover - the second registration fails
    assert reg.names() == ("at_most",) and list(view) == ["at_most"]  # the first one undone
    with reg.registered(InterventionKind("other", "x", takes_count=False)):
        assert "other" in view and dict(units) == {"at_most": "occurrences", "other": "occurrences"}
    assert "other" not in view and reg.unregister("at_most") is TOY_INTERVENTION and not view


def test_entries_refuse_bad_fields():
    with pytest.raises(InterventionError, match="unit must be one of"):
        InterventionKind("x", "x", takes_count=True, unit="bytes")
    for fields in (("no good",), ("kind",), ("a", "a"), ()):
        with pytest.raises(EventError, match="fields must be distinct identifiers"):
            EventKind("x", fields, "x")
    assert EventKind("x", ("colour",), "x").form == "x:COLOUR"  # a new field: its own name


def test_an_event_carries_its_kind_and_a_mapping_of_fields():
    event = Event.parse("transition:q:a")
    assert event.kind == "transition" and dict(event.fields) == {"state": "q", "symbol": "a"}
    assert (event.state, event.symbol, event.stack) == ("q", "a", None)
    assert hash(event) == hash(Event("transition", "q", "a")) and event != Event("transition", "q")
    assert pickle.loads(pickle.dumps(event)) == event and copy.deepcopy(event) == event
    with pytest.raises(AttributeError):
        event.kind = "state"
    with pytest.raises(TypeError):
        event.fields["state"] = "r"
    colour = EventKind("colour", ("colour",), "steps of a colour", tables={"pfsa": loop_table})
    with EVENT_KIND_REGISTRY.registered(colour):
        painted = Event.parse("colour:red")
        assert painted == Event("colour", colour="red") and str(painted) == "colour:red"
        assert dict(painted.fields) == {"colour": "red"} and painted.state is None
    with pytest.raises(PFSAError, match="type must be one of"):
        GeneratorParam("x", "text", None, "x")
    with pytest.raises(PFSAError, match="has no parameter 'q' \\(its parameters: p\\)"):
        TOY_GENERATOR(q=1)


@pytest.fixture(scope="module")
def built() -> dict:
    """One automaton from every built-in generator, at its defaults."""
    return {g.name: g(**{p.name: p.default for p in g.params}) for g in GENERATOR_REGISTRY}


def test_every_generator_builds_a_registered_kind_that_its_loader_reads(built):
    for automaton in built.values():
        assert isinstance(automaton, Automaton)
        assert call(automaton_kind(automaton.kind).loader, automaton.to_dict()) == automaton
        assert load_automaton(automaton.to_dict()) == automaton
    assert {a.kind for a in built.values()} == set(AUTOMATON_KINDS.names())
    with pytest.raises(ModuleNotFoundError):
        resolve("cfl_lightning.nowhere:f")  # the negative control: a bad reference fails


def test_every_event_table_counts_what_the_automaton_expects(built):
    """Every registered table (an automaton kind's own, or one an event kind brings) is called on
    every built-in event of a PFSA and two pushdown automata; the expected count it gives is the
    automaton's own (from its flows, computed without the tables)."""
    registered = {(e, k.name) for k in AUTOMATON_KINDS for e in k.events}
    registered |= {(e.name, a) for e in EVENT_KIND_REGISTRY for a in e.tables}
    called = set()
    for automaton in (built["parity"], built["dyck"], built["anbn"]):
        visits = automaton.expected_class_visits()
        probs = automaton.class_probs()[:, : automaton.num_symbols]
        for text, expected in automaton.expected_occurrences().items():
            event = Event.parse(text)
            table = call(event_table_ref(event.kind, automaton.kind), event, automaton)
            assert table.shape == probs.shape and table.dtype == torch.long, text
            got = float((visits[:, None] * probs * table).sum())
            assert got == pytest.approx(expected, rel=1e-9, abs=1e-12), text
            called.add((event.kind, automaton.kind))
    grammar = load_automaton({"kind": "pcfg", "rules": ["S -> 'a' S 'b' [0.4] | 'c' [0.6]"]})
    for s, symbol in enumerate(grammar.alphabet):  # a grammar's symbol table: one-hot, 1 class
        event = Event.parse(f"symbol:{symbol}")
        table = call(event_table_ref("symbol", "pcfg"), event, grammar)
        assert torch.equal(table, torch.eye(grammar.num_symbols, dtype=torch.long)[s : s + 1])
    called.add(("symbol", "pcfg"))
    rules = grammar.grammar.rules
    for r, rule in enumerate(rules):  # a rule event's table is per rule: one-hot
        event = Event.parse(f"rule:{grammar.grammar.rule_text(rule)}")
        table = call(event_table_ref("rule", "pcfg"), event, grammar)
        assert torch.equal(table, torch.eye(len(rules), dtype=torch.long)[r])
    called.add(("rule", "pcfg"))
    assert called == registered


def test_every_locate_gives_the_events_place_in_the_decomposed_kl(built):
    pfsa = built["parity"]
    width = pfsa.num_symbols + 1
    places = {"state": lambda e: ("state", pfsa.states.index(e.state)),
              "symbol": lambda e: ("symbol", pfsa.alphabet.index(e.symbol)),
              "transition": lambda e: ("transition", pfsa.states.index(e.state) * width
                                       + pfsa.alphabet.index(e.symbol))}
    located = set()
    for text in pfsa.expected_occurrences():
        event = Event.parse(text)
        assert call(event_kind(event.kind).locate, event, pfsa) == places[event.kind](event)
        located.add(event.kind)
    assert located == {k.name for k in EVENT_KIND_REGISTRY if k.locate}


@pytest.mark.parametrize("name,event", [("parity", "state:odd"), ("dyck", "push:(")])
def test_every_intervention_sampler_meets_its_kind(built, name, event):
    """Each built-in kind's sampler, called on a job, meets its own target (counts recounted from
    the automaton's annotation), and is what ``sample_corpus`` runs."""
    from cfl_lightning.sampling import SamplingJob, backend_for, check_request, sample_corpus

    automaton, k = built[name], 8
    natural = k * automaton.expected_occurrences()[event]
    counts = {"exact": 2, "at_least": 2, "at_least_once": 3}  # below the natural total
    assert natural > 4
    for kind in INTERVENTION_KINDS:
        n = counts.get(kind.name)
        request = check_request(automaton, k, seed=1, intervention=kind.name, event=event,
                                count=n)
        gens = [torch.Generator().manual_seed(s) for s in (1, (1 + 0x9E3779B9) % 2**64)]
        job = SamplingJob(backend_for(automaton), k, request.intervention, *gens)
        corpus = call(kind.sampler, job)
        classes = automaton.annotate(corpus.tokens, corpus.offsets)
        owner = torch.repeat_interleave(torch.arange(k), corpus.lengths)
        before = classes[torch.arange(corpus.tokens.numel()) + owner]
        table = automaton.event_table(Event.parse(event))
        hits = table[before, corpus.tokens]
        recount = torch.zeros(k, dtype=torch.long).index_add_(0, owner, hits)
        assert torch.equal(recount, corpus.counts), kind.name
        if kind.takes_count:
            assert kind.accepts(int(kind.realized(recount)), n), kind.name
            assert not kind.accepts(int(kind.realized(recount)) + 1, n) or kind.name == "at_least"
        same = sample_corpus(automaton, k, seed=1, intervention=kind.name, event=event, count=n)
        assert torch.equal(same.tokens, corpus.tokens), kind.name


def test_built_in_kinds_keep_their_behaviour():
    assert tuple(INTERVENTIONS) == ("none", "exact", "at_least", "at_least_once")
    assert GENERATOR_REGISTRY.names()[:3] == ("parity", "parity_resampled", "random")
    assert GENERATOR_REGISTRY.names()[3:6] == ("dyck", "random_pushdown", "anbn")
    assert GENERATOR_REGISTRY.names()[6:] == (
        "random_pcfg", "dyck_pcfg", "arithmetic", "centre_embedding")
    assert EVENT_KIND_REGISTRY.names() == (
        "state", "symbol", "transition", "push", "pop", "class", "rule")
    assert str(Event.parse("transition:q:x:y")) == "transition:q:x:y"
    assert Event.parse("transition:q:x:y") == Event("transition", "q", "x:y")
    forms = ("expected state:NAME, symbol:SYM, transition:SOURCE:SYM, push:X, pop:X, "
             "class:STATE/TOP or rule:A -> 'a' B")
    with pytest.raises(EventError, match=forms):
        Event.parse("drop:X")
    assert Event.parse("push:X") == Event("push", stack="X")
    with pytest.raises(EventError, match="^push events need a pushdown automaton$"):
        Event("push", stack="X").function(two_state())


def test_an_event_kind_without_a_pfsa_table_is_refused_in_one_line():
    drop = EventKind("drop", ("stack",), "drops of X", tables={"pushdown": loop_table})
    with EVENT_KIND_REGISTRY.registered(drop):
        event = Event.parse("drop:X")
        assert event == Event("drop", stack="X") and str(event) == "drop:X"
        with pytest.raises(EventError, match="^drop events need a pushdown automaton$"):
            event.function(two_state())
        with pytest.raises(EventError, match="no entry in the decomposed KL"):
            event.transition_index(two_state())


# ---------------------------------------------------------------------------- seen everywhere


def test_a_toy_of_each_kind_is_seen_by_the_cli(toys, tmp_path, capsys):
    from cfl_lightning.cli import automaton, sample

    parser = sample.build_parser()
    args = parser.parse_args(["--automaton", "a", "--num-strings", "1", "--seed", "0",
                              "--output", "o", "--intervention", "at_most"])
    assert args.intervention == "at_most"
    text = " ".join(parser.format_help().split())
    assert "at_most: the corpus traverses" in text and "loop:NAME" in text
    out = tmp_path / "toy.json"
    assert automaton.main(["automaton", "two_state", "--p", "0.3", "--output", str(out)]) == 0
    assert PFSA.from_json(out) == two_state(0.3)
    with pytest.raises(SystemExit):
        automaton.build_parser().parse_args(["two_state", "--p", "2", "--output", "x"])
    assert "a probability must be in [0, 1]" in capsys.readouterr().err
    corpus_path = tmp_path / "c.jsonl"
    code = sample.main(["sample", "--automaton", str(out), "--num-strings", "6", "--seed", "1",
                        "--intervention", "at_most", "--event", "loop:s0", "--count", "2",
                        "--method", "rejection", "--output", str(corpus_path)])
    assert code == 0 and len(corpus_path.read_text().splitlines()) == 6
    # the exact sampler knows nothing of the toy: refused, not sampled as another kind
    code = sample.main(["sample", "--automaton", str(out), "--num-strings", "6", "--seed", "1",
                        "--intervention", "at_most", "--event", "loop:s0", "--count", "2",
                        "--output", str(tmp_path / "d.jsonl")])
    assert code == 2 and "no exact sampler" in capsys.readouterr().err


def test_a_toy_of_each_kind_passes_config_validation(toys):
    from jsonargparse import ArgumentParser

    from cfl_lightning.data import PFADataModule
    from cfl_lightning.data.settings import (
        GENERATOR_ARGS,
        DataSettings,
        applicable,
        build_automaton,
    )

    settings = DataSettings(generator="two_state", eta=0.3, intervention="at_most",
                            event="loop:s0", count=5)
    assert build_automaton(settings) == two_state(0.3)
    assert GENERATOR_ARGS["two_state"] == ("eta",) and "eta" in applicable(settings.as_dict())
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(PFADataModule, "data")
    parsed = parser.parse_args(["--data.generator=two_state", "--data.intervention=at_most"])
    assert (parsed.data.generator, parsed.data.intervention) == ("two_state", "at_most")
    assert "two_state" in choices_text()["generators"] and "loop:NAME" in choices_text()["events"]
    with pytest.raises(InterventionError, match="no exact sampler"):
        PFADataModule(generator="two_state", intervention="at_most", event="loop:s0", count=5,
                      cache_dir="none", num_strings=4, val_strings=0, test_strings=0)


def test_a_toy_of_each_kind_is_seen_by_the_sampling_core(toys):
    from cfl_lightning.sampling import Intervention, estimate_sampling, sample_corpus
    from cfl_lightning.sampling.intervention import COUNT_UNITS

    pfsa = two_state(0.5)
    spec = Intervention.create("at_most", "loop:s0", 3)
    assert spec.validate(pfsa, 5).tolist() == [[1, 0], [0, 0]] and COUNT_UNITS["at_most"]
    assert spec.satisfied(torch.tensor([1, 2, 0])) and not spec.satisfied(torch.tensor([2, 2]))
    assert spec.satisfied_batched(torch.tensor([[1, 2], [3, 1]])).tolist() == [True, False]
    corpus = sample_corpus(pfsa, 8, seed=0, intervention="at_most", event="loop:s0", count=3,
                           method="rejection")
    assert corpus.total_count <= 3
    estimate = estimate_sampling(pfsa, 8, intervention="at_most", event="loop:s0", count=3)
    assert estimate.bins_bytes == 0  # no memory hook: no bins


def test_a_toy_of_each_kind_is_seen_by_the_analysis(toys):
    from cfl_lightning.analysis import labels
    from cfl_lightning.analysis.plan import parse_plan
    from cfl_lightning.analysis.plot import metric_label, target_title
    from cfl_lightning.analysis.records import SETTINGS

    assert SETTINGS["at_most"] == "causal_at_most"
    assert labels.setting_label("causal_at_most") == "causal (at most N)"
    assert labels.x_kind("causal_at_most") == "occurrences"
    assert labels.setting_style("causal_at_most") == TOY_INTERVENTION.style
    assert "causal_at_most" in labels.causal_settings()
    assert labels.quantity_name("kl_target_unweighted", "loop:s0") == "per-loop contribution"
    assert labels.gap_kind("kl_target", "loop:s0", [1.0, 2.0]) == "difference"  # signed
    assert metric_label("kl_target", "loop:s0").startswith("p_π(loop) × per-loop")
    assert target_title("loop:s0") == "loop s0"
    plan = {"target": "loop:s0", "causal": "causal_at_most", "bins": [1, 2, 4], "counts": [1, 2],
            "contrasts": [{"name": "C1", "bin_difference": [2, 1], "expect": "above"}],
            "claims": [{"name": "rise", "contrasts": ["C1"]}]}
    assert parse_plan(plan).causal == "causal_at_most"
    with pytest.raises(CflError, match="causal_at_least_once or causal_at_most, got 'causal_x'"):
        parse_plan({**plan, "causal": "causal_x"})


def test_a_toy_of_each_kind_is_in_the_docs_lists(toys):
    tables = markdown_tables()
    assert "| `two_state` | a toy" in tables["generators"]
    assert "`--p` / `eta` (0.5)" in tables["generators"]
    assert "| `loop:NAME` | every self-loop at state NAME | per-loop |" in tables["events"]
    assert "| `at_most` |" in tables["interventions"]
    assert choice_list("interventions").endswith('"at_least_once" | "at_most"')


def test_the_toys_are_gone_after_their_test():
    assert "two_state" not in GENERATOR_REGISTRY and "loop" not in EVENT_KIND_REGISTRY
    assert "at_most" not in INTERVENTIONS
    known = "expected one of none, exact, at_least, at_least_once$"
    with pytest.raises(InterventionError, match=known):
        INTERVENTION_KINDS.get("at_most")


# ---------------------------------------------------------------------------- the docs


def test_the_reference_holds_the_registries_tables():
    page = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    assert filled(page) == page, "run: python -m cfl_lightning.kinds.docs docs/reference.md"
    for start, _ in TABLE_MARKERS.values():
        assert start in page
    with INTERVENTION_KINDS.registered(TOY_INTERVENTION):
        assert filled(page) != page  # the negative control: a new kind changes the page
    interventions = ",".join(INTERVENTIONS)
    assert f"`--intervention {{{interventions}}}`" in page
    automaton_row = next(
        line for line in page.splitlines() if "`python -m cfl_lightning automaton" in line
    )
    assert all(name in automaton_row for name in GENERATOR_REGISTRY.names())


@pytest.mark.parametrize("page", ["README.md", "docs/guide/data_module.md"])
def test_the_guides_list_every_kind(page):
    text = (REPO / page).read_text(encoding="utf-8")
    assert f"# {choice_list('interventions')}" in text
    assert f"# {choice_list('events')}" in text
    generators = choice_list("generators")
    assert generators in text or page == "README.md"


@pytest.mark.slow  # a fresh interpreter: the point is what it imports
def test_the_registries_and_the_analysis_labels_import_no_torch():
    probe = ("import sys, cfl_lightning.kinds.docs, cfl_lightning.analysis.labels, "
             "cfl_lightning.analysis.aggregate; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=REPO, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_the_design_docs_automaton_kind_example_is_the_registry_api(monkeypatch):
    """docs/design.md's worked example (the ``pcfg`` kind): its table lists exactly the fields of
    ``AutomatonKind``, and its registration call, run against the real API, builds exactly the
    built-in ``pcfg`` entry, whose references all resolve."""
    import dataclasses
    import re as _re

    text = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    section = text[text.index("**A new automaton kind**"): text.index("**A new generator**")]
    listed = _re.findall(r"^\| `(\w+)` \|", section, flags=_re.M)
    assert listed == [f.name for f in dataclasses.fields(AutomatonKind)]
    (block,) = _re.findall(r"```python\n(.*?)```", section, flags=_re.S)
    seen: list[AutomatonKind] = []
    monkeypatch.setattr(kinds, "register_automaton_kind", seen.append)  # the call, recorded
    exec(block, {})
    (kind,) = seen
    assert kind == automaton_kind("pcfg") and kind.position_classes is False
    assert set(kind.events) <= set(EVENT_KIND_REGISTRY.names())
    for ref in (kind.loader, kind.backend, kind.estimate, *kind.events.values()):
        assert isinstance(ref, str) and _re.fullmatch(r"cfl_lightning(\.\w+)+:\w+", ref), ref
        assert callable(resolve(ref))
    with pytest.raises(EventError, match="push events need a pushdown automaton"):
        event_table_ref("push", "pcfg")
