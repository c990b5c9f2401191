"""``data.tokens`` (PFADataModule(tokens=T)), ``sample --tokens`` and ``train_tokens`` in
results.json and the analysis records."""

from __future__ import annotations

import json

import pytest
from torch import nn

from cfl_lightning.analysis.records import record_from_results, record_to_results
from cfl_lightning.automata import expected_event_count, parity_starfree_pfsa
from cfl_lightning.callbacks import FinishedRun, build_results
from cfl_lightning.cli.sample import main as sample_main
from cfl_lightning.data import PFADataModule
from cfl_lightning.errors import CflError
from cfl_lightning.results import RESULT_KEYS, type_problems
from cfl_lightning.sampling.token_matched import token_window

SMALL = dict(val_strings=20, test_strings=20, cache_dir="none", device="cpu")
MATCHED = dict(generator="parity", eta=0.3, intervention="exact", event="state:odd", count=200)


def test_the_data_module_samples_a_token_matched_training_corpus():
    dm = PFADataModule(**MATCHED, tokens=3000, **SMALL)
    corpus = dm.corpus("train")
    lo, hi = token_window(3000)
    assert lo <= dm.train_tokens <= hi and dm.train_tokens == int(corpus.lengths.sum())
    assert dm.realized_count == 200
    assert dm.train_strings == len(corpus) != dm.settings.num_strings  # K chosen, not 500
    summary = dm.summary()
    assert summary["train_strings"] == len(corpus) and summary["train_tokens"] == dm.train_tokens
    assert summary["tokens"] == 3000
    per_string = expected_event_count(dm.automaton, dm.event)
    assert dm.expected_count == pytest.approx(len(corpus) * per_string)
    assert dm.expected_occurrences()["state:odd"] == pytest.approx(len(corpus) * per_string)


def test_results_record_k_and_train_tokens_for_every_run():
    for extra in ({"tokens": 3000}, {"num_strings": 300}):
        dm = PFADataModule(**MATCHED, **extra, **SMALL)
        results = build_results(FinishedRun(model=nn.Linear(2, 3), datamodule=dm, log_dir="x"))
        assert list(results) == list(RESULT_KEYS)
        assert results["num_strings"] == len(dm.corpus("train"))
        assert results["train_tokens"] == int(dm.corpus("train").lengths.sum()) > 0
        assert not [p for p in type_problems(results) if "train_tokens" in p]
        # the analysis reads it, and writes it back
        record = record_from_results({**results, "kl_total": 1.0}, "r")
        assert record.train_tokens == results["train_tokens"]
        assert record_to_results(record)["train_tokens"] == results["train_tokens"]
    assert record_from_results({**results, "train_tokens": None}, "r").train_tokens is None


def test_the_corpus_cache_keys_on_tokens(tmp_path):
    cached = {**SMALL, "cache_dir": str(tmp_path)}
    first = PFADataModule(**MATCHED, tokens=3000, **cached).corpus("train")
    again = PFADataModule(**MATCHED, tokens=3000, **cached)
    assert again.corpus("train").tokens.equal(first.tokens) and again.cache_hits["train"]
    other = PFADataModule(**MATCHED, tokens=4000, **cached)
    assert not other.corpus("train").tokens.equal(first.tokens)
    assert not other.cache_hits["train"]


@pytest.mark.parametrize("extra,message", [
    ({"intervention": "none", "count": None}, "needs intervention exact or at_least, not 'none'"),
    ({"val_intervention": "same"}, "val_intervention 'same'"),
    ({"tokens": 0}, "tokens must be an integer >= 1"),
])
def test_the_data_module_refuses_what_tokens_cannot_do(extra, message):
    with pytest.raises(CflError, match=message):
        PFADataModule(**{**MATCHED, "tokens": 3000, **extra}, **SMALL)


# --------------------------------------------------------------------------- sample --tokens


@pytest.fixture
def automaton(tmp_path):
    path = tmp_path / "a.json"
    parity_starfree_pfsa(0.3).to_json(path)
    return str(path)


def test_sample_tokens_chooses_k_and_reports_it(automaton, tmp_path, capsys):
    out = tmp_path / "c.jsonl"
    argv = ["--automaton", automaton, "--seed", "0", "--output", str(out),
            "--intervention", "exact", "--event", "state:odd", "--count", "300",
            "--tokens", "5000"]
    assert sample_main(argv) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    lines = out.read_text().splitlines()
    assert report["num_strings"] == len(lines) and report["count"] == 300
    assert sum(json.loads(line)["count"] for line in lines) == 300
    total = sum(len(json.loads(line)["symbols"]) for line in lines)
    assert report["tokens"] == total and 4950 <= total <= 5050
    assert f"wrote {len(lines)} strings" in captured.err


@pytest.mark.parametrize("extra,message", [
    (["--tokens", "5000", "--num-strings", "10"], "give one of --num-strings K and --tokens T"),
    ([], "give one of --num-strings K and --tokens T"),
    (["--tokens", "5000", "--method", "rejection"], "--tokens samples with --method binning"),
    (["--tokens", "20"], "too few for exact 300"),
])
def test_sample_tokens_refusals_are_one_line(automaton, tmp_path, capsys, extra, message):
    argv = ["--automaton", automaton, "--seed", "0", "--output", str(tmp_path / "c.jsonl"),
            "--intervention", "exact", "--event", "state:odd", "--count", "300", *extra]
    with pytest.raises(SystemExit) as info:
        code = sample_main(argv)
        raise SystemExit(code)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "c.jsonl").exists()
