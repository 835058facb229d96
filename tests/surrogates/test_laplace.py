"""The Laplace probe: a Gaussian from potential values alone (``surrogates/laplace.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from pymc_surrogate.surrogates.laplace import laplace_from_values
from pymc_surrogate.surrogates.quadratic import positive_definite


def _ill_conditioned(dim: int, condition: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    rotation = np.linalg.qr(rng.standard_normal((dim, dim)))[0]
    precision = (rotation * np.logspace(0, np.log10(condition), dim)) @ rotation.T
    return rng.standard_normal(dim), precision


@pytest.mark.parametrize("condition", [1e2, 1e8])
def test_exact_for_a_quadratic_from_a_stuck_walk(condition):
    """Points of a random walk stuck near a start far from the mode, plus prior-scale
    rejected jumps 1e8 above the minimum: the quadratic is still recovered exactly."""
    dim = 10
    mode, precision = _ill_conditioned(dim, condition)
    rng = np.random.default_rng(1)
    near = 3.0 + 1e-3 * rng.standard_normal((150, dim))
    far = rng.standard_normal((100, dim))
    points = np.vstack([near, far])
    potentials = 0.5 * np.einsum("ni,ij,nj->n", points - mode, precision, points - mode)
    gaussian = laplace_from_values(points, potentials)
    assert gaussian.quadratic == "full"
    cov = np.linalg.inv(precision)
    chol = np.linalg.cholesky(cov)
    # Errors in posterior sds along every direction. The probe only shapes proposals, so a
    # hundredth of an sd is plenty; float64 rounding at condition 1e8 leaves about 1e-3
    # (a wrong fit is off by whole sds or by orders of magnitude).
    assert np.max(np.abs(np.linalg.solve(chol, gaussian.mean - mode))) < 1e-2
    whitened = np.linalg.solve(chol, np.linalg.solve(chol, gaussian.cov).T)
    np.testing.assert_allclose(np.linalg.eigvalsh(whitened), 1.0, atol=1e-2)


def test_too_few_points_and_non_finite_values():
    dim = 6
    rng = np.random.default_rng(2)
    points = rng.standard_normal((8, dim))
    assert laplace_from_values(points, np.sum(points**2, axis=1)) is None
    points = rng.standard_normal((200, dim))
    potentials = 0.5 * np.sum(points**2, axis=1)
    potentials[::7] = np.nan
    potentials[1::7] = np.inf
    gaussian = laplace_from_values(points, potentials)
    np.testing.assert_allclose(gaussian.cov, np.eye(dim), atol=1e-8)


def test_concave_directions_give_a_proper_gaussian():
    """A saddle (one concave direction) still yields a positive-definite covariance."""
    dim = 4
    rng = np.random.default_rng(3)
    points = rng.standard_normal((100, dim))
    curvature = np.array([1.0, 2.0, 3.0, -1.0])
    gaussian = laplace_from_values(points, 0.5 * points**2 @ curvature)
    assert np.all(np.linalg.eigvalsh(gaussian.cov) > 0)
    assert np.all(np.isfinite(gaussian.draw(rng, 5)))


def test_positive_definite_refuses_nan_with_a_clear_error():
    """NaN reaching ``eigh`` was a crash ("Eigenvalues did not converge") in tuning."""
    with pytest.raises(ValueError, match="not finite"):
        positive_definite(np.full((3, 3), np.nan))


def test_high_dimension_falls_back_to_a_diagonal_quadratic():
    """A full quadratic in d = 40 has 861 coefficients (seconds a fit): the probe fits a
    diagonal one, in the points' principal axes, and still returns a proper Gaussian."""
    dim = 40
    rng = np.random.default_rng(4)
    scales = np.logspace(-2, 0, dim)
    points = rng.standard_normal((400, dim)) * scales
    gaussian = laplace_from_values(points, 0.5 * np.sum((points / scales) ** 2, axis=1))
    assert gaussian.quadratic == "diagonal"
    assert np.all(np.linalg.eigvalsh(gaussian.cov) > 0)



