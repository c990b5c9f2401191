"""What every automaton kind in ``automata/`` derives alike from its names and its JSON form.

:class:`AutomatonBasics` is a small base of :class:`~cfl_lightning.automata.PFSA` and the
pushdown automaton: sizes from the state and symbol names, the EOS index, the ``"FILE: "`` prefix
of error messages, and reading and writing the JSON file (``to_dict``/``from_dict`` are each
kind's own). The seam itself is :class:`~cfl_lightning.automata.protocol.Automaton`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from cfl_lightning.errors import CflError
from cfl_lightning.io import atomic_write_text, read_json

__all__ = ["AutomatonBasics"]

_A = TypeVar("_A", bound="AutomatonBasics")


class AutomatonBasics:
    """Sizes, EOS, error-message prefix and JSON files of an automaton.

    A subclass sets ``states``, ``alphabet`` and ``source`` in its constructor, names its error
    class in ``error`` and defines ``to_dict`` and ``from_dict``.
    """

    error: ClassVar[type[CflError]]
    states: tuple[str, ...]
    alphabet: tuple[str, ...]
    source: str | None

    @property
    def num_states(self) -> int:
        return len(self.states)

    @property
    def num_symbols(self) -> int:
        return len(self.alphabet)

    @property
    def eos(self) -> int:
        """Index of EOS in next-symbol distributions (``|S|``, i.e. last)."""
        return len(self.alphabet)

    def where(self) -> str:
        """``"FILE: "`` for error messages, or ``""``."""
        return f"{self.source}: " if self.source else ""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_dict(cls: type[_A], data: Mapping[str, Any], *, source: str | None = None) -> _A:
        raise NotImplementedError

    def to_json(self, path: str | os.PathLike) -> None:
        """Write the JSON interchange form to ``path`` atomically."""
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def from_json(cls: type[_A], path: str | os.PathLike) -> _A:
        """Read and validate an automaton from a JSON file.

        Raises:
            CflError: the kind's :attr:`error` (``PFSAError``, ``PDAError``): the file is missing,
                is not valid JSON, or describes an invalid automaton.
        """
        name = os.fspath(path)
        data = read_json(name, error=cls.error, what="automaton")
        return cls.from_dict(data, source=name)
