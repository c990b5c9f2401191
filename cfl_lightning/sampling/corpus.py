"""A sampled corpus: strings of symbol ids stored flat, with per-string event counts."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from cfl_lightning.io import atomic_open

__all__ = ["Corpus"]


@dataclass
class Corpus:
    """``K`` strings stored flat (CSR layout).

    Attributes:
        tokens: ``[sum of lengths]`` int64 symbol ids, string after string.
        offsets: ``[K + 1]`` int64; string ``k`` is ``tokens[offsets[k]:offsets[k + 1]]``.
        counts: ``[K]`` int64 event occurrences per string, or ``None`` when no event was given.
    """

    tokens: Tensor
    offsets: Tensor
    counts: Tensor | None = None

    def __len__(self) -> int:
        return int(self.offsets.numel()) - 1

    @property
    def lengths(self) -> Tensor:
        """``[K]`` int64 string lengths (symbols, without EOS)."""
        return self.offsets[1:] - self.offsets[:-1]

    @property
    def total_count(self) -> int:
        """Corpus total of event occurrences (0 when no event was given)."""
        return 0 if self.counts is None else int(self.counts.sum())

    def string(self, k: int) -> list[int]:
        return self.tokens[int(self.offsets[k]) : int(self.offsets[k + 1])].tolist()

    def to_lists(self) -> list[list[int]]:
        """All strings as Python lists of symbol ids."""
        flat = self.tokens.tolist()
        bounds = self.offsets.tolist()
        return [flat[bounds[k] : bounds[k + 1]] for k in range(len(self))]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.to_lists())

    def to(self, device: str | torch.device) -> Corpus:
        counts = None if self.counts is None else self.counts.to(device)
        return Corpus(self.tokens.to(device), self.offsets.to(device), counts)

    @classmethod
    def from_lists(cls, strings: list[list[int]], counts: list[int] | None = None) -> Corpus:
        lengths = torch.tensor([len(s) for s in strings], dtype=torch.long)
        offsets = torch.zeros(len(strings) + 1, dtype=torch.long)
        offsets[1:] = torch.cumsum(lengths, 0)
        tokens = torch.tensor([t for s in strings for t in s], dtype=torch.long)
        return cls(tokens, offsets, None if counts is None else torch.tensor(counts).long())

    @classmethod
    def interleave(cls, parts: list[tuple[Tensor, Corpus]], num_strings: int) -> Corpus:
        """Place the strings of several corpora at given positions of one corpus.

        Args:
            parts: ``(positions [K_i], corpus with K_i strings)`` pairs covering ``0..K-1`` once.
            num_strings: ``K``.
        """
        device = parts[0][1].tokens.device
        lengths = torch.zeros(num_strings, dtype=torch.long, device=device)
        for positions, part in parts:
            lengths[positions] = part.lengths
        offsets = torch.zeros(num_strings + 1, dtype=torch.long, device=device)
        offsets[1:] = lengths.cumsum(0)
        tokens = torch.empty(int(offsets[-1]), dtype=torch.long, device=device)
        with_counts = all(part.counts is not None for _, part in parts)
        counts = torch.zeros(num_strings, dtype=torch.long, device=device) if with_counts else None
        for positions, part in parts:
            starts = torch.repeat_interleave(offsets[positions], part.lengths)
            within = torch.arange(part.tokens.numel(), device=device) - torch.repeat_interleave(
                part.offsets[:-1], part.lengths
            )
            tokens[starts + within] = part.tokens
            if counts is not None:
                counts[positions] = part.counts
        return cls(tokens, offsets, counts)

    def jsonl_lines(self, alphabet: tuple[str, ...]) -> Iterator[str]:
        """One JSON object per string, ``{"symbols": [...], "count": n}``, each a line with its
        newline (``count`` only when the corpus has counts)."""
        names = list(alphabet)
        counts = None if self.counts is None else self.counts.tolist()
        for k, string in enumerate(self.to_lists()):
            record: dict = {"symbols": [names[t] for t in string]}
            if counts is not None:
                record["count"] = counts[k]
            yield json.dumps(record, separators=(",", ":")) + "\n"

    def write_jsonl(self, path: str | os.PathLike, alphabet: tuple[str, ...]) -> None:
        """Write :meth:`jsonl_lines` to ``path``, atomically."""
        with atomic_open(path, "w") as handle:
            handle.writelines(self.jsonl_lines(alphabet))
