"""``data.corpus``: training on a JSON Lines corpus that ``sample`` wrote (issue 51, item 7).

The file's strings are the training corpus (nothing resampled), checked against the automaton:
a string outside the support is refused in one line naming the file, the line and the first
symbol (or the end) of probability 0, for a PFSA and a pushdown automaton; ``num_strings`` and
the intervention settings describe the file and are checked, never applied silently.
"""

from __future__ import annotations

import os

os.environ["WANDB_MODE"] = "disabled"  # before anything imports wandb

import json
from pathlib import Path

import pytest

from cfl_lightning.automata import PFSA, parity_starfree_pfsa
from cfl_lightning.automata.pushdown_generators import anbn_pda, dyck_pda
from cfl_lightning.data import PFADataModule
from cfl_lightning.data.corpus_file import CorpusFileError, read_corpus, support_problem
from cfl_lightning.sampling import Corpus, sample_corpus

SMALL = dict(val_strings=5, test_strings=5, cache_dir="none", device="cpu")


def _write(path: Path, lines: list) -> str:
    path.write_text("".join(json.dumps(x) + "\n" if not isinstance(x, str) else x for x in lines))
    return str(path)


@pytest.fixture
def parity(tmp_path):
    pfsa = parity_starfree_pfsa(0.3)
    path = tmp_path / "A.json"
    pfsa.to_json(path)
    return pfsa, str(path)


def test_a_sampled_corpus_is_trained_on_as_written(tmp_path, parity):
    """The training strings are the file's, in its order; num_strings and the realized count
    come from it, and the intervention it was sampled under is checked and recorded."""
    pfsa, automaton = parity
    sampled = sample_corpus(pfsa, 40, seed=5, intervention="exact", event="state:odd", count=90)
    path = tmp_path / "c.jsonl"
    sampled.write_jsonl(path, pfsa.alphabet)
    dm = PFADataModule(automaton=automaton, corpus=str(path), event="state:odd",
                       intervention="exact", count=90, **SMALL)
    assert dm.corpus("train").to_lists() == sampled.to_lists()
    assert dm.settings.num_strings == dm.hparams["num_strings"] == 40
    assert dm.realized_count == 90 == sampled.total_count
    assert dm.intervention.count == 90 and dm.cache_hits["train"] is False
    # the other splits are still sampled from the automaton
    assert len(dm.corpus("val")) == 5 and len(dm.corpus("test")) == 5
    # without an intervention the realized count is recorded as it is
    plain = PFADataModule(automaton=automaton, corpus=str(path), event="state:odd", **SMALL)
    assert plain.realized_count == 90 and plain.summary()["num_strings"] == 40


def test_settings_that_contradict_the_file_are_refused(tmp_path, parity):
    pfsa, automaton = parity
    sampled = sample_corpus(pfsa, 12, seed=1, event="state:odd")
    path = tmp_path / "c.jsonl"
    sampled.write_jsonl(path, pfsa.alphabet)
    with pytest.raises(CorpusFileError, match=r"data.num_strings 500 differs from the 12 strings"):
        PFADataModule(automaton=automaton, corpus=str(path), num_strings=500, **SMALL)
    assert PFADataModule(automaton=automaton, corpus=str(path), num_strings=12, **SMALL)
    total = sampled.total_count
    with pytest.raises(CorpusFileError, match=rf"does not meet intervention exact {total + 1} "
                       rf"\(state:odd\): it has {total} occurrences"):
        PFADataModule(automaton=automaton, corpus=str(path), intervention="exact",
                      event="state:odd", count=total + 1, **SMALL)
    containing = int((sampled.counts > 0).sum())
    with pytest.raises(CorpusFileError, match=rf"it has {containing} strings containing it"):
        PFADataModule(automaton=automaton, corpus=str(path), intervention="at_least_once",
                      event="state:odd", count=containing + 1, **SMALL)


# parity_starfree_pfsa: init -a-> rep (a loop, final), init -b-> odd <-b-> even (a loops),
# final at odd and rep
PFSA_BAD = [
    (["b", "a"], None),  # fine: ends in odd
    (["a", "b"], "symbol #1 ('b')"),  # rep has no b
    (["b", "b"], "its end (after 2 symbols)"),  # even is not final
]


@pytest.mark.parametrize("symbols, where", PFSA_BAD)
def test_a_pfsa_string_outside_the_support_names_file_line_and_symbol(tmp_path, parity,
                                                                      symbols, where):
    pfsa, _ = parity
    path = _write(tmp_path / "c.jsonl", [{"symbols": ["b"]}, "\n", {"symbols": symbols}])
    if where is None:
        assert read_corpus(path, pfsa).to_lists() == [[1], [1, 0]]
        return
    with pytest.raises(CorpusFileError) as info:
        read_corpus(path, pfsa)
    assert str(info.value) == (f"{path}: line 3: the string leaves the automaton's support at "
                               f"{where}: it has probability 0 under data.automaton")


