"""Turning sampled strings into language-model batches.

A string of ``n`` symbols ``s_1 ... s_n`` becomes ``n + 1`` *positions*: position ``j`` reads
``input_ids[j]`` (``BOS`` for ``j = 0``, else ``s_j``), predicts ``target_ids[j]`` (``s_{j+1}``, or
``EOS`` for ``j = n``), and records ``states[j]``, the automaton's position class after the prefix
``s_1 ... s_j`` (a PFSA's state; a pushdown automaton's (state, top of stack); from
:meth:`~cfl_lightning.automata.Automaton.annotate`). ``target_probs[j]`` is the automaton's
next-symbol distribution at that class, ``[p(s | c) for s in alphabet] + [p(EOS | c)]``: the row
of :func:`~cfl_lightning.automata.class_tables` (the one place targets are built). An automaton
of a kind without position classes (a PCFG: registered with ``position_classes=False``) gives
instead the exact law at every position, its ``position_laws(tokens, offsets)``, kept per
position in :attr:`TokenizedCorpus.target_probs` (``states`` are then all 0, a placeholder).

Token ids: symbols ``0 .. S-1`` in alphabet order, ``EOS = S``, ``BOS = S + 1``, ``PAD = S + 2``.
Padding positions hold ``PAD`` in ``input_ids``/``target_ids``, state ``0``, all-zero
``target_probs`` and ``mask = False``.

Everything per position is computed once per corpus in a flat (CSR) layout by
:func:`tensorize`, in one pass on the sampling device; the annotation advances all strings one
position at a time (a loop over the longest length, vectorized across strings), never a Python
loop per token.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.utils.data import Dataset, DistributedSampler

from cfl_lightning.automata import Automaton
from cfl_lightning.errors import CflError
from cfl_lightning.data.tokens import TokenIds
from cfl_lightning.kinds.automata import automaton_kind
from cfl_lightning.sampling import Corpus

__all__ = [
    "BATCH_KEYS",
    "derive_seed",
    "TokenizedCorpus",
    "state_walk",
    "tensorize",
    "check_laws",
    "length_batches",
    "collate",
    "BatchDataset",
    "BatchOrderSampler",
]

BATCH_KEYS = ("input_ids", "target_ids", "target_probs", "states", "mask")


def derive_seed(seed: int, *tags: object) -> int:
    """A 32-bit seed derived from ``seed`` and ``tags`` (a separate stream per tag tuple).

    Uses sha256, so it is stable across processes and platforms (unlike ``hash``).
    """
    text = ":".join(str(x) for x in (seed, *tags))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


@dataclass
class TokenizedCorpus:
    """Per-position arrays of a corpus, flat: string ``k`` owns ``offsets[k]:offsets[k+1]``.

    Attributes:
        inputs: ``[N]`` int64 input ids (``BOS`` then the symbols), ``N = sum(n_k + 1)``.
        targets: ``[N]`` int64 target ids (the symbols then ``EOS``).
        states: ``[N]`` int64 automaton class (a PFSA's state) after each prefix.
        offsets: ``[K + 1]`` int64 position offsets.
        counts: ``[K]`` int64 event occurrences per string, or ``None`` without an event.
        target_probs: ``[N, S + 1]`` float32 next-symbol law at every position, for an
            automaton without position classes (None: the class table's rows are the targets).
    """

    inputs: Tensor
    targets: Tensor
    states: Tensor
    offsets: Tensor
    counts: Tensor | None = None
    target_probs: Tensor | None = None

    def __len__(self) -> int:
        return int(self.offsets.numel()) - 1

    @property
    def positions(self) -> Tensor:
        """``[K]`` number of positions per string (``n_k + 1``)."""
        return self.offsets[1:] - self.offsets[:-1]


def state_walk(
    automaton: Automaton, tokens: Tensor, offsets: Tensor, device: torch.device | str | None = None
) -> Tensor:
    """The class (a PFSA's state) of every position of a flat corpus: ``automaton.annotate``.

    Kept under its old name; see :meth:`~cfl_lightning.automata.Automaton.annotate`.

    Returns:
        ``[L + K]`` int64: for string ``k`` (length ``n``) the ``n + 1`` classes before its
        symbols and before its end, at ``offsets[k] + k ... offsets[k] + k + n``.

    Raises:
        CflError: a symbol id is out of range or a string leaves the automaton's support.
    """
    return automaton.annotate(tokens, offsets, device)


def check_laws(corpus: Corpus, automaton: Automaton, device: torch.device | str = "cpu") -> Corpus:
    """``corpus``, once the exact laws of its positions are known to fit in memory.

    A kind without position classes computes the law at every position in :func:`tensorize`
    (a grammar: ``O(n^2)`` memory and ``O(n^3)`` time per string); its ``check_laws(lengths,
    device)`` estimates them from the drawn lengths and refuses in one line what does not fit.
    A data module calls this as soon as a corpus is drawn, before it is cached.

    Raises:
        SizeError: the laws' estimated peak memory exceeds the memory available.
    """
    check = getattr(automaton, "check_laws", None)
    if check is not None and not automaton_kind(automaton.kind).position_classes:
        check(corpus.lengths, device)
    return corpus


def tensorize(
    corpus: Corpus,
    automaton: Automaton,
    event_function: Tensor | None = None,
    device: torch.device | str | None = None,
) -> TokenizedCorpus:
    """Frame every string with BOS/EOS, annotate the classes, and count event occurrences.

    Everything is computed in one pass on ``device`` (the sampling device, say) and returned on
    the CPU: the same integers on every device.

    Args:
        corpus: the sampled strings.
        automaton: the automaton they were sampled from (any kind).
        event_function: optional ``[C, S]`` event table (``automaton.event_table``); per-string
            counts are recomputed from the annotation (independently of the sampler's own
            bookkeeping).
        device: where to compute (default: the CPU).
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    tokens, offsets = corpus.tokens.to(device).long(), corpus.offsets.to(device).long()
    num, total = len(corpus), tokens.numel()
    lengths = offsets[1:] - offsets[:-1]
    owner = torch.repeat_interleave(torch.arange(num, device=device), lengths, output_size=total)
    at = torch.arange(total, device=device) + owner  # framed position of each token's input slot
    ids = TokenIds(automaton.num_symbols)
    inputs = torch.full((total + num,), ids.bos, dtype=torch.long, device=device)
    inputs[at + 1] = tokens  # BOS stays at each string's first position
    targets = torch.full((total + num,), ids.eos, dtype=torch.long, device=device)
    targets[at] = tokens  # EOS stays at each string's last position
    states = automaton.annotate(tokens, offsets, device)
    laws = None
    if not automaton_kind(automaton.kind).position_classes:  # the exact law of every position
        laws = automaton.position_laws(tokens, offsets, device).to(torch.float32).cpu()
    counts = None
    if event_function is not None:
        hits = event_function.to(device).long().reshape(-1).take(
            states[at] * automaton.num_symbols + tokens
        )
        counts = torch.zeros(num, dtype=torch.long, device=device).index_add_(0, owner, hits)
        counts = counts.cpu()
    framed = offsets + torch.arange(num + 1, device=device)
    return TokenizedCorpus(
        inputs.cpu(), targets.cpu(), states.cpu(), framed.cpu(), counts, laws
    )


def length_batches(positions: Tensor, max_tokens: int) -> list[Tensor]:
    """Group strings of similar length into batches of at most ``max_tokens`` real positions.

    Strings are sorted by their number of positions (``n + 1``; ties by index) and cut greedily:
    a batch is closed when the next string would push its total above ``max_tokens``. A string
    with more than ``max_tokens`` positions forms a batch of its own (the bound is then exceeded
    by that one string only). One binary search per batch over the prefix sums, never a Python
    loop over strings.

    Returns:
        A list of ``[B]`` int64 index tensors, shortest strings first.
    """
    if max_tokens < 1:
        raise CflError(f"max_tokens must be positive, got {max_tokens}")
    order = torch.sort(positions.cpu(), stable=True).indices
    prefix = torch.zeros(order.numel() + 1, dtype=torch.long)
    prefix[1:] = positions.cpu()[order].cumsum(0)
    bounds = prefix.tolist()
    cuts, start = [], 0
    while start < order.numel():
        end = max(start + 1, bisect.bisect_right(bounds, bounds[start] + max_tokens) - 1)
        cuts.append(end)
        start = end
    return list(torch.tensor_split(order, cuts[:-1])) if cuts else []


def collate(
    corpus: TokenizedCorpus, index: Tensor, probs: Tensor | None, pad_id: int
) -> dict[str, Tensor]:
    """The batch of strings ``index`` (see the module docstring for the layout).

    Args:
        corpus: the tensorized corpus.
        index: ``[B]`` string indices.
        probs: ``[C, S + 1]`` float32 next-symbol table of the classes
            (:func:`~cfl_lightning.automata.class_tables`; ``PFADataModule.target_table``);
            unused (may be None) when the corpus has per-position ``target_probs``.
        pad_id: the padding id (``S + 2``).
    """
    length = corpus.positions[index]
    steps = torch.arange(int(length.max()))
    mask = steps[None, :] < length[:, None]
    flat = torch.where(mask, corpus.offsets[index][:, None] + steps[None, :], 0)
    states = corpus.states[flat].masked_fill(~mask, 0)
    if corpus.target_probs is not None:
        targets = corpus.target_probs[flat]
    else:
        assert probs is not None, "a corpus without per-position laws needs the class table"
        targets = probs[states]
    return {
        "input_ids": corpus.inputs[flat].masked_fill(~mask, pad_id),
        "target_ids": corpus.targets[flat].masked_fill(~mask, pad_id),
        "target_probs": targets * mask[..., None],
        "states": states,
        "mask": mask,
    }


class BatchDataset(Dataset):
    """A map-style dataset whose item ``i`` is the whole (collated) batch ``i``.

    Use with ``DataLoader(dataset, batch_size=None, sampler=BatchOrderSampler(...))``.
    """

    def __init__(
        self, corpus: TokenizedCorpus, batches: list[Tensor], probs: Tensor | None, pad_id: int
    ) -> None:
        self.corpus, self.batches, self.pad_id = corpus, batches, pad_id
        self.probs = None if probs is None else probs.detach().cpu().to(torch.float32)

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        return collate(self.corpus, self.batches[i], self.probs, self.pad_id)


class BatchOrderSampler(DistributedSampler):
    """Order of the batches in an epoch, optionally shuffled, and this rank's share of them.

    With ``shuffle`` the order is a permutation drawn from a generator seeded by ``(seed,
    epoch)``, so it is deterministic given both. As with ``DistributedSampler``,
    :meth:`set_epoch` picks the epoch: Lightning calls it at every epoch start; in a plain loop,
    call ``loader.sampler.set_epoch(epoch)`` yourself (otherwise every epoch repeats epoch 0's
    order; iterating never changes the epoch, because a ``DataLoader`` may call ``iter`` on its
    sampler more than once per epoch).

    With ``num_replicas > 1`` the ordered list is split by rank (``rank, rank + R, ...``), after
    repeating its first batches so that every rank gets the same number (as
    :class:`~torch.utils.data.DistributedSampler` does with ``drop_last=False``). Every rank must
    hold the identical list of batches (the data module guarantees it by sampling the same
    corpus on every rank). This class subclasses ``DistributedSampler`` only so that Lightning
    recognises it as already distributed and neither wraps nor replaces it.
    """

    def __init__(
        self, num_batches: int, *, shuffle: bool, seed: int, num_replicas: int = 1, rank: int = 0
    ) -> None:
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"invalid rank {rank} for {num_replicas} replicas")
        self.num_batches, self.shuffle, self.seed = num_batches, shuffle, seed
        self.num_replicas, self.rank, self.epoch, self.drop_last = num_replicas, rank, 0, False
        self.num_samples = -(-num_batches // num_replicas)
        self.total_size = self.num_samples * num_replicas

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def order(self, epoch: int) -> list[int]:
        """This rank's batch indices in ``epoch``."""
        if self.shuffle:
            gen = torch.Generator().manual_seed(derive_seed(self.seed, "batch-order", epoch))
            full = torch.randperm(self.num_batches, generator=gen).tolist()
        else:
            full = list(range(self.num_batches))
        if full and self.total_size > len(full):
            full += full[: self.total_size - len(full)]
        return full[self.rank : self.total_size : self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        return iter(self.order(self.epoch))

    def __len__(self) -> int:
        return self.num_samples
