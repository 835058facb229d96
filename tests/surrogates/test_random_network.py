import numpy as np
import pytest

from pymc_surrogate.surrogates import RandomNetworkSurrogate, Whitening


def gradients_of(surrogate, positions):
    """Surrogate gradients at the rows of ``positions``."""
    return np.array([surrogate.value_and_grad(q)[1] for q in np.atleast_2d(positions)])


def gaussian_problem(dim, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((dim, dim))
    cov = a @ a.T / dim + 0.1 * np.eye(dim)
    prec = np.linalg.inv(cov)
    mean = rng.standard_normal(dim)

    def potential(q):
        r = q - mean
        return 0.5 * np.einsum("ni,ij,nj->n", r, prec, r) + 7.0e4

    def gradient(q):
        return (q - mean) @ prec

    return rng, mean, cov, potential, gradient


def logistic_problem(dim=8, n_obs=2000, seed=1):
    rng = np.random.default_rng(seed)
    x = np.hstack([0.1 * np.ones((n_obs, 1)), 0.1 * rng.standard_normal((n_obs, dim - 1))])
    y = rng.uniform(size=n_obs) < 1 / (1 + np.exp(-x @ rng.uniform(0, 1, dim)))

    def potential(b):
        eta = b @ x.T
        return np.sum(np.logaddexp(0, eta) - y * eta, axis=1) + 0.5 * np.sum(b**2, 1) / 100

    def gradient(b):
        return (1 / (1 + np.exp(-(b @ x.T))) - y) @ x + b / 100

    mode = np.zeros(dim)
    for _ in range(30):  # Newton: the posterior's centre and Laplace covariance
        p = 1 / (1 + np.exp(-x @ mode))
        hess = (x.T * (p * (1 - p))) @ x + np.eye(dim) / 100
        mode = mode - np.linalg.solve(hess, gradient(mode[None])[0])
    return rng, mode, np.linalg.inv(hess), potential, gradient


def relative_error(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.mark.parametrize("use_values,use_grads", [(True, True), (True, False), (False, True)])
def test_recovers_a_quadratic_potential_exactly(use_values, use_grads):
    rng, mean, cov, potential, gradient = gaussian_problem(6)
    train = rng.multivariate_normal(mean, cov, size=200)
    test = rng.multivariate_normal(mean, 4 * cov, size=100)
    surrogate = RandomNetworkSurrogate(random_state=0).fit(
        train, potential(train) if use_values else None, gradient(train) if use_grads else None
    )
    assert relative_error(gradients_of(surrogate, test), gradient(test)) < 1e-6
    if use_values:
        # The offset of a potential is only identified by values.
        np.testing.assert_allclose(surrogate.predict(test), potential(test), rtol=1e-9)


@pytest.mark.parametrize("activation", ["softplus", "rbf"])
def test_fits_a_logistic_regression_potential(activation):
    rng, mode, cov, potential, gradient = logistic_problem()
    train = rng.multivariate_normal(mode, 1.5 * cov, size=300)
    test = rng.multivariate_normal(mode, cov, size=200)
    surrogate = RandomNetworkSurrogate(activation=activation, random_state=0)
    surrogate.fit(train, potential(train), gradient(train))
    assert relative_error(gradients_of(surrogate, test), gradient(test)) < 0.01
    resid = surrogate.predict(test) - potential(test)
    assert np.std(resid) < 0.05


def test_random_nodes_improve_on_the_quadratic_base():
    rng, mode, cov, potential, gradient = logistic_problem()
    train = rng.multivariate_normal(mode, 1.5 * cov, size=300)
    test = rng.multivariate_normal(mode, cov, size=200)
    errors = {}
    for n_hidden in (0, 300):
        s = RandomNetworkSurrogate(n_hidden=n_hidden, random_state=0)
        s.fit(train, potential(train), gradient(train))
        errors[n_hidden] = relative_error(gradients_of(s, test), gradient(test))
    assert errors[300] < 0.5 * errors[0]


@pytest.mark.parametrize("activation", ["softplus", "rbf"])
def test_gradient_matches_finite_differences(activation):
    rng, mode, cov, potential, gradient = logistic_problem()
    train = rng.multivariate_normal(mode, cov, size=100)
    surrogate = RandomNetworkSurrogate(activation=activation, random_state=0)
    surrogate.fit(train, potential(train))
    q = train[3] + 0.1
    value, grad = surrogate.value_and_grad(q)
    eye = np.eye(q.size) * 1e-6
    fd = [(surrogate.value_and_grad(q + e)[0] - surrogate.value_and_grad(q - e)[0]) / 2e-6 for e in eye]
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-5 * np.abs(grad).max())
    assert value == pytest.approx(surrogate.predict(q[None])[0], rel=1e-12)


def test_missing_gradients_are_ignored_not_fitted():
    rng, mean, cov, potential, gradient = gaussian_problem(4)
    train = rng.multivariate_normal(mean, cov, size=100)
    grads = gradient(train)
    grads[::2] = np.nan
    surrogate = RandomNetworkSurrogate(random_state=0).fit(train, potential(train), grads)
    assert relative_error(gradients_of(surrogate, train), gradient(train)) < 1e-6


def test_fixed_whitening_is_used():
    rng, mean, cov, potential, gradient = gaussian_problem(3)
    train = rng.multivariate_normal(mean, cov, size=50)
    whitening = Whitening.from_samples(train, dense=False)
    surrogate = RandomNetworkSurrogate(whitening=whitening, random_state=0)
    surrogate.fit(train, potential(train), gradient(train))
    assert surrogate.whitening_ is whitening


def test_same_seed_same_fit():
    rng, mode, cov, potential, gradient = logistic_problem()
    train = rng.multivariate_normal(mode, cov, size=80)
    fits = [
        RandomNetworkSurrogate(random_state=5).fit(train, potential(train)).predict(train)
        for _ in range(2)
    ]
    np.testing.assert_array_equal(*fits)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(n_hidden=-1), "n_hidden"),
        (dict(activation="relu"), "activation"),
        (dict(quadratic="cubic"), "quadratic"),
        (dict(alpha=0.0), "alpha"),
        (dict(gradient_weight=0.0), "gradient_weight"),
    ],
)
def test_invalid_settings_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RandomNetworkSurrogate(**kwargs)