def test_a_listed_transition_of_weight_zero_is_outside_the_support(tmp_path):
    """annotate walks it (the transition is listed): the probability check refuses it."""
    pfsa = PFSA.from_dict({
        "alphabet": ["a", "b"], "states": ["s"], "initial": "s", "final": {"s": 0.5},
        "transitions": [{"source": "s", "symbol": "a", "target": "s", "weight": 0.5},
                        {"source": "s", "symbol": "b", "target": "s", "weight": 0.0}],
    })
    path = _write(tmp_path / "c.jsonl", [{"symbols": ["a", "a"]}, {"symbols": ["a", "b", "a"]}])
    with pytest.raises(CorpusFileError, match=r"line 2: .* at symbol #1 \('b'\)"):
        read_corpus(path, pfsa)


@pytest.mark.parametrize("make, lines, where", [
    (dyck_pda, [["(", ")"], ["(", "[", "]", ")"], ["(", "]"]], "line 3: .* symbol #1 \\(']'\\)"),
    (dyck_pda, [["(", ")"], ["[", "(", ")"]], "line 2: .* its end \\(after 3 symbols\\)"),
    (anbn_pda, [["a", "b"], ["a", "a", "b", "b", "b"]], "line 2: .* symbol #4 \\('b'\\)"),
    (anbn_pda, [["a", "b", "a", "b"]], "line 1: .* symbol #2 \\('a'\\)"),
])
def test_a_pushdown_string_outside_the_support_is_named(tmp_path, make, lines, where):
    path = _write(tmp_path / "c.jsonl", [{"symbols": s} for s in lines])
    with pytest.raises(CorpusFileError, match=where):
        read_corpus(path, make())


def test_the_first_bad_string_is_found_whatever_annotate_reports_first():
    """annotate walks the longest strings first; the reported string is the first by index."""
    pda = dyck_pda()
    good, bad_short, bad_long = [0, 1], [1], [0, 2, 3, 3, 1]  # ( ) / ) / ( [ ] ] )
    corpus = Corpus.from_lists([good] * 5 + [bad_short] + [good] + [bad_long])
    assert support_problem(pda, corpus) == (5, 0)
    assert support_problem(pda, Corpus.from_lists([good, bad_long])) == (1, 3)
    assert support_problem(pda, Corpus.from_lists([good, good])) is None


@pytest.mark.parametrize("lines, words", [
    (["not json\n"], "line 1: not JSON"),
    ([{"symbols": ["a"], "weight": 1}], "line 1: unknown key 'weight'"),
    ([{"symbols": "ab"}], 'line 1: "symbols" must be a list'),
    ([{"symbols": ["a"]}, {"symbols": ["a", "z"]}], "line 2: symbol #1 'z' is not in the"),
    ([["a"]], "line 1: expected an object"),
    (["\n"], "the corpus holds no string"),
])
def test_malformed_files_get_one_line(tmp_path, parity, lines, words):
    pfsa, _ = parity
    path = _write(tmp_path / "c.jsonl", lines)
    with pytest.raises(CorpusFileError, match=words.replace("(", r"\(")) as info:
        read_corpus(path, pfsa)
    assert "\n" not in str(info.value) and str(info.value).startswith(path)


def test_a_missing_file_is_named(tmp_path, parity):
    pfsa, automaton = parity
    with pytest.raises(CorpusFileError, match=r"nope.jsonl: cannot read the corpus"):
        PFADataModule(automaton=automaton, corpus=str(tmp_path / "nope.jsonl"), **SMALL)


def test_fit_refuses_a_bad_corpus_in_one_line_and_writes_nothing(tmp_path, parity, capsys):
    from cfl_lightning.cli.train import main

    _, automaton = parity
    path = _write(tmp_path / "c.jsonl", [{"symbols": ["b"]}, {"symbols": ["a", "b"]}])
    root = tmp_path / "runs"
    code = main(["fit", f"--data.automaton={automaton}", f"--data.corpus={path}",
                 "--data.device=cpu", "--data.cache_dir=none",
                 f"--trainer.default_root_dir={root}"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1, err
    assert err[0] == (f"python -m cfl_lightning fit: error: {path}: line 2: the string leaves "
                      "the automaton's support at symbol #1 ('b'): it has probability 0 under "
                      "data.automaton")
    assert not root.exists()
