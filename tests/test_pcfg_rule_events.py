"""Rule events (``rule:A -> 'a' B``: uses of one rule in a string's derivation) through the
product: ``sample``, ``draw`` and ``PFADataModule`` (issue 50 item 3).

A rule's count belongs to the derivation, not to the string: on ``AMBIGUOUS`` the string ``a a``
has a derivation using ``S -> 'a' S`` once and one using it not at all, so the counts can only be
the sampler's. Checked against the independent enumeration of derivations in
``tests/pcfg_count_reference.py``: the data module's training corpus under an exact rule count
(chi-square of K = 2 corpora, negative control on a perturbed grammar), the expected count
(the reference count law's mean), the unconstrained sampler's counts recounted on a grammar where
the rule count is a function of the string, the strings of a seed pinned to the sampler's before
it counted, the corpus cache (the counts are stored with the corpus), results.json (``kl_target``
null), and the one-line refusals.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest
import torch

from cfl_lightning.automata import Event, load_automaton
from cfl_lightning.automata.pcfg import parse_grammar
from cfl_lightning.errors import CflError, EventError
from cfl_lightning.sampling.pcfg.count_law import event_degrees
from cfl_lightning.sampling.pcfg.generate import generate_strings
from tests.helpers import run_cli
from tests.pcfg_count_reference import chi_pvalue, count_law, rule_degrees, string_count_law
from tests.pcfg_reference import DYCK, EXPR

#: ``a a`` is derived with ``S -> 'a' S`` once (a, then S -> a) or not at all (S a, S -> a)
AMBIGUOUS = "S -> 'a' S [0.25] | S 'a' [0.25] | 'a' [0.3] | 'b' [0.2]\n"
WRONG = "S -> 'a' S [0.25] | S 'a' [0.25] | 'a' [0.2] | 'b' [0.3]\n"
RULE = "rule:S -> 'a' S"  # rule 0 of AMBIGUOUS
#: sha256[:16] of the tokens and offsets of generate_strings(grammar, 500, seed=7) before it
#: counted events (commit 2dc4cab): counting must draw nothing
PINNED = {"dyck": "32d6f819d6bd1861", "expr": "ad7124b87d657a11"}


def _file(tmp_path, text, name="g.pcfg"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _module(path, **kwargs):
    from cfl_lightning import PFADataModule

    settings = dict(automaton=str(path), val_strings=0, test_strings=0, cache_dir="none",
                    device="cpu")
    return PFADataModule(**{**settings, **kwargs})


def _strings(corpus):
    return tuple(tuple(corpus.string(k)) for k in range(len(corpus)))


def _leaves(w, opening, closing):
    """The ``()`` pairs of a Dyck string: the leaves (``S -> ( )``) of any derivation of it."""
    return sum(a == opening and b == closing for a, b in zip(w, w[1:]))


def _pairs_law(grammar, total, max_length=9):
    """The exact law of 2-tuples of strings given their total count of rule 0 (enumerated
    derivations: ``P(string, count)`` summed over derivations, a string's counts kept apart)."""
    degrees = rule_degrees(grammar, "rule:0")
    joint, dropped = string_count_law(grammar, degrees, max_length, total)
    assert dropped < 1e-12
    counts, missing = count_law(grammar, degrees, total)
    assert missing < 1e-12
    denom = sum(counts[i] * counts[total - i] for i in range(total + 1))
    law: dict = Counter()
    for (a, ca), pa in joint.items():
        for (b, cb), pb in joint.items():
            if ca + cb == total:
                law[(a, b)] += pa * pb / denom
    return law


def test_the_rule_event_kind_is_registered_once_and_round_trips():
    from cfl_lightning.kinds import AUTOMATON_KINDS
    from cfl_lightning.kinds.events import EVENT_KIND_REGISTRY, counted_from_tokens

    for text in ("rule:E -> E '+' T", "rule:A -> 'a:b' B"):  # the whole rest is the rule
        event = Event.parse(text)
        assert event.kind == "rule" and str(event) == text and Event.parse(str(event)) == event
    assert Event.parse("rule:E -> E '+' T").fields == {"rule": "E -> E '+' T"}
    assert EVENT_KIND_REGISTRY.names().count("rule") == 1
    assert [k.name for k in AUTOMATON_KINDS if "rule" in k.events] == ["pcfg"]
    assert not counted_from_tokens(Event.parse(RULE))
    assert counted_from_tokens(Event.parse("symbol:a"))


@pytest.mark.slow  # 1,200 data modules (~21 s); the quick lane keeps the exact-count checks
def test_a_training_corpus_under_an_exact_rule_count_follows_the_conditional_law(tmp_path):
    """1,200 data modules (seeds) of K = 2 strings with exactly 2 uses of ``S -> 'a' S``: every
    corpus realizes 2 and the pairs follow the enumerated conditional law; a perturbed grammar's
    law is rejected (negative control)."""
    path = _file(tmp_path, AMBIGUOUS)
    samples = []
    for seed in range(1200):
        dm = _module(path, num_strings=2, intervention="exact", event=RULE, count=2, seed=seed)
        assert dm.realized_count == 2
        samples.append(_strings(dm.corpus("train")))
    grammar = load_automaton(path).grammar
    assert chi_pvalue(samples, _pairs_law(grammar, 2)) > 1e-3
    wrong = load_automaton(_file(tmp_path, WRONG, "w.pcfg")).grammar
    assert chi_pvalue(samples, _pairs_law(wrong, 2)) < 1e-6


def test_one_string_has_several_counts_so_only_the_sampler_knows_them(tmp_path):
    """On the ambiguous grammar, ``a a`` comes with rule counts 0 and 1 in one corpus: the
    counts the data module reports are the derivations', not a function of the strings."""
    dm = _module(_file(tmp_path, AMBIGUOUS), num_strings=400, intervention="exact", event=RULE,
                 count=150, seed=1)
    corpus = dm.corpus("train")
    counts = dm.tokenized("train").counts
    assert torch.equal(counts, corpus.counts) and int(counts.sum()) == 150 == dm.realized_count
    seen: dict = {}
    for string, c in zip(_strings(corpus), counts.tolist()):
        seen.setdefault(string, set()).add(c)
    assert any(len(c) > 1 for c in seen.values())


def test_the_expected_count_is_k_times_the_reference_mean(tmp_path):
    """``expected_count`` = K x expected rewrites of the left side x the rule's probability; the
    enumerated count law's mean agrees (and the closed form on Dyck: 10/3 rewrites of S, 0.2)."""
    path = _file(tmp_path, AMBIGUOUS)
    dm = _module(path, num_strings=30, intervention="exact", event=RULE, count=10)
    law, missing = count_law(dm.automaton.grammar, rule_degrees(dm.automaton.grammar, "rule:0"),
                             300)
    assert missing < 1e-9
    assert dm.expected_count == pytest.approx(30 * sum(n * p for n, p in enumerate(law)),
                                              rel=1e-9)
    dyck = _module(_file(tmp_path, DYCK, "d.pcfg"), num_strings=30, event="rule:S -> S S")
    assert dyck.expected_count == pytest.approx(30 * 10 / 3 * 0.2, rel=1e-12)


@pytest.mark.parametrize("name,text", [("dyck", DYCK), ("expr", EXPR)])
def test_unconstrained_counts_are_the_derivations_and_the_strings_are_unchanged(name, text):
    """Counting draws nothing: the strings of a seed are the sampler's before it counted
    (pinned), with or without an event; on Dyck every rule's count is a function of the string
    (``S -> ( )``: the ``()`` pairs, the derivation tree's leaves; ``S -> S S``: its binary
    nodes, leaves - 1; ``S -> ( S )``: the other ``(``), recounted here."""
    grammar = parse_grammar(text, None)
    plain = generate_strings(grammar, 500, seed=7)
    digest = hashlib.sha256(plain.tokens.numpy().tobytes() + plain.offsets.numpy().tobytes())
    assert digest.hexdigest()[:16] == PINNED[name] and plain.counts is None
    for rule in grammar.rules:
        degrees = event_degrees(grammar, f"rule:{grammar.rule_text(rule)}")
        counted = generate_strings(grammar, 500, seed=7, degrees=degrees)
        assert torch.equal(counted.tokens, plain.tokens)
        assert torch.equal(counted.offsets, plain.offsets)
    if name != "dyck":
        return
    o, c = grammar.alphabet.index("("), grammar.alphabet.index(")")
    recount = {"S -> S S": [], "S -> '(' ')'": [], "S -> '(' S ')'": []}
    for w in _strings(plain):
        pairs = _leaves(w, o, c)
        recount["S -> S S"].append(pairs - 1)
        recount["S -> '(' ')'"].append(pairs)
        recount["S -> '(' S ')'"].append(w.count(o) - pairs)
    for rule, expected in recount.items():
        degrees = event_degrees(grammar, f"rule:{rule}")
        counted = generate_strings(grammar, 500, seed=7, degrees=degrees)
        assert counted.counts.tolist() == expected, rule


def test_a_correlational_run_records_the_rule_counts_of_the_same_strings(tmp_path):
    """``intervention="none"`` with a rule event: the same strings as without the event, and
    the counts of ``S -> S S`` (on Dyck the ``()`` pairs - 1)."""
    path = _file(tmp_path, DYCK)
    plain = _module(path, num_strings=300, seed=5)
    recorded = _module(path, num_strings=300, seed=5, event="rule:S -> S S")
    corpus = recorded.corpus("train")
    assert _strings(corpus) == _strings(plain.corpus("train"))
    binary = [_leaves(w, 0, 1) - 1 for w in _strings(corpus)]  # '(' is 0, ')' is 1
    assert recorded.tokenized("train").counts.tolist() == binary
    assert recorded.realized_count == sum(binary) > 0


def test_the_cache_keeps_the_counts_with_the_corpus(tmp_path, monkeypatch):
    """A cached rule-event corpus is read back with its counts (a hit, the same realized count);
    a cache that dropped them would be refused in one line, not recounted."""
    from cfl_lightning.data import cache

    path = _file(tmp_path, AMBIGUOUS)
    args = dict(num_strings=20, intervention="exact", event=RULE, count=9, seed=3,
                cache_dir=str(tmp_path / "cache"))
    first = _module(path, **args)
    assert first.realized_count == 9 and not first.cache_hits["train"]
    again = _module(path, **args)
    assert again.realized_count == 9 and again.cache_hits["train"]
    assert torch.equal(again.corpus("train").counts, first.corpus("train").counts)
    saved = cache.save_corpus

    def without_counts(where, corpus, key):
        saved(where, type(corpus)(corpus.tokens, corpus.offsets), key)

    monkeypatch.setattr(cache, "save_corpus", without_counts)
    stripped = dict(args, cache_dir=str(tmp_path / "stripped"))
    _module(path, **stripped).corpus("train")
    with pytest.raises(RuntimeError, match="carries no per-string counts"):
        _module(path, **stripped).corpus("train")


def test_at_least_and_at_least_once_and_val_same(tmp_path):
    path = _file(tmp_path, AMBIGUOUS)
    least = _module(path, num_strings=30, intervention="at_least", event=RULE, count=25, seed=2)
    assert least.realized_count >= 25
    once = _module(path, num_strings=30, intervention="at_least_once", event=RULE, count=7,
                   seed=2)
    assert once.realized_strings == 7
    same = _module(path, num_strings=30, val_strings=10, intervention="exact", event=RULE,
                   count=12, val_intervention="same", seed=2)
    assert int(same.tokenized("val").counts.sum()) == 4 and same.realized_count == 12


def test_the_cli_samples_under_a_rule_count(tmp_path):
    path = _file(tmp_path, AMBIGUOUS)
    for flags, check in (
        (("--intervention", "exact", "--count", "40"), lambda c: sum(c) == 40),
        (("--intervention", "at_least_once", "--count", "5"), lambda c: sum(x > 0 for x in c) == 5),
        ((), lambda c: len(c) == 30),
    ):
        out = tmp_path / "c.jsonl"
        done = run_cli("sample", "--automaton", path, "--num-strings", "30", "--seed", "0",
                       "--event", RULE, *flags, "--output", out)
        assert done.returncode == 0, done.stderr
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        counts = [line["count"] for line in lines]
        assert len(lines) == 30 and check(counts), flags
        assert f"{sum(counts)} occurrences of {RULE}" in done.stderr
        out.unlink()


@pytest.mark.parametrize("event,says", [
    ("rule:S -> 'c' S", "no such rule"),
    ("rule:S ->", "no such rule"),
    ("rule:", "bad event"),
    ("state:S", "events only"),
])
def test_bad_rule_text_is_one_line_and_exit_2(tmp_path, event, says):
    path = _file(tmp_path, AMBIGUOUS)
    out = tmp_path / "c.jsonl"
    done = run_cli("sample", "--automaton", path, "--num-strings", "5", "--seed", "0",
                   "--intervention", "exact", "--event", event, "--count", "2", "--output", out)
    assert done.returncode == 2 and not out.exists()
    assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr
    with pytest.raises((EventError, CflError), match=says):
        _module(path, num_strings=5, intervention="exact", event=event, count=2)


def test_other_automata_refuse_rule_events_in_one_line():
    from cfl_lightning import PFADataModule

    for kind, count in (("exact", 3), ("none", None)):
        with pytest.raises(EventError, match="^rule events need a pcfg automaton$"):
            PFADataModule(generator="parity", intervention=kind, event=RULE, count=count,
                          num_strings=10, cache_dir="none")


def test_a_corpus_file_cannot_carry_a_rule_count(tmp_path):
    path = _file(tmp_path, AMBIGUOUS)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"symbols": ["a", "a"]}\n{"symbols": ["b"]}\n')
    with pytest.raises(CflError, match="belongs to each string's derivation"):
        _module(path, corpus=str(corpus), event=RULE)


