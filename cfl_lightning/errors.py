"""User-facing error types.

Every problem caused by bad input (an invalid automaton, a missing file, an impossible
intervention target, an unsafe output path, a request too large for memory) raises a subclass of
:class:`CflError`. The command-line interface turns these into a single line on stderr and exit
status 2, without a traceback.
"""

__all__ = [
    "CflError",
    "PFSAError",
    "PDAError",
    "GrammarError",
    "EventError",
    "InterventionError",
    "RejectionExhaustedError",
    "OutputError",
    "SizeError",
    "SupportError",
]


class CflError(ValueError):
    """Base class of all errors caused by user input."""


class PFSAError(CflError):
    """An automaton is malformed or invalid (names the state, symbol or file)."""


class PDAError(PFSAError):
    """A pushdown automaton is malformed or invalid (names the file, state, top or symbol)."""


class GrammarError(PFSAError):
    """A probabilistic context-free grammar is malformed (names the file and line, or the
    nonterminal)."""


class EventError(CflError):
    """An event specification is malformed or names an unknown state or symbol."""


class InterventionError(CflError):
    """An intervention target is impossible or ill-formed."""


class RejectionExhaustedError(CflError):
    """Rejection sampling did not find a corpus meeting the constraint within its budget."""


class OutputError(CflError):
    """An output path cannot be written safely (a directory, a device, one of the inputs)."""


class SizeError(CflError):
    """A request would need more memory than is available (the message gives the estimate)."""


class SupportError(CflError):
    """A string of a corpus leaves the automaton's support (probability 0).

    Attributes:
        string: the string's index in its corpus (0-based).
        position: the first position (0-based) where it leaves: a symbol's index, or the
            string's length when it cannot end where it does.
    """

    def __init__(self, message: str, string: int, position: int) -> None:
        super().__init__(message)
        self.string = string
        self.position = position
