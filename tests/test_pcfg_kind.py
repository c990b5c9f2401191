"""The ``pcfg`` automaton kind (issue 50): one registration, loading (a ``*.pcfg`` text file and
the JSON form), unconstrained sampling through the CLI and ``draw``, one-line refusals of what is
not available (events other than symbol:X, position classes), and the data module's exact
per-position targets against the independent reference (``tests/pcfg_reference.py``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from cfl_lightning.automata import Automaton, load_automaton
from cfl_lightning.automata.events import Event
from cfl_lightning.automata.pcfg import normal_form
from cfl_lightning.errors import CflError, EventError, PFSAError
from cfl_lightning.kinds import automaton_kind
from cfl_lightning.sampling import backend_for
from tests.helpers import run_cli
from tests.pcfg_reference import (
    BAD,
    DYCK,
    EXPR,
    UNITS,
    prefix_and_string_probability,
    reference_laws,
)


@pytest.fixture
def expr_file(tmp_path):
    path = tmp_path / "expr.pcfg"
    path.write_text(EXPR)
    return path


def test_one_registration_without_position_classes():
    kind = automaton_kind("pcfg")
    assert kind.position_classes is False and kind.backend is not None
    assert kind.events == {"symbol": "cfl_lightning.automata.pcfg.automaton:symbol_table",
                           "rule": "cfl_lightning.automata.pcfg.automaton:rule_table"}


def test_text_file_and_json_give_the_same_grammar(expr_file, tmp_path):
    a = load_automaton(expr_file)
    assert a.kind == "pcfg" and a.alphabet == ("+", "*", "(", ")", "x", "y")
    assert a.source == str(expr_file)
    json_path = tmp_path / "expr.json"
    a.to_json(json_path)
    assert json.loads(json_path.read_text())["kind"] == "pcfg"
    assert load_automaton(json_path) == a == load_automaton(a.to_dict())
    for name in ("kind", "alphabet", "source", "num_symbols", "eos", "device", "to",
                 "annotate", "expected_length", "to_dict", "validate", "event_table"):
        assert hasattr(a, name), name
    assert isinstance(a, Automaton)


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_files_get_one_line_with_the_line_number(case, tmp_path):
    text, message = BAD[case]
    path = tmp_path / "x.pcfg"
    path.write_text(text)
    with pytest.raises(PFSAError) as info:
        load_automaton(path)
    assert message in str(info.value) and "\n" not in str(info.value)
    result = run_cli("sample", "--automaton", path, "--num-strings", "5", "--seed", "0",
                     "--output", tmp_path / "o.jsonl")
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o.jsonl").exists()


def test_bad_json_entry_names_the_rule(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"kind": "pcfg", "rules": ["S -> 'a' [1.0]", "oops"]}))
    with pytest.raises(PFSAError, match=r"g.json: rules\[1\]: cannot read"):
        load_automaton(path)


def test_sample_cli_writes_strings_of_the_grammar(expr_file, tmp_path):
    out = tmp_path / "out.jsonl"
    result = run_cli("sample", "--automaton", expr_file, "--num-strings", "100", "--seed", "0",
                     "--output", out)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line)["symbols"] for line in out.read_text().splitlines()]
    assert len(lines) == 100
    g = load_automaton(expr_file).grammar
    short = [s for s in lines if len(s) <= 9][:20]  # the reference grows fast with the length
    assert len(short) >= 10
    for symbols in short:
        w = tuple(g.alphabet.index(s) for s in symbols)
        assert prefix_and_string_probability(g, w)[1] > 0
    again = tmp_path / "again.jsonl"
    run_cli("sample", "--automaton", expr_file, "--num-strings", "100", "--seed", "0",
            "--output", again)
    assert again.read_text() == out.read_text()  # seeded


@pytest.mark.parametrize("flags", [
    ("--event", "state:E"),
    ("--intervention", "exact", "--event", "transition:E:x", "--count", "5"),
    ("--intervention", "exact", "--event", "symbol:zz", "--count", "5"),
])
def test_events_other_than_symbols_are_refused_in_one_line(expr_file, tmp_path, flags):
    result = run_cli("sample", "--automaton", expr_file, "--num-strings", "10", "--seed", "0",
                     "--output", tmp_path / "o.jsonl", *flags)
    assert result.returncode == 2
    assert "rule:A -> 'a' B events only" in result.stderr or "unknown symbol 'zz'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_backend_and_class_tables_refuse_in_one_line(expr_file):
    a = load_automaton(expr_file)
    with pytest.raises(EventError, match="rule:A -> 'a' B events only"):
        backend_for(a).event_counts(Event.parse("state:E"))
    with pytest.raises(CflError, match="no position classes"):
        a.class_probs()


# --------------------------------------------------------------------------- the data module


def _module(tmp_path, text: str, **kwargs):
    from cfl_lightning import PFADataModule

    path = tmp_path / "g.pcfg"
    path.write_text(text)
    settings = dict(num_strings=40, val_strings=10, test_strings=10, seed=1, cache_dir="none",
                    device="cpu")
    return PFADataModule(automaton=str(path), **{**settings, **kwargs})


@pytest.mark.parametrize("text", [DYCK, EXPR, UNITS], ids=["ambiguous", "left-recursive", "units"])
def test_batches_carry_the_exact_law_at_every_position(tmp_path, text):
    """Ambiguous (Dyck with S S), left-recursive with a unit rule (expressions), a unit cycle:
    every position's ``target_probs`` equals the reference's law (float32 targets: 1e-5)."""
    dm = _module(tmp_path, text)
    g, corpus = dm.automaton.grammar, dm.corpus("train")
    dataset = dm.train_dataloader().dataset  # item i: batch i of dm.batches (shortest first)
    checked = set()
    for i, index in enumerate(dm.batches("train")):
        batch = dataset[i]
        for row, k in enumerate(index.tolist()):
            w = tuple(corpus.string(k))
            if len(w) > 9 or w in checked:  # the reference grows fast with the length
                continue
            expected = np.array(reference_laws(g, w))
            got = batch["target_probs"][row, : len(w) + 1].double().numpy()
            np.testing.assert_allclose(got, expected, atol=1e-5)
            assert not batch["target_probs"][row, len(w) + 1:].any()  # padding: zeros
            checked.add(w)
    assert len(checked) >= 4 and max(map(len, checked)) >= 5


def test_the_layout_is_not_vacuous(tmp_path):
    """Negative control: the laws of one string shifted by a position differ from the
    reference (so the comparison above can fail)."""
    dm = _module(tmp_path, EXPR)
    corpus, tok = dm.corpus("train"), dm.tokenized("train")
    k = max((i for i in range(len(corpus)) if len(corpus.string(i)) <= 9),
            key=lambda i: len(corpus.string(i)))
    w = tuple(corpus.string(k))
    start = int(tok.offsets[k])
    shifted = tok.target_probs[start + 1: start + len(w) + 2].double().numpy()
    assert not np.allclose(shifted[:-1], np.array(reference_laws(dm.automaton.grammar, w))[:-1],
                           atol=1e-5)


def test_position_laws_equal_next_symbol_laws_per_string(expr_file):
    """The flat, chunked, length-grouped layout against one call per string."""
    from cfl_lightning.sampling import sample_corpus

    a = load_automaton(expr_file)
    corpus = sample_corpus(a, 30, seed=5)
    laws = a.position_laws(corpus.tokens, corpus.offsets)
    nf = normal_form(a.grammar)
    from cfl_lightning.automata.pcfg import next_symbol_laws

    for k in range(len(corpus)):
        w = torch.tensor([corpus.string(k)], dtype=torch.long).reshape(1, -1)
        one = next_symbol_laws(nf, w, torch.tensor([w.shape[1]]))[0]
        start = int(corpus.offsets[k]) + k
        torch.testing.assert_close(laws[start: start + w.shape[1] + 1], one)


def test_events_other_than_symbols_are_refused_by_the_data_module(tmp_path):
    with pytest.raises(CflError, match="rule:A -> 'a' B events only"):
        _module(tmp_path, EXPR, intervention="exact", event="state:E", count=5)


def test_the_data_module_trains_on_an_exact_count_of_a_symbol(tmp_path):
    dm = _module(tmp_path, EXPR, intervention="exact", event="symbol:x", count=5)
    dm.setup("fit")
    corpus = dm.corpus("train")
    x = dm.automaton.alphabet.index("x")
    assert int(corpus.counts.sum()) == 5 == int((corpus.tokens == x).sum())


def test_a_tiny_fit_and_test_run_end_to_end(tmp_path):
    """The KL loss trains on exact targets; the callback says in one line that there is no
    per-state decomposition and logs the total and per-symbol KL, which add up."""
    import lightning as L

    from cfl_lightning.callbacks import DecomposedKLCallback, ResultsWriter
    from cfl_lightning.models import LSTMLanguageModel

    dm = _module(tmp_path, EXPR, num_strings=60, val_strings=20, test_strings=30)
    model = LSTMLanguageModel(num_symbols=dm.num_symbols, hidden_size=8)
    writer = ResultsWriter(str(tmp_path / "out" / "results.json"))
    trainer = L.Trainer(max_epochs=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False,
                        accelerator="cpu", callbacks=[DecomposedKLCallback(), writer])
    with pytest.warns(UserWarning, match="no position classes") as caught:
        trainer.fit(model, datamodule=dm)
    lines = [str(w.message) for w in caught if "position classes" in str(w.message)]
    assert lines and all("\n" not in line for line in lines)
    assert np.isfinite(trainer.callback_metrics["train/loss"].item())
    assert np.isfinite(trainer.callback_metrics["val/kl_per_string"].item())
    (metrics,) = trainer.test(model, datamodule=dm, verbose=False)
    symbols = [metrics[f"kl/symbol/{s}"] for s in (*dm.automaton.alphabet, "EOS")]
    assert metrics["kl_total"] == pytest.approx(sum(symbols), rel=1e-6)
    assert metrics["kl_total"] == pytest.approx(metrics["test/kl_per_string"], rel=1e-4)
    assert not any(k.startswith("kl/state/") for k in metrics)
    callback = next(c for c in trainer.callbacks if isinstance(c, DecomposedKLCallback))
    assert set(callback.test_result) == {"total", "symbol", "stakes"}
    results = json.loads(writer.written.read_text())
    assert results["automaton"]["kind"] == "pcfg"
    assert results["kl_total"] == pytest.approx(metrics["kl_total"], rel=1e-6)
    assert set(results["kl"]) == {"symbol"}
    assert set(results["occurrences"]["count"]) == {f"symbol:{a}" for a in dm.automaton.alphabet}


def test_fit_from_the_command_line_on_a_grammar_file(expr_file, tmp_path, capsys):
    """``fit --data.automaton g.pcfg``: trains, tests, writes results.json with the KL in total
    and per symbol; the missing decomposition is one line on stderr."""
    import re

    from cfl_lightning.cli.train import main

    args = [f"--data.automaton={expr_file}", "--data.num_strings=30", "--data.val_strings=10",
            "--data.test_strings=10", "--data.cache_dir=none", "--data.device=cpu",
            "--trainer.max_epochs=1", f"--trainer.default_root_dir={tmp_path}",
            "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false",
            "--model.param_budget=2000"]
    with pytest.warns(UserWarning, match="kind 'pcfg' have no position classes"):
        assert main(["fit", *args]) == 0
    out = capsys.readouterr().out
    results = json.loads(open(re.search(r"^results: (.+)$", out, re.M).group(1)).read())
    assert results["automaton"]["kind"] == "pcfg" and results["kl_total"] > 0
    assert set(results["kl"]["symbol"]) == {"+", "*", "(", ")", "x", "y", "EOS"}


def test_a_string_outside_the_support_is_named_in_one_line(expr_file):
    a = load_automaton(expr_file)
    ids = {c: i for i, c in enumerate(a.alphabet)}
    strings = ["x+y", "x*y", "x+)", "y"]  # string 2 cannot be derived
    tokens = torch.tensor([ids[c] for w in strings for c in w])
    offsets = torch.tensor([0, 3, 6, 9, 10])
    with pytest.raises(CflError, match=r"^string 2 \(length 3\) is outside") as info:
        a.position_laws(tokens, offsets)
    assert "\n" not in str(info.value)
