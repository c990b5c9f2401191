"""The streaming count law (sampling/law.py) and the on-device split, against references.

References: the forward DP over (state, count) and direct convolution powers (tests/reference.py).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

from cfl_lightning.automata import Event, parity_starfree_pfsa, random_pfsa
from cfl_lightning.sampling import law as law_module
from cfl_lightning.sampling.counts import split_exact, tilt
from cfl_lightning.sampling.law import law_for_total, law_upto
from tests.helpers import check_split_law_by_position, short_pfsa
from tests.reference import chi_square_pvalue, count_pmf

ALPHA = 1e-3


def test_window_law_equals_the_reference_and_drops_only_negligible_mass():
    pfsa = random_pfsa(12, 4, 3, 4)
    fn = Event.parse("state:q2").function(pfsa)
    k = 5000
    n = round(3 * Event.parse("state:q2").expected_count(pfsa) * k)
    law = law_for_total(pfsa, fn, k, n)
    length = law.log_pmf.numel()
    assert length < n + 1  # streamed: far shorter than N
    reference = count_pmf(pfsa, fn, 3 * length, tol=1e-280)
    np.testing.assert_allclose(
        law.log_pmf.exp().numpy(), reference[:length], rtol=1e-7, atol=1e-250
    )
    # The tilted mass beyond the window is below e^-92 of the window's (by the reference law).
    with np.errstate(divide="ignore"):
        log_ref = np.log(reference)
    theta = tilt(torch.from_numpy(log_ref[:length]), n / k)
    tilted = log_ref + theta * np.arange(log_ref.size)
    inside = np.logaddexp.reduce(tilted[:length])
    outside = np.logaddexp.reduce(tilted[length:][np.isfinite(tilted[length:])])
    assert outside < inside - law_module.NEGLIGIBLE
    # Negative control: the same check on a window of 8 fails.
    assert np.logaddexp.reduce(tilted[8:]) > np.logaddexp.reduce(tilted[:8]) - law_module.NEGLIGIBLE


def test_certificate_refuses_a_short_window():
    """Negative control of the closed-form tail bound: a window too short is not certified."""
    pfsa = random_pfsa(12, 4, 3, 4)
    fn = Event.parse("state:q2").function(pfsa)
    source = law_module.CountSource(pfsa, fn)
    log_pmf, row, scale = source.law(16)
    assert not law_module._certified(source, log_pmf, row, scale, 100, 400)
    log_pmf, row, scale = source.law(1024)
    assert law_module._certified(source, log_pmf, row, scale, 100, 400)


@pytest.mark.parametrize("k,factor", [(1, 5), (3, 0), (2000, 100)])
def test_complete_or_certified_law_for_extreme_targets(k, factor):
    pfsa = random_pfsa(50, 10, 0, 0)
    event = Event.parse("state:q9")
    fn = event.function(pfsa)
    n = int(factor * event.expected_count(pfsa) * k)
    law = law_for_total(pfsa, fn, k, n)
    assert not torch.isnan(law.log_pmf).any() and law.high <= max(n, law.low)
    if k == 1 or n == 0:
        assert law.log_pmf.numel() == n + 1
    counts = split_exact(law, k, n, torch.Generator().manual_seed(0))
    assert int(counts.sum()) == n and int(counts.min()) >= 0


def test_law_upto_is_the_complete_prefix():
    pfsa = short_pfsa()
    fn = Event.parse("symbol:a").function(pfsa)
    get = law_upto(pfsa, fn)
    law = get(30)
    assert law.log_pmf.numel() == 31
    np.testing.assert_allclose(
        law.log_pmf.exp().numpy(), count_pmf(pfsa, fn, 30, tol=1e-280), rtol=1e-9, atol=1e-250
    )


@pytest.mark.parametrize("k", [64, 3])
def test_on_device_split_law_by_position(device, k):
    """Marginal of the first and last count given the total; K = 64 uses per-level tables."""
    check_split_law_by_position(device, k, ALPHA)


@pytest.mark.slow
def test_split_far_above_natural_on_device(device):
    """Geometric counts (parity, eta = 1) given N = 100,000 over K = 3: uniform compositions."""
    pfsa = parity_starfree_pfsa(1.0)
    fn = Event.parse("state:rep").function(pfsa)
    n, k = 100_000, 3
    law = law_for_total(pfsa.to(device), fn.to(device), k, n)
    assert law.log_pmf.numel() == n + 1  # e^theta rho >= 1: the whole law is needed
    first = split_exact(law, k, n, torch.Generator(device=device).manual_seed(4), draws=600)
    first = first[:, 0].cpu().tolist()
    bins = np.linspace(0, n + 1, 11)
    observed = Counter({i: int(v) for i, v in enumerate(np.histogram(first, bins=bins)[0])})
    j = np.arange(n + 1)
    prob = (n - j + 1) / ((n + 1) * (n + 2) / 2)
    expected = np.histogram(j, bins=bins, weights=prob)[0]
    assert chi_square_pvalue(observed, dict(enumerate(expected)), 600) > ALPHA
    assert chi_square_pvalue(observed, {i: 0.1 for i in range(10)}, 600) < ALPHA
    assert math.isfinite(float(law.log_pmf[n]))


def test_split_table_equals_per_block_weights():
    """The tabulated split weights (one strided view) give every total the same law."""
    from cfl_lightning.sampling import counts

    gen = torch.Generator().manual_seed(0)
    for _ in range(100):
        la, lb = torch.randint(1, 30, (2,), generator=gen).tolist()
        o1, o2 = torch.randint(0, 10, (2,), generator=gen).tolist()
        a = torch.rand(la, dtype=torch.float64, generator=gen)
        b = torch.rand(lb, dtype=torch.float64, generator=gen)
        a[torch.rand(la, generator=gen) < 0.2] = 0.0
        b[torch.rand(lb, generator=gen) < 0.2] = 0.0
        low = o1 + o2 + int(torch.randint(0, la + lb, (1,), generator=gen))
        high = low + int(torch.randint(0, 20, (1,), generator=gen))
        lo1, cdf1 = counts._split_table((o1, a), (o2, b), low, high)
        lo2, cdf2 = counts._split_weights((o1, a), (o2, b), torch.arange(low, high + 1))
        for r in range(high - low + 1):
            laws = []
            for lo, cdf in ((lo1, cdf1), (lo2, cdf2)):
                if torch.isnan(cdf[r]).any():
                    laws.append(None)
                    continue
                steps = torch.diff(cdf[r], prepend=cdf.new_zeros(1))
                laws.append({int(lo[r]) + j: float(x) for j, x in enumerate(steps) if x > 0})
            assert (laws[0] is None) == (laws[1] is None)
            if laws[0] is not None:
                assert laws[0].keys() == laws[1].keys()
                assert all(abs(laws[0][m] - laws[1][m]) < 1e-12 for m in laws[0])
