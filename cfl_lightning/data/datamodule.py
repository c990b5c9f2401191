"""``PFADataModule``: corpora sampled from a PFSA, optionally under an intervention, as batches.

Lifecycle:

* ``__init__`` checks the settings, builds the automaton, creates and validates the
  intervention once, resolves the device and checks the memory of all splits (cheap), so the
  vocabulary (``num_symbols``, ``vocab_size``, the special ids) is known before ``setup`` and can
  be linked to a model's arguments with
  ``LightningCLI.link_arguments(..., apply_on="instantiate")``.
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

Parts in their own modules: the settings (:mod:`cfl_lightning.data.settings`), what each split
is drawn from and its cache key (:mod:`cfl_lightning.data.splits`), the targeted test strings
(:mod:`cfl_lightning.data.targeted`) and occurrence reporting
(:mod:`cfl_lightning.data.occurrences`).

Reproducibility: the same arguments give the identical corpus and batches. ``device="auto"``
samples on CUDA when available, and CUDA and CPU draws differ: the device type is part of the
cache key; set ``device="cpu"`` for corpora identical across machines.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Literal, Optional

import lightning as L
import torch
from torch.utils.data import DataLoader

from cfl_lightning.automata import Automaton, Event, class_tables, expected_event_count
from cfl_lightning.data.batching import (
    BatchDataset,
    BatchOrderSampler,
    TokenizedCorpus,
    check_laws,
    derive_seed,
    length_batches,
    tensorize,
)
from cfl_lightning.data.cache import automaton_json, cached_corpus, corpus_key, resolve_cache_dir
from cfl_lightning.data.corpus_file import training_corpus, unmet_intervention
from cfl_lightning.data.occurrences import (
    counted_by_sampler,
    expected_occurrences,
    occurrences,
    sampler_counts,
)
from cfl_lightning.data.settings import (
    GENERATOR_ARGS,
    GENERATORS,
    DataSettings,
    applicable,
    attributes_section,
    build_automaton,
)
from cfl_lightning.data.splits import SAMPLING_METHOD, SplitPlan
from cfl_lightning.data.targeted import WithWeights, at_stake, mix, test_weights
from cfl_lightning.data.tokens import TokenIds
from cfl_lightning.errors import CflError, InterventionError
from cfl_lightning.kinds.automata import automaton_kind
from cfl_lightning.kinds.generators import GeneratorName
from cfl_lightning.kinds.interventions import InterventionName
from cfl_lightning.sampling import Corpus, Intervention
from cfl_lightning.sampling.budget import check_corpora_memory
from cfl_lightning.sampling.length import check_min_length
from cfl_lightning.sampling.request import resolve_device
from cfl_lightning.sampling.token_matched import check_token_kind

__all__ = ["PFADataModule", "SPLITS", "LONG", "SAMPLING_METHOD", "GENERATORS", "GENERATOR_ARGS"]

SPLITS = ("train", "val", "test")
#: the length-generalization test split (with ``long_min_length``)
LONG = "long_test"
#: bytes a data module keeps per position of a corpus (input, target and state ids, int64)
TOKEN_BYTES = 24
_STAGE_SPLITS = {
    "fit": ("train", "val"),
    "validate": ("val",),
    "test": ("test", LONG),
    "predict": ("test",),
}


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


_DOC = """Language-modeling data sampled from a probabilistic finite-state automaton.

Token ids (:class:`~cfl_lightning.data.tokens.TokenIds`): the automaton's symbols are
``0 .. S-1`` in alphabet order, ``EOS = S``, ``BOS = S + 1``, ``PAD = S + 2`` (embedding size
``vocab_size = S + 3``, output size ``S + 1``). Every batch is a dict with ``input_ids``,
``target_ids``, ``target_probs``, ``states`` and ``mask`` (see :mod:`cfl_lightning.data.batching`).
Batches hold strings of similar length and at most ``max_tokens`` real positions (a string of
length ``n`` has ``n + 1``); a single longer string forms a batch of its own.

The arguments are the fields of :class:`~cfl_lightning.data.settings.DataSettings`, kept as
:attr:`settings` (``hparams`` hold the same values, with ``num_symbols`` the automaton's
alphabet size).

Args:
{args}

Example:
    >>> dm = PFADataModule(generator="parity", eta=0.3, cache_dir="none")
    >>> dm.num_symbols, dm.vocab_size, dm.eos_id, dm.bos_id, dm.pad_id
    (2, 5, 2, 3, 4)