def test_fit_without_targets_or_finite_points_raises():
    with pytest.raises(ValueError, match="potentials, gradients"):
        RandomNetworkSurrogate().fit(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="finite"):
        RandomNetworkSurrogate().fit(np.zeros((3, 2)), np.full(3, np.nan))


def test_partial_gradients_fit_the_joint_potential_of_a_block_and_its_context():
    """In a compound step the surrogate learns U(q, c) from values and dU/dq only."""
    rng, mean, cov, potential, gradient = gaussian_problem(5)
    train = rng.multivariate_normal(mean, cov, size=300)
    block = 3
    surrogate = RandomNetworkSurrogate(random_state=0).fit(
        train, potential(train), gradient(train)[:, :block]
    )
    test = rng.multivariate_normal(mean, 4 * cov, size=50)
    assert relative_error(gradients_of(surrogate, test), gradient(test)) < 1e-6
    np.testing.assert_allclose(surrogate.predict(test), potential(test), rtol=1e-9)
    mixing = Whitening.from_samples(train, dense=True)
    with pytest.raises(ValueError, match="block_diagonal"):
        RandomNetworkSurrogate(whitening=mixing).fit(train, potential(train), gradient(train)[:, :block])


def test_a_clipped_quadratic_base_is_refitted_around():
    """A double well along x0 fitted with few hidden nodes: the least-squares quadratic
    comes out negative along x0 and the nodes bend it back. Clipping the quadratic to
    positive definite (so the surrogate stays bounded below) must re-solve the rest of
    the weights, or the surrogate no longer fits the data it reports a training error for
    (before the fix: reported 0.005, actual relative error 13)."""
    rng = np.random.default_rng(3)
    train = rng.uniform(-2.0, 2.0, size=(400, 2))

    def potential(q):
        return -2.0 * q[:, 0] ** 2 + 0.1 * q[:, 0] ** 4 + 0.5 * q[:, 1] ** 2

    def gradient(q):
        return np.column_stack([-4.0 * q[:, 0] + 0.4 * q[:, 0] ** 3, q[:, 1]])

    surrogate = RandomNetworkSurrogate(n_hidden=20, random_state=0)
    surrogate.fit(train, potential(train), gradient(train))
    assert np.linalg.eigvalsh(surrogate._quadratic).min() > 0
    centred = potential(train) - potential(train).mean()
    error = np.linalg.norm(surrogate.predict(train) - potential(train)) / np.linalg.norm(centred)
    grad_error = relative_error(gradients_of(surrogate, train), gradient(train))
    assert error < 2 * surrogate.training_error_ + 1e-9
    assert max(error, grad_error) < 0.05


def test_the_wall_beyond_the_trust_radius_is_smooth_and_consistent():
    """Far from the data the surrogate grows like (|x| - R)^2 / 2; value_and_grad, predict
    and finite differences agree there as inside."""
    rng, mean, cov, potential, gradient = gaussian_problem(3)
    train = rng.multivariate_normal(mean, cov, size=60)
    surrogate = RandomNetworkSurrogate(random_state=0).fit(train, potential(train), gradient(train))
    far = surrogate.whitening_.from_white(np.array([[3.0, 0.0, 0.0]]) * surrogate.trust_radius_)[0]
    value, grad = surrogate.value_and_grad(far)
    assert value == pytest.approx(surrogate.predict(far[None])[0])
    # the wall's own share, (3R - R)^2 / 2 in whitened units, is there on top of the fit
    without_wall = object.__new__(type(surrogate))
    without_wall.__dict__.update({**surrogate.__dict__, "trust_radius_": np.inf, "_wall_check": np.inf})
    wall = value - without_wall.value_and_grad(far)[0]
    assert wall == pytest.approx(0.5 * (2 * surrogate.trust_radius_) ** 2)
    step = 1e-6
    numeric = [(surrogate.value_and_grad(far + step * e)[0] - surrogate.value_and_grad(far - step * e)[0])
               / (2 * step) for e in np.eye(3)]
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-6)
