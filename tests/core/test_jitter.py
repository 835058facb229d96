import numpy as np
import pytest
from scipy import stats

from pymc_surrogate.core.jitter import jittered_trajectory


def _draws(step_size, path_length, n=4000, **kwargs):
    rng = np.random.default_rng(0)
    eps, steps = np.array([jittered_trajectory(step_size, path_length, rng, **kwargs)
                           for _ in range(n)]).T
    return eps, steps.astype(int)


@pytest.mark.parametrize("shortest", [0.0, 0.5])
def test_integration_time_is_uniform_up_to_the_path_length(shortest):
    eps, steps = _draws(0.01, 1.0, shortest=shortest)
    time = eps * steps
    assert eps.max() <= 0.012 and time.max() <= 1.0 + 1e-12
    # steps of 0.008 or more: the time is uniform above that
    above = time[time > 0.012]
    lower = max(shortest, 0.012)
    assert stats.kstest(above, stats.uniform(lower, 1.0 - lower).cdf).pvalue > 1e-3


def test_steps_never_exceed_the_jittered_step_size():
    eps, steps = _draws(0.1, 1.0)
    assert eps.max() <= 0.12 and steps.min() == 1 and steps.max() <= 13
    # n = ceil(time / eps0) steps of time / n: never below (n - 1) / n of the smallest eps0
    assert np.all(eps[steps > 1] >= 0.08 * (steps[steps > 1] - 1) / steps[steps > 1])


def test_a_path_shorter_than_one_step_takes_one_full_step():
    eps, steps = _draws(2.0, 1.0, shortest=0.5)
    assert np.all(steps == 1) and eps.min() >= 1.6 and eps.max() <= 2.4


def test_max_steps_shortens_the_path_not_the_step():
    eps, steps = _draws(0.001, 1.0, max_steps=32, shortest=0.5)
    assert steps.max() == 32 and eps.min() >= 0.0008
