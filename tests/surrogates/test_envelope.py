"""The heavy-tailed envelope mixed into a surrogate density."""

import numpy as np
import pytest
from scipy import stats as sps
from scipy.special import logsumexp

from pymc_surrogate.surrogates.envelope import TailEnvelope, with_tail_envelope
from pymc_surrogate.surrogates.whitening import Whitening


def _gaussian(mean, chol, offset=0.0):
    """An exact Gaussian 'surrogate': U(q) = offset + |L^{-1} (q - mean)|^2 / 2."""
    inv = np.linalg.inv(chol)

    def value_and_grad(q):
        z = inv @ (q - mean)
        return offset + 0.5 * z @ z, inv.T @ z

    return value_and_grad


def _scale(dim, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(dim, dim))
    chol = np.linalg.cholesky(a @ a.T / dim + 0.5 * np.eye(dim))
    return Whitening(rng.normal(size=dim), chol), chol


def _fitted(field, scale, n_draws=400, reach=None):
    """The envelope (weight 0.05) of ``field`` fitted from exact Gaussian draws at ``scale``
    (the surrogate's own draws when ``field`` is that Gaussian); also returns the draws."""
    samples = scale.from_white(np.random.default_rng(1).normal(size=(n_draws, scale.dim)))
    potentials = np.array([field(q)[0] for q in samples])
    envelope = TailEnvelope.fit(scale, samples, potentials,
                                reach=samples if reach is None else reach,
                                well_margin=5.0 + 2.0 * np.sqrt(scale.dim), weight=0.05)
    return envelope, samples


def _finite_difference_gradient(field, q, h=1e-6):
    return np.array([(field(q + h * e)[0] - field(q - h * e)[0]) / (2 * h) for e in np.eye(q.size)])


@pytest.mark.parametrize("dim", [1, 3, 12])
def test_the_envelope_holds_its_weight_but_never_tops_the_surrogate_at_its_draws(dim):
    """Fitted from draws of an exact Gaussian surrogate with potentials offset by 1000 (an
    unnormalised density, as a model's is): the envelope's mass is about ``weight`` times
    the surrogate's (up to the normalising constant's Monte Carlo error, and less where that
    would top the surrogate's density at a draw, as at d = 3), never more."""
    scale, chol = _scale(dim)
    field = _gaussian(scale.mean, chol, offset=1000.0)
    envelope, samples = _fitted(field, scale)
    log_ratio = [field(q)[0] - envelope.value_and_grad(q)[0] for q in samples]
    assert np.max(log_ratio) <= 1e-9
    # The envelope's mass by importance sampling from its own Student-t, below the wall.
    t = sps.multivariate_t(scale.mean, scale.covariance, df=envelope.nu, seed=2)
    draws = t.rvs(20_000).reshape(-1, dim)
    log_env = -np.array([envelope.value_and_grad(q)[0] for q in draws]) - t.logpdf(draws)
    log_env_mass = logsumexp(log_env) - np.log(len(draws))
    log_gauss_mass = -1000.0 + 0.5 * dim * np.log(2 * np.pi) + np.log(np.linalg.det(chol))
    share = np.exp(log_env_mass - log_gauss_mass)
    assert 0.05 / 1.5 < share < 0.05 * 1.3


def test_the_mixture_follows_the_surrogate_in_the_bulk_and_the_envelope_far_out():
    dim = 3
    scale, chol = _scale(dim)
    field = _gaussian(scale.mean, chol)
    envelope, _ = _fitted(field, scale)
    mixed = with_tail_envelope(field, envelope)
    centre = scale.mean
    assert field(centre)[0] - 0.1 < mixed(centre)[0] <= field(centre)[0]
    far = scale.from_white(np.array([8.0, 0.0, 0.0]))
    u_env, grad_env = envelope.value_and_grad(far)
    assert mixed(far)[0] == pytest.approx(u_env, abs=1e-6)
    np.testing.assert_allclose(mixed(far)[1], grad_env, atol=1e-6)
    # The envelope is heavier: far from the data, the mixture lies far below the surrogate.
    assert mixed(far)[0] < field(far)[0] - 10.0


@pytest.mark.parametrize("white_point", [[0.3, -0.2, 0.1], [3.0, 1.0, -2.0], [40.0, 0.0, 5.0]],
                         ids=["bulk", "crossover", "beyond-the-wall"])
def test_the_mixture_gradient_matches_finite_differences(white_point):
    dim = 3
    scale, chol = _scale(dim)
    field = _gaussian(scale.mean, chol)
    envelope, _ = _fitted(field, scale)
    mixed = with_tail_envelope(field, envelope)
    q = scale.from_white(np.array(white_point))
    np.testing.assert_allclose(mixed(q)[1], _finite_difference_gradient(mixed, q),
                               rtol=1e-5, atol=1e-6)


