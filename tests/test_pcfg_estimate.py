"""The estimate of a grammar corpus's exact laws before computing them (issue 50 item 6).

The count of (start, split) pairs against plain loops over the chart; the memory estimate
against the peak resident memory of a fresh process; the one-line refusal (exit 2 through
``fit``, nothing written, not even the corpus cache) under ``CFL_LIGHTNING_MEMORY_LIMIT``; a
small corpus that is not refused; the progress shown for long work.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from cfl_lightning.automata import load_automaton
from cfl_lightning.automata.pcfg import automaton as pcfg_automaton
from cfl_lightning.automata.pcfg.automaton import LAW_CHUNK_CELLS
from cfl_lightning.automata.pcfg.cost import chart_shape, law_cost
from cfl_lightning.errors import SizeError
from cfl_lightning.sampling import sample_corpus
from tests.helpers import REPO, run_cli
from tests.pcfg_reference import DYCK, EXPR

#: a Dyck grammar near criticality: mean length 48, a heavy tail (a few strings of hundreds)
LONG = "S -> '(' ')' [0.08] | '(' S ')' [0.88] | S S [0.04]\n"


def _grammar(tmp_path, text, name="g.pcfg"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _loop_pairs(lengths: list[int]) -> int:
    """(start, split) pairs of every span of width >= 2, by plain loops."""
    pairs = 0
    for n in lengths:
        for width in range(2, n + 1):
            for start in range(n - width + 1):
                for split in range(1, width):
                    assert 0 <= start < start + split < start + width <= n
                    pairs += 1
    return pairs


@pytest.mark.parametrize("text", [DYCK, EXPR])
def test_the_pair_count_is_the_charts(tmp_path, text):
    """The estimate's count of the ``O(n^3)`` pairs equals the loops' over a sampled corpus."""
    a = load_automaton(_grammar(tmp_path, text))
    corpus = sample_corpus(a, 60, seed=4)
    lengths = corpus.lengths.tolist()
    cost = a.law_cost(corpus.lengths)
    assert cost.pairs == _loop_pairs(lengths) > 0
    assert (cost.strings, cost.symbols, cost.longest) == (60, sum(lengths), max(lengths))
    assert cost.seconds > 0
    # the memory holds at least the corpus's laws (float64 and float32) and one string's chart
    shape = chart_shape(a.normal_form)
    n = max(lengths)
    floor = (sum(lengths) + 60) * (a.num_symbols + 1) * 12 + 8 * n * n * shape.nonterminals
    assert cost.peak_bytes >= floor


def test_an_empty_corpus_costs_nothing_but_its_laws(tmp_path):
    a = load_automaton(_grammar(tmp_path, DYCK))
    cost = law_cost(a.normal_form, torch.zeros(3, dtype=torch.long), LAW_CHUNK_CELLS)
    assert cost.pairs == 0 and cost.longest == 0 and cost.peak_bytes >= 3 * 3 * 12


_PEAK = """
import sys, threading, time, torch
from cfl_lightning.automata import load_automaton

def anon():  # anonymous resident memory: not reclaimed under pressure (file pages may be)
    with open("/proc/self/status") as status:
        return int(status.read().split("RssAnon:")[1].split()[0]) * 1024

