"""A PCFG seen through the automaton seam: the ``pcfg`` automaton kind's object.

:class:`PCFG` wraps a checked :class:`~cfl_lightning.automata.pcfg.Grammar` and offers the names
of the :class:`~cfl_lightning.automata.Automaton` protocol that loading, sampling and the data
module read. A PCFG has no finite position classes (its next-symbol law depends on the whole
prefix; the kind is registered with ``position_classes=False``), so instead of a class table it
gives the exact law at every position of a corpus (:meth:`PCFG.position_laws`, through
:func:`~cfl_lightning.automata.pcfg.next_symbol_laws`); :meth:`PCFG.annotate` puts every
position in the one placeholder class 0. Its events are ``symbol:X`` (counted from the tokens
by the table :func:`symbol_table`) and ``rule:A -> 'a' B`` (uses of one rule in the derivation:
no table over symbols, the sampler reports each string's count; :func:`rule_table` is its
per-rule table); ``state:`` and ``transition:`` are refused in one line (:data:`NO_EVENTS`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cfl_lightning.automata.pcfg.checks import check_grammar, expected_length
from cfl_lightning.automata.pcfg.cost import LawCost, check_law_cost, law_cost
from cfl_lightning.automata.pcfg.grammar import Grammar, rule_degrees
from cfl_lightning.automata.pcfg.normal_form import NormalForm, normal_form
from cfl_lightning.automata.pcfg.prefix import next_symbol_laws
from cfl_lightning.automata.pcfg.text import (
    grammar_from_dict,
    grammar_to_dict,
    grammar_to_text,
    parse_grammar,
)
from cfl_lightning.errors import CflError, EventError, GrammarError
from cfl_lightning.io import atomic_write_text
from cfl_lightning.progress import Progress

__all__ = ["PCFG", "NO_EVENTS", "NO_RULE_TABLE", "NO_CLASSES", "load_pcfg", "symbol_table",
           "rule_table", "LAW_CHUNK_CELLS", "LONG_LAWS"]

#: the one line an event of another kind (state, transition, push) on a PCFG gets
NO_EVENTS = ("a pcfg has symbol:X and rule:A -> 'a' B events only (state and transition "
             "events need position classes)")
#: the one line for asking a rule event's table over symbols
NO_RULE_TABLE = ("a rule event has no table over symbols: its count belongs to the string's "
                 "derivation, and the sampler reports it per string")
#: the one line for what needs position classes
NO_CLASSES = ("a pcfg has no position classes (its next-symbol law depends on the whole "
              "prefix): the decomposition by state and transition does not exist for it")
#: chart cells (strings x length^2 x normal-form nonterminals) per call of next_symbol_laws
LAW_CHUNK_CELLS = 1 << 24
#: estimated CPU seconds of a corpus's laws from which their progress is shown (a bar on a
#: terminal, a line per interval off one: :class:`~cfl_lightning.progress.Progress`)
LONG_LAWS = 10.0


class PCFG:
    """A probabilistic context-free grammar as an automaton of kind ``"pcfg"``.

    Args:
        grammar: the grammar (checked here: proper, productive, finite expected length).
        device: where the normal form's tensors live.

    Raises:
        GrammarError: the grammar fails :func:`~cfl_lightning.automata.pcfg.check_grammar`.
    """

    kind = "pcfg"

    def __init__(self, grammar: Grammar, device: str | torch.device = "cpu") -> None:
        check_grammar(grammar)
        self.grammar = grammar
        self.alphabet: tuple[str, ...] = grammar.alphabet
        self.source: str | None = grammar.source
        self._device = torch.device(device)
        self._nf: NormalForm | None = None
        self._length: float | None = None

    # ------------------------------------------------------------------ reading
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> PCFG:
        """The JSON form ``{"kind": "pcfg", "rules": [...]}``, or ``{"kind": "pcfg", "text":
        ...}`` (how a ``*.pcfg`` file is read: errors then name the file's lines)."""
        if "text" in data:
            extra = sorted(set(data) - {"kind", "text", "name"})
            if extra:
                raise GrammarError(f"{source or 'grammar'}: unknown key {extra[0]!r} beside 'text'")
            if not isinstance(data["text"], str):
                raise GrammarError(f"{source or 'grammar'}: 'text' must be the grammar's text")
            return cls(parse_grammar(data["text"], source))
        return cls(grammar_from_dict(dict(data), source))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (:func:`~cfl_lightning.automata.pcfg.grammar_to_dict`)."""
        return grammar_to_dict(self.grammar)

    def to_json(self, path: str | os.PathLike) -> None:
        """Write the JSON form atomically."""
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2) + "\n")

    def to_text(self) -> str:
        """The notation (:func:`~cfl_lightning.automata.pcfg.grammar_to_text`): what a
        ``*.pcfg`` file holds."""
        return grammar_to_text(self.grammar)

    def validate(self) -> None:
        """Raise one :class:`GrammarError` line if the grammar is not usable."""
        check_grammar(self.grammar)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PCFG) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        g = self.grammar
        return (f"PCFG(nonterminals={g.num_nonterminals}, symbols={g.num_symbols}, "
                f"rules={len(g.rules)}, start={g.nonterminals[0]!r})")

    # ------------------------------------------------------------------ basics
    @property
    def num_symbols(self) -> int:
        """``S``."""
        return len(self.alphabet)

    @property
    def eos(self) -> int:
        """Index of EOS in next-symbol distributions: ``S``."""
        return self.num_symbols

    @property
    def device(self) -> torch.device:
        """Where the normal form's tensors live."""
        return self._device

    def to(self, device: str | torch.device) -> PCFG:
        """A copy on ``device``."""
        out = PCFG.__new__(PCFG)
        out.__dict__.update(self.__dict__, _device=torch.device(device), _nf=None)
        return out

    @property
    def normal_form(self) -> NormalForm:
        """The grammar's normal form on :attr:`device` (built on first use)."""
        if self._nf is None:
            self._nf = normal_form(self.grammar, self._device)
        return self._nf

    def expected_length(self) -> float:
        """Expected number of symbols per string."""
        if self._length is None:
            self._length = expected_length(self.grammar)
        return self._length

    # ------------------------------------------------------------------ positions
    @property
    def class_label(self) -> str:
        """``"none"``: a PCFG has no position classes."""
        return "none"

    @property
    def class_names(self) -> tuple[str, ...]:
        """Empty: a PCFG has no position classes."""
        return ()

    def class_probs(self) -> Tensor:
        """Refused in one line (:data:`NO_CLASSES`): use :meth:`position_laws`."""
        raise CflError(NO_CLASSES)

    def class_transitions(self) -> Tensor:
        """Refused in one line (:data:`NO_CLASSES`)."""
        raise CflError(NO_CLASSES)

    def expected_class_visits(self) -> Tensor:
        """Refused in one line (:data:`NO_CLASSES`)."""
        raise CflError(NO_CLASSES)

    def annotate(
        self, tokens: Tensor, offsets: Tensor, device: torch.device | str | None = None
    ) -> Tensor:
        """Class 0 at every position (a placeholder: there are no classes), after checking that
        every symbol id is in range. Support is checked by :meth:`position_laws`.

        Returns:
            ``[L + K]`` int64 zeros.
        """
        device = torch.device("cpu") if device is None else torch.device(device)
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.num_symbols):
            raise CflError(f"a symbol id is outside 0 .. {self.num_symbols - 1}")
        return torch.zeros(tokens.numel() + offsets.numel() - 1, dtype=torch.long, device=device)

    def position_laws(
        self, tokens: Tensor, offsets: Tensor, device: torch.device | str | None = None
    ) -> Tensor:
        """The exact next-symbol law at every position of a flat corpus.

        Strings are grouped by length (equal lengths need no padding) and sent to
        :func:`~cfl_lightning.automata.pcfg.next_symbol_laws` in chunks of at most
        :data:`LAW_CHUNK_CELLS` chart cells. Their time and peak memory are estimated first
        from the strings' lengths (:meth:`law_cost`): what does not fit in memory is refused in
        one line, and work estimated at :data:`LONG_LAWS` seconds or more shows its progress,
        the estimate in its label.

        Args:
            tokens: ``[L]`` int64 symbol ids, string after string.
            offsets: ``[K + 1]`` int64 string boundaries.
            device: where to compute (default: the CPU); the result stays there.

        Returns:
            ``[L + K, S + 1]`` float64: for string ``k`` of length ``n`` its ``n + 1``
            laws (after ``0 .. n`` symbols, EOS last) at ``offsets[k] + k ... offsets[k] + k + n``
            (the layout of :meth:`annotate`).

        Raises:
            CflError: a string outside the grammar's support (one line naming it).
            SizeError: the laws' estimated peak memory exceeds the memory available
                (``CFL_LIGHTNING_MEMORY_LIMIT`` overrides it).
        """
        device = torch.device("cpu") if device is None else torch.device(device)
        nf = self.normal_form if device == self._device else normal_form(self.grammar, device)
        tokens, offsets = tokens.to(device).long(), offsets.to(device).long()
        lengths = offsets[1:] - offsets[:-1]
        cost = self.check_laws(lengths, device)
        label = f"grammar laws, estimated {cost.describe()}"
        bar = Progress(len(lengths), label, enabled=None if cost.seconds >= LONG_LAWS else False)
        out = torch.zeros(tokens.numel() + lengths.numel(), self.num_symbols + 1,
                          dtype=torch.float64, device=device)
        try:
            _fill_laws(nf, tokens, offsets, out, bar)
        finally:
            bar.close()  # its timer (off a terminal) ends with the work, refused or not
        return out

    def check_laws(self, lengths: Tensor, device: torch.device | str = "cpu") -> LawCost:
        """:meth:`law_cost`, refused in one line when the laws' peak memory exceeds the memory
        available on ``device`` (``CFL_LIGHTNING_MEMORY_LIMIT`` overrides it): what
        :meth:`position_laws` checks first, and a data module as soon as a corpus is drawn
        (before it is cached).

        Raises:
            SizeError: the one line, with the estimate.
        """
        return check_law_cost(self.normal_form, lengths, LAW_CHUNK_CELLS, device)

    def law_cost(self, lengths: Tensor) -> LawCost:
        """The estimated CPU time and peak memory of :meth:`position_laws` on strings of these
        lengths (:func:`~cfl_lightning.automata.pcfg.cost.law_cost`); nothing large is
        allocated.

        Args:
            lengths: ``[K]`` int64 string lengths.
        """
        return law_cost(self.normal_form, lengths, LAW_CHUNK_CELLS)

    # ------------------------------------------------------------------ events
    def event_table(self, event: Any) -> Tensor:
        """``symbol:X``: ``[1, S]`` int64, 1 at ``X`` (one placeholder class, as
        :meth:`annotate` gives). A ``rule`` event has none (:data:`NO_RULE_TABLE`; its
        registered table is per rule, :func:`rule_table`); other kinds are refused in one line
        (:data:`NO_EVENTS`)."""
        kind = getattr(event, "kind", None)
        if kind == "rule":
            event.table(self)  # an unknown rule is named first
            raise EventError(f"{event}: {NO_RULE_TABLE}")
        if kind != "symbol":
            raise EventError(f"{event}: {NO_EVENTS}")
        return event.table(self)

    def event_location(self, event: Any) -> tuple[str, tuple[int, ...]]:
        """``("symbol", (s,))`` for ``symbol:X`` (the per-symbol KL); ``("rule", ())`` for a
        rule event, which has no place in it (its ``kl_target`` is null); others refused."""
        if getattr(event, "kind", None) == "rule":
            event.table(self)  # validates the rule
            return "rule", ()
        self.event_table(event)  # validates the kind and the name
        return "symbol", (self.alphabet.index(event.symbol),)

    def expected_event_count(self, event: Any) -> float:
        """Expected occurrences of an event per string, from the grammar's expectation matrix:
        ``symbol:X``, expected rewrites of each nonterminal times its expected count of ``X``;
        ``rule:A -> ...``, expected rewrites of ``A`` times the rule's probability."""
        if getattr(event, "kind", None) == "rule":
            degrees = event.table(self).cpu().numpy()  # validates the rule
            probs = np.array([r.prob for r in self.grammar.rules])
            lhs = np.array([r.lhs for r in self.grammar.rules])
            return float((self.expected_rewrites()[lhs] * probs * degrees).sum())
        self.event_table(event)  # validates the kind and the symbol
        return float(self.expected_symbol_counts()[self.alphabet.index(event.symbol)])

    def expected_rewrites(self) -> np.ndarray:
        """``[N]`` float64: expected rewrites of each nonterminal per string,
        ``(I - M^T)^-1 e_start`` (``M`` the expectation matrix)."""
        m = self.grammar.expectation_matrix()
        return np.linalg.solve(np.eye(len(m)) - m.T, np.eye(len(m))[0])

    def expected_symbol_counts(self) -> np.ndarray:
        """``[S + 1]`` float64: expected occurrences of each symbol per string, EOS (last) 1.

        Expected rewrites of each nonterminal (``(I - M^T)^-1 e_start``, ``M`` the expectation
        matrix) times the expected count of each terminal in one rewrite.
        """
        g = self.grammar
        direct = np.zeros((g.num_nonterminals, self.num_symbols + 1))  # per rewrite of each
        for rule in g.rules:
            for s in rule.rhs:
                if s.terminal:
                    direct[rule.lhs, s.index] += rule.prob
        out = self.expected_rewrites() @ direct
        out[-1] = 1.0
        return out

    def expected_occurrences(self) -> dict[str, float]:
        """Expected occurrences per string of every ``symbol:X`` event (the only events a
        grammar has as properties of its strings), keyed by the event's text."""
        counts = self.expected_symbol_counts()
        return {f"symbol:{a}": float(v) for a, v in zip(self.alphabet, counts)}

    def diagram(self) -> Any:
        """Refused in one line: a grammar is not drawn as a state diagram."""
        raise CflError("a pcfg is not drawn as a state diagram (print its rules instead)")


