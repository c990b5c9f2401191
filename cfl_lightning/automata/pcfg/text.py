"""Reading and writing grammars: NLTK's PCFG notation, and its JSON form.

The notation (one or more rules of one left side per line)::

    # Dyck-1 without the empty string
    S -> '(' ')' [0.5] | '(' S ')' [0.3] | S S [0.2]

Terminals are quoted (``'a'`` or ``"a"``), nonterminals are bare names, every alternative ends
with its probability in brackets, ``#`` starts a comment, and the first rule's left side is the
start. A left side may have rules on several lines. Empty right sides (``A -> [0.5]``) are
refused: every rule writes at least one symbol. The JSON form is
``{"kind": "pcfg", "rules": ["S -> ...", ...]}``, one line of the notation per entry.

Errors name the file and the line (``FILE:LINE: ...``; in the JSON form ``FILE: rules[i]: ...``).
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from cfl_lightning.automata.pcfg.grammar import Grammar, Rule, Symbol
from cfl_lightning.automata.pfsa import RESERVED_SYMBOLS
from cfl_lightning.errors import GrammarError

__all__ = ["parse_grammar", "grammar_from_dict", "grammar_to_dict", "grammar_to_text"]

_TOKEN = re.compile(
    r"""\s*(?:(?P<arrow>->)|(?P<bar>\|)|(?P<prob>\[[^\]]*\])|(?P<term>'[^']*'|"[^"]*")"""
    r"""|(?P<name>[^\s'"\[\]|#]+)|(?P<bad>\S))"""
)


def _strip_comment(line: str) -> str:
    """The line without a ``#`` comment (a ``#`` inside quotes is part of a terminal)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[:i]
    return line


def _tokens(text: str, where: str) -> list[tuple[str, str]]:
    out = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        value = match.group(kind)
        if kind == "bad":
            hint = " (an unterminated quote?)" if value in "'\"" else ""
            raise GrammarError(f"{where}: cannot read {value!r}{hint}")
        out.append((kind, value))
    return out


def _probability(value: str, where: str) -> float:
    try:
        prob = float(value[1:-1])
    except ValueError:
        raise GrammarError(f"{where}: {value} is not a probability") from None
    if not 0.0 <= prob <= 1.0:
        raise GrammarError(f"{where}: probability {value[1:-1]} is not in [0, 1]")
    return prob


def _alternatives(tokens: list[tuple[str, str]], lhs: str, where: str):
    """``(rhs tokens, probability)`` per ``|``-separated alternative."""
    rhs: list[tuple[str, str]] = []
    prob = None
    for kind, value in tokens + [("bar", "|")]:
        if kind == "bar":
            if prob is None:
                raise GrammarError(f"{where}: an alternative of {lhs} has no probability "
                                   "(write it as [p] after the alternative)")
            if not rhs:
                raise GrammarError(f"{where}: empty right side for {lhs} (not supported: every "
                                   "rule must write at least one symbol)")
            yield rhs, prob
            rhs, prob = [], None
        elif prob is not None:
            raise GrammarError(f"{where}: {value!r} after the probability of an alternative of "
                               f"{lhs} (separate alternatives with |)")
        elif kind == "prob":
            prob = _probability(value, where)
        elif kind == "arrow":
            raise GrammarError(f"{where}: a second '->' (one rule per line)")
        else:
            rhs.append((kind, value))


def _read_lines(lines: Iterable[tuple[str, str]]):
    """``(where, lhs, [(rhs tokens, prob)])`` per non-empty line."""
    for where, raw in lines:
        text = _strip_comment(raw).strip()
        if not text:
            continue
        tokens = _tokens(text, where)
        if len(tokens) < 2 or tokens[0][0] != "name" or tokens[1][0] != "arrow":
            raise GrammarError(f"{where}: cannot read this rule (expected 'A -> ... [p]'): {text}")
        lhs = tokens[0][1]
        yield where, lhs, list(_alternatives(tokens[2:], lhs, where))


def _build(entries: list, source: str | None) -> Grammar:
    where_file = source or "grammar"
    if not entries:
        raise GrammarError(f"{where_file}: no rules (an empty grammar)")
    nonterminals: dict[str, int] = {}
    for _, lhs, _ in entries:
        nonterminals.setdefault(lhs, len(nonterminals))
    alphabet: dict[str, int] = {}
    rules = []
    for line_no, (where, lhs, alternatives) in enumerate(entries, start=1):
        for rhs_tokens, prob in alternatives:
            rhs = []
            for kind, value in rhs_tokens:
                if kind == "term":
                    name = value[1:-1]
                    if name == "" or name in RESERVED_SYMBOLS:
                        raise GrammarError(f"{where}: terminal {value} is empty or reserved "
                                           f"({', '.join(RESERVED_SYMBOLS)} are reserved)")
                    rhs.append(Symbol(True, alphabet.setdefault(name, len(alphabet))))
                elif value not in nonterminals:
                    raise GrammarError(f"{where}: nonterminal {value} has no rules (undefined; "
                                       "quote it if it is a terminal)")
                else:
                    rhs.append(Symbol(False, nonterminals[value]))
            rules.append(Rule(nonterminals[lhs], tuple(rhs), prob, _line_number(where)))
    if not alphabet:
        raise GrammarError(f"{where_file}: the grammar has no terminal")
    return Grammar(tuple(nonterminals), tuple(alphabet), tuple(rules), source)


def _line_number(where: str) -> int:
    tail = where.rsplit(":", 1)[-1].strip().removeprefix("rules[").removesuffix("]")
    return int(tail) if tail.isdigit() else 0


def parse_grammar(text: str, source: str | None = None) -> Grammar:
    """Read a grammar in NLTK's notation (the module docstring); not yet checked for
    properness or termination (:func:`cfl_lightning.automata.pcfg.checks.check_grammar`).

    Raises:
        GrammarError: one line naming ``source`` and the line.
    """
    name = source or "grammar"
    lines = ((f"{name}:{i}", line) for i, line in enumerate(text.splitlines(), start=1))
    return _build(list(_read_lines(lines)), source)


def grammar_from_dict(data: dict[str, Any], source: str | None = None) -> Grammar:
    """Read the JSON form ``{"kind": "pcfg", "rules": [...]}``.

    Raises:
        GrammarError: a missing or malformed ``rules`` list, an unknown key, or a bad rule
            (``FILE: rules[i]: ...``).
    """
    name = source or "grammar"
    unknown = sorted(set(data) - {"kind", "rules", "name"})
    if unknown:
        raise GrammarError(f"{name}: unknown key {unknown[0]!r} (a pcfg file has 'kind', "
                           "'rules' and optionally 'name')")
    rules = data.get("rules")
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
        raise GrammarError(f"{name}: 'rules' must be a list of strings, one rule line each")
    lines = ((f"{name}: rules[{i}]", line) for i, line in enumerate(rules))
    return _build(list(_read_lines(lines)), source)


def grammar_to_text(grammar: Grammar) -> str:
    """The notation, one line per rule, in rule order (``repr`` of probabilities: exact)."""
    return "".join(f"{grammar.rule_text(r)} [{r.prob!r}]\n" for r in grammar.rules)


def grammar_to_dict(grammar: Grammar) -> dict[str, Any]:
    """The JSON form."""
    return {"kind": "pcfg", "rules": grammar_to_text(grammar).splitlines()}
