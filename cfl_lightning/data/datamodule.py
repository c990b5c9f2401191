"""``PFADataModule``: corpora sampled from a PFSA, optionally under an intervention, as batches.

Lifecycle:

* ``__init__`` builds and validates the automaton and the event (cheap), so the vocabulary
  (``num_symbols``, ``vocab_size``, the special ids) is known before ``setup`` and can be linked to
  a model's arguments with ``LightningCLI.link_arguments(..., apply_on="instantiate")``.
* ``prepare_data`` (rank 0 only) fills the on-disk cache with all three corpora.
* ``setup(stage)`` samples (or reads from the cache) the corpora the stage needs and tensorizes
  them; it is idempotent.

Splits: ``train`` is sampled under the intervention; ``val`` and ``test`` are sampled
unconstrained from the automaton (they estimate the KL to the automaton's own distribution), so
they do not depend on ``intervention``/``event``/``count`` and are shared by every run of a
sweep over those. Each split has its own random stream, derived from ``seed``. Two options
change this: ``val_intervention="same"`` samples the validation strings under the training
intervention (count scaled to ``val_strings``), and ``test_target_strings`` adds test strings
drawn conditioned on reaching a state where the event is at stake
(:mod:`cfl_lightning.sampling.visits`); test batches then carry ``weights`` (importance weights
``P(y) / mix(y)``), so every test value still estimates the automaton's own distribution.

Distributed training: every rank samples (or reads) the identical corpus (sampling depends only
on the arguments, never on the rank) and builds the identical list of batches; each rank then
iterates its share of that list (``rank, rank + world_size, ...``; see
:class:`~cfl_lightning.data.batching.BatchOrderSampler`). No ``DistributedSampler`` over strings
is involved. Training shares are padded to equal length; evaluation shares are not (no string is
evaluated twice, so DDP epoch sums equal the single-process ones).

Reproducibility: the same arguments give the identical corpus and batches. ``device="auto"``
samples on CUDA when available, and CUDA and CPU draws differ: the device type is part of the
cache key; set ``device="cpu"`` for corpora identical across machines.
"""

from __future__ import annotations

import hashlib
import operator
from typing import Any, Literal, Optional

import lightning as L
import torch
from torch.utils.data import DataLoader

from cfl_lightning import sampling
from cfl_lightning.automata import (
    PFSA,
    Event,
    parity_starfree_pfsa,
    random_pfsa,
    resampled_parity_starfree_pfsa,
)
from cfl_lightning.data.batching import (
    BatchDataset,
    BatchOrderSampler,
    TokenizedCorpus,
    derive_seed,
    length_batches,
    tensorize,
)
from cfl_lightning.data.cache import automaton_json, cached_corpus, corpus_key, resolve_cache_dir
from cfl_lightning.errors import CflError, PFSAError
from cfl_lightning.sampling import Corpus
from cfl_lightning.sampling.budget import MemoryEstimate, check_memory, estimate_sampling
from cfl_lightning.sampling.intervention import Intervention
from cfl_lightning.sampling.request import SEED_MAX
from cfl_lightning.sampling.visits import (
    mixture_weights,
    reach_probability,
    sample_visiting,
    stake_states,
)

__all__ = ["PFADataModule", "SPLITS", "SAMPLING_METHOD"]

SPLITS = ("train", "val", "test")
SAMPLING_METHOD = "binning"
#: bytes a data module keeps per position of a corpus (input, target and state ids, int64)
TOKEN_BYTES = 24
GENERATORS = ("parity", "parity_resampled", "random")
#: the constructor arguments each generator uses
GENERATOR_ARGS = {
    "parity": ("eta",),
    "parity_resampled": ("weight_seed",),
    "random": ("num_states", "num_symbols", "topology_seed", "weight_seed"),
}
_SOURCE_ARGS = (
    "automaton", "generator", "eta", "num_states", "num_symbols", "topology_seed", "weight_seed"
)
_STAGE_SPLITS = {
    "fit": ("train", "val"),
    "validate": ("val",),
    "test": ("test",),
    "predict": ("test",),
}


