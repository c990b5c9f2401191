"""A grammar run's target in ``results.json`` (issue 50 item 5): ``kl_target`` (the per-symbol
KL of the intervened symbol), ``kl_target_unweighted`` (divided by the symbol's exact expected
occurrences per string), ``kl_unweighted.symbol``, ``test_visits.symbol`` and
``target_test_visits`` (positions where the symbol is at stake), so that ``analyze`` reads grammar
runs as it reads the other kinds'. Checked against closed forms, a Monte-Carlo estimate and the
batches' own laws.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from cfl_lightning.automata import load_automaton
from cfl_lightning.metrics import SymbolKL, symbol_unweighted
from cfl_lightning.sampling import sample_corpus
from tests.pcfg_reference import DYCK, EXPR


def _grammar(tmp_path, text):
    path = tmp_path / "g.pcfg"
    path.write_text(text)
    return load_automaton(path)


def test_expected_symbol_counts_closed_form(tmp_path):
    """Dyck ``S -> ( ) [0.5] | ( S ) [0.3] | S S [0.2]``: expected rewrites of S solve
    ``E = 1 + 0.7 E`` (``E = 10/3``), each writing one ``(`` with probability 0.8."""
    g = _grammar(tmp_path, DYCK)
    np.testing.assert_allclose(g.expected_symbol_counts(), [8 / 3, 8 / 3, 1.0], rtol=1e-12)


def test_expected_symbol_counts_match_samples(tmp_path):
    """The expression grammar (left-recursive, ambiguous): each symbol's mean count over 20,000
    sampled strings is within 4 standard errors of the exact expectation."""
    g = _grammar(tmp_path, EXPR)
    corpus = sample_corpus(g, 20_000, seed=3)
    counts = np.zeros((20_000, g.num_symbols))
    for i in range(20_000):
        counts[i] = np.bincount(corpus.string(i), minlength=g.num_symbols)
    se = counts.std(0) / np.sqrt(len(counts))
    exact = g.expected_symbol_counts()
    assert exact[-1] == 1.0
    assert np.all(np.abs(counts.mean(0) - exact[:-1]) < 4 * se + 1e-12)


def test_symbol_kl_counts_the_positions_at_stake():
    """``stakes``: real positions whose law gives the symbol ``p > 0``, padding excluded."""
    metric = SymbolKL(2)
    p = torch.tensor([[[0.5, 0.5, 0.0], [0.0, 0.2, 0.8], [1.0, 0.0, 0.0]],
                      [[0.0, 0.0, 1.0], [0.3, 0.3, 0.4], [0.0, 1.0, 0.0]]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    metric.update(torch.full((2, 3, 3), 1 / 3).log(), {"target_probs": p, "mask": mask})
    assert metric.compute()["stakes"].tolist() == [2, 2, 2]


def test_symbol_unweighted_divides_by_the_expected_count():
    got = symbol_unweighted(torch.tensor([0.4, 0.2, 0.1], dtype=torch.float64),
                            torch.tensor([2.0, 0.0, 1.0], dtype=torch.float64))
    assert got[0] == pytest.approx(0.2) and torch.isnan(got[1]) and got[2] == pytest.approx(0.1)


def test_a_grammar_run_records_its_target(tmp_path):
    """Fit and test under ``exact`` on ``symbol:x``: results.json's target entries equal the
    per-symbol KL of ``x``, its value over x's exact expected count, and the number of test
    positions where the batches' laws give ``x`` positive probability."""
    import lightning as L

    from cfl_lightning import PFADataModule
    from cfl_lightning.callbacks import DecomposedKLCallback, ResultsWriter
    from cfl_lightning.models import LSTMLanguageModel

    path = tmp_path / "g.pcfg"
    path.write_text(EXPR)
    dm = PFADataModule(automaton=str(path), num_strings=60, val_strings=20, test_strings=30,
                       intervention="exact", event="symbol:x", count=120, seed=2,
                       cache_dir="none", device="cpu")
    model = LSTMLanguageModel(num_symbols=dm.num_symbols, hidden_size=8)
    writer = ResultsWriter(str(tmp_path / "out" / "results.json"))
    trainer = L.Trainer(max_epochs=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False,
                        accelerator="cpu", callbacks=[DecomposedKLCallback(), writer])
    with pytest.warns(UserWarning, match="no position classes"):
        trainer.fit(model, datamodule=dm)
    (metrics,) = trainer.test(model, datamodule=dm, verbose=False)
    results = json.loads(writer.written.read_text())
    x = dm.automaton.alphabet.index("x")
    stake = sum(int(((b["target_probs"][..., x] > 0) & b["mask"].bool()).sum())
                for b in dm.test_dataloader())
    exact = dm.automaton.expected_symbol_counts()
    assert results["target_test_visits"] == stake > 0
    assert results["test_visits"]["symbol"]["x"] == stake
    assert results["kl_target"] == pytest.approx(results["kl"]["symbol"]["x"], rel=1e-12)
    assert results["kl_target"] == pytest.approx(metrics["kl/symbol/x"], rel=1e-6)
    assert results["kl_target_unweighted"] == pytest.approx(results["kl_target"] / exact[x],
                                                            rel=1e-9)
    assert metrics["kl_target_unweighted"] == pytest.approx(results["kl_target_unweighted"],
                                                            rel=1e-6)
    for name, value in results["kl_unweighted"]["symbol"].items():
        i = (*dm.automaton.alphabet, "EOS").index(name)
        assert value == pytest.approx(results["kl"]["symbol"][name] / exact[i], rel=1e-9)


def test_occurrences_of_every_symbol(tmp_path):
    """results.json's ``occurrences`` for a grammar: every symbol's total count and strings with
    one, counted here from the corpus's strings; ``expected_occurrences`` is K times the exact
    expectation (so ``stratify`` can bin grammar runs)."""
    from cfl_lightning import PFADataModule
    from cfl_lightning.data.occurrences import expected_occurrences

    path = tmp_path / "g.pcfg"
    path.write_text(EXPR)
    dm = PFADataModule(automaton=str(path), num_strings=80, val_strings=5, test_strings=5,
                       seed=4, cache_dir="none", device="cpu")
    dm.setup("fit")
    corpus, g = dm.corpus("train"), dm.automaton
    strings = [list(corpus.string(i)) for i in range(len(corpus))]
    got = dm.occurrences("train")
    for i, a in enumerate(g.alphabet):
        assert got["count"][f"symbol:{a}"] == sum(w.count(i) for w in strings)
        assert got["strings"][f"symbol:{a}"] == sum(i in w for w in strings)
    assert sum(got["count"].values()) == sum(map(len, strings))
    exact = g.expected_symbol_counts()
    for i, (spec, value) in enumerate(expected_occurrences(g, 80).items()):
        assert spec == f"symbol:{g.alphabet[i]}" and value == pytest.approx(80 * exact[i])


def test_stratify_bins_grammar_settings_by_their_realized_count(tmp_path):
    """``stratify --event symbol:x`` on a correlational grid over a grammar's corpus seeds: each
    chosen setting's realized count of ``x`` (recounted here from its corpus) lies in its bin."""
    import yaml

    from cfl_lightning import PFADataModule
    from tests.helpers import run_cli

    grammar = tmp_path / "g.pcfg"
    grammar.write_text(EXPR)
    config = tmp_path / "base.yaml"
    config.write_text(f"data:\n  automaton: {grammar}\n  num_strings: 40\n  cache_dir: none\n")
    sweep = tmp_path / "corr.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "g", "method": "grid", "metric": {"name": "kl_total", "goal": "minimize"},
        "parameters": {"data.seed": {"values": list(range(6))}},
        "command": ["${env}", "${interpreter}", "-m", "cfl_lightning", "fit", "--config",
                    str(config), "${args}"],
    }))
    out = tmp_path / "strat.yaml"
    result = run_cli("stratify", sweep, "--event", "symbol:x", "--edges", "0,60,1000",
                     "--per-bin", "2", "--output", out)
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(open(tmp_path / "strat.csv")))
    assert len(rows) == 6
    x = 4  # 'x' in the expression grammar's alphabet (+ * ( ) x y)
    for row in rows:
        dm = PFADataModule(automaton=str(grammar), num_strings=40, seed=int(row["data.seed"]),
                           cache_dir="none", val_strings=1, test_strings=1)
        dm.setup("fit")
        corpus = dm.corpus("train")
        count = sum(list(corpus.string(i)).count(x) for i in range(len(corpus)))
        assert int(row["realized_count"]) == count
        assert int(row["bin"]) == (0 if count < 60 else 60)
    chosen = yaml.safe_load(out.read_text())["parameters"]["data.seed"]["values"]
    assert sorted(chosen) == sorted(int(r["data.seed"]) for r in rows if r["chosen"] == "true")


