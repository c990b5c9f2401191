"""Flags as a new user types them (issue 42, items 3-4): no abbreviations, a misspelled flag named
with the closest known one, ``--output -`` streamed or refused in one line, and the hints that
name flags name the command's own."""

from __future__ import annotations

import json

import pytest

from cfl_lightning.cli import analyze, automaton, draw, sample, stratify, sweep
from tests.helpers import PARITY_JSON, exit_status

BUILDERS = [sample, automaton, sweep, stratify, analyze, draw]


def parsers(parser):
    """``parser`` and its subcommands' parsers."""
    import argparse

    yield parser
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for sub in action.choices.values():
                yield from parsers(sub)


@pytest.mark.parametrize("module", BUILDERS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_parser_refuses_abbreviations(module):
    found = list(parsers(module.build_parser()))
    assert found and all(p.allow_abbrev is False for p in found)


def test_the_lightning_parsers_refuse_abbreviations_too():
    from cfl_lightning.cli.lightning_cli import CflArgumentParser
    from cfl_lightning.stratify import _data_module

    assert CflArgumentParser().allow_abbrev is False
    with pytest.raises(Exception):  # noqa: B017, PT011 - builds the parser, then refuses
        _data_module(["--data.num_strin=5"])
    from cfl_lightning import stratify as core

    assert core._PARSER.allow_abbrev is False  # noqa: SLF001


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.json").write_text(json.dumps(PARITY_JSON))
    return tmp_path


def sample_args(*extra):
    return ["sample", "--automaton", "a.json", "--seed", "0", *extra]


@pytest.mark.parametrize(
    "flag, message",
    [
        # an abbreviation was accepted as --num-strings although the guide says flags are given
        # in full; a misspelling was reported only as the missing --num-strings
        ("--num-string", "unrecognized argument --num-string (did you mean --num-strings?)"),
        ("--num-strigns", "unrecognized argument --num-strigns (did you mean --num-strings?)"),
        ("--bogus", "unrecognized argument --bogus (see python -m cfl_lightning sample --help)"),
    ],
)
def test_a_misspelled_or_shortened_flag_is_named(work, capsys, flag, message):
    code = exit_status(sample_args(flag, "5", "--output", "o.jsonl"))
    err = capsys.readouterr().err
    assert code == 2 and err == f"python -m cfl_lightning sample: error: {message}\n"
    assert not (work / "o.jsonl").exists()
    # negative control: the full name is accepted
    assert exit_status(sample_args("--num-strings", "5", "--output", "o.jsonl")) == 0


def test_values_that_look_like_flags_are_values(work, capsys):
    from cfl_lightning.cli.common import ArgumentParser

    parser = ArgumentParser(prog="p")
    parser.add_argument("--x", type=float)
    parser.add_argument("rest", nargs="*")
    assert parser.unknown_option(["--x", "-5", "-", "--", "--not-a-flag"]) is None
    assert parser.unknown_option(["--x=1", "--y"]).startswith("unrecognized argument --y")


def test_a_subcommands_flags_are_checked_by_its_parser(work, capsys):
    code = exit_status(["automaton", "parity", "--eta", "0.3", "--outpt", "p.json"])
    err = capsys.readouterr().err
    assert code == 2 and "unrecognized argument --outpt (did you mean --output?)" in err
    assert exit_status(["automaton", "parity", "--eta", "0.3", "--output", "p.json"]) == 0


def test_sample_output_dash_writes_json_lines_to_standard_output(work, capsys):
    code = exit_status(sample_args("--num-strings", "4", "--output", "-"))
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 4 and all(set(line) == {"symbols"} for line in lines)
    assert "wrote 4 strings to standard output" in err
    assert not (work / "-").exists()  # it wrote a file named "-" before
    # the same corpus as a file
    assert exit_status(sample_args("--num-strings", "4", "--output", "c.jsonl")) == 0
    assert (work / "c.jsonl").read_text() == out


@pytest.mark.parametrize(
    "argv",
    [
        ["analyze", "runs", "--output", "-"],
        ["analyze", "runs", "--export-results", "-"],
        ["draw", "a.json", "--output", "-"],
        ["automaton", "parity", "--output", "-"],
        ["sweep", "s.yaml", "--output", "-"],
        ["stratify", "s.yaml", "--output", "-"],
    ],
    ids=lambda a: "-".join(a[:1] + a[-2:-1]),
)
def test_output_dash_is_refused_in_one_line_where_files_are_written(work, capsys, argv):
    code = exit_status(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "cannot write to standard output ('-'); give a file path" in err
    assert not (work / "-").exists()


def test_samples_correlational_hint_names_its_own_flag(work, capsys):
    """Issue 42: the hint named --data.count=null, a flag of fit, not of sample."""
    code = exit_status(sample_args("--num-strings", "4", "--count", "5", "--output", "o.jsonl"))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "leave the count out (omit --count)" in err and "--data.count" not in err
    # negative control: the Python API (and fit, through the data module) keep their own terms
    from cfl_lightning.errors import InterventionError
    from cfl_lightning.sampling.intervention import Intervention

    with pytest.raises(InterventionError, match="count=None; on the command line --data.count="):
        Intervention.create("none", None, 5)
