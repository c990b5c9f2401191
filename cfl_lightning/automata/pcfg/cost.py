"""The CPU time and peak memory of a corpus's exact next-symbol laws, before computing them.

:meth:`~cfl_lightning.automata.pcfg.PCFG.position_laws` computes the law at every position of
every string (:mod:`~cfl_lightning.automata.pcfg.prefix`), strings of one length together in
chunks of at most :data:`~cfl_lightning.automata.pcfg.automaton.LAW_CHUNK_CELLS` chart cells.
Its cost is a function of the strings' lengths and the normal form's sizes only, so it is
estimated here from the *actual* lengths of the corpus, after sampling and before the laws: the
estimate is then exact in its counts (no moment of the length distribution, whose tail decides
everything, is guessed), and it comes right where it matters, before the expensive step.

Counts, per chunk of ``b`` strings of length ``n`` (``M`` normal-form nonterminals, ``R``
binary rules, ``R_w`` of them with two wide children ``B``, ``C``):

* ``pairs = b (n + 1) n (n - 1) / 6``: the (start, split) pairs of the ``O(n^3)`` rules (width
  ``w`` has ``n - w + 1`` starts and ``w - 1`` splits); each costs ``|B| |C|`` multiply-adds on
  the dense path, ``R_w`` gathered products on the sparse one;
* ``spans = b n (n + 1) / 2``: each costs the one-split rules, the strided writes of ``B`` and
  ``C``, the ``nu`` pass's ``R`` products, and on the dense path the ``[|B| |C|, M]`` contraction;
* ``2 n`` Python steps (a width, a prefix length) and one plan per chunk.

Seconds: :data:`PAIR_DENSE`, :data:`PAIR_SPARSE`, :data:`SPAN_UNIT`, :data:`STEP` and
:data:`CALL` times those counts (measured on one CPU thread; checked by
``benchmarks/bench_estimates.py --laws-only``). Peak bytes: the laws of the whole corpus
(``[L + K, S + 1]`` float64, and their float32 copy) plus the largest chunk's chart
(``[n, n, b, M]``), its two copies by start and by end (``[n, b, |B| or |C|, n]``), the ``nu``
pass (``[n, b, R]`` and ``[n + 1, b, M]``) and the temporaries of one width (on the sparse path
three ``[i, b, R_w, m]`` arrays, ``i m <= n^2 / 4``; on the dense path the contiguous copies of
the children and the pair products), plus :data:`FIXED_BYTES`. Every array is counted whole, as
if every page were touched: a fresh process's resident memory grew by 118 MB on one
2,000-symbol string (after a short string's laws), and in some runs by 215 to 229 MB (every
page resident, the libraries' first use included); estimated 241 MB.

The refusal (:func:`check_law_cost`) is the package's :class:`~cfl_lightning.errors.SizeError`
(exit 2 at the command line); long work shows its progress
(:meth:`~cfl_lightning.automata.pcfg.PCFG.position_laws`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from cfl_lightning.automata.pcfg.normal_form import NormalForm
from cfl_lightning.automata.pcfg.prefix import _plan
from cfl_lightning.errors import SizeError
from cfl_lightning.memory import MEMORY_LIMIT_ENV, format_bytes, host_available, limit_from_env

__all__ = ["LawCost", "ChartShape", "chart_shape", "law_cost", "check_law_cost",
           "PAIR_DENSE", "PAIR_SPARSE", "SPAN_UNIT", "STEP", "CALL", "FIXED_BYTES"]

# CPU seconds (one thread, the project's 2-core CPU machine), fitted to next_symbol_laws timed
# on single lengths (n = 1 to 560, 1 to 200 strings, both O(n^3) paths forced) and checked
# against whole corpora by benchmarks/bench_estimates.py --laws-only (estimate / measured 0.67
# to 1.19); a dense multiply-add measured 0.2 to 0.45 ns, a sparse product 2.1 to 4.7 ns:
PAIR_DENSE = 0.3e-9  # one multiply-add of a batched small matrix product (the dense path)
PAIR_SPARSE = 3.5e-9  # one gathered product of the sparse O(n^3) path
SPAN_UNIT = 3.5e-9  # one gathered product of the other O(n^2) terms, per span
STEP = 5.0e-5  # one Python step (a width of the chart, a prefix length of the nu pass)
CALL = 1.0e-3  # one chunk: the plan, the laws, the gathers of the corpus
#: bytes besides the arrays: the allocator's slack and the math libraries' first use (a fresh
#: process's resident memory grew up to ~21 MB beyond the arrays of one 2,000-symbol string)
FIXED_BYTES = 1 << 25


@dataclass(frozen=True)
class ChartShape:
    """The normal form's sizes that the laws' cost reads.

    Attributes:
        nonterminals: ``M``; rules: ``R`` (binary); wide: ``R_w`` (two wide children);
        lefts, rights: ``|B|``, ``|C|``; dense: whether the dense ``O(n^3)`` path is taken;
        symbols: ``S``; span_units: gathered products per span of the ``O(n^2)`` terms;
        table_units: multiply-adds per span of the dense path's contraction (0 if sparse).
    """

    nonterminals: int
    rules: int
    wide: int
    lefts: int
    rights: int
    dense: bool
    symbols: int
    span_units: int
    table_units: int


def chart_shape(nf: NormalForm) -> ChartShape:
    """The sizes of ``nf``'s chart plan (the one :func:`~.prefix.next_symbol_laws` builds)."""
    plan = _plan(nf, None)
    m, s = plan.lexical.shape
    lefts, rights = plan.lefts.stop - plan.lefts.start, plan.rights.stop - plan.rights.start
    r = int(plan.rules.weight.numel())
    one_split = int(plan.first.weight.numel() + plan.last.weight.numel())
    dense = plan.table is not None
    units = one_split + lefts + rights + r + m
    table = lefts * rights * m if dense else 0
    return ChartShape(m, r, int(plan.wide.weight.numel()), lefts, rights, dense, s, units, table)