def test_newton_step_and_covariance_of_a_ridge():
    """``laplace_at`` on a regression-like ridge (curvatures 1e-3 to 1e9, correlation
    -0.99999999): one Newton step from far along the ridge lands on the mode, and the
    covariance is the inverse Hessian, its narrowest and widest sds both right."""
    from pymc_surrogate.surrogates.laplace import laplace_at

    x = np.arange(3952.0, 4014.0)
    design = np.column_stack([np.ones_like(x), x])
    precision = design.T @ design + np.diag([1e-4, 900.0])
    mode = np.array([-60.0, 0.0176])
    start = np.array([9.3, 0.0])
    gaussian = laplace_at(start, precision @ (start - mode), precision)
    cov = np.linalg.inv(precision)
    chol = np.linalg.cholesky(cov)
    assert np.max(np.abs(np.linalg.solve(chol, gaussian.mean - mode))) < 1e-3
    whitened = np.linalg.solve(chol, np.linalg.solve(chol, gaussian.cov).T)
    np.testing.assert_allclose(np.linalg.eigvalsh(whitened), 1.0, atol=1e-3)
    assert laplace_at(start, np.zeros(2), -precision) is None


def test_a_far_extrapolated_fit_stays_in_its_trust_region():
    """Points spread 0.1 around the origin, a quadratic whose minimum lies 1e4 away along a
    nearly flat direction: the fit is exact, but the Gaussian returned keeps its mean within
    ``TRUST_FACTOR`` times the points' radius and its sds within ``TRUST_FACTOR`` times their
    sds (the 20-d PDE showcase's early fit sent the chain to 4e5, where the solver fails)."""
    from pymc_surrogate.surrogates.laplace import TRUST_FACTOR

    dim = 3
    rng = np.random.default_rng(5)
    points = 0.1 * rng.standard_normal((60, dim))
    mode = np.array([1e4, 0.0, 0.0])
    curvature = np.array([1e-6, 1.0, 1.0])
    gaussian = laplace_from_values(points, 0.5 * (points - mode) ** 2 @ curvature)
    spread = points.std(axis=0)
    radius = np.max(np.linalg.norm((points - points.mean(axis=0)) / spread, axis=1))
    assert np.max(np.abs(gaussian.mean)) <= 1.01 * TRUST_FACTOR * radius * spread.max()
    assert np.all(np.sqrt(np.linalg.eigvalsh(gaussian.cov)) <= 1.01 * TRUST_FACTOR * spread.max())
    assert gaussian.mean[0] > points[:, 0].mean()  # toward the minimum, only damped


def test_without_the_trust_region_the_fit_is_returned_as_it_is():
    """``trust_region=False`` (KernelHMC's base, judged against the values): an exact
    quadratic from points spread 0.1 gives its own curvature, not sds of twice 0.1."""
    dim = 4
    rng = np.random.default_rng(6)
    points = 0.1 * rng.standard_normal((80, dim))
    gaussian = laplace_from_values(points, 0.5 * np.sum(points**2, axis=1), trust_region=False)
    np.testing.assert_allclose(gaussian.cov, np.eye(dim), atol=1e-6)
    clipped = laplace_from_values(points, 0.5 * np.sum(points**2, axis=1))
    assert np.max(np.linalg.eigvalsh(clipped.cov)) < 0.2


def test_draws_of_a_badly_scaled_gaussian_that_rounding_left_indefinite():
    """sds 1e4 and 1e-4, correlation 1 + 1e-12 (rounding of a covariance whose variances
    are 1e16 apart): no Cholesky factor exists; the draws keep each coordinate's sd."""
    from pymc_surrogate.surrogates.laplace import Gaussian

    sds = np.array([1e4, 1e-4])
    cov = np.outer(sds, sds) * np.array([[1.0, 1.0 + 1e-12], [1.0 + 1e-12, 1.0]])
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.cholesky(cov)
    gaussian = Gaussian(np.array([1.0, -1.0]), cov, "full")
    factor = gaussian.factor()
    np.testing.assert_allclose(np.sqrt(np.diag(factor @ factor.T)), sds, rtol=1e-6)
    draws = gaussian.draw(np.random.default_rng(0), 4000)
    np.testing.assert_allclose(draws.std(0) / sds, 1.0, rtol=0.05)
    np.testing.assert_allclose(np.corrcoef(draws.T)[0, 1], 1.0, atol=1e-4)


def test_laplace_from_values_of_a_badly_scaled_quadratic():
    """sds 1e4 and 1e-4: the fit from values is the quadratic's Gaussian, and it draws."""
    rng = np.random.default_rng(1)
    sds = np.array([1e4, 1e-4])
    points = rng.standard_normal((60, 2)) * sds * 2
    fit = laplace_from_values(points, 0.5 * np.sum((points / sds) ** 2, axis=1))
    np.testing.assert_allclose(np.sqrt(np.diag(fit.cov)) / sds, 1.0, rtol=1e-4)
    assert np.all(np.isfinite(fit.draw(np.random.default_rng(2), 10)))