"""


class PFADataModule(L.LightningDataModule):
    __doc__ = _DOC.format(args=attributes_section())

    def __init__(
        self,
        automaton: Optional[str] = None,
        generator: GeneratorName = "parity",  # type: ignore[assignment]
        eta: float = 0.5,
        num_states: int = 50,
        num_symbols: int = 10,
        topology_seed: int = 0,
        weight_seed: int = 0,
        intervention: InterventionName = "none",  # type: ignore[assignment]
        event: Optional[str] = None,
        count: Optional[int] = None,
        num_strings: Optional[int] = None,
        corpus: Optional[str] = None,
        tokens: Optional[int] = None,
        val_strings: int = 200,
        test_strings: int = 500,
        test_target_strings: int = 0,
        long_min_length: Optional[int] = None,
        long_test_strings: int = 500,
        val_intervention: Literal["none", "same"] = "none",
        max_tokens: int = 128,
        seed: int = 0,
        device: str = "auto",
        cache_dir: Optional[str] = None,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if isinstance(automaton, Automaton):  # an object: recorded (and cached) as its JSON
            automaton = automaton.to_dict()  # type: ignore[assignment]
        self.save_hyperparameters()  # Lightning's record of the call (the CLI adds its keys)
        settings = DataSettings.from_arguments(locals())
        #: the automaton (any registered kind: :func:`~cfl_lightning.automata.load_automaton`)
        self.automaton: Automaton = build_automaton(settings)
        #: the checked constructor arguments (``num_strings`` resolved: a corpus file's count)
        self.settings: DataSettings
        #: the strings of ``corpus`` (None: the training corpus is sampled)
        self.corpus_file: Optional[Corpus]
        self.settings, self.corpus_file = training_corpus(settings, self.automaton)
        #: the least length of the long test split's strings (None: no long split)
        self.long_min_length: Optional[int] = self.settings.long_min_length
        #: ``P(length >= long_min_length)`` of one string (None without a long split)
        self.long_probability: Optional[float] = self._long_probability()
        # The recorded hparams are the checked settings, with the real alphabet size (the
        # constructor value only sizes random automata): Lightning merges data and model hparams
        # and rejects a mismatch with the model's num_symbols. Saved again (not edited in place)
        # so that ``hparams_initial``, which the Trainer logs and merges, holds it too.
        self.save_hyperparameters(
            {**self.hparams, **self.settings.as_dict(), "num_symbols": self.automaton.num_symbols}
        )
        #: the training corpus's intervention (kind, event, count), validated on the automaton
        self.intervention: Intervention = self._training_intervention()
        #: ``[C, S]`` int64 event table (None without an event)
        self.event_function = self.intervention.validate(self.automaton, self._planned_strings())
        #: the counted event (None without one)
        self.event: Optional[Event] = self.intervention.event
        #: the validation corpus's intervention ("same": the training one, count scaled)
        self.val_intervention: Intervention = self._val_intervention()
        #: ``[C]`` bool classes at which the event is at stake (None without an event), and
        #: ``P(reach)`` of those states (None without targeted test strings)
        self.stake, self.reach_probability = at_stake(
            self.automaton, self.event, self.settings.test_target_strings
        )
        self._device = resolve_device(self.settings.device)
        self.cache_path = resolve_cache_dir(self.settings.cache_dir)
        self._check_memory()
        self.num_symbols: int = self.automaton.num_symbols
        ids = TokenIds(self.num_symbols)
        self.vocab_size: int = ids.vocab_size
        self.eos_id: int = ids.eos
        self.bos_id: int = ids.bos
        self.pad_id: int = ids.pad
        self._splits: dict[str, tuple[Corpus, TokenizedCorpus, list[torch.Tensor]]] = {}
        self.cache_hits: dict[str, bool] = {}
        if self.corpus_file is not None:  # checked against the intervention before any run
            self._load("train")

    @classmethod
    def from_settings(cls, settings: DataSettings) -> PFADataModule:
        """The data module of ``settings`` (the same as passing its fields as arguments)."""
        return cls(**settings.as_dict())

    # ------------------------------------------------------------------ construction checks
    def _long_probability(self) -> Optional[float]:
        """``P(length >= long_min_length)``, refused in one line when the split is out of reach
        (None without a long split)."""
        if self.long_min_length is None or not self.settings.long_test_strings:
            return None
        return check_min_length(
            self.automaton, self.settings.long_test_strings, self.long_min_length,
            f"data.long_min_length {self.long_min_length}",
        )

    def _training_intervention(self) -> Intervention:
        """The training corpus's intervention, refused when its kind has no sampler or does not
        go with ``tokens``."""
        s = self.settings
        intervention = Intervention.create(s.intervention, s.event, s.count)
        if intervention.constrained and intervention.spec.sampler is None:
            raise InterventionError(
                f"intervention {intervention.kind!r} has no exact sampler (its registry "
                "entry's sampler is unset): a data module cannot sample it"
            )
        if s.tokens is not None:
            check_token_kind(intervention.kind, s.tokens)
        return intervention

    def _val_intervention(self) -> Intervention:
        """``none``, or (``val_intervention="same"``) the training one with a scaled count."""
        s, train = self.settings, self.intervention
        if s.val_intervention not in ("none", "same"):
            raise CflError(f"val_intervention must be 'none' or 'same', got {s.val_intervention!r}")
        if s.val_intervention == "none" or not train.constrained or s.val_strings == 0:
            return Intervention()
        if s.tokens is not None:
            raise CflError("val_intervention 'same' scales the count by num_strings, which "
                           "tokens leaves to the sampler: use val_intervention 'none' with tokens")
        assert train.count is not None
        count = int(round(train.count * s.val_strings / s.num_strings))
        intervention = Intervention(train.kind, train.event, count)
        intervention.validate(self.automaton, s.val_strings)
        return intervention

    def _check_memory(self) -> None:
        """Refuse corpora too large for memory before anything is sampled or logged.

        Every split is kept, with its per-position tensors (:data:`TOKEN_BYTES` per position):
        one :func:`~cfl_lightning.sampling.budget.check_corpora_memory` over all of them.

        Raises:
            SizeError: the estimate exceeds the memory available (the message names every
                split's size).
        """
        s = self.settings
        corpora = {
            "num_strings": (
                self._planned_strings(), Intervention() if s.corpus else self.intervention
            ),
            "val_strings": (s.val_strings, self.val_intervention),
            "test_strings": (s.test_strings, Intervention()),
            "test_target_strings": (s.test_target_strings, Intervention()),
            "long_test_strings": (s.sizes[LONG], Intervention()),
        }
        listed = ", ".join(f"{name} {k:,}" for name, (k, _) in corpora.items() if k)
        per_position = TOKEN_BYTES
        if not automaton_kind(self.automaton.kind).position_classes:  # float32 laws per position
            per_position += 4 * (self.automaton.num_symbols + 1)
        check_corpora_memory(
            self.automaton, list(corpora.values()), device=self.device,
            extra_bytes_per_token=per_position, what=f"the data module's corpora ({listed})",
        )

    # ------------------------------------------------------------------ sampling
    @property
    def device(self) -> torch.device:
        """The sampling device (``"auto"`` resolved on construction)."""
        return self._device

    def _plan(self, split: str) -> SplitPlan:
        """How ``split``'s corpus is drawn (``train``, ``val``, ``test`` or ``test_target``)."""
        s = self.settings
        seed = derive_seed(s.seed, split)
        if split == "test_target":  # conditioned on reaching a state where the event is at stake
            return SplitPlan(split, s.test_target_strings, seed, reach=self.event)
        if split == LONG:  # conditioned on the length
            return SplitPlan(split, s.sizes[LONG], seed, min_length=s.long_min_length)
        spec = {"train": self.intervention, "val": self.val_intervention}.get(split)
        # an event the tokens cannot recount (a rule's uses): the sampler records its counts
        kept = spec is not None and (spec.constrained or counted_by_sampler(spec))
        tokens = s.tokens if split == "train" else None
        return SplitPlan(
            split, s.sizes[split], seed, spec if kept else Intervention(), tokens=tokens
        )

    def _cached(self, plan: SplitPlan) -> tuple[Corpus, bool]:
        """``(corpus, cache hit)`` of ``plan``: read from the cache, or drawn, checked
        (:func:`~cfl_lightning.data.batching.check_laws`) and written."""
        if plan.num_strings == 0:  # an empty split: nothing to sample or cache
            return plan.draw(self.automaton, self.device, self.stake), False
        key = corpus_key(self.automaton, **plan.key_arguments(self.device))
        return cached_corpus(self.cache_path, key, lambda: check_laws(
            plan.draw(self.automaton, self.device, self.stake), self.automaton, self.device))

    def _read(self, split: str) -> tuple[Corpus, bool]:
        """``split``'s strings (the test ones followed by the targeted ones) and a cache hit."""
        if split == "train" and self.corpus_file is not None:
            return self.corpus_file, False
        plan = self._plan(split)
        corpus, hit = self._cached(plan)
        if plan.tokens is None and len(corpus) != plan.num_strings:
            raise RuntimeError(
                f"{split} corpus has {len(corpus)} strings, expected {plan.num_strings}"
            )
        if split == "test" and self.settings.test_target_strings:
            target, target_hit = self._cached(self._plan("test_target"))
            corpus, hit = mix(corpus, target), hit and target_hit
        return corpus, hit

    def _tokenize(self, split: str, corpus: Corpus) -> TokenizedCorpus:
        """Per-position arrays of ``split``; the corpus must meet its intervention."""
        event_function = self.event_function if split in ("train", "val") else None
        tokenized = tensorize(corpus, self.automaton, event_function, device=self.device)
        spec = {"train": self.intervention, "val": self.val_intervention}.get(split)
        if counted_by_sampler(spec):
            tokenized = dataclasses.replace(tokenized, counts=sampler_counts(split, corpus, spec))
        counts = tokenized.counts
        if spec is not None and counts is not None and not spec.satisfied(counts):
            if split == "train" and self.settings.corpus is not None:
                raise unmet_intervention(self.settings.corpus, spec, counts)
            what = "a corpus" if split == "train" else "validation strings"
            raise RuntimeError(
                f"the sampler returned {what} violating intervention {spec}: "
                f"realized {spec.realized(counts)}"
            )
        return tokenized

    def _load(self, split: str) -> tuple[Corpus, TokenizedCorpus, list[torch.Tensor]]:
        """``split``'s corpus, its per-position arrays and its batches; built on first use."""
        if split not in self._splits:
            corpus, self.cache_hits[split] = self._read(split)
            tokenized = self._tokenize(split, corpus)
            batches = length_batches(tokenized.positions, self.settings.max_tokens)
            self._splits[split] = (corpus, tokenized, batches)
        return self._splits[split]

    def test_weights(self) -> Optional[torch.Tensor]:
        """``[K]`` float64 importance weights of the test strings, or None (all 1).

        With ``test_target_strings`` the test set mixes ``test_strings`` unconstrained strings
        and ``test_target_strings`` strings conditioned on reaching the event's at-stake
        states; each string weighs ``P(y) / mix(y)``
        (:func:`~cfl_lightning.sampling.visits.mixture_weights`).
        """
        s = self.settings
        if not s.test_target_strings:
            return None
        assert self.stake is not None and self.reach_probability is not None
        return test_weights(
            self.tokenized("test"), self.stake, s.test_strings, s.test_target_strings,
            self.reach_probability,
        )

    def corpus(self, split: str = "train") -> Corpus:
        """The strings of ``split`` ("train", "val", "test" or, with ``long_min_length``,
        :data:`LONG`); sampled on first use (``train``: read from ``corpus`` when given)."""
        splits = SPLITS + ((LONG,) if self.long_min_length is not None else ())
        if split not in splits:
            raise CflError(f"unknown split {split!r}; expected one of {splits}")
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
        for split in SPLITS + ((LONG,) if self.long_min_length is not None else ()):
            if split != "train" or self.corpus_file is None:
                self._cached(self._plan(split))
        if self.settings.test_target_strings:
            self._cached(self._plan("test_target"))

    def setup(self, stage: Optional[str] = None) -> None:
        """Sample (or read from the cache) the corpora ``stage`` needs; idempotent."""
        for split in _STAGE_SPLITS.get(str(stage) if stage is not None else "", SPLITS + (LONG,)):
            if split != LONG or self.long_min_length is not None:
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
        probs = None if tokenized.target_probs is not None else self.target_table
        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        if not shuffle and world > 1:
            batches = spread_batches(batches, world, split)
            batches, world, rank = batches[rank::world], 1, 0  # this rank's share, unpadded
        order = BatchOrderSampler(
            len(batches),
            shuffle=shuffle,
            seed=derive_seed(self.settings.seed, "batch-order"),
            num_replicas=world,
            rank=rank,
        )
        dataset = BatchDataset(tokenized, batches, probs, self.pad_id)
        weights = self.test_weights() if split == "test" else None
        if weights is not None:
            dataset = WithWeights(dataset, weights)
        return DataLoader(
            dataset,
            batch_size=None,
            sampler=order,
            num_workers=self.settings.num_workers,
            persistent_workers=self.settings.num_workers > 0,
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

    def long_test_dataloader(self) -> Optional[DataLoader]:
        """Batches of the long split (strings of at least ``long_min_length`` symbols, this
        rank's share as for the test batches), or None without ``long_min_length``.
        :class:`~cfl_lightning.callbacks.DecomposedKLCallback` evaluates them after the test."""
        return None if self.long_min_length is None else self._loader(LONG, shuffle=False)

    # ------------------------------------------------------------------ targets
    @property
    def pfsa(self) -> Automaton:
        """The automaton (the name of :attr:`automaton` before pushdown automata)."""
        return self.automaton

    @property
    def target_table(self) -> torch.Tensor:
        """``[C, S + 1]`` float32: row ``c`` is the target distribution of a position of class
        ``c`` (:func:`~cfl_lightning.automata.class_tables`); batches index it by ``states``."""
        return class_tables(self.automaton)[0].to(torch.float32)

    def results_metadata(self) -> dict[str, Any]:
        """What ``results.json`` records about the data (see :mod:`cfl_lightning.callbacks`)."""
        return self.summary()

    # ------------------------------------------------------------------ analysis
    @property
    def automaton_id(self) -> str:
        """First 16 hex digits of the sha256 of the canonical automaton JSON."""
        return hashlib.sha256(automaton_json(self.automaton).encode("utf-8")).hexdigest()[:16]

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
            with at least one traversal (:func:`~cfl_lightning.data.occurrences.occurrences`).
            One unconstrained run thus serves every target.
        """
        return occurrences(self.automaton, self.tokenized(split))

    def expected_occurrences(self) -> dict[str, float]:
        """``num_strings`` x expected occurrences per unconstrained string, for every event."""
        return expected_occurrences(self.automaton, self.train_strings)

    @property
    def expected_count(self) -> Optional[float]:
        """``num_strings`` x expected occurrences per unconstrained string (None without event)."""
        if self.event is None:
            return None
        return self.train_strings * expected_event_count(self.automaton, self.event)

    def summary(self) -> dict[str, Any]:
        """Flat dict for hyperparameter logging.

        The constructor arguments that apply to the chosen automaton source (``automaton``, or
        ``generator`` with its own arguments: ``eta`` for "parity", ``weight_seed`` for
        "parity_resampled", ``num_states``/``num_symbols``/``topology_seed``/``weight_seed`` for
        "random") and every other argument, plus ``realized_count``, ``realized_strings``,
        ``expected_count``, ``automaton_states``, ``alphabet_size``, ``vocab_size``,
        ``automaton_id``, ``train_tokens`` (symbols in the training corpus) and
        ``train_strings`` (its strings: ``num_strings``, or with ``tokens`` the K chosen).
        Samples (or reads) the training corpus if needed.
        """
        out = applicable(dict(self.hparams))
        out.update(
            realized_count=self.realized_count,
            realized_strings=self.realized_strings,
            expected_count=self.expected_count,
            automaton_states=len(self.automaton.class_names),
            alphabet_size=self.num_symbols,
            vocab_size=self.vocab_size,
            automaton_id=self.automaton_id,
            train_tokens=self.train_tokens,
            train_strings=self.train_strings,
        )
        return out

    @property
    def train_strings(self) -> int:
        """Training strings K: ``num_strings``, or with ``tokens`` the K the sampler chose
        (samples or reads the training corpus then)."""
        if self.settings.tokens is None:
            return self.settings.num_strings
        return len(self.corpus("train"))

    @property
    def train_tokens(self) -> int:
        """Symbols in the training corpus, EOS excluded (samples or reads it if needed)."""
        return int(self.corpus("train").tokens.numel())

    def _planned_strings(self) -> int:
        """K before sampling: ``num_strings``, or with ``tokens`` a guess for the checks
        (``T / E[length]``; at least ``count``, so that the count's bound is not refused)."""
        s = self.settings
        if s.tokens is None:
            return s.num_strings
        guess = round(s.tokens / max(self.automaton.expected_length(), 1e-2))
        return max(1, guess, s.count or 0)
