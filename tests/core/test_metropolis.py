import numpy as np
import pytest

from pymc_surrogate.core.metropolis import (
    accept_probability,
    hamiltonian,
    metropolis_accept,
    surrogate_transition_log_ratio,
)


def test_accept_probability():
    assert accept_probability(0.5) == 1.0
    assert accept_probability(np.log(0.25)) == pytest.approx(0.25)
    assert accept_probability(np.nan) == 0.0
    assert accept_probability(-np.inf) == 0.0


def test_metropolis_accept_frequency():
    rng = np.random.default_rng(0)
    hits = sum(metropolis_accept(np.log(0.3), rng)[0] for _ in range(20000))
    assert abs(hits / 20000 - 0.3) < 4 * np.sqrt(0.3 * 0.7 / 20000)


def test_nan_energy_is_rejected():
    assert hamiltonian(np.nan, 1.0) == np.inf
    assert not metropolis_accept(-hamiltonian(np.nan, 0.0), np.random.default_rng(0))[0]


def test_surrogate_transition_ratio_cancels_a_perfect_surrogate():
    # If the surrogate equals the potential up to a constant, every move is accepted.
    assert surrogate_transition_log_ratio(3.0, 5.0, 10.0, 12.0) == pytest.approx(0.0)
    assert surrogate_transition_log_ratio(3.0, np.nan, 10.0, 12.0) == -np.inf
