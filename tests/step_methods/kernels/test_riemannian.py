"""SurrogateHMC(kernel=HMCKernel(metric="riemannian")): RNS-RMHMC's surrogate transitions (``step_methods/kernels/riemannian.py``)."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pymc_surrogate import AdaptiveSurrogateHMC, HMCKernel, SurrogateHMC
from pymc_surrogate.surrogates.whitening import Whitening
from tests.reliability.broken import no_metropolis_correction
from tests.reliability.helpers import check_gaussian, check_moments, sample
from tests.reliability.test_faults import BAD_REGIONS, EDGE, first_coordinate_moments

#: Statistical checks of the Riemannian kernel (numpy): CI shares their cases between the
#: PyMC generations (tests/reliability/conftest.py).
pytestmark = pytest.mark.shared_between_generations


@pytest.mark.parametrize("kwargs,match", [
    ({"metric": "fisher"}, "metric must be one of"),
    ({"metric": "riemannian", "softabs_alpha": 0.0}, "softabs_alpha must be a positive"),
    ({"metric": "riemannian", "correction": "hamiltonian"}, "surrogate_transition"),
])
def test_invalid_settings_are_named(kwargs, match):
    with pm.Model():
        pm.Normal("x", shape=2)
        with pytest.raises(ValueError, match=match):
            SurrogateHMC(kernel=HMCKernel(**kwargs))


def test_a_block_of_a_compound_step_is_refused():
    with pm.Model():
        a = pm.Normal("a")
        pm.Normal("b", mu=a)
        with pytest.raises(ValueError, match="all of the model's continuous variables"):
            SurrogateHMC([a], kernel=HMCKernel(metric="riemannian"))


def _cut_gaussian_draws(step_class, metric="riemannian", **kwargs):
    """Draws of the bad-region test's posterior (N(0, I) cut at x0 < 1 by a -inf logp, a
    cut no smooth surrogate shows, so only the true-logp correction keeps the draws out)."""
    term, _, _ = BAD_REGIONS["-inf"]
    with pm.Model():
        x = pm.Normal("x", 0.0, 1.0, shape=2, initval=np.array([-0.5, 0.0]))
        pm.Potential("bad", term(x))
        return sample(step_class(kernel=HMCKernel(metric=metric)), **kwargs)


@pytest.mark.parametrize("step_class,metric", [(SurrogateHMC, "riemannian"),
                                               (AdaptiveSurrogateHMC, "riemannian"),
                                               (SurrogateHMC, "riemannian-diagonal")])
def test_riemannian_draws_are_exact_on_a_cut_gaussian(step_class, metric):
    """The moment check of the reliability suite, whose power against a sampler without
    the correction is shown below on the same model."""
    idata = _cut_gaussian_draws(step_class, metric, tune=500, draws=1000)
    draws = idata.posterior["x"].values
    assert not (draws[..., 0] > EDGE).any()
    mean0, sd0 = first_coordinate_moments(BAD_REGIONS["-inf"][2])
    check = check_moments(draws, [mean0, 0.0], [sd0, 1.0])
    assert check.passed, check.report("x")
    stats = idata.sample_stats
    assert stats["riemannian"].values.all()
    surrogate = stats["uses_surrogate"].values
    assert np.isfinite(stats["fixed_point_iterations"].values[surrogate]).all()
    assert (stats["fixed_point_iterations"].values[surrogate] >= 2).all()  # two implicit half-steps


def test_the_cut_gaussian_check_flags_riemannian_draws_without_the_correction():
    with no_metropolis_correction():
        idata = _cut_gaussian_draws(SurrogateHMC, tune=300, draws=300)
    draws = idata.posterior["x"].values
    assert (draws[..., 0] > EDGE).any()
    mean0, sd0 = first_coordinate_moments(BAD_REGIONS["-inf"][2])
    assert not check_moments(draws, [mean0, 0.0], [sd0, 1.0]).passed


#: kilpisjarvi's shape: sds 30 and 0.01, correlation -0.99. In the parameters' units the
#: wide direction's curvature, 1 / (30^2 (1 - 0.99^2)) ~ 0.06, lies under SoftAbs's floor
#: 1 / alpha = 1, a metric 18 times too stiff there.
BADLY_SCALED_SD = np.array([30.0, 0.01])
BADLY_SCALED_COV = np.outer(BADLY_SCALED_SD, BADLY_SCALED_SD) * np.array([[1.0, -0.99],
                                                                          [-0.99, 1.0]])


def test_riemannian_draws_are_right_on_a_badly_scaled_gaussian():
    """SoftAbs in the chain's whitened frame is scale-free: the marginals and the
    eigen-coordinates (the widest and narrowest directions) within their MCSEs.

    Power: with the metric in the parameters' units (the frame replaced by the identity)
    the same check fails (`test_the_badly_scaled_check_flags_an_absolute_softabs_floor`)."""
    draws = _badly_scaled_draws()
    for check, name in zip(check_gaussian(draws, [0.0, 0.0], BADLY_SCALED_COV), ("x", "eig")):
        assert check.passed, check.report(name)


def test_the_badly_scaled_check_flags_an_absolute_softabs_floor(monkeypatch):
    monkeypatch.setattr(SurrogateHMC, "_whitened",
                        lambda self, chain: Whitening.identity(self.dim))
    draws = _badly_scaled_draws()
    assert not all(check.passed for check in check_gaussian(draws, [0.0, 0.0], BADLY_SCALED_COV))


def _badly_scaled_draws() -> np.ndarray:
    with pm.Model():
        pm.MvNormal("x", mu=np.zeros(2), cov=BADLY_SCALED_COV)
        return sample(SurrogateHMC(kernel=HMCKernel(metric="riemannian"))).posterior["x"].values