def test_a_surrogate_that_is_not_finite_falls_back_on_the_envelope():
    dim = 2
    scale, chol = _scale(dim)
    field = _gaussian(scale.mean, chol)
    envelope, _ = _fitted(field, scale, n_draws=200)

    def broken(q):
        return np.inf, np.full(dim, np.nan)

    value, grad = with_tail_envelope(broken, envelope)(scale.mean)
    assert np.isfinite(value) and np.all(np.isfinite(grad))


def test_a_student_t_posterior_keeps_a_bounded_weight_in_the_tails():
    """The point of the envelope: with a surrogate as light as a Gaussian, pi / pi~ for a
    Student-t(3) posterior grows without bound in the tails; with the envelope it stays
    below a constant (about 1 / weight) out to the wall."""
    dim, nu = 3, 3.0
    scale = Whitening(np.zeros(dim), np.full(dim, np.sqrt(nu / (nu - 2))))
    chol = np.diag(scale.chol)
    field = _gaussian(scale.mean, chol)
    # training data 15 out: the wall is at twice that
    envelope, _ = _fitted(field, scale, reach=np.array([[15.0, 0.0, 0.0]]))
    mixed = with_tail_envelope(field, envelope)

    def log_weight(q, surrogate):  # log pi / pi~ up to a constant, 0 at the mode
        true = -np.sum((nu + 1) / 2 * np.log1p(q**2 / nu))
        return true + surrogate(q)[0] - surrogate(np.zeros(dim))[0]

    far = [np.array([x, 0.0, 0.0]) for x in (5.0, 10.0, 20.0)]
    far += [np.array([x, x, 0.0]) for x in (5.0, 10.0)]
    assert max(log_weight(q, field) for q in far) > 50
    assert max(log_weight(q, mixed) for q in far) < np.log(1 / 0.05) + 2.0


def test_the_envelope_follows_the_surrogate_level_not_a_local_change():
    """When the surrogate's level moves (another block's value in a compound step, new
    weights of an adaptive surrogate), the envelope moves with it and keeps its share."""
    dim = 2
    scale, chol = _scale(dim)
    field = _gaussian(scale.mean, chol)
    envelope, _ = _fitted(field, scale, n_draws=200)
    raised = _gaussian(scale.mean, chol, offset=30.0)
    q = scale.from_white(np.array([6.0, 1.0]))
    assert with_tail_envelope(raised, envelope)(q)[0] == pytest.approx(
        with_tail_envelope(field, envelope)(q)[0] + 30.0)
    # A local change (an online update near one point, here a dip at the envelope's centre)
    # is not a change of level: the envelope stays where it was.
    dipped = _with_well(field, scale.mean, depth=20.0, width=0.05)
    assert with_tail_envelope(dipped, envelope)(q)[0] == pytest.approx(
        with_tail_envelope(field, envelope)(q)[0])


def _with_well(field, centre, depth=200.0, width=0.5):
    def value_and_grad(q):
        u, g = field(q)
        z = (q - centre) / width
        bump = depth * np.exp(-0.5 * z @ z)
        return u - bump, g + bump * z / width

    return value_and_grad


def test_a_spurious_well_beyond_the_draws_is_filled():
    """A well 200 deep, 6 sd out where the surrogate's draws never went: the density the
    trajectories run on stays within the envelope's floor there, and at most doubles where
    the draws are."""
    dim = 3
    scale, chol = _scale(dim)
    plain = _gaussian(scale.mean, chol)
    centre = scale.from_white(np.array([6.0, 0.0, 0.0]))
    welled = _with_well(plain, centre)
    envelope, samples = _fitted(welled, scale)  # the draws stay inside 6 sd
    mixed = with_tail_envelope(welled, envelope)
    floor = envelope.value_and_grad(centre)[0] - envelope.depth
    assert welled(centre)[0] < floor - 100.0
    assert mixed(centre)[0] >= floor - 1.0
    for q in samples:  # the envelope never tops the surrogate at its draws
        assert welled(q)[0] - np.log(2) - 1e-9 <= mixed(q)[0] <= welled(q)[0]
    # smooth through the floor: the gradient matches finite differences on the well's rim
    rim = scale.from_white(np.array([5.0, 0.3, -0.2]))
    np.testing.assert_allclose(mixed(rim)[1], _finite_difference_gradient(mixed, rim),
                               rtol=1e-5, atol=1e-5)