@dataclass(frozen=True)
class LawCost:
    """The estimated cost of one corpus's laws.

    Attributes:
        strings: ``K``; symbols: ``L``; longest: the longest string's length.
        pairs: (start, split) pairs of the ``O(n^3)`` rules, summed over the strings (exact).
        seconds: estimated CPU seconds (one thread).
        peak_bytes: estimated peak memory.
    """

    strings: int
    symbols: int
    longest: int
    pairs: int
    seconds: float
    peak_bytes: int

    def describe(self) -> str:
        """``"~140.0 MB and ~5.0 s for 1,000 strings (28,849 symbols, longest 562)"``."""
        return (f"~{format_bytes(self.peak_bytes)} and ~{_seconds(self.seconds)} for "
                f"{self.strings:,} strings ({self.symbols:,} symbols, longest {self.longest:,})")


def _seconds(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"
    return f"{seconds / 3600:.1f} h"


def _chunk_bytes(shape: ChartShape, n: int, b: int) -> int:
    """Peak bytes of one call of ``next_symbol_laws`` on ``b`` strings of length ``n``."""
    m, bc = shape.nonterminals, shape.lefts + shape.rights
    quarter = (n * n) // 4 + 1  # the most (start, split) pairs of one width
    if shape.dense:
        temp = quarter * bc + n * shape.lefts * shape.rights
    else:
        temp = 3 * quarter * shape.wide
    cells = n * n * (m + bc) + n * shape.rules + 2 * (n + 1) * (m + shape.symbols + 1) + temp
    return 8 * b * cells


def law_cost(nf: NormalForm, lengths: Tensor, chunk_cells: int) -> LawCost:
    """The cost of the laws of strings of these lengths (module docstring).

    Args:
        nf: the grammar's normal form.
        lengths: ``[K]`` int64 string lengths.
        chunk_cells: chart cells per call (the caller's chunking,
            :data:`~cfl_lightning.automata.pcfg.automaton.LAW_CHUNK_CELLS`).

    Returns:
        A :class:`LawCost`; nothing large is allocated.
    """
    shape = chart_shape(nf)
    lengths = lengths.detach().to("cpu", torch.long)
    values, counts = torch.unique(lengths, return_counts=True)
    pairs = spans = steps = calls = peak = 0
    for n, k in zip(values.tolist(), counts.tolist()):
        per_chunk = max(1, chunk_cells // max(1, n * n * shape.nonterminals))
        chunks = -(-k // per_chunk)
        pairs += k * (n + 1) * n * (n - 1) // 6
        spans += k * n * (n + 1) // 2
        steps, calls = steps + 2 * n * chunks, calls + chunks
        peak = max(peak, _chunk_bytes(shape, n, min(k, per_chunk)))
    per_pair = (PAIR_DENSE * shape.lefts * shape.rights if shape.dense
                else PAIR_SPARSE * shape.wide)
    per_span = SPAN_UNIT * shape.span_units + PAIR_DENSE * shape.table_units
    seconds = pairs * per_pair + spans * per_span + steps * STEP + calls * CALL
    symbols, k = int(lengths.sum()), int(lengths.numel())
    laws = (symbols + k) * (shape.symbols + 1) * (8 + 4)  # float64 laws and their float32 copy
    longest = int(lengths.max()) if k else 0
    return LawCost(k, symbols, longest, pairs, seconds, int(laws + peak + FIXED_BYTES))


def _available(device: torch.device) -> int | None:
    """Bytes available on ``device`` (``-1``: the check is off; None: unknown)."""
    override = limit_from_env()
    if override is not None:
        return override
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except (RuntimeError, AssertionError):
            return None
    return host_available()


def check_law_cost(
    nf: NormalForm, lengths: Tensor, chunk_cells: int, device: torch.device | str = "cpu"
) -> LawCost:
    """:func:`law_cost`, refused in one line when its peak memory exceeds what is available.

    ``CFL_LIGHTNING_MEMORY_LIMIT`` overrides the memory available (``0`` or ``off``: no check).

    Raises:
        SizeError: ``the exact laws of a grammar corpus need ~... and ~... for K strings
            (..., longest n), more than the ... of memory available ...``.
    """
    cost = law_cost(nf, lengths, chunk_cells)
    have = _available(torch.device(device))
    if have is not None and have >= 0 and cost.peak_bytes > have:
        place = "GPU memory" if torch.device(device).type == "cuda" else "memory"
        raise SizeError(
            f"the exact laws of a grammar corpus need {cost.describe()}, more than the "
            f"{format_bytes(have)} of {place} available (the chart of the longest strings grows "
            f"as n^2): use fewer or shorter strings ({MEMORY_LIMIT_ENV} overrides the limit)"
        )
    return cost
