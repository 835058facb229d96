"""Invariants of the numpy surrogates, by property-based testing (hypothesis).

Deterministic: ``derandomize=True`` draws the same examples on every run, and each
example seeds its own numpy generator. Properties:

* a potential the surrogate's base can represent exactly (a quadratic) is reproduced;
* ``value_and_grad`` (what trajectories use) and ``predict`` (the public prediction) are
  one function, and fitting then predicting on the training points reproduces the fit's
  own reported ``training_error_``;
* the gradient matches central finite differences of the value;
* batch and online learning (``RecursiveLeastSquares``) give the same weights;
* degenerate training data (duplicates, constant values, 3 points in d = 20, magnitudes
  of 1e12 or 1e-12) give finite predictions and gradients, or a ValueError that says why.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from pymc_surrogate.surrogates import RandomNetworkSurrogate, Whitening

#: Surrogates of the potential, by name: a new surrogate is one more line.
SURROGATES = {
    "softplus": lambda seed: RandomNetworkSurrogate(random_state=seed),
    "rbf": lambda seed: RandomNetworkSurrogate(activation="rbf", random_state=seed),
}

PROPERTY = settings(
    derandomize=True,
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)

seeds = st.integers(0, 2**31 - 1)


def random_gaussian(rng, dim, condition, scale):
    q, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    cov = (q * np.geomspace(1.0, condition, dim)) @ q.T * scale**2
    return rng.normal(0.0, 3.0 * scale, dim), cov


def potential_family(name, rng, dim):
    """Smooth potentials U(q) with gradients, and a sampler of training positions."""
    mean, cov = random_gaussian(rng, dim, 10.0, 1.0)
    prec = np.linalg.inv(cov)
    offset = rng.uniform(-1e4, 1e4)

    def quadratic(q):
        r = q - mean
        return 0.5 * np.einsum("ni,ij,nj->n", r, prec, r) + offset, r @ prec

    if name == "quadratic":
        return quadratic, lambda n: rng.multivariate_normal(mean, cov, size=n)
    if name == "banana":
        assume(dim >= 2)
        # sparse-grid-hmc §4.2's banana, in the first two coordinates; Gaussian elsewhere.
        curvature = rng.uniform(10.0, 50.0)

        def banana(q):
            m = q[:, 0] + q[:, 1] ** 2 - 1.0
            value = curvature * m**2 / 2 + 0.5 * np.sum(q**2, axis=1)
            grad = q.copy()
            grad[:, 0] += curvature * m
            grad[:, 1] += curvature * m * 2 * q[:, 1]
            return value, grad

        def positions(n):
            q = rng.standard_normal((n, dim))
            q[:, 1] *= 0.9
            q[:, 0] = 1.0 - q[:, 1] ** 2 + 0.3 * q[:, 0]
            return q

        return banana, positions
    if name == "logistic":
        x = rng.standard_normal((200, dim))
        y = rng.uniform(size=200) < 0.5

        def logistic(q):
            eta = q @ x.T
            p = 1.0 / (1.0 + np.exp(-eta))
            value = np.sum(np.logaddexp(0.0, eta) - y * eta, axis=1) + 0.5 * np.sum(q**2, 1)
            return value, (p - y) @ x + q

        return logistic, lambda n: 0.15 * rng.standard_normal((n, dim))
    raise ValueError(name)


FAMILIES = ["quadratic", "banana", "logistic"]


# ------------------------------------------------------- exact representation
@pytest.mark.parametrize("surrogate", list(SURROGATES))
@PROPERTY
@given(seed=seeds, dim=st.integers(1, 6), log_condition=st.floats(0.0, 3.0),
       log_scale=st.floats(-3.0, 3.0), log_offset=st.floats(0.0, 8.0))
def test_quadratic_potential_is_reproduced(surrogate, seed, dim, log_condition, log_scale,
                                           log_offset):
    rng = np.random.default_rng(seed)
    mean, cov = random_gaussian(rng, dim, 10**log_condition, 10**log_scale)
    prec = np.linalg.inv(cov)
    offset = 10**log_offset
    train = rng.multivariate_normal(mean, cov, size=30 * dim + 20)
    test = rng.multivariate_normal(mean, 2.0 * cov, size=20)

    def u(q):
        r = q - mean
        return 0.5 * np.einsum("ni,ij,nj->n", r, prec, r) + offset

    def g(q):
        return (q - mean) @ prec

    fit = SURROGATES[surrogate](seed).fit(train, u(train), g(train))
    spread = np.std(u(test))
    values = np.array([fit.value_and_grad(q)[0] for q in test])
    grads = np.array([fit.value_and_grad(q)[1] for q in test])
    np.testing.assert_allclose(values - u(test), 0.0, atol=1e-5 * spread + 1e-9 * offset)
    np.testing.assert_allclose(grads, g(test), atol=1e-5 * np.abs(g(test)).max())


# ------------------------------------------------ one function, its own training error
@pytest.mark.parametrize("surrogate", list(SURROGATES))
@PROPERTY
@example(seed=0, dim=2, family="banana", with_gradients=True)
@given(seed=seeds, dim=st.integers(2, 5), family=st.sampled_from(FAMILIES),
       with_gradients=st.booleans())
def test_value_and_grad_is_predict(surrogate, seed, dim, family, with_gradients):
    """Trajectories run on ``value_and_grad``; ``predict`` is what the fit was solved for
    and what users see. They must be the same function, at the training points and off
    them."""
    rng = np.random.default_rng(seed)
    potential, positions = potential_family(family, rng, dim)
    train = positions(40 * dim)
    values, grads = potential(train)
    fit = SURROGATES[surrogate](seed).fit(train, values, grads if with_gradients else None)
    points = np.vstack([train[:25], positions(25)])
    by_predict = fit.predict(points)
    by_value_and_grad = np.array([fit.value_and_grad(q)[0] for q in points])
    scale = np.std(values) + 1.0
    np.testing.assert_allclose(by_value_and_grad, by_predict, rtol=0, atol=1e-8 * scale)


@pytest.mark.parametrize("surrogate", list(SURROGATES))
@PROPERTY
@example(seed=0, dim=2, family="banana")
@given(seed=seeds, dim=st.integers(1, 5), family=st.sampled_from(FAMILIES))
def test_predicting_the_training_points_reproduces_the_training_error(surrogate, seed, dim,
                                                                       family):
    """Values only: ``training_error_`` is ``|U_hat - U| / |U - mean U|`` on the training
    set. Recomputed from ``value_and_grad`` (what the sampler uses) it must agree."""
    rng = np.random.default_rng(seed)
    potential, positions = potential_family(family, rng, dim)
    train = positions(40 * dim)
    values, _ = potential(train)
    fit = SURROGATES[surrogate](seed).fit(train, values)
    assert fit.n_train_ == len(train)
    fitted = np.array([fit.value_and_grad(q)[0] for q in train])
    centred = values - values.mean()
    error = np.linalg.norm(fitted - values) / np.linalg.norm(centred)
    assert error == pytest.approx(fit.training_error_, rel=1e-6, abs=1e-9)


# ------------------------------------------------------- gradient vs differences
@pytest.mark.parametrize("surrogate", list(SURROGATES))
@PROPERTY
@given(seed=seeds, dim=st.integers(1, 5), family=st.sampled_from(FAMILIES),
       with_gradients=st.booleans())
def test_gradient_matches_finite_differences(surrogate, seed, dim, family, with_gradients):
    rng = np.random.default_rng(seed)
    potential, positions = potential_family(family, rng, dim)
    train = positions(30 * dim)
    values, grads = potential(train)
    fit = SURROGATES[surrogate](seed).fit(train, values, grads if with_gradients else None)
    for q in positions(5):
        _, grad = fit.value_and_grad(q)
        h = 1e-5 * (1.0 + np.abs(q))
        fd = np.array([
            (fit.value_and_grad(q + h[i] * e)[0] - fit.value_and_grad(q - h[i] * e)[0]) / (2 * h[i])
            for i, e in enumerate(np.eye(dim))
        ])
        np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1e-5 * (np.abs(grad).max() + 1.0))


# ----------------------------------------------------------- batch vs online
def _online():
    return pytest.importorskip("pymc_surrogate.surrogates.online")


@PROPERTY
@given(seed=seeds, p=st.integers(1, 30), n0=st.integers(0, 60), n=st.integers(1, 200),
       log_penalty=st.floats(-6.0, 2.0), log_column_scale=st.floats(-4.0, 4.0))
def test_online_least_squares_equals_batch(seed, p, n0, n, log_penalty, log_column_scale):
    online = _online()
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((n0 + n, p)) * 10 ** rng.uniform(-1, 1, p)
    targets = rows @ rng.standard_normal(p) + 0.1 * rng.standard_normal(n0 + n)
    scale = 10 ** (log_column_scale * rng.uniform(-1, 1, p))
    penalty = np.full(p, 10**log_penalty)
    penalty[: p // 3] = 0.0  # an unpenalised block, as the polynomial base is
    first = rows[:n0] / scale
    gram = first.T @ first
    learner = online.RecursiveLeastSquares(gram, first.T @ targets[:n0], penalty, scale)
    learner.update(rows[n0:], targets[n0:])
    # The batch problem the learner documents: (H^T H + diag(penalty, floored)) c = H^T y,
    # in the scaled columns, with the floor taken from the starting Gram matrix.
    scaled = rows / scale
    floor = 1e-10 * max(float(np.max(np.diag(gram), initial=0.0)), 1.0)
    system = scaled.T @ scaled + np.diag(np.maximum(penalty, floor))
    batch = np.linalg.solve(system, scaled.T @ targets) / scale
    fitted_online, fitted_batch = rows @ learner.coef, rows @ batch
    np.testing.assert_allclose(fitted_online, fitted_batch,
                               atol=1e-7 * (np.abs(fitted_batch).max() + 1.0))


@pytest.mark.parametrize("surrogate", list(SURROGATES))
@PROPERTY
@given(seed=seeds, dim=st.integers(1, 4), family=st.sampled_from(FAMILIES),
       split=st.floats(0.2, 0.8))
def test_online_continuation_of_a_fit_equals_the_batch_fit(surrogate, seed, dim, family, split):
    """Fit on the first part, learn the rest one point at a time: the surrogate is the
    batch ridge solution on all points, on the same basis and penalty."""
    online = _online()
    rng = np.random.default_rng(seed)
    potential, positions = potential_family(family, rng, dim)
    train = positions(40 * dim)
    values, _ = potential(train)
    k = max(int(split * len(train)), 10 * dim)
    fit = SURROGATES[surrogate](seed).fit(train[:k], values[:k])
    eq = fit.normal_equations_
    learner = online.RecursiveLeastSquares(eq.gram, eq.rhs, eq.penalty, eq.column_scale)
    learner.update(fit.value_features(train[k:]), values[k:] - fit.target_offset_)
    scaled = fit.value_features(train) / eq.column_scale
    floor = 1e-10 * max(float(np.max(np.diag(eq.gram))), 1.0)
    batch = np.linalg.solve(
        scaled.T @ scaled + np.diag(np.maximum(eq.penalty, floor)),
        scaled.T @ (values - fit.target_offset_),
    ) / eq.column_scale
    by_online = fit.with_coefficients(learner.coef)
    by_batch = fit.with_coefficients(batch)
    points = positions(20)
    scale = np.std(values) + 1.0
    np.testing.assert_allclose(by_online.predict(points), by_batch.predict(points),
                               atol=1e-6 * scale)


# ------------------------------------------------------- degenerate training data
def _degenerate(case, rng):
    """(positions, potentials, gradients) that a sampler can produce in bad cases."""
    d = 3
    if case == "duplicated_points":
        base = rng.standard_normal((4, d))
        q = np.repeat(base, 25, axis=0)
        return q, 0.5 * np.sum(q**2, 1), q.copy()
    if case == "single_point_repeated":
        q = np.repeat(rng.standard_normal((1, d)), 50, axis=0)
        return q, 0.5 * np.sum(q**2, 1), q.copy()
    if case == "constant_values":
        q = rng.standard_normal((60, d))
        return q, np.full(60, 3.0), np.zeros((60, d))
    if case == "three_points_in_d20":
        q = rng.standard_normal((3, 20))
        return q, 0.5 * np.sum(q**2, 1), q.copy()
    if case == "values_1e12":
        q = rng.standard_normal((60, d))
        return q, 1e12 * (1.0 + 0.5 * np.sum(q**2, 1)), 1e12 * q
    if case == "values_1e-12":
        q = rng.standard_normal((60, d))
        return q, 1e-12 * 0.5 * np.sum(q**2, 1), 1e-12 * q
    if case == "positions_1e-12":
        q = 1e-12 * rng.standard_normal((60, d))
        return q, 0.5 * np.sum((q / 1e-12) ** 2, 1), q / 1e-24
    if case == "positions_1e12":
        q = 1e12 * rng.standard_normal((60, d))
        return q, 0.5 * np.sum((q / 1e12) ** 2, 1), q / 1e24
    if case == "collinear_points":
        t = rng.standard_normal(60)
        q = np.outer(t, np.ones(d))
        return q, 0.5 * np.sum(q**2, 1), q.copy()
    raise ValueError(case)


DEGENERATE = ["duplicated_points", "single_point_repeated", "constant_values",
              "three_points_in_d20", "values_1e12", "values_1e-12", "positions_1e-12",
              "positions_1e12", "collinear_points"]


@pytest.mark.parametrize("with_gradients", [True, False], ids=["values+gradients", "values"])
@pytest.mark.parametrize("case", DEGENERATE)
@pytest.mark.parametrize("surrogate", list(SURROGATES))
def test_degenerate_training_data_gives_finite_surrogate_or_clear_error(surrogate, case,
                                                                       with_gradients):
    rng = np.random.default_rng(7)
    q, values, grads = _degenerate(case, rng)
    try:
        fit = SURROGATES[surrogate](0).fit(q, values, grads if with_gradients else None)
    except ValueError as err:
        assert str(err), "a ValueError without a message"
        return
    assert fit.is_finite_
    assert np.isfinite(fit.training_error_)
    spread = np.std(q, axis=0) + np.abs(q).max() * 1e-3 + 1e-300
    head = q[:10]
    probes = np.vstack([head, head + spread * rng.standard_normal(head.shape)])
    for point in probes:
        value, grad = fit.value_and_grad(point)
        assert np.isfinite(value) and np.all(np.isfinite(grad)), (point, value, grad)
    assert np.all(np.isfinite(fit.predict(probes)))


@PROPERTY
@given(seed=seeds, n=st.integers(0, 6), dim=st.integers(1, 8), log_scale=st.floats(-12, 12),
       dense=st.booleans())
def test_whitening_from_few_or_identical_samples_is_invertible(seed, n, dim, log_scale, dense):
    rng = np.random.default_rng(seed)
    samples = np.repeat(10**log_scale * rng.standard_normal((1, dim)), n, axis=0)
    if n > 2:
        samples[: n // 2] += 10**log_scale * rng.standard_normal((n // 2, dim))
    w = Whitening.from_samples(samples, dense=dense)
    assert np.all(np.isfinite(w.chol)) and np.all(np.isfinite(w.mean))
    inv = w.inverse_chol()
    assert np.all(np.isfinite(inv))
    x = w.to_white(samples) if n else np.zeros((0, dim))
    assert np.all(np.isfinite(x))
    np.testing.assert_allclose(w.from_white(x), samples, atol=1e-9 * (10**log_scale + 1e-300))
