"""Automaton generators: named, seeded recipes that build an automaton, one entry each.

Built in (:data:`GENERATOR_REGISTRY`, registration order): ``parity`` (the paper's Figure 1,
weights set by ``eta``), ``parity_resampled`` (Figure 1's topology, Dirichlet weights),
``random`` (the paper's random topology with Dirichlet weights), the pushdown generators
``dyck``, ``random_pushdown`` and ``anbn``, and the grammar generators ``random_pcfg``,
``dyck_pcfg``, ``arithmetic`` and ``centre_embedding``. In configs the pushdown and random
grammar generators take their seed from ``data.weight_seed`` (``dyck``) or
``data.topology_seed`` (``random_pushdown``, ``random_pcfg``); their other parameters keep their
defaults there (write the automaton with ``automaton ...`` and pass
``data.automaton=FILE`` to set them).

A :class:`Generator` holds its build function (a callable or a ``"module:function"``
reference, imported on first use), its parameters (:class:`GeneratorParam`: name, type,
default, help, the ``automaton`` command's flag and the data-module field that supplies it in
configs) and a one-line description. The ``automaton`` command's subcommands and flags, the data
module's ``generator=`` validation and the arguments it passes, and the docs' list read it.
Pure Python (no torch at import).

Adding a generator (the pushdown ``dyck``, see docs/design.md): write its function, then
``register_generator(Generator(...))``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cfl_lightning.errors import PFSAError
from cfl_lightning.kinds.registry import Names, Ref, Registry, resolve

__all__ = [
    "GeneratorName",
    "Generator",
    "GeneratorParam",
    "GENERATOR_REGISTRY",
    "GENERATOR_NAMES",
    "PARAM_TYPES",
    "generator",
    "register_generator",
]

#: parameter types: an integer, a real number, a seed (integer in 0..2**64-1), a probability
PARAM_TYPES = ("int", "float", "seed", "probability")


@dataclass(frozen=True)
class GeneratorParam:
    """One parameter of a generator's build function.

    Attributes:
        name: the build function's keyword.
        type: one of :data:`PARAM_TYPES` (the command line parses and checks it).
        default: the value when not given (None: the build function's own choice).
        help: one line for ``--help`` and the docs.
        flag: the ``automaton`` command's flag (default ``--`` + the name with ``-``).
        setting: the data-module field (``data.<setting>``) that supplies the parameter in
            configs; None: configs leave it at its default.
    """

    name: str
    type: str
    default: Any
    help: str
    flag: str | None = None
    setting: str | None = None

    def __post_init__(self) -> None:
        if self.type not in PARAM_TYPES:
            raise PFSAError(
                f"generator parameter {self.name!r}: type must be one of "
                f"{', '.join(PARAM_TYPES)}, got {self.type!r}"
            )
        if self.flag is None:
            object.__setattr__(self, "flag", "--" + self.name.replace("_", "-"))


@dataclass(frozen=True)
class Generator:
    """One automaton generator.

    Attributes:
        name: the ``automaton`` subcommand and the value of ``data.generator``.
        description: one line for ``--help`` and the docs.
        build: ``build(**params) -> automaton``, a callable or a ``"module:function"`` reference.
        params: its parameters, in the order of the help.
        size: ``size(params) -> (states, symbols)``: the automaton's size before it is built,
            for the ``automaton`` command's memory check; or None.
    """

    name: str
    description: str
    build: Ref
    params: tuple[GeneratorParam, ...] = ()
    size: Callable[[Mapping[str, Any]], tuple[int, int]] | None = None

    @property
    def settings(self) -> tuple[str, ...]:
        """The data-module fields this generator reads (``("eta",)`` for ``parity``)."""
        return tuple(p.setting for p in self.params if p.setting is not None)

    def __call__(self, **params: Any) -> Any:
        """Build the automaton: ``build(**params)`` (unknown names refused in one line)."""
        known = {p.name for p in self.params}
        unknown = sorted(set(params) - known)
        if unknown:
            raise PFSAError(
                f"generator {self.name!r} has no parameter {unknown[0]!r} "
                f"(its parameters: {', '.join(p.name for p in self.params) or 'none'})"
            )
        return resolve(self.build)(**params)

    def from_settings(self, settings: Any) -> Any:
        """Build from a data module's settings: each parameter with a ``setting`` field."""
        return self(**{p.name: getattr(settings, p.setting) for p in self.params if p.setting})


_REGISTRY: Registry[Generator] = Registry("generator", PFSAError)
#: the registry of automaton generators
GENERATOR_REGISTRY = _REGISTRY
#: the generators' names, a live tuple-like view
GENERATOR_NAMES: Names = _REGISTRY.view()


def generator(name: str) -> Generator:
    """The generator ``name`` (``PFSAError`` naming the known generators otherwise)."""
    return _REGISTRY.get(name)


def register_generator(entry: Generator, *, replace: bool = False) -> None:
    """Register an automaton generator (see :class:`Generator`)."""
    _REGISTRY.register(entry, replace=replace)


_GEN = "cfl_lightning.automata.generators"
_PDA = "cfl_lightning.automata.pushdown.generators"
_PCFG = "cfl_lightning.automata.pcfg.generators"
_WEIGHT_SEED = "seed of the Dirichlet weights"
for _entry in (
    Generator(
        "parity",
        "the paper's parity + star-free automaton (Figure 1)",
        f"{_GEN}:parity_generator",
        (
            GeneratorParam("eta", "float", 0.5, "P(a) at init (fixed weights)", setting="eta"),
            GeneratorParam(
                "weight_seed", "seed", None, "resample Dirichlet weights with this seed"
            ),
            GeneratorParam(
                "final_weight", "float", None,
                "final weight of odd and rep with --weight-seed (default 0.1)",
            ),
        ),
    ),
    Generator(
        "parity_resampled",
        "Figure 1's topology with Dirichlet weights (the paper's first case study)",
        f"{_GEN}:resampled_parity_starfree_pfsa",
        (
            GeneratorParam("weight_seed", "seed", 0, _WEIGHT_SEED, setting="weight_seed"),
            GeneratorParam("final_weight", "float", 0.1, "final weight of odd and rep"),
            GeneratorParam("concentration", "float", 1.0, "Dirichlet concentration"),
        ),
    ),
    Generator(
        "random",
        "random topology with Dirichlet weights",
        f"{_GEN}:random_pfsa",
        (
            GeneratorParam("num_states", "int", 50, "number of states", "--states", "num_states"),
            GeneratorParam(
                "num_symbols", "int", 10, "alphabet size", "--symbols", "num_symbols"
            ),
            GeneratorParam(
                "topology_seed", "seed", 0, "seed of the topology", setting="topology_seed"
            ),
            GeneratorParam("weight_seed", "seed", 0, _WEIGHT_SEED, setting="weight_seed"),
            GeneratorParam("final_weight", "float", 0.3, "final weight of accepting states"),
            GeneratorParam("keep_prob", "probability", 0.5, "probability of keeping an arc"),
            GeneratorParam("accept_prob", "probability", 0.3, "probability a state accepts"),
            GeneratorParam("concentration", "float", 1.0, "Dirichlet concentration"),
        ),
        size=lambda p: (p["num_states"], p["num_symbols"]),
    ),
    Generator(
        "dyck",
        "Dyck-k (pushdown): k bracket types, Dirichlet weights, closing above 1/2",
        f"{_PDA}:dyck_pda",
        (
            GeneratorParam("k", "int", 2, "number of bracket types"),
            GeneratorParam("seed", "seed", 0, _WEIGHT_SEED, setting="weight_seed"),
            GeneratorParam("concentration", "float", 1.0, "Dirichlet concentration"),
            GeneratorParam(
                "close_prob", "probability", 0.6, "closing probability on a non-empty stack (> 0.5)"
            ),
            GeneratorParam(
                "final_weight", "probability", 0.5, "ending probability on the empty stack"
            ),
            GeneratorParam(
                "neutral_prob", "probability", 0.0,
                "probability of a neutral symbol x (keeps the stack) at every step; 0: none",
            ),
        ),
    ),
    Generator(
        "random_pushdown",
        "the paper's random topology with a stack action per transition (pushdown)",
        f"{_PDA}:random_pda",
        (
            GeneratorParam("num_states", "int", 4, "number of states", "--states"),
            GeneratorParam("num_symbols", "int", 4, "number of symbols", "--symbols"),
            GeneratorParam("num_stack", "int", 2, "number of stack symbols", "--stack-symbols"),
            GeneratorParam(
                "seed", "seed", 0, "seed of the topology, stack actions and weights",
                setting="topology_seed",
            ),
            GeneratorParam(
                "keep_prob", "probability", 0.5, "probability that a (class, symbol) step exists"
            ),
            GeneratorParam("accept_prob", "probability", 0.3, "probability that a state accepts"),
            GeneratorParam("final_weight", "probability", 0.3, "ending weight of accepting states"),
            GeneratorParam("concentration", "float", 1.0, "Dirichlet concentration"),
            GeneratorParam("push_prob", "probability", 0.25, "probability that a step pushes"),
            GeneratorParam(
                "pop_prob", "probability", 0.5, "probability that a step pops (non-empty stack)"
            ),
            GeneratorParam(
                "max_expected_length", "float", None, "redraw above this expected length"
            ),
            GeneratorParam("max_tries", "int", 1000, "redraws before giving up"),
        ),
    ),
    Generator(
        "anbn",
        "a^n b^n (pushdown) with geometric n >= min_n",
        f"{_PDA}:anbn_pda",
        (
            GeneratorParam("p_continue", "probability", 0.5, "probability of one more a"),
            GeneratorParam("min_n", "int", 0, "smallest n (0 or 1)"),
        ),
    ),
    Generator(
        "random_pcfg",
        "a random grammar (pcfg): Dirichlet rule weights, redrawn until it ends",
        f"{_PCFG}:random_pcfg",
        (
            GeneratorParam("nonterminals", "int", 5, "number of nonterminals"),
            GeneratorParam("terminals", "int", 4, "number of terminals"),
            GeneratorParam("rules", "int", 3, "rules per nonterminal"),
            GeneratorParam("seed", "seed", 0, "seed of the rules and weights",
                           setting="topology_seed"),
            GeneratorParam("max_rhs", "int", 3, "longest right side"),
            GeneratorParam(
                "terminal_prob", "probability", 0.6, "probability that a right-side symbol is a "
                "terminal"
            ),
            GeneratorParam("concentration", "float", 1.0, "Dirichlet concentration"),
            GeneratorParam(
                "max_expected_length", "float", 20.0, "redraw above this expected length"
            ),
            GeneratorParam("max_tries", "int", 1000, "redraws before giving up"),
        ),
    ),
    Generator(
        "dyck_pcfg",
        "non-empty Dyck-k words as an unambiguous grammar (pcfg)",
        f"{_PCFG}:dyck_pcfg",
        (
            GeneratorParam("k", "int", 2, "number of bracket types"),
            GeneratorParam(
                "nest_prob", "probability", 0.4, "probability that a block holds a word"
            ),
            GeneratorParam(
                "concat_prob", "probability", 0.3, "probability that another block follows"
            ),
        ),
    ),
    Generator(
        "arithmetic",
        "ambiguous arithmetic expressions over x: E + E, E * E, (E) (pcfg)",
        f"{_PCFG}:arithmetic_pcfg",
        (
            GeneratorParam("plus_prob", "probability", 0.2, "weight of E -> E + E"),
            GeneratorParam("times_prob", "probability", 0.15, "weight of E -> E * E"),
            GeneratorParam("paren_prob", "probability", 0.1, "weight of E -> ( E )"),
        ),
    ),
    Generator(
        "centre_embedding",
        "centre embedding with agreement, n_i ... v_i nested (pcfg)",
        f"{_PCFG}:centre_embedding_pcfg",
        (
            GeneratorParam("pairs", "int", 2, "noun/verb pairs"),
            GeneratorParam("embed_prob", "probability", 0.5, "probability of one more level"),
        ),
    ),
):
    register_generator(_entry)
del _entry


class GeneratorName(str):
    """A registered generator's name: the type of ``data.generator``.

    Constructing it checks the name against the registry (so a config parser that builds it,
    jsonargparse's, refuses an unknown generator with the registry's one-line message).
    """

    def __new__(cls, value: str) -> GeneratorName:
        generator(value)
        return super().__new__(cls, value)
