"""Binning-semiring laws (hypothesis), the Kleene-star closed form, powers, log vs real."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cfl_lightning.semiring import BinningSemiring

ORDERS = st.integers(min_value=0, max_value=6)
SETTINGS = settings(max_examples=60, deadline=None)


def element(order: int, draw, scale: float = 1.0) -> torch.Tensor:
    values = draw(
        st.lists(
            st.one_of(st.just(0.0), st.floats(0.0, 1.0, allow_nan=False)),
            min_size=order + 1,
            max_size=order + 1,
        )
    )
    return torch.tensor(values, dtype=torch.float64) * scale


def naive_times(a: torch.Tensor, b: torch.Tensor, order: int) -> torch.Tensor:
    """Definition (eq. binning-semiring-convolution) as a double loop."""
    out = torch.zeros(order + 1, dtype=torch.float64)
    for i in range(order + 1):
        for j in range(order + 1):
            out[min(i + j, order)] += a[i] * b[j]
    return out


@st.composite
def triples(draw):
    order = draw(ORDERS)
    return order, element(order, draw), element(order, draw), element(order, draw)


@SETTINGS
@given(triples())
def test_times_matches_definition(t):
    order, a, b, _ = t
    S = BinningSemiring(order)
    assert torch.allclose(S.times(a, b), naive_times(a, b, order), atol=1e-12)


@SETTINGS
@given(triples())
def test_semiring_axioms(t):
    order, a, b, c = t
    S = BinningSemiring(order)
    close = lambda x, y: torch.allclose(x, y, atol=1e-12)  # noqa: E731
    assert close(S.times(S.times(a, b), c), S.times(a, S.times(b, c)))  # associative
    assert close(S.times(a, b), S.times(b, a))  # commutative (base is commutative)
    assert close(S.plus(S.plus(a, b), c), S.plus(a, S.plus(b, c)))
    assert close(S.times(a, S.plus(b, c)), S.plus(S.times(a, b), S.times(a, c)))  # distributive
    assert close(S.times(S.one(), a), a) and close(S.plus(S.zero(), a), a)  # identities
    assert close(S.times(S.zero(), a), S.zero())  # annihilation


@SETTINGS
@given(triples())
def test_log_space_agrees_with_real(t):
    order, a, b, _ = t
    R, L = BinningSemiring(order), BinningSemiring(order, log=True)
    assert torch.allclose(L.times(a.log(), b.log()).exp(), R.times(a, b), atol=1e-12)
    assert torch.allclose(L.plus(a.log(), b.log()).exp(), R.plus(a, b), atol=1e-12)
    v = a / (a.sum() + 1.0)  # sum < 1: star finite
    assert torch.allclose(L.star(v.log()).exp(), R.star(v), rtol=1e-10, atol=1e-12)
    assert not torch.isnan(L.times(L.zero(), b.log())).any()  # -inf never gives NaN


@pytest.mark.slow
@SETTINGS
@given(triples())
def test_star_is_the_unique_fixpoint(t):
    order, a, w, _ = t
    S = BinningSemiring(order)
    v = a / (a.sum() + 0.5)  # sum v < 1
    x = S.star(v)
    assert torch.isfinite(x).all()
    assert torch.allclose(x, S.plus(S.one(), S.times(v, x)), rtol=1e-10, atol=1e-12)
    # Arden: star(v) (x) w solves y = v (x) y (+) w.
    y = S.times(x, w)
    assert torch.allclose(y, S.plus(S.times(v, y), w), rtol=1e-10, atol=1e-12)
    # Against the truncated series sum_{k<=200} v^k.
    series, power = S.zero(), S.one()
    for _ in range(400):
        series, power = S.plus(series, power), S.times(power, v)
    assert torch.allclose(x, series, rtol=1e-6, atol=1e-9)


@SETTINGS
@given(triples(), st.integers(0, 9))
def test_power_by_squaring(t, n):
    order, a, _, _ = t
    S = BinningSemiring(order)
    expected = S.one()
    for _ in range(n):
        expected = S.times(expected, a)
    assert torch.allclose(S.power(a, n), expected, rtol=1e-10, atol=1e-12)


def test_star_diverges_at_one_and_overflow_bin():
    S = BinningSemiring(3)
    v = torch.tensor([0.5, 0.5, 0.0, 0.0], dtype=torch.float64)  # sum 1: infinite mass
    x = S.star(v)
    assert math.isinf(float(x[-1])) and torch.isfinite(x[:-1]).all()
    # Closed form: v = (0.5, 0.5) means each factor adds 0 or 1 occurrence with prob 1/2.
    # star(v)_n = sum_k C(k, n) 2^-k = 2 for every n < N.
    assert torch.allclose(x[:-1], torch.full((3,), 2.0, dtype=torch.float64))


def test_batched_shapes_and_lift():
    S = BinningSemiring(4)
    w = torch.tensor([[0.2, 0.3], [0.5, 0.0]], dtype=torch.float64)
    c = torch.tensor([[0, 1], [7, 2]])
    lifted = S.lift(w, c)
    assert lifted.shape == (2, 2, 5)
    assert float(lifted[1, 0, 4]) == 0.5  # count 7 clamps to the overflow bin
    m = S.matmul(lifted, lifted)
    assert m.shape == (2, 2, 5)
    ref = S.plus(S.times(lifted[0, 0], lifted[0, 1]), S.times(lifted[0, 1], lifted[1, 1]))
    assert torch.allclose(m[0, 1], ref)


@pytest.mark.parametrize("log", [False, True])
def test_sum_rejects_bin_axis(log):
    with pytest.raises(ValueError):
        BinningSemiring(2, log=log).sum(torch.zeros(2, 3), dim=-1)


def test_log_star_of_zero_is_one():
    L = BinningSemiring(3, log=True)
    x = L.star(L.zero())
    assert torch.equal(x, L.one())
    assert not np.isnan(x.numpy()).any()
