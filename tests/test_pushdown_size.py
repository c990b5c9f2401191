"""Pushdown automata at the paper's automaton size (50 states): no false refusal, sizes refused.

``random_pushdown --states 50 --symbols 10 --stack-symbols 3 --seed 0`` has ``G Q^2 + Q = 7,550``
excursion variables. The bound on the occurrences of one string used to iterate the (max, +)
system on all of them; the values overflowed to NaN past ~512 variables and the event
``symbol:a`` (97 positive transitions) was refused as impossible. The reference here is
independent of the bound: strings drawn by the unconstrained sampler (an explicit stack).
"""

from __future__ import annotations

import pytest
import torch

from cfl_lightning.automata.pushdown_events import parse_event
from cfl_lightning.automata.pushdown_generators import random_pda
from cfl_lightning.errors import SizeError
from cfl_lightning.sampling.pushdown_backend import PushdownEventCounts
from cfl_lightning.sampling import sample_corpus
from cfl_lightning.sampling.pushdown_unconstrained import sample_unconstrained
from tests.helpers import run_cli


@pytest.fixture(scope="module")
def paper_size():
    return random_pda(50, 10, 3, seed=0)


def test_event_at_paper_size_is_not_refused(paper_size):
    pda = paper_size
    event = parse_event("symbol:a")
    table = pda.event_table(event)
    corpus = sample_unconstrained(pda, 300, torch.Generator().manual_seed(0), event_table=table)
    seen = int(corpus.counts.max())
    assert seen >= 2  # strings of this automaton do hold several a's
    bound = PushdownEventCounts(pda, event).max_per_string()
    assert bound is None or bound >= seen  # None: unbounded (the old code said 0)


def test_exact_corpus_at_paper_size(paper_size):
    corpus = sample_corpus(
        paper_size, 20, seed=0, intervention="exact", event="symbol:a", count=30
    )
    a = paper_size.alphabet.index("a")
    recount = [string.count(a) for string in corpus]  # from the tokens, not the sampler's record
    assert len(corpus) == 20 and sum(recount) == 30
    assert recount == corpus.counts.tolist()


def test_law_beyond_memory_is_refused(paper_size, monkeypatch):
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "128M")  # the load fits (~77 MB)
    counts = PushdownEventCounts(paper_size, parse_event("symbol:a"))
    with pytest.raises(SizeError, match="count law") as info:
        counts.law(5000)
    assert "\n" not in str(info.value)


def test_cli_at_paper_size_refuses_a_law_beyond_memory(tmp_path, monkeypatch):
    path, out = tmp_path / "pda.json", tmp_path / "corpus.jsonl"
    made = run_cli("automaton", "random_pushdown", "--states", "50", "--symbols", "10",
                   "--stack-symbols", "3", "--seed", "0", "--output", path)  # fmt: skip
    assert made.returncode == 0 and path.exists()
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "128M")  # the load fits (~77 MB)
    refused = run_cli("sample", "--automaton", path, "--num-strings", "500", "--seed", "0",
                      "--intervention", "exact", "--event", "symbol:a", "--count", "5000",
                      "--output", out)  # fmt: skip
    assert refused.returncode == 2 and not out.exists()
    lines = refused.stderr.strip().splitlines()
    # one line: the request's estimate (its count series included) or the count law's own check
    assert len(lines) == 1 and "memory available" in lines[0]
    assert "this corpus needs" in lines[0] or "count law" in lines[0]
