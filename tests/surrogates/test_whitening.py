import numpy as np
import pytest

from pymc_surrogate.surrogates import Whitening


@pytest.mark.parametrize("dense", [False, True])
def test_round_trip_and_unit_scale(dense):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 4))
    samples = rng.multivariate_normal([1.0, -2.0, 3.0, 0.0], a @ a.T + np.eye(4), size=5000)
    whitening = Whitening.from_samples(samples, dense=dense)
    x = whitening.to_white(samples)
    np.testing.assert_allclose(whitening.from_white(x), samples, atol=1e-10)
    np.testing.assert_allclose(x.mean(0), 0.0, atol=1e-8)
    np.testing.assert_allclose(x.std(0), 1.0, rtol=1e-2)
    if dense:
        np.testing.assert_allclose(np.cov(x, rowvar=False), np.eye(4), atol=1e-2)


@pytest.mark.parametrize("dense", [False, True])
def test_gradient_chain_rule(dense):
    rng = np.random.default_rng(1)
    whitening = Whitening.from_samples(rng.standard_normal((50, 3)) * [1, 5, 9], dense=dense)
    weights = rng.standard_normal(3)
    # U(q) = w . q, so U(x) = w . from_white(x) and dU/dx = L^T w.
    fd = [
        (weights @ whitening.from_white(e * 1e-6) - weights @ whitening.from_white(-e * 1e-6)) / 2e-6
        for e in np.eye(3)
    ]
    np.testing.assert_allclose(whitening.gradient_to_white(weights), fd, rtol=1e-6)


def test_degenerate_samples_stay_invertible():
    whitening = Whitening.from_samples(np.ones((10, 3)), dense=True)
    assert np.all(np.isfinite(whitening.inverse_chol()))
    assert np.all(np.isfinite(Whitening.from_samples(np.ones((1, 3))).chol))


def test_points_on_very_different_scales_do_not_break_the_factor():
    """Rounding can make the shrunk covariance of such points indefinite for Cholesky (a
    random walk's points at condition 1e8 crashed tuning): here nearly collinear points
    1e6 wide, where scipy's Cholesky of the shrunk covariance raises; the factor exists."""
    rng = np.random.default_rng(0)
    points = rng.standard_normal((30, 3)) @ rng.standard_normal((3, 20)) * 1e6
    points += 1e-6 * rng.standard_normal(points.shape)
    whitening = Whitening.from_samples(points, dense=True)
    assert np.all(np.isfinite(whitening.chol))
    assert np.all(np.isfinite(whitening.to_white(points)))


@pytest.mark.parametrize("dense", [False, True])
def test_the_regulariser_is_scale_free(dense):
    """A ridge regression's posterior (sds 29 and 7e-3, correlation -0.99999, narrowest
    principal sd 3.5e-5): estimated in parameter space or in a frame of about the right
    scale, the narrow direction is right (an absolute ridge swamped it 1000-fold)."""
    rng = np.random.default_rng(2)
    sd, rho = np.array([29.0, 7.3e-3]), -0.999988
    cov = np.outer(sd, sd) * np.array([[1.0, rho], [rho, 1.0]])
    samples = rng.multivariate_normal([-78.0, 0.022], cov, size=500)
    frame = Whitening(np.array([-77.0, 0.02]), np.linalg.cholesky(cov * 1.3))
    narrow = np.linalg.eigh(cov)[1][:, 0]

    def narrow_variance(whitening):
        full = whitening.covariance if whitening.dense else np.diag(whitening.covariance)
        return narrow @ full @ narrow

    framed = Whitening.from_samples(samples, dense=dense, frame=frame)
    plain = Whitening.from_samples(samples, dense=dense)
    truth = narrow @ cov @ narrow
    for estimate in (framed, plain):
        np.testing.assert_allclose(np.diag(np.atleast_2d(estimate.covariance)) if dense
                                   else estimate.covariance, np.diag(np.cov(samples.T)), rtol=0.02)
    if dense:
        assert 0.8 < narrow_variance(framed) / truth < 1.25
        assert 0.8 < narrow_variance(plain) / truth < 1.25
    x = framed.to_white(samples)
    np.testing.assert_allclose(framed.from_white(x), samples, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("dense", [False, True])
def test_a_small_sd_is_not_floored(dense):
    """kilpisjarvi's slope sd 0.0075 beside an intercept sd of 30 (correlation -0.9999):
    200 draws give the sds back within sampling error, whatever their units."""
    rng = np.random.default_rng(5)
    sd, rho = np.array([30.0, 7.5e-3]), -0.9999
    cov = np.outer(sd, sd) * np.array([[1.0, rho], [rho, 1.0]])
    for units in (1.0, 1e-4):
        samples = rng.multivariate_normal([0.0, 0.0], cov * units**2, size=200)
        estimate = Whitening.from_samples(samples, dense=dense)
        estimated_sd = np.sqrt(np.diag(np.atleast_2d(estimate.covariance)) if dense
                               else estimate.covariance)
        # sd of a sample sd from 200 normal draws: 5%; 4 of those
        np.testing.assert_allclose(estimated_sd / (sd * units), 1.0, atol=0.2)


@pytest.mark.parametrize("dense", [False, True])
def test_fewer_points_than_dimensions_give_an_isotropic_frame(dense):
    """Two points in d = 4 say nothing of each coordinate's scale: one coordinate's spread
    can come out near zero by chance (a score network's first fit kept that frame, and its
    late gradient was 31% off in that coordinate). Such a frame is isotropic, at the
    points' root-mean-square spread."""
    rng = np.random.default_rng(7)
    samples = rng.normal(size=(2, 4)) * np.array([1.0, 1.0, 1.0, 1e-3])
    estimate = Whitening.from_samples(samples, dense=dense)
    sd = np.sqrt(np.diag(np.atleast_2d(estimate.covariance)) if dense else estimate.covariance)
    np.testing.assert_allclose(sd, sd[0], rtol=1e-12)
    assert sd[0] > 0.1


def test_scaled_cholesky_keeps_each_coordinates_scale():
    """A floor of 1e-12 on the covariance's eigenvalues widened a coordinate of sd 1e-4
    next to one of sd 1e4 a hundredfold; on the correlations it keeps it."""
    from pymc_surrogate.surrogates.whitening import robust_cholesky, scaled_cholesky

    sds = np.array([1e4, 1e-4])
    cov = np.outer(sds, sds) * np.array([[1.0, 1.0 + 1e-12], [1.0 + 1e-12, 1.0]])
    for factor in (scaled_cholesky(cov), robust_cholesky(cov)):
        assert np.allclose(factor, np.tril(factor))
        np.testing.assert_allclose(np.sqrt(np.diag(factor @ factor.T)), sds, rtol=1e-6)
    # a well-conditioned covariance: the plain Cholesky factor, unchanged
    a = np.array([[2.0, 0.3], [0.3, 1.0]])
    np.testing.assert_array_equal(robust_cholesky(a), np.linalg.cholesky(a))
    np.testing.assert_allclose(scaled_cholesky(a), np.linalg.cholesky(a), rtol=1e-12)


def test_whitening_of_badly_scaled_samples():
    rng = np.random.default_rng(0)
    sds = np.array([1e4, 1e-4])
    samples = rng.standard_normal((500, 2)) * sds
    whitening = Whitening.from_samples(samples, dense=True)
    np.testing.assert_allclose(whitening.to_white(samples).std(0), 1.0, rtol=0.02)
