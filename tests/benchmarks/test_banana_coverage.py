"""The funnel check of ``benchmarks/banana_coverage.py``: independent exact draws pass it at
its measured false-alarm rate, and draws that miss the funnel's neck or mouth fail it.

Each case is a set of 2 x 1000 draws measured as one run (:func:`measure`). Over 200 sets
per case (``pytest -m slow`` for the three below): exact draws called wrong at 6 (3 %),
draws without the neck (v > -4) or the mouth (v < 5) at 200 of 200; measured the same way,
v > -5 and v < 6 at 200 of 200, exact draws with x's sd scaled by 0.8 or 1.25 at 87 and
100. CI checks 30 sets of exact draws and 20 of each broken case.
"""

from __future__ import annotations

import arviz as az
import numpy as np
import pytest
import xarray as xr
from scipy.stats import truncnorm

from benchmarks.banana_coverage import FUNNEL_SCALE, funnel_reference, measure
from pymc_surrogate.compat import ARVIZ_1

CHAINS, DRAWS = 2, 1000
REF = funnel_reference()


def _result(draws: np.ndarray):
    """``(CHAINS * DRAWS, 2)`` draws of (v, x) as the result ``pm.sample`` would return."""
    d = draws.reshape(CHAINS, DRAWS, 2)
    posterior = xr.Dataset({"v": (("chain", "draw"), d[..., 0]),
                            "x": (("chain", "draw", "x_dim_0"), d[..., 1:])})
    if not ARVIZ_1:  # (ArviZ 1 has an InferenceData alias of DataTree: no groups)
        return az.InferenceData(posterior=posterior)
    return xr.DataTree.from_dict({"posterior": posterior})


def _funnel(rng, n, v_low=-np.inf, v_high=np.inf):
    """Exact funnel draws, ``v`` truncated to ``(v_low, v_high)``: a sampler that never
    enters the neck (``v_low``) or the mouth (``v_high``)."""
    a, b = v_low / FUNNEL_SCALE, v_high / FUNNEL_SCALE
    v = truncnorm.rvs(a, b, scale=FUNNEL_SCALE, size=n, random_state=rng)
    return np.column_stack([v, rng.normal(size=n) * np.exp(v / 2)])


CASES = {
    "exact": {},
    "no neck (v > -4)": {"v_low": -4.0},
    "no mouth (v < 5)": {"v_high": 5.0},
}


def flagged(case: str, sets: int, seed: int = 0) -> int:
    """How many of ``sets`` sets of a case's draws :func:`measure` calls wrong."""
    rng = np.random.default_rng([seed, list(CASES).index(case)])
    return sum(measure(_result(_funnel(rng, CHAINS * DRAWS, **CASES[case])), REF,
                       ("v", "x"))["status"] == "wrong" for _ in range(sets))


def test_reference_matches_exact_draws():
    """The quadrature quantiles of x hold 2.5 % of 10^6 exact draws on each side."""
    x = REF.draw(np.random.default_rng(1), 1_000_000)
    assert np.allclose(x.mean(axis=0)[0], 0.0, atol=0.02)
    for i in range(2):
        assert abs(np.mean(x[:, i] < REF.quantiles[i, 0]) - 0.025) < 0.001
        assert abs(np.mean(x[:, i] > REF.quantiles[i, 1]) - 0.025) < 0.001


@pytest.mark.parametrize("sets", [30, pytest.param(200, marks=pytest.mark.slow)])
def test_exact_draws_pass_at_the_measured_rate(sets):
    """False alarms: at most 4 of 30 / 15 of 200 (measured: 6 of 200; Binomial(30, 0.03)
    exceeds 4 with probability 0.002)."""
    assert flagged("exact", sets) <= {30: 4, 200: 15}[sets]


@pytest.mark.parametrize("case", [c for c in CASES if c != "exact"])
@pytest.mark.parametrize("sets", [20, pytest.param(200, marks=pytest.mark.slow)])
def test_missing_neck_or_mouth_is_flagged(case, sets):
    """Power: every set of draws without the neck or the mouth is called wrong."""
    assert flagged(case, sets) == sets
