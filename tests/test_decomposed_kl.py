"""DecomposedKL, its functional form, pfsa_kl and the naming helpers.

References: the closed form for state-only models (a second automaton on the same topology),
brute-force enumeration of an acyclic automaton for prefix-dependent models, and a forward
dynamic program for a length-dependent model on the (cyclic) parity + star-free automaton.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from cfl_lightning.automata import (
    PFSA,
    parity_starfree_pfsa,
    random_pfsa,
    resampled_parity_starfree_pfsa,
)
from cfl_lightning.errors import EventError, PFSAError
from cfl_lightning.metrics import (
    DecomposedKL,
    decomposed_kl,
    kl_log_dict,
    kl_nested_dict,
    kl_target_names,
    pfsa_kl,
    pfsa_kl_decomposed,
    target_values,
)

KEYS = ("total", "state", "transition", "symbol", "state_unweighted", "transition_unweighted",
        "symbol_unweighted")
WEIGHTED = ("state", "transition", "symbol")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------------------------- helpers
def sample(pfsa: PFSA, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ancestral sampling: ``states`` [K, T] (-1 at padding), ``mask``, ``symbols`` [K, T]."""
    g = torch.Generator().manual_seed(seed)
    probs, eos = pfsa.next_symbol_probs(), pfsa.eos
    cur = torch.full((k,), pfsa.initial, dtype=torch.long)
    alive = torch.ones(k, dtype=torch.bool)
    states, masks, symbols = [], [], []
    while alive.any():
        states.append(torch.where(alive, cur, -1))
        masks.append(alive.clone())
        sym = torch.multinomial(probs[cur], 1, generator=g).squeeze(1)
        symbols.append(torch.where(alive, sym, -1))
        alive = alive & (sym != eos)
        cur = torch.where(alive, pfsa.next_state[cur, sym.clamp(max=eos - 1)], cur)
    return torch.stack(states, 1), torch.stack(masks, 1), torch.stack(symbols, 1)


