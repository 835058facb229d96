"""AdaptiveSurrogateHMC adapts in the draws: asymptotically exact, and how close in a run.

Its surrogate's weights change between draws with probability ``a_t = t^-0.5`` (diminishing
adaptation, rns-hmc §4): every transition is exact for the surrogate of that moment, and the
chain's law converges to the posterior, but a finite run may keep a bias that one run's
Monte Carlo error hides. Pooling runs at consecutive seeds shrinks that error by the square
root of their number, so these tests bound the bias tighter than the one-run exactness tests
(``test_exactness``): the short form pools 4 runs (8 chains), the slow one 12 (24 chains).
"""

from __future__ import annotations

import numpy as np
import pytest

from pymc_surrogate import AdaptiveSurrogateHMC
from pymc_surrogate.compat import concat_chains, posterior_dataset
from tests.conftest import correlated_gaussian, gaussian_model
from tests.reliability.helpers import SEED, assert_gaussian, assert_healthy, sample


def pooled_adaptive_runs(runs: int, black_box: bool):
    mean, cov = correlated_gaussian(3, seed=31, condition=10.0)
    results = []
    for offset in range(runs):
        with gaussian_model(mean, cov, black_box=black_box):
            results.append(sample(AdaptiveSurrogateHMC(), tune=600, random_seed=SEED + offset))
    return concat_chains(results), mean, cov


def assert_adapted_in_draws(idata) -> None:
    """The property under test must be exercised: every chain switched weights in its draws."""
    adaptations = posterior_dataset(idata, "sample_stats")["adaptations"].values
    switched = adaptations[:, -1] - adaptations[:, 0]
    assert np.all(switched > 0), f"no adaptation in the draws of some chains: {switched}"


@pytest.mark.parametrize(
    "runs", [4, pytest.param(12, marks=pytest.mark.slow)], ids=lambda n: f"{n}runs"
)
@pytest.mark.parametrize("black_box", [False, True], ids=["gradient", "black_box"])
def test_adaptation_in_draws_keeps_the_posterior(runs, black_box):
    idata, mean, cov = pooled_adaptive_runs(runs, black_box)
    assert_healthy(idata)
    assert_adapted_in_draws(idata)
    assert_gaussian(idata, "x", mean, cov)
