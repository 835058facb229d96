import numpy as np
import pymc as pm
import pytest

from pymc_surrogate import AdaptiveSurrogateHMC
from tests.conftest import correlated_gaussian, gaussian_model
from tests.reliability.helpers import assert_moments

SAMPLE = dict(draws=1000, tune=600, chains=2, cores=1, progressbar=False, random_seed=21)


@pytest.mark.parametrize("black_box", [False, True])
@pytest.mark.shared_between_generations
def test_known_posterior_with_adaptation_in_the_draws(black_box):
    mean, cov = correlated_gaussian(5, seed=8)
    with gaussian_model(mean, cov, black_box=black_box):
        idata = pm.sample(step=AdaptiveSurrogateHMC(), **SAMPLE)
    assert_moments(idata, "x", mean, np.sqrt(np.diag(cov)))
    stats = idata.sample_stats
    adaptations = stats.adaptations.values
    # Adaptation goes on in the draws, ever more rarely.
    assert np.all(adaptations[:, -1] > adaptations[:, 0])
    assert stats.training_size.values[0, -1] > stats.training_size.values[0, 0]


def test_freezes_when_asked():
    mean, cov = correlated_gaussian(3, seed=10)
    with gaussian_model(mean, cov):
        idata = pm.sample(step=AdaptiveSurrogateHMC(adapt_in_draws=False), **{**SAMPLE, "draws": 300})
    stats = idata.sample_stats
    assert np.all(stats.adaptations.values[:, -1] == stats.adaptations.values[:, 0])
    assert np.all(stats.training_size.values[:, -1] == stats.training_size.values[:, 0])


@pytest.mark.parametrize("decay", [0.0, 1.5, -1.0])
def test_decay_must_keep_the_sum_infinite(decay):
    with pm.Model():
        pm.Normal("x")
        with pytest.raises(ValueError, match="adaptation_decay"):
            AdaptiveSurrogateHMC(adaptation_decay=decay)