def _integer(name: str, value: Any, low: int, high: Optional[int] = None) -> int:
    """``value`` as a Python int in ``low..high`` (numpy integers accepted, bools refused)."""
    try:
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None or number < low or (high is not None and number > high):
        bound = f"in {low}..{high}" if high is not None else f">= {low}"
        raise CflError(f"{name} must be an integer {bound}, got {value!r}")
    return number


def spread_batches(batches: list[torch.Tensor], ranks: int, split: str) -> list[torch.Tensor]:
    """At least ``ranks`` batches for an evaluation split, so that no rank is left without one.

    Lightning refuses a rank whose loader is empty, and evaluation never repeats strings: while
    there are fewer batches than ranks, the batch with the most strings is cut in two (its halves
    stay in place, so the order by length is kept and every string is still counted once).

    Args:
        batches: the split's batches, each a 1-D tensor of string indices.
        ranks: the number of processes.
        split: the split's name (for the error message).

    Raises:
        CflError: the split has fewer strings than there are processes.
    """
    strings = sum(len(b) for b in batches)
    if strings < ranks:
        raise CflError(
            f"the {split} split has {strings} string{'s' if strings != 1 else ''}, fewer than the "
            f"{ranks} processes (raise data.{split}_strings or use fewer devices)"
        )
    batches = list(batches)
    while len(batches) < ranks:
        i = max(range(len(batches)), key=lambda j: len(batches[j]))
        half = (len(batches[i]) + 1) // 2
        batches[i : i + 1] = [batches[i][:half], batches[i][half:]]
    return batches


