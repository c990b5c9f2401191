"""Probabilistic context-free grammars (the pure core: no Lightning).

:class:`Grammar` (rules over nonterminals and terminals), read from NLTK's notation or its JSON
form (:mod:`.text`), checked (:mod:`.checks`), put in normal form (:mod:`.normal_form`), and the
exact next-symbol laws at every position of a batch of strings (:mod:`.prefix`).
"""

from cfl_lightning.automata.pcfg.checks import (
    check_grammar,
    expected_length,
    termination_probabilities,
)
from cfl_lightning.automata.pcfg.grammar import Grammar, Rule, Symbol
from cfl_lightning.automata.pcfg.normal_form import NormalForm, normal_form
from cfl_lightning.automata.pcfg.prefix import inside, next_symbol_laws
from cfl_lightning.automata.pcfg.text import (
    grammar_from_dict,
    grammar_to_dict,
    grammar_to_text,
    parse_grammar,
)

__all__ = [
    "Grammar",
    "Rule",
    "Symbol",
    "parse_grammar",
    "grammar_from_dict",
    "grammar_to_dict",
    "grammar_to_text",
    "check_grammar",
    "expected_length",
    "termination_probabilities",
    "NormalForm",
    "normal_form",
    "inside",
    "next_symbol_laws",
]
