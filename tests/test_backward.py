"""Backward weights: Lehmann (generic) vs the fast 0/1 recurrence vs a forward DP and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cfl_lightning.automata import Event, parity_starfree_pfsa, random_pfsa
from cfl_lightning.sampling.feasibility import max_occurrences
from cfl_lightning.semiring import backward_fast, backward_lehmann, initial_count_law
from cfl_lightning.semiring.powers import power_rows
from tests.helpers import short_pfsa
from tests.reference import count_pmf

CASES = [
    (short_pfsa, "state:t"),
    (short_pfsa, "symbol:a"),
    (short_pfsa, "transition:s:b"),
    (lambda: parity_starfree_pfsa(0.3), "state:odd"),
    (lambda: parity_starfree_pfsa(0.3), "symbol:b"),
    (lambda: random_pfsa(6, 3, 1, 2), "state:q1"),
    (lambda: random_pfsa(6, 3, 1, 2), "symbol:c"),
]


@pytest.mark.parametrize("make,spec", CASES)
@pytest.mark.parametrize("log", [False, True])
def test_lehmann_equals_fast_route(make, spec, log):
    pfsa = make()
    fn = Event.parse(spec).function(pfsa)
    order = 7
    generic = backward_lehmann(pfsa, fn, order, log=log)
    if log:
        generic = generic.exp()
    exact = backward_fast(pfsa, fn, order).dense().T  # [Q, order]
    tail = backward_fast(pfsa, fn, order + 1, tail=True).dense()[order]  # P(>= order)
    assert torch.allclose(generic[:, :order], exact, rtol=1e-9, atol=1e-14)
    assert torch.allclose(generic[:, order], tail, rtol=1e-9, atol=1e-14)
    # Every state's bins form a distribution (a valid PFSA terminates a.s.).
    assert torch.allclose(generic.sum(1), torch.ones(pfsa.num_states, dtype=torch.float64))


@pytest.mark.parametrize("make,spec", CASES)
def test_fast_route_matches_forward_dp(make, spec):
    pfsa = make()
    fn = Event.parse(spec).function(pfsa)
    reference = count_pmf(pfsa, fn, 30)
    fast = backward_fast(pfsa, fn, 31, block=4).dense()[:, pfsa.initial].numpy()
    np.testing.assert_allclose(fast, reference, rtol=1e-8, atol=1e-15)


def test_far_tail_closed_form_without_underflow():
    # eta = 1: every string is a^(k+1) with k ~ Geometric: P(k transitions leave 'rep') = 0.1 * 0.9^k.
    pfsa = parity_starfree_pfsa(1.0)
    fn = Event.parse("state:rep").function(pfsa)
    n = 200_000  # 0.9^n ~ 10^-9151: far below float64
    bins = backward_fast(pfsa, fn, n + 1)
    logp = bins.log_column(pfsa.initial)
    k = torch.tensor([0, 1, 1000, 123_456, n], dtype=torch.long)
    expected = math.log(0.1) + k.double() * math.log(0.9)
    assert torch.allclose(logp[k], expected, rtol=1e-10)
    tails = backward_fast(pfsa, fn, n + 1, tail=True).log_column(pfsa.initial)
    assert torch.allclose(tails[k], k.double() * math.log(0.9), rtol=1e-10, atol=1e-12)
    assert not torch.isnan(bins.values).any()


def test_event_that_cannot_occur_gives_exact_zeros():
    pfsa = parity_starfree_pfsa(0.0)  # 'rep' unreachable
    fn = Event.parse("state:rep").function(pfsa)
    bins = backward_fast(pfsa, fn, 50)
    dense = bins.dense()[:, pfsa.initial]
    assert float(dense[0]) == pytest.approx(1.0)
    assert torch.all(dense[1:] == 0)
    assert not torch.isnan(bins.log_scale[torch.isfinite(bins.log_scale)]).any()
    assert max_occurrences(pfsa, fn) == 0


def test_max_occurrences():
    pfsa = parity_starfree_pfsa(0.3)
    assert max_occurrences(pfsa, Event.parse("state:init").function(pfsa)) == 1
    assert max_occurrences(pfsa, Event.parse("state:odd").function(pfsa)) is None


def test_fast_route_rejects_non_binary_events():
    pfsa = short_pfsa()
    with pytest.raises(ValueError):
        backward_fast(pfsa, 2 * Event.parse("state:s").function(pfsa), 5)


def test_integer_valued_event_lehmann_matches_dp():
    pfsa = short_pfsa()
    fn = Event.parse("symbol:a").function(pfsa) * 2 + Event.parse("state:s").function(pfsa)
    generic = backward_lehmann(pfsa, fn, 9)[pfsa.initial, :9].numpy()
    np.testing.assert_allclose(generic, count_pmf(pfsa, fn, 8), rtol=1e-9, atol=1e-15)


# ------------------------------------------------------------------------- doubling, streaming
def naive_rows(start, matrix, count):
    rows = [start]
    for _ in range(count - 1):
        rows.append(rows[-1] @ matrix)
    return torch.stack(rows)


@pytest.mark.parametrize("block", [None, 1, 4, 4096])
def test_power_rows_match_sequential_products(block, device):
    gen = torch.Generator().manual_seed(0)
    matrix = torch.rand(7, 7, dtype=torch.float64, generator=gen) * 0.25
    matrix[2, :] = 0.0  # a row that kills mass: exact zeros must survive
    start = torch.rand(7, dtype=torch.float64, generator=gen)
    rows, (power, scale) = power_rows(start.to(device), matrix.to(device), 37, block)
    dense = (rows.values * rows.log_scale[:, None].exp()).cpu()
    expected = naive_rows(start, matrix, 37)
    torch.testing.assert_close(dense, expected, rtol=1e-12, atol=0.0)
    if block is None:  # 37 rows are made by doubling to 64: the power returned is A^64
        torch.testing.assert_close(
            (power * scale.exp()).cpu(), torch.linalg.matrix_power(matrix, 64), rtol=1e-10, atol=0.0
        )


@pytest.mark.parametrize("make,spec", CASES)
@pytest.mark.parametrize("tail", [False, True])
def test_initial_count_law_matches_forward_dp(make, spec, tail, device):
    pfsa = make().to(device)
    fn = Event.parse(spec).function(pfsa)
    reference = count_pmf(make(), fn.cpu(), 400)
    if tail:
        reference = reference[::-1].cumsum()[::-1]  # P(count >= n); mass beyond 400 < 1e-18
    log_law, _ = initial_count_law(pfsa, fn, 41, tail=tail)
    assert log_law.numel() >= 41 and not torch.isnan(log_law).any()
    got = log_law[:41].exp().cpu().numpy()
    np.testing.assert_allclose(got, reference[:41], rtol=1e-8, atol=1e-15)
    # Negative control: a shifted law is far from the reference.
    assert not np.allclose(log_law[1:42].exp().cpu().numpy(), reference[:41], rtol=1e-3)


def test_initial_count_law_far_tail_and_bins_by_doubling(device):
    """eta = 1 closed form at n up to 10^6 (0.9^n ~ 10^-45757), both routes, no NaN or inf."""
    pfsa = parity_starfree_pfsa(1.0).to(device)
    fn = Event.parse("state:rep").function(pfsa)
    n = 1_000_000
    log_law, last = initial_count_law(pfsa, fn, n + 1)
    k = torch.tensor([0, 1, 1000, 123_456, 999_999, n])
    expected = math.log(0.1) + k.double() * math.log(0.9)
    torch.testing.assert_close(log_law.cpu()[k], expected, rtol=1e-10, atol=1e-9)
    assert torch.isfinite(log_law).all() and torch.isfinite(last.log_scale).all()
    for block in (None, 4096):
        bins = backward_fast(pfsa, fn, 300_001, block=block)
        logp = bins.log_column(pfsa.initial).cpu()
        torch.testing.assert_close(logp[k[:4]], expected[:4], rtol=1e-10, atol=1e-9)
        assert torch.isfinite(bins.values).all() and not torch.isnan(bins.log_scale).any()


def test_doubling_keeps_structural_zeros(device):
    pfsa = parity_starfree_pfsa(0.0).to(device)  # 'rep' unreachable: P(count > 0) = 0 exactly
    fn = Event.parse("state:rep").function(pfsa)
    log_law, _ = initial_count_law(pfsa, fn, 5000)
    assert float(log_law[0]) == pytest.approx(0.0, abs=1e-12)
    assert torch.all(log_law[1:] == -math.inf)
    bins = backward_fast(pfsa, fn, 5000, block=None)
    assert torch.all(bins.dense()[1:, pfsa.initial] == 0)