def _fill_laws(nf: NormalForm, tokens: Tensor, offsets: Tensor, out: Tensor, bar: Progress) -> None:
    """Write the laws of every string into ``out`` (:meth:`PCFG.position_laws`' layout), strings
    of one length together in chunks of at most :data:`LAW_CHUNK_CELLS` chart cells."""
    device, lengths = tokens.device, offsets[1:] - offsets[:-1]
    for n in torch.unique(lengths).tolist():
        strings = torch.nonzero(lengths == n).flatten()
        per_chunk = max(1, LAW_CHUNK_CELLS // max(1, n * n * nf.num_nonterminals))
        for chunk in torch.split(strings, per_chunk):
            starts = offsets[chunk]
            rows = starts[:, None] + torch.arange(n, device=device)[None, :]
            batch = tokens[rows] if n else torch.zeros(len(chunk), 0, dtype=torch.long,
                                                       device=device)
            try:
                laws = next_symbol_laws(nf, batch, torch.full_like(chunk, n))
            except CflError:
                raise _unsupported(nf, batch, chunk, n) from None
            at = (starts + chunk)[:, None] + torch.arange(n + 1, device=device)[None, :]
            out[at.reshape(-1)] = laws.reshape(-1, out.shape[1])
            bar.update(len(chunk))


def _unsupported(nf: NormalForm, batch: Tensor, chunk: Tensor, n: int) -> CflError:
    """The one line for the first string of a chunk whose laws fail (found string by string)."""
    for row, k in enumerate(chunk.tolist()):
        try:
            next_symbol_laws(nf, batch[row: row + 1], torch.tensor([n], device=batch.device))
        except CflError:
            break
    else:  # pragma: no cover - the chunk failed, so one of its strings does
        k = int(chunk[0])
    return CflError(f"string {k} (length {n}) is outside the grammar's support, or its "
                    "probability underflows float64 even rescaled (very long strings of a "
                    "nearly critical grammar)")


def symbol_table(event: Any, pcfg: PCFG) -> Tensor:
    """``symbol:X`` on a grammar: ``[1, S]`` int64, 1 at ``X`` (the registered table).

    Raises:
        EventError: an unknown symbol (the event tables' wording).
    """
    if event.symbol not in pcfg.alphabet:
        raise EventError(f"event {event}: unknown symbol {event.symbol!r}")
    table = torch.zeros(1, pcfg.num_symbols, dtype=torch.long, device=pcfg.device)
    table[0, pcfg.alphabet.index(event.symbol)] = 1
    return table


def rule_table(event: Any, pcfg: PCFG) -> Tensor:
    """``rule:A -> 'a' B`` on a grammar: its registered table, per rule (a rule event is not
    counted over symbols): ``[R]`` int64, 1 for the named rule (in ``grammar.rules`` order).

    Raises:
        EventError: no rule of the grammar is written so (one line).
    """
    return torch.from_numpy(rule_degrees(pcfg.grammar, event.fields["rule"]))


def load_pcfg(data: Mapping[str, Any], *, source: str | None = None) -> PCFG:
    """The ``pcfg`` kind's loader (:meth:`PCFG.from_dict`)."""
    return PCFG.from_dict(data, source=source)