def state_model(probs: torch.Tensor, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Log-probs of a model depending on the state alone; NaN at padding (must be ignored)."""
    lp = probs.log()[states.clamp(min=0)]
    return torch.where(mask[..., None], lp, torch.nan)


def acyclic(weights=(0.6, 0.4, 0.5, 0.3, 0.7, 0.0), final=(0.0, 0.2, 0.3, 1.0)) -> PFSA:
    """s0 -a-> s1, s0 -b-> s2, s1 -a-> s3, s1 -b-> s2, s2 -a-> s3, s2 -b-> s3 (weight 0 here)."""
    nxt = torch.tensor([[1, 2], [3, 2], [3, 3], [-1, -1]])
    w = torch.tensor([weights[0:2], weights[2:4], weights[4:6], (0.0, 0.0)], dtype=torch.float64)
    f = torch.tensor(final, dtype=torch.float64)
    return PFSA(["s0", "s1", "s2", "s3"], ["a", "b"], nxt, w, f)


def enumerate_strings(pfsa: PFSA) -> list[tuple[tuple[int, ...], float]]:
    """Every positive-probability string of an acyclic automaton with its probability."""
    probs = pfsa.next_symbol_probs().tolist()
    out, stack = [], [((), pfsa.initial, 1.0)]
    while stack:
        prefix, q, p = stack.pop()
        for s, ps in enumerate(probs[q]):
            if ps == 0:
                continue
            if s == pfsa.eos:
                out.append((prefix, p * ps))
            else:
                stack.append((prefix + (s,), int(pfsa.next_state[q, s]), p * ps))
    return sorted(out)


def walk(pfsa: PFSA, prefix) -> int:
    q = pfsa.initial
    for s in prefix:
        q = int(pfsa.next_state[q, s])
    return q


def batch_strings(pfsa: PFSA, strings) -> tuple[torch.Tensor, torch.Tensor]:
    """``states`` [B, T] (-1 at padding) and ``mask`` [B, T] for explicit strings."""
    width = max(len(x) for x in strings) + 1
    states = torch.full((len(strings), width), -1, dtype=torch.long)
    for b, x in enumerate(strings):
        states[b, : len(x) + 1] = torch.tensor([walk(pfsa, x[:t]) for t in range(len(x) + 1)])
    return states, states >= 0


def check_sums(out: dict) -> None:
    for key in WEIGHTED:
        assert not torch.isnan(out[key]).any()
        assert_close(out[key].sum(), out["total"], atol=1e-12, rtol=1e-12)
    assert_close(out["transition"].sum(0), out["symbol"], atol=1e-12, rtol=0)
    assert_close(out["transition"].sum(1), out["state"], atol=1e-12, rtol=1e-12)


# ---------------------------------------------------------------------------------- 1. closed form
@pytest.mark.parametrize(
    "p, q",
    [
        (resampled_parity_starfree_pfsa(0), resampled_parity_starfree_pfsa(1)),
        (random_pfsa(6, 3, topology_seed=3, weight_seed=0), random_pfsa(6, 3, 3, weight_seed=1)),
    ],
)
def test_state_only_model_matches_closed_form(p, q):
    states, mask, _ = sample(p, 600, seed=1)
    reachable = torch.tensor(p.reachable())
    visited = torch.zeros(p.num_states, dtype=torch.bool)
    visited[states[mask]] = True
    assert torch.equal(visited, reachable)
    metric = DecomposedKL(p)
    for chunk in range(3):  # several batches of different widths
        rows = slice(200 * chunk, 200 * (chunk + 1))
        width = int(mask[rows].sum(1).max())
        st, mk = states[rows, :width], mask[rows, :width]
        metric.update(state_model(q.next_symbol_probs(), st, mk), st, mk)
    out, ref = metric.compute(), pfsa_kl_decomposed(p, q)
    for key in KEYS:
        assert_close(out[key], ref[key], atol=1e-10, rtol=1e-10, equal_nan=True)
    assert_close(out["total"], pfsa_kl(p, q), atol=1e-10, rtol=0)
    check_sums(out)


# ---------------------------------------------------------------------------------- 2. enumeration
def test_prefix_dependent_model_exact_by_enumeration():
    A = acyclic()
    probs, visits = A.next_symbol_probs(), A.expected_visits()
    strings = enumerate_strings(A)
    g = torch.Generator().manual_seed(7)
    logits: dict[tuple, torch.Tensor] = {}

    def model(prefix):  # depends on the whole prefix, not only on the state
        if prefix not in logits:
            logits[prefix] = torch.log_softmax(torch.randn(3, generator=g, dtype=torch.float64), 0)
        return logits[prefix]

    # Reference: sum over prefixes y of p_prefix(y) (...), grouped by state.
    prefixes = {x[:t] for x, _ in strings for t in range(len(x) + 1)}
    state_w = torch.zeros(4, dtype=torch.float64)
    trans_w = torch.zeros(4, 3, dtype=torch.float64)
    for y in sorted(prefixes):
        q = walk(A, y)
        p_prefix = math.prod(float(probs[walk(A, y[:t]), y[t]]) for t in range(len(y)))
        pa, support = probs[q], probs[q] > 0
        ratio = torch.where(support, pa.log() - model(y), 0.0)
        state_w[q] += p_prefix * (pa * ratio).sum()
        trans_w[q] += p_prefix * pa * ratio
    string_kl = sum(
        p * (math.log(p) - sum(float(model(x[:t])[s]) for t, s in enumerate(x + (2,))))
        for x, p in strings
    )
    states, mask = batch_strings(A, [x for x, _ in strings])
    log_probs = torch.full((*states.shape, 3), torch.nan, dtype=torch.float64)
    for b, (x, _) in enumerate(strings):
        for t in range(len(x) + 1):
            log_probs[b, t] = model(x[:t])
    weights = torch.tensor([p for _, p in strings], dtype=torch.float64)
    out = decomposed_kl(A, log_probs, states, mask, weights)
    assert_close(out["total"], torch.tensor(string_kl, dtype=torch.float64), atol=1e-12, rtol=0)
    assert_close(out["state"], state_w, atol=1e-12, rtol=0)
    assert_close(out["transition"], trans_w, atol=1e-12, rtol=0)
    assert_close(out["symbol"], trans_w.sum(0), atol=1e-12, rtol=0)
    assert_close(out["state_unweighted"], state_w / visits, atol=1e-12, rtol=0)
    sym_weight = (visits[:, None] * probs).sum(0)
    assert_close(out["symbol_unweighted"], trans_w.sum(0) / sym_weight, atol=1e-12, rtol=0)
    assert torch.isnan(out["transition_unweighted"][2, 1])  # zero-weight transition s2 -b->
    assert out["transition"][2, 1] == 0
    check_sums(out)
    metric = DecomposedKL(A)
    metric.update(log_probs, states, mask, weights)
    for key in KEYS:
        assert_close(metric.compute()[key], out[key], atol=0, rtol=0, equal_nan=True)


def test_length_dependent_model_monte_carlo_converges():
    A = parity_starfree_pfsa(0.3)
    probs, W = A.next_symbol_probs(), A.transition_matrix()
    g = torch.Generator().manual_seed(3)
    base = torch.randn(4, 3, generator=g, dtype=torch.float64)
    bias = torch.randn(5, 3, generator=g, dtype=torch.float64)

    def model(t):  # [Q, 3] log-probs after a prefix of length t
        return torch.log_softmax(base + bias[min(t, 4)], -1)

    support = probs > 0
    alpha = torch.zeros(4, dtype=torch.float64)
    alpha[A.initial] = 1.0
    exact_state = torch.zeros(4, dtype=torch.float64)
    exact_trans, t = torch.zeros(4, 3, dtype=torch.float64), 0
    while alpha.sum() > 1e-14:  # forward DP over prefix lengths
        ratio = torch.where(support, probs.log() - model(t), 0.0)
        exact_trans += alpha[:, None] * probs * ratio
        exact_state += alpha * (probs * ratio).sum(-1)
        alpha, t = alpha @ W, t + 1
    states, mask, _ = sample(A, 4000, seed=5)
    steps = torch.arange(states.shape[1]).clamp(max=4)
    log_probs = model(0)[states.clamp(min=0)]
    for t in range(1, 5):
        log_probs[:, steps == t] = model(t)[states[:, steps == t].clamp(min=0)]
    out = decomposed_kl(A, log_probs, states, mask)
    check_sums(out)
    assert_close(out["state"], exact_state, atol=0.02, rtol=0.05)
    assert_close(out["transition"], exact_trans, atol=0.02, rtol=0.05)
    assert_close(out["total"], exact_state.sum(), atol=0.02, rtol=0.03)


# ---------------------------------------------------------------------------------- 3. properties
def test_sums_to_total_and_functional_matches_metric():
    A = random_pfsa(8, 4, topology_seed=1, weight_seed=2)
    states, mask, _ = sample(A, 300, seed=2)
    log_probs = torch.log_softmax(torch.randn(*states.shape, 5, dtype=torch.float64), -1)
    out = decomposed_kl(A, log_probs, states, mask)
    check_sums(out)
    assert (out["state_unweighted"][~torch.isnan(out["state_unweighted"])] >= 0).all()
    metric = DecomposedKL(A)
    metric.update(log_probs[:100], states[:100], mask[:100])
    metric.update(log_probs[100:], states[100:], mask[100:])
    for key in KEYS:
        assert_close(metric.compute()[key], out[key], atol=1e-12, rtol=1e-12, equal_nan=True)
    ones = decomposed_kl(A, log_probs, states, mask, torch.ones(300, dtype=torch.float64))
    for key in KEYS:
        assert_close(ones[key], out[key], atol=0, rtol=0, equal_nan=True)


def test_zero_when_model_is_the_automaton():
    A = resampled_parity_starfree_pfsa(4)
    states, mask, _ = sample(A, 200, seed=0)
    out = decomposed_kl(A, state_model(A.next_symbol_probs(), states, mask), states, mask)
    for key in KEYS:
        values = out[key][~torch.isnan(out[key])]
        assert values.abs().max() < 1e-12
    assert float(pfsa_kl(A, A)) == 0.0


def test_merged_states_equal_one_metric_fed_both_halves():
    A = random_pfsa(6, 3, topology_seed=5, weight_seed=0)
    states, mask, _ = sample(A, 200, seed=4)
    log_probs = torch.log_softmax(torch.randn(*states.shape, 4, dtype=torch.float64), -1)
    whole, first, second, fwd = DecomposedKL(A), DecomposedKL(A), DecomposedKL(A), DecomposedKL(A)
    whole.update(log_probs, states, mask)
    first.update(log_probs[:80], states[:80], mask[:80])
    second.update(log_probs[80:], states[80:], mask[80:])
    first.merge_state(second)
    batch_out = fwd(log_probs[:80], states[:80], mask[:80])  # forward returns the batch value
    fwd(log_probs[80:], states[80:], mask[80:])
    assert set(batch_out) == set(KEYS)
    for name in ("counts", "kl_sums", "ratio_sums"):
        assert getattr(whole, name).dtype == torch.float64
        assert whole._reductions[name].__name__ == "dim_zero_sum"
        summed = getattr(first, name)  # what a DDP "sum" reduction yields
        assert_close(summed, getattr(whole, name), atol=1e-12, rtol=1e-12)
    for key in KEYS:
        for merged in (first, fwd):
            assert_close(
                merged.compute()[key], whole.compute()[key], atol=1e-12, rtol=1e-12, equal_nan=True
            )


def test_zero_probabilities_give_no_nan():
    A = parity_starfree_pfsa(eta=1.0)  # init -b-> odd has weight 0: odd, even unreachable
    states, mask, _ = sample(A, 100, seed=0)
    model = A.next_symbol_probs().clone()
    model[3] = torch.tensor([0.8, 0.0, 0.2], dtype=torch.float64)  # -inf where p_A = 0
    out = decomposed_kl(A, state_model(model, states, mask), states, mask)
    check_sums(out)
    for key in ("total", *WEIGHTED):
        assert torch.isfinite(out[key]).all()
    assert torch.isnan(out["state_unweighted"][1:3]).all()
    assert torch.isnan(out["symbol_unweighted"][1])  # p_pi(b) = 0
    assert torch.isnan(out["transition_unweighted"][0, 1:]).all()  # p_A(b|init) = p_A(EOS|init) = 0
    assert torch.isfinite(out["transition_unweighted"][3, [0, 2]]).all()
    # The model gives 0 to something the automaton emits: +inf, still no NaN.
    model[3] = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    out = decomposed_kl(A, state_model(model, states, mask), states, mask)
    assert out["total"] == math.inf and out["transition"][3, 2] == math.inf
    for key in WEIGHTED:
        assert not torch.isnan(out[key]).any()


def test_unvisited_state_gives_nan_unweighted():
    A = parity_starfree_pfsa(0.3)
    states, mask = batch_strings(A, [(0,), (0, 0, 0), (0, 0)])  # only the star-free branch
    out = decomposed_kl(A, state_model(A.next_symbol_probs(), states, mask), states, mask)
    assert torch.isnan(out["state_unweighted"][1:3]).all()
    assert torch.isnan(out["transition_unweighted"][1:3]).all()
    assert (out["state"][1:3] == 0).all() and torch.isfinite(out["total"])
    check_sums(out)
    empty = DecomposedKL(A)
    with pytest.warns(UserWarning):
        nothing = empty.compute()
    assert nothing["total"] == 0 and torch.isnan(nothing["symbol_unweighted"]).all()


def test_input_validation():
    A = parity_starfree_pfsa(0.3)
    states, mask = batch_strings(A, [(0, 0)])
    good = torch.zeros(1, 3, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="log_probs"):
        decomposed_kl(A, torch.zeros(1, 3, 4), states, mask)
    with pytest.raises(ValueError, match="states and mask"):
        decomposed_kl(A, good, states[:, :2], mask)
    with pytest.raises(ValueError, match="states must lie"):
        decomposed_kl(A, good, torch.full_like(states, 9), mask)
    with pytest.raises(ValueError, match="NaN"):
        decomposed_kl(A, torch.full_like(good, math.nan), states, mask)
    with pytest.raises(ValueError, match="weights"):
        decomposed_kl(A, good, states, mask, torch.ones(2))


# ---------------------------------------------------------------------------------- 4. pfsa_kl
def test_pfsa_kl_zero_nonnegative_and_matches_enumeration():
    for seed in range(5):
        p, q = resampled_parity_starfree_pfsa(seed), resampled_parity_starfree_pfsa(seed + 10)
        assert float(pfsa_kl(p, p)) == 0.0 and float(pfsa_kl(p, q)) > 0
        check_sums(pfsa_kl_decomposed(p, q))
    p, q = acyclic(), acyclic(weights=(0.2, 0.8, 0.1, 0.6, 0.4, 0.3), final=(0.0, 0.3, 0.3, 1.0))
    q_probs = {x: prob for x, prob in enumerate_strings(q)}
    exact = sum(prob * math.log(prob / q_probs[x]) for x, prob in enumerate_strings(p))
    assert_close(pfsa_kl(p, q), torch.tensor(exact, dtype=torch.float64), atol=1e-12, rtol=0)
    assert_close(pfsa_kl_decomposed(p, q)["total"], pfsa_kl(p, q), atol=1e-12, rtol=0)
    # q misses something p emits: +inf; p(.) = 0 terms are 0.
    assert float(pfsa_kl(q, p)) == math.inf
    with pytest.raises(PFSAError):
        pfsa_kl(parity_starfree_pfsa(), acyclic())


# ---------------------------------------------------------------------------------- naming
def test_log_dict_and_target_values():
    A = parity_starfree_pfsa(0.3)
    states, mask = batch_strings(A, [(0,), (0, 0)])
    model = torch.full((*states.shape, 3), 1 / 3, dtype=torch.float64).log()
    out = decomposed_kl(A, model, states, mask)
    logs = kl_log_dict(out, A)
    assert logs["kl/total"] == pytest.approx(float(out["total"]))
    assert logs["kl/state/rep"] == pytest.approx(float(out["state"][3]))
    assert logs["kl/symbol/EOS"] == pytest.approx(float(out["symbol"][2]))
    assert logs["kl/transition/rep:EOS"] == pytest.approx(float(out["transition"][3, 2]))
    assert "kl/transition/init:EOS" not in logs and "kl/transition/rep:b" not in logs
    assert "kl_unweighted/state/odd" not in logs and "kl_unweighted/total" not in logs
    assert math.isnan(kl_log_dict(out, A, "val_kl", skip_nan=False)["val_kl_unweighted/state/odd"])
    assert kl_nested_dict(out, A, unweighted=True)["state"]["odd"] is None
    assert target_values(out, "state:rep", A) == (float(out["state"][3]),
                                                  float(out["state_unweighted"][3]))
    assert target_values(out, "symbol:a", A)[0] == float(out["symbol"][0])
    assert target_values(out, "transition:rep:a", A)[1] == float(out["transition_unweighted"][3, 0])
    assert math.isnan(target_values(out, "transition:odd:b", A)[1])
    assert kl_target_names("symbol:b", A) == ("kl/symbol/b", "kl_unweighted/symbol/b")
    with pytest.raises(EventError):
        target_values(out, "state:nowhere", A)


def test_symbol_unweighted_averages_over_visited_states_only():
    """An unvisited state's per-transition contribution is unknown, not 0: U(s) is the
    p_pi(q, s)-weighted mean of U(q, s) over the states the strings visit."""
    A = parity_starfree_pfsa(0.3)
    states, mask = batch_strings(A, [(0,), (0, 0, 0), (0, 0)])  # init and rep only
    model = A.next_symbol_probs().clone()
    model[:, 0], model[:, -1] = 0.5 * model[:, 0] + 0.25, 0.5 * model[:, -1] + 0.25
    model = model / model.sum(1, keepdim=True)
    out = decomposed_kl(A, state_model(model, states, mask), states, mask)
    probs, visits = A.next_symbol_probs().double(), A.expected_visits().double()
    visited = torch.zeros(A.num_states, dtype=torch.bool)
    visited[states[mask].unique()] = True
    ratio = torch.where(probs > 0, (probs / model.double()).log(), torch.zeros_like(probs))
    weight = torch.where(visited[:, None], visits[:, None] * probs, torch.zeros_like(probs))
    expected = (weight * ratio).sum(0) / weight.sum(0)
    a = A.alphabet.index("a")
    assert visited.tolist() == [True, False, False, True] and (visits[1:3] > 0).all()
    assert_close(out["symbol_unweighted"][a], expected[a], atol=1e-12, rtol=0)
    # negative control: dividing by every state's weight shrinks it towards 0
    everywhere = (weight * ratio).sum(0)[a] / (visits * probs[:, a]).sum()
    assert abs(float(everywhere) - float(expected[a])) > 1e-3
