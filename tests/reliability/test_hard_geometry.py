"""Hard geometry with a known answer: an evaluate-only, ill-conditioned linear inverse
problem (exactly Gaussian) and Neal's funnel.

Each step method must be right on the inverse problem, at every condition number, with no
crash and no heavy-tail message (a Gaussian has none); on the funnel, which no HMC variant
samples reliably, it must be right or say that it is not (``issues``: "no silent failure").
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.models.hard_geometry import FUNNEL_SCALE, make_funnel, make_heat_inverse
from tests.reliability.helpers import (
    assert_gaussian,
    assert_healthy,
    check_moments,
    black_box_step,
    pymc_convergence_messages,
    recorded_warnings,
    sample,
    warning_messages,
)


@pytest.mark.parametrize(
    "condition,gradient",
    [
        (1e8, False),
        pytest.param(1e4, False, marks=pytest.mark.slow),
        pytest.param(1e6, False, marks=pytest.mark.slow),
        pytest.param(1e8, True, marks=pytest.mark.slow),
    ],
)
def test_ill_conditioned_inverse_problem_right(step, condition, gradient):
    """20-d heat-equation inverse problem, precision condition number up to 1e8: the
    posterior's marginals and its eigen-directions (narrowest to widest) are right."""
    if not gradient and step.cls.learns_from_gradients:
        pytest.skip("a gradient learner on a 20-d black box differences 41 logps a gradient "
                    "(over 20 minutes here); it is checked on the gradient version (slow)")
    model, info = make_heat_inverse(20, condition, gradient=gradient)
    with model, recorded_warnings() as caught:
        idata = sample(step(), tune=1000, draws=1000)
    assert_healthy(idata)
    assert_gaussian(idata, "theta", info.extra["mean"], info.extra["cov"])
    assert not warning_messages(caught, "heavy tails"), "heavy-tail message on a Gaussian"


test_ill_conditioned_inverse_problem_right.known_defects = {
    # Measured 2026-11-27: fails at the suite's seed under pytest (one BLAS thread) on this
    # machine's Haswell OpenBLAS kernels, PyMC 5.28.5: one eigen-direction's sd 0.905 of the
    # truth (chains 0.89 / 0.92, per-chain ESS 489 / 608), z -4.62 against the limit 4.52.
    # Right at seeds 1-8 and at 20240 with two BLAS threads (every |z(sd)| <= 2.95, that
    # direction's z -1.3..1.1): no bias seen in 9 runs; a p ~ 1e-4 event, or a rare narrow
    # run those 9 cannot show. `pytest -m experimental` runs it.
    "SparseGridHMC-100000000.0-False": "fails at the suite's seed on one BLAS build "
                                       "(docs/reliability.md, Known bugs)",
}


def ridge_regression(seed: int = 5):
    """posteriordb's kilpisjarvi with its noise sd known: ``y = a + b x + N(0, 1.1^2)``, ``x``
    the year shifted to 3952-4013, ``a ~ N(9.3, 100^2)``, ``b ~ N(0, 0.0333^2)``; an exact
    Gaussian posterior with intercept-slope correlation -0.9999 (sds 30 and 0.0075)."""
    rng = np.random.default_rng(seed)
    x = np.arange(3952.0, 4014.0)
    sigma, prior_mean, prior_sd = 1.1, np.array([9.3, 0.0]), np.array([100.0, 1 / 30])
    design = np.column_stack([np.ones_like(x), x])
    y = design @ np.array([-60.0, 0.0176]) + sigma * rng.standard_normal(len(x))
    precision = design.T @ design / sigma**2 + np.diag(prior_sd**-2.0)
    cov = np.linalg.inv(precision)
    mean = cov @ (design.T @ y / sigma**2 + prior_mean / prior_sd**2)
    return x, y, sigma, prior_mean, prior_sd, mean, cov


def test_ridge_regression_right(step):
    """A gradient model on a ridge: before, the L-BFGS climb stopped 2.3 sds along it and
    every run was wrong (sd 0.1-0.2 of the posterior's, |z| up to 366, with a dense mass
    matrix too)."""
    import pymc as pm

    x, y, sigma, prior_mean, prior_sd, mean, cov = ridge_regression()
    with pm.Model(), recorded_warnings() as caught:
        coef = pm.Normal("coef", prior_mean, prior_sd, shape=2)
        pm.Normal("y", coef[0] + coef[1] * x, sigma, observed=y)
        idata = sample(step(), tune=1000, draws=1000)
    assert_healthy(idata)
    assert_gaussian(idata, "coef", mean, cov)
    assert not warning_messages(caught, "chain"), warning_messages(caught, "chain")


# All five in CI (4-8 s each with the scale-free whitening; 130-220 s with the absolute
# ridge it replaced, which inflated the ridge's narrow direction and shrank the step size).


@pytest.mark.parametrize("dim", [2, pytest.param(10, marks=pytest.mark.slow)])
def test_funnel_right_or_loud(step, dim):
    """Neal's funnel (black box): the log-scale ``v`` is N(0, 3^2); a run whose ``v`` is
    wrong (or too short to tell) must have said so: a step's warning through the ``pymc``
    logger, or ``pm.sample``'s own convergence checks, which users get by default."""
    model, _ = make_funnel(dim, gradient=False)
    with model, recorded_warnings() as caught:
        idata = sample(black_box_step(step), tune=1000, draws=1000)
    assert_healthy(idata)
    v = idata.posterior["v"].values[..., None]
    check = check_moments(v, 0.0, FUNNEL_SCALE)
    if not check.passed:
        told = [m for m in warning_messages(caught) if "chain" in m]
        told += pymc_convergence_messages(idata, model)
        assert told, "wrong funnel and no warning:\n" + check.report("v")
