"""Token ids of the models' vocabulary: the one place that numbers them.

As ``docs/internal_contract.md`` states them: an automaton's ``S`` symbols are ``0 .. S-1``
in alphabet order, then ``EOS = S``, ``BOS = S + 1`` and ``PAD = S + 2``: embeddings cover
``S + 3`` ids, next-symbol outputs ``S + 1`` classes (the symbols and EOS, EOS last).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TokenIds"]


@dataclass(frozen=True)
class TokenIds:
    """The token ids of an alphabet of ``num_symbols`` symbols.

    Example:
        >>> ids = TokenIds(2)
        >>> ids.eos, ids.bos, ids.pad, ids.vocab_size, ids.num_classes
        (2, 3, 4, 5, 3)
    """

    num_symbols: int

    @property
    def eos(self) -> int:
        """End of string: the last output class."""
        return self.num_symbols

    @property
    def bos(self) -> int:
        """Beginning of string: every string's first input."""
        return self.num_symbols + 1

    @property
    def pad(self) -> int:
        """Padding (never a target)."""
        return self.num_symbols + 2

    @property
    def vocab_size(self) -> int:
        """Input ids: the symbols, EOS, BOS and PAD."""
        return self.num_symbols + 3

    @property
    def num_classes(self) -> int:
        """Output classes: the symbols and EOS."""
        return self.num_symbols + 1
