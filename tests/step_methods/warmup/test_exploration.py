"""The black-box exploration's population (``step_methods/warmup/exploration.py``)."""

from __future__ import annotations

import numpy as np
import pymc as pm

from pymc_surrogate import SurrogateHMC
from pymc_surrogate.step_methods.warmup.mode_climb import climb_to_mode


def _prior_rows(step, n: int = 4000) -> np.ndarray:
    """``n`` draws of the exploration's population, as the step seeds it."""
    return step.evaluations.draw_prior(n, step.rng)


def test_population_is_drawn_from_the_prior():
    with pm.Model():
        pm.Normal("x", 3.0, 2.0, shape=2)
        rows = _prior_rows(SurrogateHMC(use_gradient=False))
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
        rows = _prior_rows(SurrogateHMC(use_gradient=False))
    assert rows.shape == (4000, 4)
    # the step's raveled order is the model's value variables: x, then log(s)
    centre = np.append(start, np.log(2.0))
    assert np.all(np.abs(rows - centre) <= 1.0)
    # U(-1, 1): mean 0 and sd 1/sqrt(3) per coordinate, within 5 standard errors
    np.testing.assert_allclose(rows.mean(axis=0), centre, atol=5 * 0.577 / np.sqrt(4000))
    np.testing.assert_allclose(rows.std(axis=0), 1 / np.sqrt(3), atol=0.02)


def _climb(model, start=None):
    """The start-of-tune climb of a fresh SurrogateHMC on ``model`` from ``start`` (default
    the model's initial point): where it ends, and the gradient evaluations it used."""
    with model:
        step = SurrogateHMC()
    chain = step.chain
    if start is None:
        point = model.initial_point()
        start = np.concatenate([np.ravel(point[v.name]) for v in step.vars])
    first = step._evaluate(chain, np.asarray(start, dtype=float), with_grad=True)
    before = step.evaluator.counts.grad_evals
    end = climb_to_mode(first, lambda q: step._evaluate(chain, q, with_grad=True),
                        lambda q: step.evaluator.evaluate(chain, q, True, True), step.tuning)[0]
    return end, step.evaluator.counts.grad_evals - before


def test_climb_stays_out_of_a_centred_hierarchys_neck():
    """Centred eight schools: the density is unbounded as tau -> 0 with theta = mu, and
    L-BFGS followed it from log tau 1.61 to -13.55, where the chains then stayed (R-hat
    3.2, sd ratios below 0.04). The climb must end above tau's 1% posterior quantile
    (0.040, posteriordb's reference draws)."""
    y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
    sigma = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", beta=5.0)
        theta = pm.Normal("theta", mu, tau, shape=8)
        pm.Normal("y", theta, sigma, observed=y)
    end, _ = _climb(model)
    log_tau = end.q[1]  # value variables in the model's order: mu, tau_log__, theta
    assert np.log(0.040) < log_tau < np.log(14.4), log_tau


def test_climb_stays_out_of_neals_funnels_neck():
    """Neal's funnel, d = 10 (v ~ N(0, 3^2), x_i | v ~ N(0, e^v)): from (v, x) = (2, 1)
    L-BFGS went to v = -36; the climb must end above v's 1% quantile (-6.98)."""
    with pm.Model() as model:
        v = pm.Normal("v", 0.0, 3.0)
        pm.Normal("x", 0.0, pm.math.exp(v / 2), shape=9)
    end, _ = _climb(model, start=np.r_[2.0, np.ones(9)])
    assert -6.98 < end.q[0] < 6.98, end.q[0]


def test_climb_still_reaches_an_ill_conditioned_gaussians_mode():
    """What the climb is for: from far out (sds 1e-3 to 1, start 5 everywhere: 5e3 sds)
    it must still reach the mode (L-BFGS then Newton): the mass check keeps its end."""
    sds = np.geomspace(1e-3, 1.0, 10)
    with pm.Model() as model:
        pm.Normal("x", 0.0, sds, shape=10)
    end, _ = _climb(model, start=np.full(10, 5.0))
    np.testing.assert_allclose(end.q / sds, 0.0, atol=1e-3)


def test_prior_scale_is_each_coordinates_prior_sd():
    from pymc_surrogate.step_methods.warmup.prior import prior_scale

    with pm.Model() as model:
        pm.Normal("x", 0.0, np.array([1e4, 1e-4]), shape=2)
    scale = prior_scale(model, ["x"], 2)
    np.testing.assert_allclose(scale / [1e4, 1e-4], 1.0, atol=0.2)
    with pm.Model() as flat:
        pm.Flat("x", shape=2)
    assert prior_scale(flat, ["x"], 2) is None  # nothing to learn a scale from


def test_hessian_steps_relative_to_the_coordinates_scale():
    """Gradients by central differences on sds 1e4 and 1e-4 at the mode: steps of 1e-6
    move the wide coordinate's gradient by 1e-14, below the differences' rounding, and
    its curvature came out at any sign; steps relative to the scale find it."""
    from pymc_surrogate.core.types import ChainPoint
    from pymc_surrogate.step_methods.warmup.mode_climb import _hessian

    sds = np.array([1e4, 1e-4])
    from pymc_surrogate import VariationalHMC

    with pm.Model():
        pm.Normal("x", 0.0, sds, shape=2)
        step = VariationalHMC(use_gradient="finite_difference")
    functions = step.functions
    np.testing.assert_allclose(functions.difference_scale / sds, 1.0, atol=0.2)

    def evaluate(q):
        logp, grad = functions.logp_and_grad(q)
        return ChainPoint(q, -logp, -grad)

    start = evaluate(np.zeros(2))
    hessian = _hessian(start, evaluate, functions.difference_scale)
    np.testing.assert_allclose(np.diag(hessian) * sds**2, 1.0, rtol=1e-3)


def test_walk_back_needs_a_positive_hessian_diagonal():
    """An earlier iterate whose Hessian has a negative diagonal entry (rounding) is no
    Laplace mass, however small ``|det|`` makes its ``-log|det| / 2``."""
    from pymc_surrogate.core.types import ChainPoint
    from pymc_surrogate.step_methods.warmup import mode_climb

    start, end = (ChainPoint(np.full(2, v), p, np.zeros(2)) for v, p in ((1.0, 0.6), (0.0, 0.5)))
    hessians = {1.0: np.diag([-1e-12, 1.0]), 0.0: np.eye(2)}
    diagnose = lambda q: ChainPoint(q, 0.0, np.zeros(2))
    original = mode_climb._hessian
    try:
        mode_climb._hessian = lambda point, *args: hessians[point.q[0]]
        point, _ = mode_climb._where_the_mass_is([start, end], np.eye(2), diagnose)
        assert point is end
        hessians[1.0] = np.diag([1e-12, 1.0])  # the same |det|, positive: it wins
        point, _ = mode_climb._where_the_mass_is([start, end], np.eye(2), diagnose)
        assert point is start
    finally:
        mode_climb._hessian = original
