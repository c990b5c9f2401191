"""Every event's occurrences in a corpus, realized and expected (correlational analysis).

One unconstrained run thus serves every target: ``results.json`` records, for every
``state:NAME``, ``symbol:SYM`` and existing ``transition:SOURCE:SYM``, the training corpus's
total traversals and strings with at least one (:func:`occurrences`), and ``K`` times the
expected traversals of an unconstrained string (:func:`expected_occurrences`).
"""

from __future__ import annotations

import torch

from cfl_lightning.automata import PFSA
from cfl_lightning.data.batching import TokenizedCorpus

__all__ = ["occurrences", "expected_occurrences"]


def occurrences(pfsa: PFSA, tok: TokenizedCorpus) -> dict[str, dict[str, int]]:
    """Realized occurrences of every event in a tokenized corpus.

    Args:
        pfsa: the automaton the corpus was sampled from.
        tok: its per-position arrays (``targets`` and ``states``, ``[sum of n + 1]``).

    Returns:
        ``{"count": {spec: n}, "strings": {spec: m}}`` over every ``state:NAME``,
        ``symbol:SYM`` and existing ``transition:SOURCE:SYM``: total traversals, and strings
        with at least one traversal.
    """
    q, s = pfsa.num_states, pfsa.num_symbols
    moves = tok.targets < s  # positions that emit a symbol (not EOS)
    string_of = torch.repeat_interleave(torch.arange(len(tok)), tok.positions)[moves]
    arc = tok.states[moves] * s + tok.targets[moves]
    names = {
        "state": (arc // s, q, [f"state:{n}" for n in pfsa.states]),
        "symbol": (arc % s, s, [f"symbol:{a}" for a in pfsa.alphabet]),
        "transition": (
            arc,
            q * s,
            [f"transition:{src}:{a}" for src in pfsa.states for a in pfsa.alphabet],
        ),
    }
    exists = (pfsa.next_state >= 0).reshape(-1).tolist()
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


def expected_occurrences(pfsa: PFSA, num_strings: int) -> dict[str, float]:
    """``num_strings`` x expected occurrences per unconstrained string, for every event."""
    k = num_strings
    flow = pfsa.expected_visits()[:, None] * pfsa.weights  # [Q, S]
    out = {f"state:{n}": k * float(v) for n, v in zip(pfsa.states, flow.sum(1))}
    out.update({f"symbol:{a}": k * float(v) for a, v in zip(pfsa.alphabet, flow.sum(0))})
    table = pfsa.next_state.tolist()
    for i, src in enumerate(pfsa.states):
        for j, a in enumerate(pfsa.alphabet):
            if table[i][j] >= 0:
                out[f"transition:{src}:{a}"] = k * float(flow[i, j])
    return out
