"""CPU time of the exact next-symbol laws (``PCFG.position_laws``) of 1,000 sampled strings of
a random 10-nonterminal, 40-rule grammar tuned to expected length 30 (issue 50's size target:
30 CPU-s), against the implementation before the chart-layout rewrite (copied below as a
baseline, same grouping by length, same run). Run:
``OMP_NUM_THREADS=1 python benchmarks/bench_pcfg_laws.py [--no-baseline]``.

CPU-s are process time (``time.process_time``): the machine is shared, so wall time is not
the figure. The new laws are compared with the baseline's (largest absolute difference).
"""
import sys
import time

import numpy as np
import torch

from cfl_lightning.automata.pcfg import check_grammar, expected_length, parse_grammar
from cfl_lightning.automata.pcfg.automaton import LAW_CHUNK_CELLS, PCFG
from cfl_lightning.automata.pcfg.normal_form import NormalForm
from cfl_lightning.errors import CflError
from cfl_lightning.sampling.pcfg import generate_strings

Tensor = torch.Tensor


# ------------------------------------------------------------ the baseline (before 2026-11-29)
def _old_rule_products(nf: NormalForm, left: Tensor, right: Tensor) -> Tensor:
    """``sum over the split axis (-2) of P(A -> B C) left[..., B] right[..., C]`` per parent.

    Args:
        left, right: ``[..., m, M]``.

    Returns:
        ``[..., M]``.
    """
    prod = left[..., nf.left] * right[..., nf.right] * nf.weight  # [..., m, R]
    out = torch.zeros(*prod.shape[:-2], nf.num_nonterminals, dtype=prod.dtype, device=prod.device)
    return out.index_add_(-1, nf.parent, prod.sum(dim=-2))


def _old_right_children(nf: NormalForm, parents: Tensor, spans: Tensor) -> Tensor:
    """``sum over starts (-2) of mu[X] P(X -> B C) beta[B]``, per right child ``C``.

    Args:
        parents: ``[..., k, M]`` (``mu`` at each start), spans: ``[..., k, M]`` (``beta`` of the
            span from that start to the current end).

    Returns:
        ``[..., M]``.
    """
    prod = parents[..., nf.parent] * spans[..., nf.left] * nf.weight  # [..., k, R]
    out = torch.zeros(*prod.shape[:-2], nf.num_nonterminals, dtype=prod.dtype, device=prod.device)
    return out.index_add_(-1, nf.right, prod.sum(dim=-2))


def old_inside(nf: NormalForm, tokens: Tensor) -> Tensor:
    """Scaled inside probabilities of every span of a batch of equal-length strings.

    Args:
        nf: the normal form.
        tokens: ``[B, n]`` int64 symbol ids (padding right of a string's end is harmless: no
            span ending left of it reads it).

    Returns:
        ``[B, n, n, M]`` float64, indexed ``[b, start, width - 1, A]``: ``beta / prod s_t``
        over the span.
    """
    b, n = tokens.shape
    m = nf.num_nonterminals
    lex = nf.lexical.T[tokens]  # [B, n, M]
    scale = lex.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    chart = torch.zeros(b, n, n, m, dtype=torch.float64, device=tokens.device)
    chart[:, :, 0] = lex / scale
    for width in range(2, n + 1):
        starts = torch.arange(n - width + 1, device=tokens.device)
        splits = torch.arange(1, width, device=tokens.device)
        left = chart[:, : n - width + 1, : width - 1]  # [B, i, m, M]: start i, width m
        right = chart[:, starts[:, None] + splits[None, :], (width - splits - 1)[None, :]]
        chart[:, : n - width + 1, width - 1] = _old_rule_products(nf, left, right)
    return chart


def old_next_symbol_laws(nf: NormalForm, tokens: Tensor, lengths: Tensor) -> Tensor:
    """``P(next symbol | w_1 .. w_k)`` for ``k = 0 .. n`` of every string (EOS last).

    Args:
        nf: the normal form of a consistent grammar.
        tokens: ``[B, n]`` int64, strings padded on the right.
        lengths: ``[B]`` int64 true lengths.

    Returns:
        ``[B, n + 1, S + 1]`` float64; row ``k`` of string ``b`` is the law after its first
        ``k`` symbols (rows past ``lengths[b]`` are meaningless).

    Raises:
        CflError: a string outside the grammar's support, or one whose probability underflows.
    """
    b, n = tokens.shape
    chart = old_inside(nf, tokens)
    g = nf.first_symbol  # [M, S]
    nu = torch.zeros(b, n + 1, nf.num_nonterminals, dtype=torch.float64, device=tokens.device)
    nu[:, 0, 0] = 1.0
    mu = torch.zeros_like(nu)
    for k in range(1, n + 1):
        mu[:, k - 1] = nu[:, k - 1] @ nf.left_corner
        starts = torch.arange(k, device=tokens.device)
        spans = chart[:, starts, k - 1 - starts]  # [B, k, M]: span start .. k-1 (0-based)
        nu[:, k] = _old_right_children(nf, mu[:, :k], spans)
    numer = nu @ g  # [B, n + 1, S]
    ends = torch.zeros(b, n + 1, dtype=torch.float64, device=tokens.device)
    ends[:, 1:] = chart[:, 0, :, 0]
    laws = torch.cat([numer, ends[..., None]], dim=-1)
    total = laws.sum(dim=-1, keepdim=True)
    rows = torch.arange(n + 1, device=tokens.device)[None, :] <= lengths[:, None]
    final = ends.gather(1, lengths[:, None]).squeeze(1)
    if not bool((total[..., 0][rows] > 0).all()) or not bool((final > 0).all()):
        bad = int(torch.nonzero((final <= 0)).flatten()[0]) if bool((final <= 0).any()) else 0
        raise CflError(f"string {bad} (length {int(lengths[bad])}) is outside the grammar's "
                       "support, or its probability underflows float64 even rescaled")
    return laws / total.clamp_min(torch.finfo(torch.float64).tiny)


