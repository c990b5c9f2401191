"""Independent brute-force references for the sampler tests.

Nothing here uses the binning semiring or the samplers: string probabilities come from walking the
automaton symbol by symbol, count laws from a forward dynamic program over (state, count) pairs.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from scipy import stats

from cfl_lightning.automata.pfsa import PFSA


def enumerate_strings(pfsa: PFSA, event_fn, max_len: int) -> dict[tuple[int, ...], tuple[float, int]]:
    """Every string of length <= max_len with its probability and event count."""
    table = pfsa.next_state.tolist()
    weights = pfsa.weights.tolist()
    final = pfsa.final.tolist()
    fn = event_fn.tolist()
    out: dict[tuple[int, ...], tuple[float, int]] = {}
    frontier = [((), pfsa.initial, 1.0, 0)]
    for _ in range(max_len + 1):
        nxt = []
        for prefix, q, p, c in frontier:
            if final[q] > 0:
                out[prefix] = (p * final[q], c)
            if len(prefix) == max_len:
                continue
            for s, t in enumerate(table[q]):
                if t >= 0 and weights[q][s] > 0:
                    nxt.append((prefix + (s,), t, p * weights[q][s], c + fn[q][s]))
        frontier = nxt
    return out


def count_pmf(pfsa: PFSA, event_fn, max_count: int, tol: float = 1e-15) -> np.ndarray:
    """P(count = n) for n = 0..max_count by a forward DP over (state, count), in float64."""
    q = pfsa.num_states
    table = pfsa.next_state.numpy()
    w = pfsa.weights.numpy()
    f = pfsa.final.numpy()
    fn = event_fn.numpy()
    alpha = np.zeros((q, max_count + 1))
    alpha[pfsa.initial, 0] = 1.0
    pmf = np.zeros(max_count + 1)
    while alpha.sum() > tol:
        pmf += (alpha * f[:, None]).sum(0)
        new = np.zeros_like(alpha)
        for i in range(q):
            for s in range(table.shape[1]):
                t = table[i, s]
                if t < 0 or w[i, s] == 0:
                    continue
                shift = int(fn[i, s])
                if shift:
                    new[t, shift:] += w[i, s] * alpha[i, :-shift]
                else:
                    new[t] += w[i, s] * alpha[i]
        alpha = new
    return pmf


def convolution_power(pmf: np.ndarray, k: int) -> np.ndarray:
    """pmf^{*k} truncated to len(pmf), by direct convolution."""
    out = np.zeros_like(pmf)
    out[0] = 1.0
    for _ in range(k):
        out = np.convolve(out, pmf)[: len(pmf)]
    return out


def chi_square_pvalue(observed: Counter, expected: dict, total: int, min_expected: float = 5.0) -> float:
    """Pearson chi-square p-value; categories with small expectation pooled into 'other'.

    ``expected`` maps categories to probabilities summing to <= 1; the missing mass (and any
    observed category not in ``expected``) goes to 'other'.
    """
    obs, exp = [], []
    other_obs, other_exp = 0.0, 1.0 - sum(expected.values())
    for key, prob in expected.items():
        if prob * total >= min_expected:
            obs.append(observed.get(key, 0))
            exp.append(prob * total)
        else:
            other_obs += observed.get(key, 0)
            other_exp += prob
    other_obs += sum(v for k, v in observed.items() if k not in expected)
    if other_exp * total >= 1e-9 or other_obs:
        obs.append(other_obs)
        exp.append(max(other_exp, 0.0) * total)
    obs_arr, exp_arr = np.array(obs, dtype=float), np.array(exp, dtype=float)
    if np.any((exp_arr == 0) & (obs_arr > 0)):
        return 0.0
    keep = exp_arr > 0
    obs_arr, exp_arr = obs_arr[keep], exp_arr[keep]
    exp_arr *= obs_arr.sum() / exp_arr.sum()
    return float(stats.chisquare(obs_arr, exp_arr).pvalue)
