"""``DataSettings``: the settings of a :class:`~cfl_lightning.data.PFADataModule`, one field each.

The data module's constructor takes these fields as keyword arguments (so ``PFADataModule(...)``
calls and the LightningCLI ``data.*`` keys stay as they are) and builds one
:class:`DataSettings`, which checks the integer fields. The fields' documentation below is also
the constructor's ``Args`` (and so ``fit --help``): it is written once, here.

Example:
    >>> settings = DataSettings(generator="parity", eta=0.3, num_strings=100)
    >>> build_automaton(settings).num_states, settings.num_strings
    (4, 100)
"""

from __future__ import annotations

import inspect
import operator
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, Mapping, Optional

from cfl_lightning.automata import Automaton, load_automaton
from cfl_lightning.errors import CflError
from cfl_lightning.kinds.generators import (
    GENERATOR_NAMES,
    GENERATOR_REGISTRY,
    GeneratorName,
    generator,
)
from cfl_lightning.kinds.interventions import (
    INTERVENTION_KINDS,
    InterventionName,
    intervention_kind,
)
from cfl_lightning.sampling.request import SEED_MAX

__all__ = [
    "DataSettings",
    "GENERATORS",
    "GENERATOR_ARGS",
    "build_automaton",
    "applicable",
    "attributes_section",
]

#: the registered generators' names (a live view of :mod:`cfl_lightning.kinds.generators`)
GENERATORS = GENERATOR_NAMES


#: the constructor arguments each generator uses (its parameters' ``setting`` fields)
GENERATOR_ARGS: Mapping[str, tuple[str, ...]] = GENERATOR_REGISTRY.mapping("settings")
_SOURCE_ARGS = (
    "automaton", "generator", "eta", "num_states", "num_symbols", "topology_seed", "weight_seed"
)
#: training strings when neither ``num_strings`` nor ``corpus`` is given
DEFAULT_NUM_STRINGS = 500
#: integer fields that may be None
_OPTIONAL = ("num_strings", "long_min_length")
#: the integer fields: (name, lowest value, highest value or None), in the order they are checked
_INTEGERS = (
    ("num_strings", 1, None),  # None: the default (below), or with a corpus the file's count
    ("val_strings", 0, None),
    ("test_strings", 0, None),
    ("test_target_strings", 0, None),
    ("long_min_length", 0, None),  # None: no long split
    ("long_test_strings", 0, None),
    ("max_tokens", 1, None),
    ("num_workers", 0, None),
    ("num_states", 1, None),
    ("num_symbols", 1, None),
    ("seed", 0, SEED_MAX),
    ("topology_seed", 0, SEED_MAX),
    ("weight_seed", 0, SEED_MAX),
)


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