class PFADataModule(L.LightningDataModule):
    """Language-modeling data sampled from a probabilistic finite-state automaton.

    Token ids: the automaton's symbols are ``0 .. S-1`` in alphabet order, ``EOS = S``,
    ``BOS = S + 1``, ``PAD = S + 2`` (embedding size ``vocab_size = S + 3``, output size
    ``S + 1``). Every batch is a dict with ``input_ids``, ``target_ids``, ``target_probs``,
    ``states`` and ``mask`` (see :mod:`cfl_lightning.data.batching`). Batches hold strings of
    similar length and at most ``max_tokens`` real positions (a string of length ``n`` has
    ``n + 1``); a single longer string forms a batch of its own.

    Args:
        automaton: path of an automaton JSON file; if None, the automaton comes from
            ``generator``.
        generator: built-in automaton used when ``automaton`` is None: "parity" (the paper's
            parity + star-free PFSA, weights set by ``eta``), "parity_resampled" (same topology,
            Dirichlet weights drawn with ``weight_seed``) or "random" (``num_states`` states,
            ``num_symbols`` symbols, ``topology_seed``, ``weight_seed``).
        eta: probability of the star-free branch of the "parity" automaton, in [0, 1].
        num_states: number of states of the "random" automaton.
        num_symbols: alphabet size of the "random" automaton (the attribute ``num_symbols`` of
            the built module is the alphabet size of whichever automaton is used).
        topology_seed: seed of the "random" automaton's topology.
        weight_seed: seed of the "random" and "parity_resampled" automata's weights.
        intervention: how the training corpus is sampled: "none" (unconstrained), "exact" (the
            corpus traverses the event exactly ``count`` times), "at_least" (at least ``count``
            times) or "at_least_once" (exactly ``count`` strings contain the event).
        event: the counted transitions: "state:NAME", "symbol:SYM" or "transition:SOURCE:SYM".
            With intervention "none" the corpus is unconstrained and the event's realized count
            is only recorded (the correlational setting).
        count: the intervention's target (required with an intervention, not allowed without).
        num_strings: number of training strings K.
        val_strings: number of validation strings (0 for none).
        test_strings: number of unconstrained test strings (0 for none).
        test_target_strings: additional test strings drawn conditioned on reaching a state at
            which the event is at stake (its state; for a symbol, every state where the symbol
            has positive probability), for reliable estimates of a rarely visited target. The
            per-visit prefix law at those states is unchanged by the conditioning, and test
            batches carry importance ``weights`` that keep every other test value unbiased
            too. Needs an event; 0 (default) for none.
        val_intervention: "none" (default): validation strings are unconstrained, so early
            stopping, the LR schedule and the checkpoint choice select on the KL to the
            automaton's own distribution, which is what the test reports; "same": drawn under
            the training intervention with its count scaled by ``val_strings / num_strings``
            (rounded; in-distribution validation, as without access to the automaton).
        max_tokens: upper bound on the real positions (n + 1 per string) in one batch.
        seed: seed of all sampling and of the per-epoch batch order; each split and the batch
            order use separate streams derived from it.
        device: where to sample: "auto" (CUDA when available), "cpu", "cuda" or "cuda:N".
            Batches are always returned on the CPU (Lightning moves them).
        cache_dir: directory of the corpus cache. None: the environment variable
            CFL_LIGHTNING_CACHE if set, else ~/.cache/cfl_lightning. "none" (also accepted as
            the value of CFL_LIGHTNING_CACHE) disables the cache.
        num_workers: DataLoader worker processes (0 = load in the main process).

    Example:
        >>> dm = PFADataModule(generator="parity", eta=0.3, cache_dir="none")
        >>> dm.num_symbols, dm.vocab_size, dm.eos_id, dm.bos_id, dm.pad_id
        (2, 5, 2, 3, 4)
    """

    def __init__(
        self,
        automaton: Optional[str] = None,
        generator: Literal["parity", "parity_resampled", "random"] = "parity",
        eta: float = 0.5,
        num_states: int = 50,
        num_symbols: int = 10,
        topology_seed: int = 0,
        weight_seed: int = 0,
        intervention: Literal["none", "exact", "at_least", "at_least_once"] = "none",
        event: Optional[str] = None,
        count: Optional[int] = None,
        num_strings: int = 500,
        val_strings: int = 200,
        test_strings: int = 500,
        test_target_strings: int = 0,
        val_intervention: Literal["none", "same"] = "none",
        max_tokens: int = 128,
        seed: int = 0,
        device: str = "auto",
        cache_dir: Optional[str] = None,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        # numpy integers are accepted and stored as Python ints (the hparams are logged)
        num_strings, val_strings, test_strings, test_target_strings, max_tokens, num_workers = (
            _integer(name, value, low)
            for name, value, low in (
                ("num_strings", num_strings, 1),
                ("val_strings", val_strings, 0),
                ("test_strings", test_strings, 0),
                ("test_target_strings", test_target_strings, 0),
                ("max_tokens", max_tokens, 1),
                ("num_workers", num_workers, 0),
            )
        )
        num_states, num_symbols = _integer("num_states", num_states, 1), _integer(
            "num_symbols", num_symbols, 1)
        seed, topology_seed, weight_seed = (
            _integer(name, value, 0, SEED_MAX)
            for name, value in (("seed", seed), ("topology_seed", topology_seed),
                                ("weight_seed", weight_seed))
        )
        self.save_hyperparameters()
        self.pfsa: PFSA = self._build_automaton()
        # The recorded hparam is the real alphabet size (the constructor value only sizes random
        # automata); Lightning merges data and model hparams and rejects a mismatch with the
        # model's num_symbols. Saved again (not edited in place) so that ``hparams_initial``,
        # which the Trainer logs and merges, holds it too.
        self.save_hyperparameters({**self.hparams, "num_symbols": self.pfsa.num_symbols})
        #: the training corpus's intervention (kind, event, count), validated on the automaton
        self.intervention: Intervention = self._check_intervention()
        #: the counted event (None without one)
        self.event: Optional[Event] = self.intervention.event
        self.event_function = None if self.event is None else self.event.function(self.pfsa)
        if val_intervention not in ("none", "same"):
            raise CflError(f"val_intervention must be 'none' or 'same', got {val_intervention!r}")
        #: the validation corpus's intervention ("same": the training one, count scaled)
        self.val_intervention: Intervention = self._check_val_intervention()
        #: ``[Q]`` bool states at which the event is at stake (None without an event)
        self.stake = None if self.event is None else stake_states(self.pfsa, self.event)
        self.reach_probability: Optional[float] = None
        if test_target_strings:
            if self.stake is None:
                raise CflError("test_target_strings needs an event (data.event)")
            self.reach_probability = reach_probability(self.pfsa, self.stake)
            if self.reach_probability <= 0:
                raise CflError(
                    f"no string of the automaton reaches a state where {self.event} is at stake"
                )
        try:
            self._device = torch.device(device) if device != "auto" else None
        except (RuntimeError, TypeError):
            raise CflError(
                f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}"
            ) from None
        self.cache_path = resolve_cache_dir(cache_dir)
        self._check_sizes()
        self.num_symbols: int = self.pfsa.num_symbols
        self.vocab_size: int = self.num_symbols + 3
        self.eos_id: int = self.num_symbols
        self.bos_id: int = self.num_symbols + 1
        self.pad_id: int = self.num_symbols + 2
        self._splits: dict[str, tuple[Corpus, TokenizedCorpus, list[torch.Tensor]]] = {}
        self.cache_hits: dict[str, bool] = {}

    # ------------------------------------------------------------------ construction checks
    def _build_automaton(self) -> PFSA:
        hp = self.hparams
        if hp.automaton is not None:
            return PFSA.from_json(hp.automaton)
        if hp.generator == "parity":
            return parity_starfree_pfsa(hp.eta)
        if hp.generator == "parity_resampled":
            return resampled_parity_starfree_pfsa(hp.weight_seed)
        if hp.generator == "random":
            return random_pfsa(hp.num_states, hp.num_symbols, hp.topology_seed, hp.weight_seed)
        raise PFSAError(f"unknown generator {hp.generator!r}; expected one of {GENERATORS}")

    def _check_intervention(self) -> Intervention:
        hp = self.hparams
        intervention = Intervention.create(hp.intervention, hp.event, hp.count)
        intervention.validate(self.pfsa, hp.num_strings)
        return intervention

    def _check_val_intervention(self) -> Intervention:
        hp, train = self.hparams, self.intervention
        if hp.val_intervention == "none" or not train.constrained or hp.val_strings == 0:
            return Intervention.create("none")
        assert train.count is not None
        count = int(round(train.count * hp.val_strings / hp.num_strings))
        intervention = Intervention.create(train.kind, train.event, count)
        intervention.validate(self.pfsa, hp.val_strings)
        return intervention

    def _check_sizes(self) -> None:
        """Refuse corpora too large for memory before anything is sampled or logged.

        Sums :func:`~cfl_lightning.sampling.estimate_sampling` over the splits (every split is
        kept, with its per-position tensors: :data:`TOKEN_BYTES` per position); the exact
        sampler's bins are transient, so only the largest counts.

        Raises:
            SizeError: the estimate exceeds the memory available (the message names every
                split's size).
        """
        hp = self.hparams
        sizes = {
            "num_strings": hp.num_strings, "val_strings": hp.val_strings,
            "test_strings": hp.test_strings, "test_target_strings": hp.test_target_strings,
        }
        interventions = {"num_strings": self.intervention, "val_strings": self.val_intervention}
        parts = []
        for name, k in sizes.items():
            if k == 0:
                continue
            intervention = interventions.get(name)
            constrained = intervention is not None and intervention.constrained
            parts.append(estimate_sampling(
                self.pfsa, k,
                intervention=intervention.kind if constrained else "none",
                event=intervention.event if constrained else None,
                count=intervention.count if constrained else None,
                extra_bytes_per_token=TOKEN_BYTES,
            ))
        total = MemoryEstimate(
            num_strings=sum(p.num_strings for p in parts),
            expected_length=parts[0].expected_length,
            expected_tokens=sum(p.expected_tokens for p in parts),
            bins_bytes=max(p.bins_bytes for p in parts),
            corpus_bytes=sum(p.corpus_bytes for p in parts),
        )
        listed = ", ".join(f"{name} {k:,}" for name, k in sizes.items() if k)
        check_memory(total, self.device, what=f"the data module's corpora ({listed})")

    # ------------------------------------------------------------------ sampling
    @property
    def device(self) -> torch.device:
        """The sampling device (``"auto"`` resolved)."""
        if self._device is not None:
            if self._device.type == "cuda" and not torch.cuda.is_available():
                raise CflError(f"device {self.hparams.device!r} requested but CUDA is unavailable")
            return self._device
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def _sampling_arguments(self, split: str) -> dict[str, Any]:
        hp = self.hparams
        sizes = {
            "train": hp.num_strings,
            "val": hp.val_strings,
            "test": hp.test_strings,
            "test_target": hp.test_target_strings,
        }
        intervention = {"train": self.intervention, "val": self.val_intervention}.get(split)
        if split == "test_target":  # conditioned on reaching a state where the event is at stake
            kind, event, count = "reach", str(self.event), None
        elif intervention is not None and intervention.constrained:
            kind, event, count = intervention.kind, str(intervention.event), intervention.count
        else:
            kind, event, count = "none", None, None
        return {
            "split": split,
            "num_strings": sizes[split],
            "seed": derive_seed(hp.seed, split),
            "intervention": kind,
            "event": event,
            "count": count,
            "method": SAMPLING_METHOD,
            "device_type": self.device.type,
        }

    def _cached(self, args: dict[str, Any]) -> tuple[Corpus, bool]:
        """``(corpus, cache hit)`` for the sampling arguments ``args``."""
        if args["num_strings"] == 0:  # an empty split: nothing to sample or cache
            return Corpus(torch.zeros(0, dtype=torch.long), torch.zeros(1, dtype=torch.long)), False
        key = corpus_key(self.pfsa, **args)
        return cached_corpus(self.cache_path, key, lambda: self._sample(args))

    def _sample(self, args: dict[str, Any]) -> Corpus:
        if args["intervention"] == "reach":
            assert self.stake is not None
            pfsa = self.pfsa.to(self.device)
            gen = torch.Generator(device=pfsa.device).manual_seed(args["seed"])
            return sample_visiting(pfsa, args["num_strings"], gen, self.stake).to("cpu")
        corpus = sampling.sample_corpus(
            self.pfsa.to(self.device),
            args["num_strings"],
            seed=args["seed"],
            intervention=args["intervention"],
            event=args["event"],
            count=args["count"],
            method=args["method"],
            device=self.device,
        )
        return corpus.to("cpu")

    def _load(self, split: str) -> tuple[Corpus, TokenizedCorpus, list[torch.Tensor]]:
        if split not in self._splits:
            args = self._sampling_arguments(split)
            corpus, hit = self._cached(args)
            if len(corpus) != args["num_strings"]:
                raise RuntimeError(
                    f"{split} corpus has {len(corpus)} strings, expected {args['num_strings']}"
                )
            if split == "test" and self.hparams.test_target_strings:
                target, target_hit = self._cached(self._sampling_arguments("test_target"))
                corpus, hit = self._mix(corpus, target), hit and target_hit
            event_function = self.event_function if split in ("train", "val") else None
            tokenized = tensorize(corpus, self.pfsa, event_function, device=self.device)
            if split == "train":
                self._check_realized(tokenized)
            if split == "val" and not self.val_intervention.satisfied(tokenized.counts):
                raise RuntimeError(
                    "the sampler returned validation strings violating intervention "
                    f"{self.val_intervention}"
                )
            self.cache_hits[split] = hit
            batches = length_batches(tokenized.positions, self.hparams.max_tokens)
            self._splits[split] = (corpus, tokenized, batches)
        return self._splits[split]

    @staticmethod
    def _mix(plain: Corpus, target: Corpus) -> Corpus:
        """The plain test strings followed by the conditioned ones (no event counts)."""
        k, m = len(plain), len(target)
        parts = [(torch.arange(k), plain), (torch.arange(k, k + m), target)]
        parts = [(i, Corpus(c.tokens, c.offsets, None)) for i, c in parts if len(c)]
        return Corpus.interleave(parts, k + m)

    def test_weights(self) -> Optional[torch.Tensor]:
        """``[K]`` float64 importance weights of the test strings, or None (all 1).

        With ``test_target_strings`` the test set mixes ``test_strings`` unconstrained strings
        and ``test_target_strings`` strings conditioned on reaching the event's at-stake
        states; each string weighs ``P(y) / mix(y)``
        (:func:`~cfl_lightning.sampling.visits.mixture_weights`).
        """
        hp = self.hparams
        if not hp.test_target_strings:
            return None
        assert self.stake is not None and self.reach_probability is not None
        tokenized = self.tokenized("test")
        at_stake = self.stake[tokenized.states]
        owner = torch.repeat_interleave(torch.arange(len(tokenized)), tokenized.positions)
        reached = torch.zeros(len(tokenized), dtype=torch.long).index_add_(
            0, owner, at_stake.long()
        ) > 0
        return mixture_weights(
            reached, hp.test_strings, hp.test_target_strings, self.reach_probability
        )

    def _check_realized(self, tokenized: TokenizedCorpus) -> None:
        """Guard the causal setup: the corpus must satisfy the intervention it was sampled under."""
        if tokenized.counts is not None and not self.intervention.satisfied(tokenized.counts):
            raise RuntimeError(
                f"the sampler returned a corpus violating intervention {self.intervention}: "
                f"realized {self.intervention.realized(tokenized.counts)}"
            )

    def corpus(self, split: str = "train") -> Corpus:
        """The sampled strings of ``split`` ("train", "val" or "test"); sampled on first use."""
        if split not in SPLITS:
            raise CflError(f"unknown split {split!r}; expected one of {SPLITS}")
        return self._load(split)[0]

    def tokenized(self, split: str = "train") -> TokenizedCorpus:
        """Per-position arrays (inputs, targets, states, event counts) of ``split``."""
        self.corpus(split)
        return self._splits[split][1]

    def batches(self, split: str = "train") -> list[torch.Tensor]:
        """The string indices of every batch of ``split``, in unshuffled (length) order."""
        self.corpus(split)
        return self._splits[split][2]

    # ------------------------------------------------------------------ Lightning hooks
    def prepare_data(self) -> None:
        """Fill the on-disk cache with all three corpora (nothing to do without a cache)."""
        if self.cache_path is None:
            return
        for split in SPLITS:
            self._cached(self._sampling_arguments(split))
        if self.hparams.test_target_strings:
            self._cached(self._sampling_arguments("test_target"))

    def setup(self, stage: Optional[str] = None) -> None:
        """Sample (or read from the cache) the corpora ``stage`` needs; idempotent."""
        for split in _STAGE_SPLITS.get(str(stage) if stage is not None else "", SPLITS):
            self._load(split)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        """Batches of ``split`` for this rank.

        Training (``shuffle``): every rank gets the same number of batches, the list padded
        with its first batches as ``DistributedSampler`` does (each rank must take the same
        number of optimizer steps). Evaluation: rank ``r`` of ``R`` gets batches ``r, r + R,
        ...`` and nothing is repeated (shares may differ by one batch), so epoch sums over the
        ranks count every validation/test string exactly once.
        """
        _, tokenized, batches = self._load(split)
        probs = self.pfsa.next_symbol_probs().to(torch.float32)
        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        if not shuffle and world > 1:
            batches = spread_batches(batches, world, split)
            batches, world, rank = batches[rank::world], 1, 0  # this rank's share, unpadded
        order = BatchOrderSampler(
            len(batches),
            shuffle=shuffle,
            seed=derive_seed(self.hparams.seed, "batch-order"),
            num_replicas=world,
            rank=rank,
        )
        dataset = BatchDataset(tokenized, batches, probs, self.pad_id)
        weights = self.test_weights() if split == "test" else None
        if weights is not None:
            dataset = _WithWeights(dataset, weights)
        return DataLoader(
            dataset,
            batch_size=None,
            sampler=order,
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        """Training batches in a shuffled order, deterministic given ``seed`` and the epoch."""
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        """Validation batches, unshuffled (shortest strings first)."""
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        """Test batches, unshuffled (shortest strings first)."""
        return self._loader("test", shuffle=False)

    # ------------------------------------------------------------------ analysis
    @property
    def automaton_id(self) -> str:
        """First 16 hex digits of the sha256 of the canonical automaton JSON."""
        return hashlib.sha256(automaton_json(self.pfsa).encode("utf-8")).hexdigest()[:16]

    @property
    def realized_count(self) -> Optional[int]:
        """Event occurrences in the training corpus (None without an event).

        Counted from the automaton walk over the corpus; equals ``count`` under "exact". Samples
        (or reads) the training corpus if ``setup`` has not done so yet.
        """
        if self.event is None:
            return None
        return int(self.tokenized("train").counts.sum())

    @property
    def realized_strings(self) -> Optional[int]:
        """Training strings with at least one occurrence (None without an event)."""
        if self.event is None:
            return None
        return int((self.tokenized("train").counts > 0).sum())

    def occurrences(self, split: str = "train") -> dict[str, dict[str, int]]:
        """Realized occurrences of every event in a corpus, for correlational analysis.

        Returns:
            ``{"count": {spec: n}, "strings": {spec: m}}`` over every ``state:NAME``,
            ``symbol:SYM`` and existing ``transition:SOURCE:SYM``: total traversals, and strings
            with at least one traversal. One unconstrained run thus serves every target.
        """
        tok = self.tokenized(split)
        q, s = self.pfsa.num_states, self.pfsa.num_symbols
        moves = tok.targets < s  # positions that emit a symbol (not EOS)
        string_of = torch.repeat_interleave(torch.arange(len(tok)), tok.positions)[moves]
        arc = tok.states[moves] * s + tok.targets[moves]
        names = {
            "state": (arc // s, q, [f"state:{n}" for n in self.pfsa.states]),
            "symbol": (arc % s, s, [f"symbol:{a}" for a in self.pfsa.alphabet]),
            "transition": (
                arc,
                q * s,
                [f"transition:{src}:{a}" for src in self.pfsa.states for a in self.pfsa.alphabet],
            ),
        }
        exists = (self.pfsa.next_state >= 0).reshape(-1).tolist()
        count: dict[str, int] = {}
        strings: dict[str, int] = {}
        for kind, (index, size, labels) in names.items():
            totals = torch.bincount(index, minlength=size).tolist()
            pairs = torch.unique(string_of * size + index)
            holders = torch.bincount(pairs % size, minlength=size).tolist()
            for i, label in enumerate(labels):
                if kind == "transition" and not exists[i]:
                    continue
                count[label], strings[label] = int(totals[i]), int(holders[i])
        return {"count": count, "strings": strings}

    def expected_occurrences(self) -> dict[str, float]:
        """``num_strings`` x expected occurrences per unconstrained string, for every event."""
        k = self.hparams.num_strings
        flow = self.pfsa.expected_visits()[:, None] * self.pfsa.weights  # [Q, S]
        out = {f"state:{n}": k * float(v) for n, v in zip(self.pfsa.states, flow.sum(1))}
        out.update({f"symbol:{a}": k * float(v) for a, v in zip(self.pfsa.alphabet, flow.sum(0))})
        table = self.pfsa.next_state.tolist()
        for i, src in enumerate(self.pfsa.states):
            for j, a in enumerate(self.pfsa.alphabet):
                if table[i][j] >= 0:
                    out[f"transition:{src}:{a}"] = k * float(flow[i, j])
        return out

    @property
    def expected_count(self) -> Optional[float]:
        """``num_strings`` x expected occurrences per unconstrained string (None without event)."""
        if self.event is None:
            return None
        return self.hparams.num_strings * self.event.expected_count(self.pfsa)

    def summary(self) -> dict[str, Any]:
        """Flat dict for hyperparameter logging.

        The constructor arguments that apply to the chosen automaton source (``automaton``, or
        ``generator`` with its own arguments: ``eta`` for "parity", ``weight_seed`` for
        "parity_resampled", ``num_states``/``num_symbols``/``topology_seed``/``weight_seed`` for
        "random") and every other argument, plus ``realized_count``, ``realized_strings``,
        ``expected_count``, ``automaton_states``, ``alphabet_size``, ``vocab_size``,
        ``automaton_id`` and ``train_tokens`` (symbols in the training corpus). Samples (or
        reads) the training corpus if needed.
        """
        hp = dict(self.hparams)
        source = (
            ("automaton",) if hp["automaton"] is not None else ("generator", *GENERATOR_ARGS[hp["generator"]])
        )
        out = {k: v for k, v in hp.items() if k not in _SOURCE_ARGS or k in source}
        out.update(
            realized_count=self.realized_count,
            realized_strings=self.realized_strings,
            expected_count=self.expected_count,
            automaton_states=self.pfsa.num_states,
            alphabet_size=self.num_symbols,
            vocab_size=self.vocab_size,
            automaton_id=self.automaton_id,
            train_tokens=int(self.corpus("train").tokens.numel()),
        )
        return out


class _WithWeights(torch.utils.data.Dataset):
    """A :class:`BatchDataset` whose batches also carry ``weights`` ``[B]`` (one per string)."""

    def __init__(self, batches: BatchDataset, weights: torch.Tensor) -> None:
        self.batches, self.weights = batches, weights

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        batch = self.batches[i]
        batch["weights"] = self.weights[self.batches.batches[i]]
        return batch
