"""Issue 51 item 3 / issue 49 item 4: estimates per automaton kind before the work starts.

A sampling request whose estimated time or memory is far beyond its size is refused in one line
with the estimate and the event's natural count; ``--force`` (``force=True``) insists. Long work
off a terminal writes a progress line at intervals. No test here times anything: the estimates
are checked against their own law and against the issue's boundaries (counts 1,000 and 10,000
of ``push:D3`` on 50 strings run; 100,000 is refused); benchmarks/bench_estimates.py measures.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from cfl_lightning.automata import load_automaton, parity_starfree_pfsa
from cfl_lightning.errors import CflError, SizeError
from cfl_lightning.progress import Progress
from cfl_lightning.sampling import Intervention, check_request, estimates
from cfl_lightning.sampling.estimates import CorpusRequest, estimate_request, format_seconds
from tests.helpers import run_cli


#: issue 51's depth automaton (tests/data/depth.json; see tests/test_input_checks.py)
DEPTH = json.loads((Path(__file__).parent / "data" / "depth.json").read_text())


@pytest.fixture(scope="module")
def depth():
    return load_automaton(DEPTH)


@pytest.fixture
def depth_file(tmp_path):
    path = tmp_path / "depth.json"
    path.write_text(json.dumps(DEPTH))
    return path


def _push(count):
    return Intervention.create("exact", "push:D3", count)


# ---------------------------------------------------------------- the request
def test_the_runaway_request_is_refused_in_one_line_with_its_natural_count(depth_file, tmp_path):
    out = tmp_path / "out.jsonl"
    result = run_cli(
        "sample", "--automaton", depth_file, "--num-strings", "50", "--seed", "0",
        "--intervention", "exact", "--event", "push:D3", "--count", "100000", "--output", out,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    line = lines[0]
    for needle in ("would take ~", "exact count 100,000 of push:D3",
                   "natural count ~28.5 in 50 strings", "--force"):
        assert needle in line, line
    assert not out.exists()


@pytest.mark.parametrize("count", [29, 1000, 10_000])
def test_the_counts_that_finish_in_seconds_are_not_refused(depth, count):
    request = check_request(depth, 50, seed=0, intervention="exact", event="push:D3", count=count)
    assert request.estimate is not None and request.estimate.seconds < estimates.DEFAULT_TIME_LIMIT


@pytest.mark.slow
def test_force_runs_what_would_be_refused(depth_file, tmp_path, monkeypatch):
    """A time limit of ~0 leaves only the 'far beyond the same strings' rule: 100 occurrences in
    2 strings (natural ~1.1) is 88 times beyond; forced, it runs and meets the count."""
    monkeypatch.setenv("CFL_LIGHTNING_TIME_LIMIT", "1e-9")
    args = ["sample", "--automaton", depth_file, "--num-strings", "2", "--seed", "0",
            "--intervention", "exact", "--event", "push:D3", "--count", "200", "--device", "cpu",
            "--output", tmp_path / "out.jsonl"]
    refused = run_cli(*args)
    assert refused.returncode == 2 and "use --force to run it anyway" in refused.stderr
    forced = run_cli(*args, "--force")
    assert forced.returncode == 0, forced.stderr
    counts = [json.loads(line)["count"] for line in (tmp_path / "out.jsonl").read_text().split()]
    assert sum(counts) == 200


def test_the_api_insists_with_a_keyword(depth):
    with pytest.raises(SizeError, match=r"natural count ~28\.5 .* use force=True"):
        check_request(depth, 50, seed=0, intervention="exact", event="push:D3", count=100_000)
    monkey_limit = estimates.time_limit()
    assert monkey_limit == estimates.DEFAULT_TIME_LIMIT
    request = check_request(
        depth, 50, seed=0, intervention="exact", event="push:D3", count=100_000, force=True
    )
    assert request.estimate is not None and request.estimate.seconds > 600


def test_the_time_limit_is_an_environment_setting(depth, monkeypatch):
    monkeypatch.setenv("CFL_LIGHTNING_TIME_LIMIT", "off")
    check_request(depth, 50, seed=0, intervention="exact", event="push:D3", count=100_000)
    monkeypatch.setenv("CFL_LIGHTNING_TIME_LIMIT", "soon")
    with pytest.raises(SizeError, match="CFL_LIGHTNING_TIME_LIMIT='soon'"):
        check_request(depth, 50, seed=0, intervention="exact", event="push:D3", count=1000)


@pytest.mark.slow  # imports Lightning
def test_a_data_module_refuses_the_runaway_request_on_construction(tmp_path, depth_file):
    from cfl_lightning.data import PFADataModule

    with pytest.raises(CflError, match="natural count ~28.5 in 50 strings"):
        PFADataModule(
            automaton=str(depth_file), intervention="exact", event="push:D3", count=100_000,
            num_strings=50, val_strings=10, test_strings=10, device="cpu", cache_dir="none",
        )


def test_memory_far_beyond_the_corpus_is_refused_too(monkeypatch):
    """With the time rule off, a PFSA corpus of 10 strings holding 10^7 occurrences (~GBs of
    bins and symbols) is still far beyond its size."""
    monkeypatch.setenv("CFL_LIGHTNING_TIME_LIMIT", "off")
    monkeypatch.setenv("CFL_LIGHTNING_MEMORY_LIMIT", "off")
    parity = parity_starfree_pfsa(0.3)
    with pytest.raises(SizeError, match=r"GB .*natural count ~63\.0 in 10 strings"):
        check_request(parity, 10, seed=0, intervention="exact", event="state:odd", count=10**7)
    check_request(parity, 10, seed=0, intervention="exact", event="state:odd", count=10**7,
                  force=True)


# ---------------------------------------------------------------- the law, per kind
def test_each_kind_has_its_own_estimate(depth, monkeypatch):
    parity = parity_starfree_pfsa(0.3)
    pda = estimate_request(depth, CorpusRequest(50, _push(1000)))
    pfsa = estimate_request(parity, CorpusRequest(50, Intervention.create("exact", "state:odd",
                                                                          1000)))
    assert pda.extra_bytes > 0 and pfsa.extra_bytes == 0  # the count series and walk tables
    assert pda.natural_count == pytest.approx(28.45, abs=0.01)
    calls = []
    # the pushdown kind's registry entry names estimates:pushdown_estimate (resolved per call)
    monkeypatch.setattr(estimates, "pushdown_estimate",
                        lambda a, r: calls.append(a.kind) or estimates.Estimate(1e9, 1e-3))
    with pytest.raises(SizeError, match="would take ~"):
        check_request(depth, 5, seed=0)
    check_request(parity, 5, seed=0)  # the PFSA's own estimate: not the pushdown's
    assert calls == ["pushdown"]


def test_the_pushdown_law_grows_faster_than_its_corpus(depth):
    """Tenfold N: the corpus grows tenfold, the pushdown's time by more (the count law's series
    to N is quadratic, the walk's rows grow with the budget); the PFSA's stays near linear."""
    small = estimate_request(depth, CorpusRequest(50, _push(10_000))).seconds
    large = estimate_request(depth, CorpusRequest(50, _push(100_000))).seconds
    assert large > 30 * small
    parity = parity_starfree_pfsa(0.3)
    odd = [estimate_request(parity, CorpusRequest(50, Intervention.create("exact", "state:odd",
                                                                          n))).seconds
           for n in (10_000, 100_000)]
    assert 5 < odd[1] / odd[0] < 15


def test_seconds_read_as_a_person_would_say_them():
    assert [format_seconds(s) for s in (0.42, 42, 960, 3 * 3600, 5 * 86400)] == [
        "0.4 s", "42 s", "16 min", "3.0 h", "5.0 days"
    ]


# ---------------------------------------------------------------- progress off a terminal
def test_off_a_terminal_progress_writes_a_line_at_intervals():
    stream = io.StringIO()  # not a terminal
    bar = Progress(3, "sampling", stream=stream, interval=0.05)
    bar.update(1)
    deadline = time.monotonic() + 60
    while stream.getvalue().count("\n") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and lines[0].startswith("sampling: 1/3 done, ")
    assert lines[0].endswith(" s elapsed") and "\r" not in stream.getvalue()
    written = stream.getvalue()
    time.sleep(0.2)
    assert stream.getvalue() == written  # closed: no more lines


def test_progress_writes_nothing_when_disabled_or_short():
    off = io.StringIO()
    bar = Progress(3, "sampling", stream=off, enabled=False, interval=0.01)
    time.sleep(0.1)
    bar.close()
    short = io.StringIO()
    quick = Progress(3, "sampling", stream=short)  # the default interval: 30 s
    quick.update(3)
    quick.close()
    assert off.getvalue() == "" and short.getvalue() == ""