def old_position_laws(nf: NormalForm, tokens: Tensor, offsets: Tensor, s: int) -> Tensor:
    """The baseline's ``PCFG.position_laws`` (strings grouped by exact length, chunked)."""
    lengths = offsets[1:] - offsets[:-1]
    out = torch.zeros(tokens.numel() + lengths.numel(), s + 1, dtype=torch.float64)
    for n in torch.unique(lengths).tolist():
        strings = torch.nonzero(lengths == n).flatten()
        per_chunk = max(1, LAW_CHUNK_CELLS // max(1, n * n * nf.num_nonterminals))
        for chunk in torch.split(strings, per_chunk):
            starts = offsets[chunk]
            batch = tokens[starts[:, None] + torch.arange(n)[None, :]]
            laws = old_next_symbol_laws(nf, batch, torch.full_like(chunk, n))
            at = (starts + chunk)[:, None] + torch.arange(n + 1)[None, :]
            out[at.reshape(-1)] = laws.reshape(-1, s + 1)
    return out


# ------------------------------------------------------------------------------ the benchmark
def grammar(x: float, seed: int = 0):
    """Ten nonterminals, four rules each; ``x``: the weight of ``N -> 't' N'``."""
    rng = np.random.default_rng(seed)
    T = "abcde"
    lines = []
    for i in range(10):
        j, k, l = rng.integers(0, 10, 3)
        t = rng.choice(list(T), 4)
        rec = 0.05 * rng.uniform(0.5, 1.0)  # weight of the two-nonterminal rule
        one = 0.1
        lin = x
        end = 1 - rec - one - lin
        lines.append(f"N{i} -> '{t[0]}' [{end!r}] | '{t[1]}' N{j} [{lin!r}] "
                     f"| N{k} N{l} [{rec!r}] | '{t[2]}' N{j} '{t[3]}' [{one!r}]")
    return parse_grammar("\n".join(lines) + "\n")

def tuned_grammar(target: float = 30.0):
    """:func:`grammar` with the linear-recursion weight bisected to ``E[length] = target``."""
    lo, hi = 0.0, 0.85
    for _ in range(40):
        mid = (lo + hi) / 2
        g = grammar(mid)
        try:
            check_grammar(g)
            length = expected_length(g)
        except Exception:
            length = float("inf")
        lo, hi = (mid, hi) if length < target else (lo, mid)
    return grammar(lo)


def main() -> None:
    """Tune the grammar, sample 1,000 strings, time the laws (all, then short strings only)."""
    g = tuned_grammar()
    print("rules", len(g.rules), "nonterminals", g.num_nonterminals, "E[len]", expected_length(g))
    a = PCFG(g)
    c = generate_strings(g, 1000, seed=0)
    lens = c.lengths
    print(f"mean length {float(lens.float().mean()):.1f}, max {int(lens.max())}, "
          f"median {float(lens.float().median()):.0f}")
    nf = a.normal_form
    print("normal form nonterminals", nf.num_nonterminals, "binary rules", nf.weight.numel())
    c0 = time.process_time()
    laws = a.position_laws(c.tokens, c.offsets)
    new = time.process_time() - c0
    print(f"all 1,000 strings: CPU {new:.1f} s")
    if "--no-baseline" not in sys.argv:
        c0 = time.process_time()
        old = old_position_laws(nf, c.tokens, c.offsets, a.num_symbols)
        base = time.process_time() - c0
        print(f"baseline (before the rewrite), all 1,000 strings: CPU {base:.1f} s; "
              f"ratio {base / new:.1f}x; largest |difference| of the laws "
              f"{float((old - laws).abs().max()):.1e}")
    ones = torch.ones(laws.shape[0], dtype=torch.float64)
    print("rows sum to 1:", bool(torch.allclose(laws.sum(-1), ones)))
    for cut in (100, 200):
        keep = (lens <= cut).nonzero().flatten().tolist()
        toks = torch.cat([torch.tensor(c.string(k), dtype=torch.long) for k in keep])
        offs = torch.tensor([0] + np.cumsum([int(lens[k]) for k in keep]).tolist())
        c0 = time.process_time()
        a.position_laws(toks, offs)
        print(f"strings <= {cut} ({len(keep)}, {int(lens[keep].sum())} symbols): "
              f"CPU {time.process_time() - c0:.1f} s")
    for k in torch.argsort(lens, descending=True)[:2].tolist():
        w = torch.tensor(c.string(k), dtype=torch.long)[None]
        c0 = time.process_time()
        a.position_laws(w[0], torch.tensor([0, w.shape[1]]))
        line = f"the string of length {w.shape[1]} alone: CPU {time.process_time() - c0:.2f} s"
        if "--no-baseline" not in sys.argv:
            c0 = time.process_time()
            old_next_symbol_laws(nf, w, torch.tensor([w.shape[1]]))
            line += f" (baseline {time.process_time() - c0:.2f} s)"
        print(line)


if __name__ == "__main__":
    main()
