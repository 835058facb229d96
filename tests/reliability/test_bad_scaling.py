"""Badly scaled posteriors: coordinates whose sds are 1e4 and 1e-4 (1e6 and 1e-6 slow).

A black box gives the samplers only logp values, so nothing tells them the units of each
coordinate: every length they use (random-walk steps, the floor under a covariance's
eigenvalues, the condition number of a box, a finite-difference step) must be relative
to each coordinate's own scale, or the narrow coordinate is lost next to the wide one.
Each gradient-free step method, with its default settings, must be right on a 2-d
Gaussian served by an Op without a gradient; VariationalHMC differencing the logp must be
right on priors of such scales.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

from pymc_surrogate import (
    AdaptiveSurrogateHMC,
    KernelHMC,
    SparseGridHMC,
    SurrogateHMC,
    VariationalHMC,
)
from tests.conftest import BlackBoxGaussianLogp
from tests.reliability.helpers import (
    assert_healthy,
    assert_moments,
    recorded_warnings,
    sample,
    warning_messages,
)

GRADIENT_FREE = [SurrogateHMC, AdaptiveSurrogateHMC, KernelHMC, SparseGridHMC]


def _black_box(sds) -> pm.Model:
    """``x ~ N(0, diag(sds^2))`` as a ``pm.Potential`` on a ``pm.Flat`` vector, computed
    in a Python Op with no gradient; the chains start half an sd off in each coordinate."""
    sds = np.asarray(sds, dtype=float)
    with pm.Model() as model:
        x = pm.Flat("x", shape=sds.size, initval=0.5 * sds)
        pm.Potential("lik", BlackBoxGaussianLogp(np.zeros(sds.size), np.diag(sds**2))(x))
    return model


def _priors(sds) -> pm.Model:
    """The same posterior as independent ``pm.Normal`` priors (a model with a gradient,
    sampled without it)."""
    with pm.Model() as model:
        pm.Normal("x", 0.0, np.asarray(sds, dtype=float), shape=len(sds))
    return model


@pytest.mark.parametrize(
    "scale", [1e4, pytest.param(1e6, marks=pytest.mark.slow)], ids=["1e4", "1e6"])
@pytest.mark.parametrize("cls", GRADIENT_FREE, ids=lambda c: c.__name__)
def test_gradient_free_step_on_a_badly_scaled_black_box(cls, scale):
    """sds ``scale`` and ``1 / scale``: right means and sds, chains agreeing (each
    class used to stop with "Matrix is not positive definite" at the first Laplace
    probe's draws)."""
    sds = np.array([scale, 1.0 / scale])
    with _black_box(sds):
        idata = sample(cls(), tune=1000, draws=1000)
    assert_healthy(idata)
    assert_moments(idata, "x", np.zeros(2), sds)


@pytest.mark.slow
@pytest.mark.parametrize("cls", GRADIENT_FREE, ids=lambda c: c.__name__)
def test_gradient_free_step_on_badly_scaled_priors_without_their_gradient(cls):
    """Priors N(0, 1e4) and N(0, 1e-4) sampled with ``use_gradient=False``."""
    sds = np.array([1e4, 1e-4])
    with _priors(sds):
        idata = sample(cls(use_gradient=False), tune=1000, draws=1000)
    assert_healthy(idata)
    assert_moments(idata, "x", np.zeros(2), sds)


@pytest.mark.parametrize(
    "scale", [1e4, pytest.param(1e6, marks=pytest.mark.slow)], ids=["1e4", "1e6"])
def test_sparse_grid_with_the_gradient_on_badly_scaled_priors(scale):
    """Priors N(0, scale) and N(0, 1 / scale) with their gradient: the grid's box came
    from a Laplace approximation that lost the narrow coordinate (R-hat 1.33 at 1e4; at
    1e6 both sds 0 of the truth, R-hat 1.85); from the warm-up's states it holds both."""
    sds = np.array([scale, 1.0 / scale])
    with _priors(sds):
        idata = sample(SparseGridHMC(), tune=1000, draws=1000)
    assert_healthy(idata)
    assert_moments(idata, "x", np.zeros(2), sds)


def test_finite_differences_on_badly_scaled_priors():
    """VariationalHMC differencing the logp of priors N(0, 1e3) and N(0, 1e-3): steps of
    a fixed size gave the climb's Hessian rounding for the wide coordinate's curvature,
    and its sd came out at 0.29-0.73 of the truth (R-hat 1.3-1.9), with no warning."""
    sds = np.array([1e3, 1e-3])
    with _priors(sds):
        idata = sample(VariationalHMC(use_gradient="finite_difference"), tune=1000,
                       draws=1000)
    assert_healthy(idata)
    assert_moments(idata, "x", np.zeros(2), sds)


def _black_box_with_a_constant(sds, constant) -> pm.Model:
    """The black box of ``_black_box`` with ``-constant`` added to its logp, started at
    the mode: a pm.Flat gives no prior scale, and the logp's size sets the rounding of
    its differences."""
    sds = np.asarray(sds, dtype=float)
    with pm.Model() as model:
        x = pm.Flat("x", shape=sds.size, initval=np.zeros(sds.size))
        pm.Potential("lik", BlackBoxGaussianLogp(np.zeros(sds.size), np.diag(sds**2))(x)
                     - constant)
    return model


def test_finite_differences_on_a_badly_scaled_black_box_with_a_constant():
    """sds 1e3 and 1e-3, logp offset by -100: the wide coordinate's curvature moves the
    differenced gradient by 1e-12 over a step of 1e-6, below its rounding (4e-9); steps
    grown until it is resolved give the climb its Laplace approximation (with steps of
    1e-6, sd 0.14 of the truth, R-hat 1.06)."""
    sds = np.array([1e3, 1e-3])
    with _black_box_with_a_constant(sds, 100.0):
        idata = sample(VariationalHMC(use_gradient="finite_difference"), tune=1000,
                       draws=1000)
    assert_healthy(idata)
    assert_moments(idata, "x", np.zeros(2), sds)


def test_finite_differences_that_cannot_resolve_the_curvature_say_so():
    """The same with the logp offset by -1e4: no step up to a million times the first
    resolves the curvature, and a warning names the coordinate and the reason (no
    silently wrong sd)."""
    with _black_box_with_a_constant([1e3, 1e-3], 1e4), recorded_warnings() as caught:
        sample(VariationalHMC(use_gradient="finite_difference"), tune=50, draws=20)
    told = warning_messages(caught, "could not resolve its curvature")
    assert told and "`x[0]`" in told[0] and "`x[1]`" not in told[0], told