def test_a_grammar_run_under_a_rule_count_writes_results(tmp_path):
    """Fit and test under ``exact`` on a rule: results.json records ``realized_count`` N and the
    exact ``expected_count``; ``kl_target`` and ``kl_target_unweighted`` are null (a rule has no
    place in the per-symbol KL)."""
    import warnings

    import lightning as L

    from cfl_lightning.callbacks import DecomposedKLCallback, ResultsWriter
    from cfl_lightning.models import LSTMLanguageModel

    dm = _module(_file(tmp_path, DYCK), num_strings=60, val_strings=20, test_strings=30,
                 intervention="exact", event="rule:S -> S S", count=25, seed=2)
    model = LSTMLanguageModel(num_symbols=dm.num_symbols, hidden_size=8)
    writer = ResultsWriter(str(tmp_path / "out" / "results.json"))
    trainer = L.Trainer(max_epochs=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False,
                        accelerator="cpu", callbacks=[DecomposedKLCallback(), writer])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, datamodule=dm)
        trainer.test(model, datamodule=dm, verbose=False)
    results = json.loads(writer.written.read_text())
    assert results["realized_count"] == 25
    assert results["expected_count"] == pytest.approx(60 * 10 / 3 * 0.2, rel=1e-12)
    assert results["kl_target"] is None and results["kl_target_unweighted"] is None
    assert results["kl_total"] is not None
