"""Interventions on a grammar through the product's one path: ``sample_corpus``/``draw`` run the
registered intervention samplers on the pcfg backend's count source (``PCFGEventCounts``).

Checked against the independent enumeration of ``tests/pcfg_count_reference.py`` (chi-square of
K = 2 corpora under an exact total, with a negative control), hard constraints recounted from the
tokens for every intervention kind, determinism, the CLI, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cfl_lightning.automata import load_automaton
from cfl_lightning.automata.protocol import expected_event_count
from cfl_lightning.automata.events import Event
from cfl_lightning.errors import CflError
from cfl_lightning.sampling import sample_corpus
from tests.helpers import run_cli
from tests.pcfg_count_reference import (
    chi_pvalue, count_law, event_count, rule_degrees, string_law,
)

AMBIGUOUS = "S -> S S [0.15] | '(' S ')' [0.15] | '(' ')' [0.3] | 'x' [0.4]\n"
WRONG = "S -> S S [0.2] | '(' S ')' [0.1] | '(' ')' [0.3] | 'x' [0.4]\n"


def _load(tmp_path, text, name="g.pcfg"):
    path = tmp_path / name
    path.write_text(text)
    return load_automaton(str(path))


def _pairs_law(grammar, total, symbol="("):
    """The exact law of 2-tuples of strings given their total count of ``symbol``."""
    x = grammar.alphabet.index(symbol)
    law, dropped = string_law(grammar, 9, symbol=x, max_count=total)
    assert dropped < 1e-12
    counts, _ = count_law(grammar, rule_degrees(grammar, f"symbol:{symbol}"), total)
    denom = sum(counts[i] * counts[total - i] for i in range(total + 1))
    return {(a, b): pa * pb / denom for a, pa in law.items() for b, pb in law.items()
            if event_count(a, x) + event_count(b, x) == total}


def _strings(corpus):
    return tuple(tuple(corpus.tokens[corpus.offsets[k]: corpus.offsets[k + 1]].tolist())
                 for k in range(len(corpus)))


@pytest.mark.slow  # 1,500-5,000 corpora through sample_corpus (~6-12 s each count); the quick
# lane keeps the pure sampler's law checks (test_pcfg_interventions) and the hard constraints below
@pytest.mark.parametrize("count", [0, 2, 3, 5])
def test_exact_corpora_through_draw_follow_the_conditional_law(tmp_path, count):
    """K = 2 strings of the ambiguous grammar under an exact total of ``(``: 0, about the
    natural total (2 x 0.818), above it, and about 3x natural (5)."""
    g = _load(tmp_path, AMBIGUOUS)
    assert 2 * expected_event_count(g, Event.parse("symbol:(")) == pytest.approx(18 / 11)
    draws = 5000 if count == 0 else 1500  # at 0 the wrong grammar's law is closer: more draws
    samples = [_strings(sample_corpus(g, 2, seed=s, intervention="exact", event="symbol:(",
                                      count=count)) for s in range(draws)]
    assert chi_pvalue(samples, _pairs_law(g.grammar, count)) > 1e-3
    wrong = _load(tmp_path, WRONG, "w.pcfg")
    assert chi_pvalue(samples, _pairs_law(wrong.grammar, count)) < 1e-6  # negative control


@pytest.mark.parametrize("kind,count,check", [
    ("exact", 0, lambda c: int(c.sum()) == 0),
    ("exact", 200, lambda c: int(c.sum()) == 200),
    ("at_least", 150, lambda c: int(c.sum()) >= 150),
    ("at_least_once", 7, lambda c: int((c > 0).sum()) == 7),
])
def test_hard_constraints_recounted_from_the_tokens(tmp_path, kind, count, check):
    g = _load(tmp_path, AMBIGUOUS)
    corpus = sample_corpus(g, 20, seed=3, intervention=kind, event="symbol:(", count=count)
    x = g.alphabet.index("(")
    recount = torch.tensor([s.count(x) for s in _strings(corpus)])
    assert torch.equal(recount, corpus.counts.cpu()) and check(recount)
    again = sample_corpus(g, 20, seed=3, intervention=kind, event="symbol:(", count=count)
    assert torch.equal(again.tokens, corpus.tokens)  # same seed, same corpus


def test_the_expected_count_is_the_count_laws_mean(tmp_path):
    g = _load(tmp_path, AMBIGUOUS)
    counts, missing = count_law(g.grammar, rule_degrees(g.grammar, "symbol:("), 400)
    mean = sum(n * p for n, p in enumerate(counts))
    assert missing < 1e-9
    assert expected_event_count(g, Event.parse("symbol:(")) == pytest.approx(mean, rel=1e-6)


def test_the_cli_samples_exact_counts_and_refuses_other_events(tmp_path):
    path = tmp_path / "g.pcfg"
    path.write_text(AMBIGUOUS)
    out = tmp_path / "c.jsonl"
    done = run_cli("sample", "--automaton", path, "--num-strings", "30", "--seed", "0",
                   "--intervention", "exact", "--event", "symbol:(", "--count", "90",
                   "--output", out)
    assert done.returncode == 0, done.stderr
    assert "90 occurrences of symbol:(" in done.stderr
    bad = tmp_path / "d.jsonl"
    refused = run_cli("sample", "--automaton", path, "--num-strings", "30", "--seed", "0",
                      "--intervention", "exact", "--event", "state:S", "--count", "3",
                      "--output", bad)
    assert refused.returncode == 2 and not bad.exists()
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "rule:A -> 'a' B events only" in refused.stderr


def test_impossible_requests_are_one_line(tmp_path):
    g = _load(tmp_path, "S -> '(' ')' [0.6] | '(' S ')' [0.4]\n")  # every string holds a (
    with pytest.raises(CflError, match="every string contains the event"):
        sample_corpus(g, 5, seed=0, intervention="at_least_once", event="symbol:(", count=2)
    with pytest.raises(CflError, match="unknown symbol"):
        sample_corpus(g, 5, seed=0, intervention="exact", event="symbol:z", count=2)
