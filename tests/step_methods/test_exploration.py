"""The black-box exploration's population (``step_methods/exploration.py``)."""

from __future__ import annotations

import numpy as np
import pymc as pm

from pymc_surrogate import SurrogateHMC


def test_population_is_drawn_from_the_prior():
    with pm.Model():
        pm.Normal("x", 3.0, 2.0, shape=2)
        rows = SurrogateHMC(use_gradient=False)._draw_prior(4000)
    assert rows.shape == (4000, 2)
    # mean within 5 standard errors (0.03), sd within 5 (0.022 of 2)
    np.testing.assert_allclose(rows.mean(axis=0), 3.0, atol=0.16)
    np.testing.assert_allclose(rows.std(axis=0), 2.0, atol=0.12)


def test_population_without_a_prior_is_pymcs_jitter_around_the_initial_value():
    """A ``pm.Flat`` vector (a whole log-posterior served behind one Op) has no prior to
    draw: the population is the initial value plus U(-1, 1) per coordinate, as PyMC's own
    jittered start. Before, it was empty, and a chain that rejected its first proposals
    had no spread to jump by (a 20-d served Gaussian: min ESS 2, sds 0.01-0.48)."""
    start = np.array([5.0, -2.0, 0.5])
    with pm.Model():
        x = pm.Flat("x", shape=3, initval=start)
        s = pm.HalfFlat("s", initval=2.0)
        pm.Potential("lp", -0.5 * pm.math.sum(x**2) - s)
        rows = SurrogateHMC(use_gradient=False)._draw_prior(4000)
    assert rows.shape == (4000, 4)
    # the step's raveled order is the model's value variables: x, then log(s)
    centre = np.append(start, np.log(2.0))
    assert np.all(np.abs(rows - centre) <= 1.0)
    # U(-1, 1): mean 0 and sd 1/sqrt(3) per coordinate, within 5 standard errors
    np.testing.assert_allclose(rows.mean(axis=0), centre, atol=5 * 0.577 / np.sqrt(4000))
    np.testing.assert_allclose(rows.std(axis=0), 1 / np.sqrt(3), atol=0.02)
