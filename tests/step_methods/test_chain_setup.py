"""Every chain gets its own random streams, on both PyMC generations and with any ``cores``.

PyMC 5 hands a chain its generator through ``set_rng``, PyMC 6 through ``setup_chain``; a
step that follows only one of them keeps the generators it was built with in the other, so
two worker processes draw the same momenta and their chains couple (R-hat and ESS then look
better than they are).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pymc_surrogate import STEP_METHODS
from pymc_surrogate.compat import posterior_dataset

RUN = dict(draws=60, tune=120, chains=2, progressbar=False, compute_convergence_checks=False)


def _draws_and_momenta(cls, cores: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    with pm.Model():
        pm.Normal("x", 0.0, 1.0, shape=3)
        idata = pm.sample(step=cls(), cores=cores, random_seed=seed, **RUN)
    x = posterior_dataset(idata)["x"].values
    energy = posterior_dataset(idata, "sample_stats")["energy"].values
    return x, energy


@pytest.mark.parametrize("cls", STEP_METHODS.values(), ids=STEP_METHODS.keys())
def test_parallel_chains_are_independent_and_reproducible(cls):
    x, energy = _draws_and_momenta(cls, cores=2, seed=11)
    # Chains that shared their momentum stream start from the same point and retrace each
    # other: equal draws and equal energies.
    shared_draws = np.isin(x[0].ravel(), x[1].ravel()).mean()
    shared_energies = np.isin(energy[0], energy[1]).mean()
    assert shared_draws < 0.05 and shared_energies < 0.05, (shared_draws, shared_energies)
    again, _ = _draws_and_momenta(cls, cores=2, seed=11)
    np.testing.assert_array_equal(x, again)


@pytest.mark.parametrize("cls", STEP_METHODS.values(), ids=STEP_METHODS.keys())
def test_the_chain_hook_of_this_pymc_reseeds_the_momenta(cls):
    """What ``pm.sample`` calls before a chain (PyMC 6 ``setup_chain``, PyMC 5 ``set_rng``)
    gives the momenta that chain's stream: different seeds, different momenta."""
    from pymc.step_methods.compound import BlockedStep

    with pm.Model():
        pm.Normal("x", 0.0, 1.0, shape=3)
        step = cls()

    def momenta(seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        if hasattr(BlockedStep, "setup_chain"):
            step.setup_chain(rng, 100, 100)
        else:
            step.set_rng(rng)
        return np.array([step.kernel.metric.random() for _ in range(5)])

    first, second, first_again = momenta(1), momenta(2), momenta(1)
    assert not np.isin(first, second).any()
    np.testing.assert_array_equal(first, first_again)