a = load_automaton(sys.argv[1])
n = int(sys.argv[2])
tokens = torch.tensor([0] * (n // 2) + [1] * (n // 2))  # ( ... ( ) ... ): in the support
offsets = torch.tensor([0, n])
a.position_laws(torch.tensor([0] * 32 + [1] * 32), torch.tensor([0, 64]))  # the libraries' first
before, peak, done = anon(), [0], threading.Event()  # use is resident now

def poll():
    while not done.is_set():
        peak[0] = max(peak[0], anon())
        time.sleep(0.001)

watcher = threading.Thread(target=poll)
watcher.start()
a.position_laws(tokens, offsets)
done.set()
watcher.join()
print(max(peak[0], anon()) - before, a.law_cost(offsets[1:] - offsets[:-1]).peak_bytes)
"""


@pytest.mark.slow  # a fresh interpreter (torch imported once more) and a 125 MB chart
def test_the_memory_estimate_bounds_the_measured_peak(tmp_path):
    """One 2,000-symbol string: the estimate is above the growth of the process's anonymous
    resident memory to its peak while the laws are computed (polled every millisecond; file
    pages are left out, and ``ru_maxrss`` is not used: Linux carries it over ``execve`` from the
    forking process, so a subprocess of a long pytest run read 869 MB), and within 3x of it."""
    path = _grammar(tmp_path, LONG)
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, str(path), "2000"], capture_output=True, text=True,
        check=True, cwd=REPO, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                                   "PYTHONPATH": str(REPO)},
    ).stdout.split()
    measured, estimated = int(out[0]), int(out[1])
    assert measured > 100 * 2**20, out  # the chart was really built
    assert measured <= estimated <= 3 * measured, out


def test_the_check_refuses_exactly_above_the_limit(tmp_path, monkeypatch):
    """``check_laws`` compares the estimate with ``CFL_LIGHTNING_MEMORY_LIMIT``: equal passes, one
    byte less is refused in one line naming the estimate and the override."""
    a = load_automaton(_grammar(tmp_path, LONG))
    lengths = sample_corpus(a, 30, seed=0).lengths
    need = a.law_cost(lengths).peak_bytes
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", str(need))
    assert a.check_laws(lengths).peak_bytes == need
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", str(need - 1))
    with pytest.raises(SizeError, match=r"^the exact laws of a grammar corpus need ~") as info:
        a.check_laws(lengths)
    assert "\n" not in str(info.value) and "CFL_LIGHTNING_MEMORY_LIMIT" in str(info.value)
    with pytest.raises(SizeError):  # position_laws checks before computing
        a.position_laws(torch.zeros(int(lengths.sum()), dtype=torch.long),
                        torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]))


def _fit_args(grammar, tmp_path):
    return [f"--data.automaton={grammar}", "--data.num_strings=30", "--data.val_strings=10",
            "--data.test_strings=10", f"--data.cache_dir={tmp_path / 'cache'}",
            "--data.device=cpu", "--trainer.max_epochs=1",
            f"--trainer.default_root_dir={tmp_path / 'run'}",
            "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false",
            "--model.param_budget=2000"]


def test_fit_refuses_laws_beyond_the_limit_in_one_line(tmp_path, monkeypatch):
    """2 MB: the corpora's sampling estimate fits (~0.9 MB), the drawn training corpus's laws
    (~35 MB: a 254-symbol string's chart and the fixed 32 MB) do not. Exit 2, one line, no
    traceback, nothing written: not the run directory, not the corpus cache."""
    grammar = _grammar(tmp_path, LONG)
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "2M")
    result = run_cli("fit", *_fit_args(grammar, tmp_path))
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and "the exact laws of a grammar corpus need ~" in errors[0], errors
    assert "longest" in errors[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


@pytest.mark.slow  # one epoch of training through the command line
def test_fit_on_a_small_grammar_corpus_is_not_refused(tmp_path, monkeypatch):
    """The same run under 64 MB: trains and writes its results."""
    grammar = _grammar(tmp_path, LONG)
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "64M")
    result = run_cli("fit", *_fit_args(grammar, tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    written = next((tmp_path / "run").rglob("results.json"))
    assert json.loads(written.read_text())["automaton"]["kind"] == "pcfg"


def test_a_data_module_under_a_roomy_limit_computes_its_laws(tmp_path, monkeypatch):
    from cfl_lightning.data import PFADataModule

    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "64M")
    dm = PFADataModule(automaton=str(_grammar(tmp_path, LONG)), num_strings=30, val_strings=10,
                       test_strings=10, cache_dir="none", device="cpu")
    dm.setup("fit")
    laws = dm.tokenized("train").target_probs
    assert laws is not None and laws.shape[0] == int(dm.corpus("train").lengths.sum()) + 30


def test_a_corpus_file_too_large_for_its_laws_is_refused_as_such(tmp_path, monkeypatch):
    """A grammar corpus file is checked through its laws: under a small limit the refusal is the
    laws' memory, not a string outside the support (the support check must not swallow it)."""
    from cfl_lightning.data import PFADataModule

    grammar = _grammar(tmp_path, LONG)
    a = load_automaton(grammar)
    corpus = sample_corpus(a, 30, seed=0)
    corpus.write_jsonl(tmp_path / "c.jsonl", a.alphabet)
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "2M")
    with pytest.raises(SizeError, match=r"^the exact laws of a grammar corpus need ~"):
        PFADataModule(automaton=str(grammar), corpus=str(tmp_path / "c.jsonl"), val_strings=0,
                      test_strings=0, cache_dir="none", device="cpu")
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "64M")
    dm = PFADataModule(automaton=str(grammar), corpus=str(tmp_path / "c.jsonl"), val_strings=0,
                       test_strings=0, cache_dir="none", device="cpu")
    assert len(dm.corpus("train")) == 30


class _Bar:
    made: list = []
    closed = 0

    def __init__(self, total, label, enabled=None):
        self.made.append((total, label, enabled))

    def update(self, n):
        pass

    def close(self):
        _Bar.closed += 1


@pytest.mark.parametrize("long_laws, shown", [(0.0, None), (1e9, False)])
def test_long_laws_show_their_progress_with_the_estimate(tmp_path, monkeypatch, long_laws, shown):
    """At :data:`LONG_LAWS` estimated seconds or more, the laws' progress is shown (``enabled``
    left to :class:`Progress`: a bar on a terminal, a line per interval off one), the estimate in
    its label; below, nothing is shown."""
    a = load_automaton(_grammar(tmp_path, DYCK))
    corpus = sample_corpus(a, 20, seed=1)
    monkeypatch.setattr(pcfg_automaton, "Progress", _Bar)
    monkeypatch.setattr(pcfg_automaton, "LONG_LAWS", long_laws)
    _Bar.made = []
    a.position_laws(corpus.tokens, corpus.offsets)
    [(total, label, enabled)] = _Bar.made
    assert total == 20 and enabled is shown
    assert label.startswith("grammar laws, estimated ~") and "longest" in label


def test_the_progress_ends_when_a_string_is_refused(tmp_path, monkeypatch):
    """A string outside the support stops the laws with its one line; the progress (whose timer
    writes a line per interval off a terminal) is closed all the same."""
    from cfl_lightning.errors import CflError

    a = load_automaton(_grammar(tmp_path, DYCK))
    monkeypatch.setattr(pcfg_automaton, "Progress", _Bar)
    _Bar.closed = 0
    tokens = torch.tensor([0, 1, 1, 0])  # "()" then ")(": the second is outside the support
    with pytest.raises(CflError, match="^string 1 "):
        a.position_laws(tokens, torch.tensor([0, 2, 4]))
    assert _Bar.closed == 1