@dataclass(frozen=True)
class DataSettings:
    """Where the automaton comes from, how each corpus is sampled, and how it is batched.

    Integer fields accept numpy integers and are stored as Python ints (they are logged).

    Attributes:
        automaton: path of an automaton JSON file of any kind (``"kind"``: ``pfsa``, the
            default, or ``pushdown``); in Python also an automaton object (recorded as its
            JSON); if None, the automaton comes from ``generator``.
        generator: a registered generator used when ``automaton`` is None ({generators}).
        eta: probability of the star-free branch of the "parity" automaton, in [0, 1].
        num_states: number of states of the "random" automaton.
        num_symbols: alphabet size of the "random" automaton (the attribute ``num_symbols`` of
            the built module is the alphabet size of whichever automaton is used).
        topology_seed: seed of the "random" automaton's topology.
        weight_seed: seed of the "random" and "parity_resampled" automata's weights.
        intervention: how the training corpus is sampled, a registered intervention kind
            ({interventions}).
        event: the counted transitions: {events}.
            With intervention "none" the corpus is unconstrained and the event's realized count
            is only recorded (the correlational setting).
        count: the intervention's target (required with an intervention, not allowed without).
        num_strings: number of training strings K (default 500; with ``corpus``: the file's
            count, and a value given must equal it; with ``tokens``: not used).
        corpus: path of a JSON Lines training corpus, as ``python -m cfl_lightning sample``
            writes it (``{{"symbols": [...]}}`` per line), to train on instead of sampling one.
            Every string is checked against the automaton (one line naming the file, the line
            and the first symbol where it leaves the support); the event's realized count is
            recorded as for a sampled corpus. ``intervention``, ``event`` and ``count`` then
            describe the file and are checked, not applied: a corpus that does not meet them is
            refused (its realized value named). Validation and test strings are still sampled.
        tokens: a token-matched training corpus (``exact`` or ``at_least``): its total of
            symbols T (EOS excluded, within 1%); the number of strings K is chosen by the sampler
            (:mod:`~cfl_lightning.sampling.token_matched`), ``num_strings`` is then not used, and
            ``results.json`` records the K chosen. None (default): ``num_strings`` strings.
        val_strings: number of validation strings (0 for none).
        test_strings: number of unconstrained test strings (0 for none).
        test_target_strings: additional test strings drawn conditioned on reaching a state at
            which the event is at stake (its state; for a symbol, every state where the symbol
            has positive probability), for reliable estimates of a rarely visited target. The
            per-visit prefix law at those states is unchanged by the conditioning, and test
            batches carry importance ``weights`` that keep every other test value unbiased
            too. Needs an event; 0 (default) for none.
        long_min_length: the length-generalization split (as in the Chomsky-hierarchy suite
            and FLaRe): ``L`` adds ``long_test_strings`` test strings drawn from the automaton
            conditioned on having at least ``L`` symbols, exactly (rejection on the
            unconstrained sampler; refused in one line when ``P(length >= L)`` is too small to
            reach, :mod:`cfl_lightning.sampling.length`). They are evaluated beside the ordinary
            test strings and recorded under ``long_test`` in ``results.json``. None (default):
            no long split.
        long_test_strings: strings of the long split (used with ``long_min_length``).
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

    Raises:
        CflError: an integer field that is not an integer or is out of its range (the message
            names the field); an unknown generator or intervention kind (the message names the
            known ones).
    """

    automaton: Optional[str] = None
    generator: GeneratorName = "parity"  # type: ignore[assignment]
    eta: float = 0.5
    num_states: int = 50
    num_symbols: int = 10
    topology_seed: int = 0
    weight_seed: int = 0
    intervention: InterventionName = "none"  # type: ignore[assignment]
    event: Optional[str] = None
    count: Optional[int] = None
    num_strings: Optional[int] = None
    corpus: Optional[str] = None
    tokens: Optional[int] = None
    val_strings: int = 200
    test_strings: int = 500
    test_target_strings: int = 0
    long_min_length: Optional[int] = None
    long_test_strings: int = 500
    val_intervention: Literal["none", "same"] = "none"
    max_tokens: int = 128
    seed: int = 0
    device: str = "auto"
    cache_dir: Optional[str] = None
    num_workers: int = 0

    def __post_init__(self) -> None:
        if self.num_strings is None and self.corpus is None:
            object.__setattr__(self, "num_strings", DEFAULT_NUM_STRINGS)
        for name, low, high in _INTEGERS:
            value = getattr(self, name)
            if value is not None or name not in _OPTIONAL:  # a corpus's count is read later
                object.__setattr__(self, name, _integer(name, value, low, high))
        if self.tokens is not None:
            if self.corpus is not None:
                raise CflError("data.tokens samples a training corpus, data.corpus reads one: "
                               "give one of them")
            object.__setattr__(self, "tokens", _integer("tokens", self.tokens, 1))
        generator(self.generator)  # unknown: PFSAError naming the registered generators
        intervention_kind(self.intervention)  # unknown: InterventionError naming the kinds
        for name in ("generator", "intervention"):  # plain text in hparams and results.json
            object.__setattr__(self, name, str(getattr(self, name)))

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> DataSettings:
        """The settings among ``arguments`` (e.g. a constructor's ``locals()``; others ignored)."""
        return cls(**{f.name: arguments[f.name] for f in fields(cls) if f.name in arguments})

    def as_dict(self) -> dict[str, Any]:
        """``{field: value}`` in the constructor's order."""
        return asdict(self)

    @property
    def sizes(self) -> dict[str, int]:
        """Strings of each split: ``train``, ``val``, ``test`` and ``test_target``."""
        return {
            "train": self.num_strings,
            "val": self.val_strings,
            "test": self.test_strings,
            "test_target": self.test_target_strings,
            "long_test": self.long_test_strings if self.long_min_length is not None else 0,
        }


def build_automaton(settings: DataSettings) -> Automaton:
    """The automaton of ``settings``: read from ``automaton``, else built by ``generator``.

    ``automaton`` is a JSON file (or its parsed object) of any registered kind
    (:func:`~cfl_lightning.automata.load_automaton`: ``"kind"`` absent means a PFSA).

    Raises:
        PFSAError: an unknown generator, or an invalid automaton file.
    """
    if settings.automaton is not None:
        return load_automaton(settings.automaton)
    return generator(settings.generator).from_settings(settings)


def applicable(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """``hparams`` without the automaton-source arguments that the chosen source does not use.

    ``automaton`` when a file is given; else ``generator`` and its own arguments
    (:data:`GENERATOR_ARGS`). Every other entry is kept.
    """
    source = (
        ("automaton",)
        if hparams["automaton"] is not None
        else ("generator", *GENERATOR_ARGS[hparams["generator"]])
    )
    return {k: v for k, v in hparams.items() if k not in _SOURCE_ARGS or k in source}


def attributes_section() -> str:
    """The ``Attributes:`` entries of :class:`DataSettings`' docstring, as an ``Args:`` body.

    The lists of generators, intervention kinds and event forms come from the registries.
    """
    from cfl_lightning.kinds.docs import choices_text

    doc = inspect.cleandoc(DataSettings.__doc__ or "")
    body = doc.split("Attributes:\n", 1)[1].split("\n\n", 1)[0]
    return body.format(**choices_text())


def _register_types() -> None:
    """Let jsonargparse (LightningCLI's parser) check the registry-checked name types.

    A known name stays a plain ``str`` (so hparams, ``results.json`` and checkpoints hold plain
    text); an unknown one is refused with the registry's one-line message.
    """
    try:
        from jsonargparse.typing import register_type
    except ImportError:  # pragma: no cover - the CLI's dependency
        return
    for name_type, registry in (
        (GeneratorName, GENERATOR_REGISTRY),
        (InterventionName, INTERVENTION_KINDS),
    ):
        register_type(
            name_type,
            serializer=str,
            deserializer=lambda value, t=name_type: str(t(value)),
            type_check=lambda value, _, r=registry: type(value) is str and value in r,
        )


_register_types()
