"""What each corpus of a data module is drawn from: one value per split, its cache key, its draw.

A :class:`SplitPlan` holds a split's size, its seed (derived from the data module's ``seed``)
and the :class:`~cfl_lightning.sampling.Intervention` it is drawn under -- the value the data
module validated on construction, passed on unchanged to the sampler
(:func:`~cfl_lightning.sampling.sampler.draw`). The targeted test strings are not drawn under an
intervention on the training corpus but conditioned on reaching the event's at-stake states
(``reach``; :mod:`cfl_lightning.data.targeted`), and the long test strings are drawn
conditioned on their length (``min_length``; :mod:`cfl_lightning.sampling.length`).
:meth:`SplitPlan.key_arguments` is the record that :func:`~cfl_lightning.data.cache.corpus_key`
hashes: its format is the cache's and must not change (a targeted split is recorded with the
intervention label ``"reach"``; ``min_length`` is recorded only where it is set, so every other
split keeps its key).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from cfl_lightning.automata import Automaton, Event
from cfl_lightning.data.targeted import sample_targeted
from cfl_lightning.sampling import Corpus, Intervention
from cfl_lightning.sampling.length import sample_min_length
from cfl_lightning.sampling.request import SamplingRequest
from cfl_lightning.sampling.sampler import draw
from cfl_lightning.sampling.token_matched import sample_token_matched

__all__ = ["SplitPlan", "SAMPLING_METHOD", "REACH"]

SAMPLING_METHOD = "binning"
#: the intervention label of targeted test strings in a cache key (not an intervention kind)
REACH = "reach"


@dataclass(frozen=True)
class SplitPlan:
    """The sampling of one split.

    Attributes:
        split: ``train``, ``val``, ``test``, ``test_target`` or ``long_test``.
        num_strings: its strings (0: an empty split, nothing sampled).
        seed: its random stream's seed.
        intervention: the validated intervention it is drawn under; ``Intervention()`` (none,
            no event) for unconstrained splits: their event counts come from the tokenizer.
        reach: for targeted test strings, the event whose at-stake states every string reaches.
        min_length: for the long split, the least length ``L`` of every string (drawn from the
            automaton conditioned on ``length >= L``).
        tokens: a token-matched training corpus's total of symbols (``num_strings`` unused: the
            sampler chooses K, :func:`~cfl_lightning.sampling.token_matched.sample_token_matched`).
    """

    split: str
    num_strings: int
    seed: int
    intervention: Intervention = Intervention()
    reach: Optional[Event] = None
    min_length: Optional[int] = None
    tokens: Optional[int] = None

    def key_arguments(self, device: torch.device) -> dict[str, Any]:
        """The sampling arguments that identify the corpus (what the cache key hashes)."""
        spec = self.intervention
        kind, event = (REACH, self.reach) if self.reach is not None else (spec.kind, spec.event)
        length = {} if self.min_length is None else {"min_length": self.min_length}
        tokens = {} if self.tokens is None else {"tokens": self.tokens}  # keys unchanged without
        return {
            **tokens,
            "split": self.split,
            "num_strings": self.num_strings,
            "seed": self.seed,
            "intervention": kind,
            "event": None if event is None else str(event),
            "count": spec.count,
            "method": SAMPLING_METHOD,
            "device_type": device.type,
            **length,
        }

    def draw(self, pfsa: Automaton, device: torch.device, stake: Optional[torch.Tensor]) -> Corpus:
        """Sample the split's corpus on ``device`` (returned on the CPU).

        Args:
            pfsa: the automaton.
            device: the resolved sampling device.
            stake: ``[C]`` bool at-stake classes (needed only with ``reach``).
        """
        if self.num_strings == 0:
            return Corpus(torch.zeros(0, dtype=torch.long), torch.zeros(1, dtype=torch.long))
        if self.reach is not None:
            assert stake is not None
            return sample_targeted(pfsa, self.num_strings, self.seed, stake, device)
        if self.min_length is not None:
            return sample_min_length(
                pfsa, self.num_strings, self.min_length, self.seed, device=device,
                what=f"data.long_min_length {self.min_length}",
            )
        if self.tokens is not None:
            spec = self.intervention
            return sample_token_matched(
                pfsa, self.tokens, seed=self.seed, intervention=spec.kind, event=spec.event,
                count=spec.count, device=device,
            ).corpus
        request = SamplingRequest(
            self.num_strings, self.seed, self.intervention, SAMPLING_METHOD, device
        )
        return draw(pfsa, request)
