"""The pushdown automaton's ``pop:X`` and ``class:STATE/TOP`` events (issue 48 item 4: targets
that carry the stack), against the independent reference (``tests/pushdown_reference.py``): their
tables' expected counts, their exact count laws, their realized counts in sampled corpora, and
where they live in the decomposed KL."""

from __future__ import annotations

import pytest
import torch

from cfl_lightning.automata import PushdownAutomaton
from cfl_lightning.automata.events import Event
from cfl_lightning.errors import EventError
from cfl_lightning.sampling import sample_corpus
from cfl_lightning.sampling.pushdown.law import ExcursionSeries
from tests import pushdown_reference as ref

DYCK2 = ref.dyck_json(2, open_probs=[0.3, 0.7])
TWO = ref.two_state_json()
CASES = [
    (DYCK2, "pop:(", ref.pop_event("(")), (DYCK2, "pop:[", ref.pop_event("[")),
    (DYCK2, "class:q/(", ref.class_event("q/(")), (DYCK2, "class:q/-", ref.class_event("q/-")),
    (TWO, "pop:Y", ref.pop_event("Y")), (TWO, "class:q/Y", ref.class_event("q/Y")),
]  # fmt: skip


# expected counts and event tables against the reference: tests/test_pushdown_automaton.py's
# test_expected_occurrences_against_the_reference and test_event_tables_count_like_the_reference
# (they cover every pop:X and class:STATE/TOP of its small automata)


@pytest.mark.parametrize("data,event,predicate", CASES[:3] + CASES[4:5],
                         ids=[c[1] for c in CASES[:3] + CASES[4:5]])
def test_count_laws_match_the_enumeration(data, event, predicate):
    pda = PushdownAutomaton.from_dict(data)
    enum = ref.enumerate_pda(data, 10, 1e-13)
    law = ExcursionSeries.of(pda, pda.event_table(Event.parse(event))).log_law(6).exp().numpy()
    reference = enum.count_law(predicate)
    got = [reference.get(n, 0.0) for n in range(len(law))]
    assert all(r - 1e-12 <= p <= r + enum.missing + 1e-12 for p, r in zip(law, got))
    assert enum.missing < 0.2


def test_pops_equal_pushes_per_string_and_the_corpus_holds_the_count():
    """Every ( pushed is popped before the end: an exact corpus on ``pop:(`` holds N pops, and
    each string as many pushes of ( as pops of (, recounted by the reference's walk."""
    pda = PushdownAutomaton.from_dict(DYCK2)
    corpus = sample_corpus(pda, 40, seed=3, intervention="exact", event="pop:(", count=25)
    pops, pushes = [], []
    for i in range(len(corpus)):
        symbols = [pda.alphabet[t] for t in corpus.string(i)]
        prob, steps = ref.walk(DYCK2, symbols)
        assert prob > 0
        pops.append(sum(ref.pop_event("(")(*s) for s in steps))
        pushes.append(sum(ref.push_event("(")(*s) for s in steps))
    assert sum(pops) == 25 and pops == pushes == corpus.counts.tolist()


def test_class_counts_in_a_corpus_equal_the_reference_walk():
    pda = PushdownAutomaton.from_dict(DYCK2)
    corpus = sample_corpus(pda, 30, seed=4, intervention="exact", event="class:q/[", count=20)
    counts = []
    for i in range(len(corpus)):
        _, steps = ref.walk(DYCK2, [pda.alphabet[t] for t in corpus.string(i)])
        counts.append(sum(ref.class_event("q/[")(*s) for s in steps))
    assert sum(counts) == 20 and counts == corpus.counts.tolist()


def test_where_they_live_in_the_decomposed_kl():
    pda = PushdownAutomaton.from_dict(DYCK2)
    kind, (c,) = pda.event_location(Event.parse("class:q/("))
    assert kind == "state" and pda.class_names[c] == "q/("
    kind, places = pda.event_location(Event.parse("pop:("))
    width = pda.num_symbols + 1
    named = {(pda.class_names[i // width], pda.alphabet[i % width]) for i in places}
    assert kind == "transition" and named == {("q/(", ")")}


@pytest.mark.parametrize("spec,message", [
    ("class:q/x", "unknown class 'q/x'"), ("class:q", "unknown class 'q'"),
    ("pop:Z", "unknown stack symbol 'Z'"),
])
def test_unknown_names_are_one_line(spec, message):
    pda = PushdownAutomaton.from_dict(DYCK2)
    with pytest.raises(EventError, match=message) as err:
        pda.event_table(Event.parse(spec))
    assert "\n" not in str(err.value)


def test_a_pfsa_refuses_them_in_one_line():
    from cfl_lightning import parity_starfree_pfsa

    for spec in ("pop:X", "class:q/X"):
        with pytest.raises(EventError, match="need a pushdown automaton"):
            parity_starfree_pfsa().event_table(Event.parse(spec))


def test_the_sample_command_takes_them_and_names_an_unknown_class(tmp_path):
    """The file's declared names are checked before the automaton is built: a class is
    ``STATE/TOP`` for ``class:`` as for ``transition:`` (``class:q/(`` was refused as an unknown
    state)."""
    import json

    from tests.helpers import run_cli

    path = tmp_path / "dyck2.json"
    path.write_text(json.dumps(DYCK2))
    out = tmp_path / "c.jsonl"
    for spec in ("class:q/(", "pop:["):
        result = run_cli("sample", "--automaton", path, "--intervention", "exact", "--event", spec,
                         "--count", 12, "--num-strings", 20, "--seed", 0, "--output", out)
        assert result.returncode == 0, result.stderr
    bad = run_cli("sample", "--automaton", path, "--intervention", "exact", "--event", "class:q",
                  "--count", 3, "--num-strings", 5, "--seed", 0, "--output", tmp_path / "b.jsonl")
    assert bad.returncode == 2 and "unknown class 'q'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "b.jsonl").exists()


def test_dyck_with_a_neutral_symbol_keeps_the_brackets_law():
    """``dyck --neutral-prob nu``: x keeps the stack; the expected length is ``B + (B + 1) nu /
    (1 - nu)``; a string with x's inserted has the bracket string's
    probability without x (same seed) times ``nu^#x (1 - nu)^(brackets + 1)`` (the reference's
    walk); nu = 0 is the automaton without x itself."""
    from cfl_lightning.automata.pushdown.generators import dyck_pda

    plain, noisy = dyck_pda(2, 5), dyck_pda(2, 5, neutral_prob=0.25)
    assert dyck_pda(2, 5, neutral_prob=0.0) == plain and noisy.alphabet[-1] == "x"
    b = float(plain.expected_length())
    assert float(noisy.expected_length()) == pytest.approx(b + (b + 1) / 3, rel=1e-9)
    for s in ref.enumerate_pda(plain.to_dict(), 6).strings:  # x's inserted anywhere: the
        for at in range(len(s.symbols) + 1):                 # brackets' law times nu^#x
            with_x = s.symbols[:at] + ("x", "x") + s.symbols[at:]
            expected = s.prob * 0.25**2 * 0.75 ** (len(s.symbols) + 1)
            assert ref.string_prob(noisy.to_dict(), list(with_x)) == pytest.approx(expected)
