"""A training corpus read from a JSON Lines file (what ``python -m cfl_lightning sample`` writes).

Each non-blank line is one string, ``{"symbols": ["a", "b", ...], "count": n}``: ``symbols``
names the automaton's symbols (``[]`` is the empty string); ``count``, which ``sample`` writes
for its ``--event``, is optional and not read (the data module recounts every event from the
automaton). Any other key, a symbol outside the alphabet and a string outside the automaton's
support (a step or an end of probability 0) are refused in one line naming the file, the line
and the first position where the string leaves the support.

Example:
    >>> from cfl_lightning.automata import parity_starfree_pfsa
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "c.jsonl")
    >>> _ = open(path, "w").write('{"symbols": ["a", "b"]}\\n{"symbols": ["a"]}\\n')
    >>> corpus = read_corpus(path, parity_starfree_pfsa(0.5))
    >>> corpus.to_lists()
    [[0, 1], [0]]
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Optional

import torch
from torch import Tensor

from cfl_lightning.automata import Automaton, Event
from cfl_lightning.data.settings import DataSettings
from cfl_lightning.data.tokens import TokenIds
from cfl_lightning.errors import CflError, EventError, SizeError, SupportError
from cfl_lightning.kinds import automaton_kind
from cfl_lightning.kinds.events import counted_from_tokens
from cfl_lightning.sampling import Corpus, Intervention

__all__ = [
    "CorpusFileError", "read_corpus", "support_problem", "training_corpus", "unmet_intervention",
]

_KEYS = ("symbols", "count")


class CorpusFileError(CflError):
    """A corpus file that cannot be read, or holds a string the automaton cannot emit."""


def _symbols(record: Any, where: str, index: dict[str, int]) -> list[int]:
    """The symbol ids of one parsed line (``where`` names the file and line in messages)."""
    if not isinstance(record, dict):
        raise CorpusFileError(f'{where}: expected an object {{"symbols": [...]}}, got {record!r:.60}')
    unknown = [k for k in record if k not in _KEYS]
    if unknown:
        raise CorpusFileError(f"{where}: unknown key {unknown[0]!r} (a line holds {', '.join(_KEYS)})")
    symbols = record.get("symbols")
    if not isinstance(symbols, list):
        raise CorpusFileError(f'{where}: "symbols" must be a list of symbol names, got {symbols!r:.60}')
    ids = []
    for i, name in enumerate(symbols):
        if not isinstance(name, str) or name not in index:
            known = ", ".join(map(repr, list(index)[:12]))
            raise CorpusFileError(
                f"{where}: symbol #{i} {name!r} is not in the automaton's alphabet ({known})"
            )
        ids.append(index[name])
    return ids


def _parse(path: str, automaton: Automaton) -> tuple[list[list[int]], list[int]]:
    """The strings of ``path`` as symbol ids, and the line number of each."""
    index = {name: i for i, name in enumerate(automaton.alphabet)}
    strings, lines = [], []
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                where = f"{path}: line {number}"
                try:
                    record = json.loads(line)
                except ValueError as err:
                    raise CorpusFileError(f"{where}: not JSON ({err})") from None
                strings.append(_symbols(record, where, index))
                lines.append(number)
    except OSError as err:
        raise CorpusFileError(f"{path}: cannot read the corpus ({err.strerror or err})") from None
    except UnicodeDecodeError:
        raise CorpusFileError(f"{path}: not UTF-8 text") from None
    if not strings:
        raise CorpusFileError(f"{path}: the corpus holds no string")
    return strings, lines


def _head(corpus: Corpus, num: int) -> Corpus:
    """The first ``num`` strings of ``corpus``."""
    return Corpus(corpus.tokens[: int(corpus.offsets[num])], corpus.offsets[: num + 1])


def _first_refused_string(corpus: Corpus, accepts: Callable[[Corpus], bool]) -> int:
    """The first string (by index) of a corpus that ``accepts`` refuses as a whole: the ``i``
    whose first ``i`` strings are accepted and first ``i + 1`` not (bisection on heads)."""
    low, high = 0, len(corpus)  # the first ``low`` strings are accepted, the first ``high`` not
    while high - low > 1:
        mid = (low + high) // 2
        if accepts(_head(corpus, mid)):
            low = mid
        else:
            high = mid
    return low


def _first_unwalkable(automaton: Automaton, corpus: Corpus) -> Optional[tuple[int, int]]:
    """``(string, position)`` of the first string (by index) that ``annotate`` refuses."""

    def walks(head: Corpus) -> bool:
        try:
            automaton.annotate(*_flat(head))
            return True
        except SupportError:
            return False

    if walks(corpus):
        return None
    low = _first_refused_string(corpus, walks)
    string = corpus.string(low)
    try:
        automaton.annotate(torch.tensor(string, dtype=torch.long), torch.tensor([0, len(string)]))
    except SupportError as err:
        return low, err.position
    raise AssertionError("annotate refused a corpus but none of its strings")  # pragma: no cover


def _flat(corpus: Corpus) -> tuple[torch.Tensor, torch.Tensor]:
    return corpus.tokens, corpus.offsets


def _position_laws(automaton: Automaton, corpus: Corpus) -> Optional[Tensor]:
    """The laws at every position (``[L + K, S + 1]``) of a kind without position classes, or
    None where a string has a prefix of probability 0 (the laws refuse it). Laws too large for
    memory are refused (:class:`SizeError`), not taken for a string outside the support."""
    try:
        return automaton.position_laws(corpus.tokens, corpus.offsets)
    except SizeError:
        raise
    except CflError:
        return None


def _first_refused(automaton: Automaton, corpus: Corpus) -> tuple[int, int]:
    """``(string, -1)``: the first string (by bisection) whose laws a kind without position
    classes refuses (a prefix of probability 0, or an end of probability 0: the laws do not say
    which, so the position is left unknown, -1)."""

    def has_laws(head: Corpus) -> bool:
        return _position_laws(automaton, head) is not None

    return _first_refused_string(corpus, has_laws), -1


def _first_improbable(automaton: Automaton, corpus: Corpus) -> Optional[tuple[int, int]]:
    """``(string, position)`` of the first step (or end) of probability 0 in a corpus that
    ``annotate`` walks (a listed transition of weight 0, an end where the final weight is 0; for
    a kind without position classes, a symbol or end of probability 0 under the exact laws)."""
    if len(corpus) == 0:
        return None
    if automaton_kind(automaton.kind).position_classes:
        classes = automaton.annotate(corpus.tokens, corpus.offsets)
        laws = automaton.class_probs()[classes]  # [L + K, S + 1]: each position's law
    else:
        laws = _position_laws(automaton, corpus)
        if laws is None:
            return _first_refused(automaton, corpus)
    lengths = corpus.lengths
    owner = torch.repeat_interleave(torch.arange(len(corpus)), lengths)
    at = torch.arange(corpus.tokens.numel()) + owner  # each symbol's position in ``laws``
    targets = torch.full((laws.shape[0],), TokenIds(automaton.num_symbols).eos, dtype=torch.long)
    targets[at] = corpus.tokens
    bad = torch.nonzero(laws[torch.arange(laws.shape[0]), targets] <= 0).flatten()
    if bad.numel() == 0:
        return None
    first = int(bad[0])
    starts = corpus.offsets[:-1] + torch.arange(len(corpus))
    string = int(torch.searchsorted(starts, torch.tensor([first]), right=True)[0]) - 1
    return string, first - int(starts[string])


def support_problem(automaton: Automaton, corpus: Corpus) -> Optional[tuple[int, int]]:
    """Where the first string outside the automaton's support leaves it, or None.

    Args:
        automaton: any automaton.
        corpus: the strings (symbol ids).

    Returns:
        ``(string, position)``: the first string (by index) of probability 0, and the first
        position where its probability becomes 0 (a symbol's index, or its length: it cannot
        end there; -1 for a kind without position classes, whose laws do not say where). None
        when every string has positive probability.
    """
    walk = _first_unwalkable(automaton, corpus)
    walkable = len(corpus) if walk is None else walk[0]
    zero = _first_improbable(automaton, _head(corpus, walkable))
    return zero if zero is not None else walk


def read_corpus(path: str | os.PathLike, automaton: Automaton) -> Corpus:
    """The strings of a JSON Lines corpus file, checked against ``automaton``.

    Args:
        path: the file (the format of ``python -m cfl_lightning sample``; module docstring).
        automaton: the automaton the strings must belong to.

    Returns:
        the corpus (no counts: the data module counts events itself).

    Raises:
        CorpusFileError: one line naming the file and the line: unreadable, not JSON, an unknown
            key or symbol, no string at all, or a string outside the support (its first symbol
            of probability 0, or an end of probability 0).
    """
    path = os.fspath(path)
    strings, lines = _parse(path, automaton)
    corpus = Corpus.from_lists(strings)
    corpus.tokens = corpus.tokens.long()  # an all-empty corpus is built as floats
    problem = support_problem(automaton, corpus)
    if problem is not None:
        k, i = problem
        string = strings[k]
        if i < 0:  # a kind without position classes: the string, not the place
            raise CorpusFileError(
                f"{path}: line {lines[k]}: the string is outside the automaton's support: it "
                "has probability 0 under data.automaton"
            )
        what = (
            f"symbol #{i} ({automaton.alphabet[string[i]]!r})" if i < len(string)
            else f"its end (after {len(string)} symbols)"
        )
        raise CorpusFileError(
            f"{path}: line {lines[k]}: the string leaves the automaton's support at {what}: "
            "it has probability 0 under data.automaton"
        )
    return corpus


def _check_countable(settings: DataSettings) -> None:
    """Refuse a corpus file with an event its strings cannot be counted on (a grammar's rule:
    the count belongs to each string's derivation, which the file does not record)."""
    try:
        event = None if settings.event is None else Event.parse(settings.event)
    except EventError:
        return  # malformed: refused with the intervention's other checks
    if event is not None and not counted_from_tokens(event):
        raise CorpusFileError(
            f"data.corpus {settings.corpus}: the count of {event} belongs to each string's "
            "derivation, which a corpus file does not record (sample the corpus instead)"
        )


def training_corpus(
    settings: DataSettings, automaton: Automaton
) -> tuple[DataSettings, Optional[Corpus]]:
    """The settings with ``num_strings`` resolved, and the corpus file's strings (None without
    ``settings.corpus``).

    Raises:
        CorpusFileError: the file cannot be read or holds a string outside the support
            (:func:`read_corpus`), ``num_strings`` was given and differs from its count, or the
            event is counted on derivations (a rule), which the file does not record.
    """
    if settings.corpus is None:
        return settings, None
    _check_countable(settings)
    corpus = read_corpus(settings.corpus, automaton)
    if settings.num_strings is not None and settings.num_strings != len(corpus):
        raise CorpusFileError(
            f"data.num_strings {settings.num_strings} differs from the {len(corpus)} strings of "
            f"data.corpus {settings.corpus} (leave num_strings out: the file's count is used)"
        )
    return replace(settings, num_strings=len(corpus)), corpus


def unmet_intervention(path: str, spec: Intervention, counts: Tensor) -> CorpusFileError:
    """The error of a corpus file whose per-string ``counts`` ``[K]`` do not meet ``spec``."""
    unit = "strings containing it" if spec.unit == "strings" else "occurrences"
    return CorpusFileError(
        f"data.corpus {path} does not meet intervention {spec}: it has {spec.realized(counts)} "
        f"{unit} (data.intervention, data.event and data.count describe the file; use "
        "intervention none to train on it as it is)"
    )