def test_a_corpus_file_of_a_grammar_is_read_and_checked(tmp_path):
    """``corpus=`` with a grammar: the strings ``sample`` wrote are the training corpus; a file
    with a string of probability 0 (its prefix impossible, or its end) is refused in one line
    naming the line, checked against the reference's string probability."""
    from cfl_lightning import PFADataModule
    from cfl_lightning.data.corpus_file import CorpusFileError
    from tests.helpers import run_cli
    from tests.pcfg_reference import prefix_and_string_probability

    grammar = tmp_path / "g.pcfg"
    grammar.write_text(EXPR)
    out = tmp_path / "c.jsonl"
    assert run_cli("sample", "--automaton", grammar, "--num-strings", 20, "--seed", 1,
                   "--output", out).returncode == 0
    dm = PFADataModule(automaton=str(grammar), corpus=str(out), num_strings=20,
                       val_strings=2, test_strings=2, cache_dir="none")
    dm.setup("fit")
    written = [json.loads(line)["symbols"] for line in out.read_text().splitlines()]
    g = dm.automaton
    corpus = dm.corpus("train")
    assert [[g.alphabet[t] for t in corpus.string(i)] for i in range(20)] == written
    for bad in (["x", "+", ")"], ["x", "+"], ["(", "x"]):
        ids = tuple(g.alphabet.index(c) for c in bad)
        assert prefix_and_string_probability(g.grammar, ids)[1] == 0.0  # the reference agrees
        path = tmp_path / "bad.jsonl"
        lines = [{"symbols": ["x"]}, {"symbols": ["y"]}, {"symbols": bad}]
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
        with pytest.raises(CorpusFileError, match=r"bad\.jsonl: line 3: the string is outside"
                           ) as err:
            PFADataModule(automaton=str(grammar), corpus=str(path), num_strings=3,
                          val_strings=2, test_strings=2, cache_dir="none")
        assert "\n" not in str(err.value)
