import numpy as np
import pytest

from pymc_surrogate.surrogates import RandomNetworkSurrogate
from pymc_surrogate.surrogates.online import RecursiveLeastSquares
from pymc_surrogate.surrogates.quadratic import proper_quadratic
from pymc_surrogate.surrogates.ridge import solve_partially_penalised_ridge


def batch_solution(rows, targets, penalty, floor_from):
    floor = 1e-10 * max(float(np.max(np.diag(floor_from))), 1.0)
    system = rows.T @ rows + np.diag(np.maximum(penalty, floor))
    return np.linalg.solve(system, rows.T @ targets)


def test_online_equals_batch_after_thousands_of_updates_with_near_duplicates():
    rng = np.random.default_rng(0)
    p, n0, n = 60, 100, 5000
    rows = rng.standard_normal((n0 + n, p))
    # Near-duplicate equations: the case where Greville's recursion needs care.
    rows[n0 + 100 : n0 + 300] = rows[n0 + 99] + 1e-9 * rng.standard_normal((200, p))
    targets = rows @ rng.standard_normal(p) + 0.1 * rng.standard_normal(n0 + n)
    penalty = np.r_[np.zeros(10), np.full(p - 10, 0.5)]
    start_gram = rows[:n0].T @ rows[:n0]
    learner = RecursiveLeastSquares(start_gram, rows[:n0].T @ targets[:n0], penalty)
    learner.update(rows[n0:], targets[n0:])
    expected = batch_solution(rows, targets, penalty, start_gram)
    np.testing.assert_allclose(learner.coef, expected, rtol=1e-9, atol=1e-12)
    # P stays the inverse of the regularised Gram matrix.
    floor = 1e-10 * max(float(np.max(np.diag(start_gram))), 1.0)
    system = rows.T @ rows + np.diag(np.maximum(penalty, floor))
    np.testing.assert_allclose(learner.precision_inverse @ system, np.eye(p), atol=1e-8)
    np.testing.assert_allclose(learner.precision, system, rtol=1e-12, atol=1e-9)


def test_online_continues_the_surrogate_fit_exactly():
    rng = np.random.default_rng(1)
    dim = 3
    positions = rng.standard_normal((200, dim))
    potential = lambda q: 0.5 * np.sum(q**2, 1) + 0.3 * np.sin(q[:, 0]) + 10.0
    first, later = positions[:80], positions[80:]
    surrogate = RandomNetworkSurrogate(n_hidden=30, alpha=1e-3, random_state=0)
    surrogate.fit(first, potential(first))
    eq = surrogate.normal_equations_
    learner = RecursiveLeastSquares(eq.gram, eq.rhs, eq.penalty, eq.column_scale)
    learner.update(surrogate.value_features(later), potential(later) - surrogate.target_offset_)
    updated = surrogate.with_coefficients(learner.coef)
    # The same regression solved in batch on all 200 points, on the same basis.
    rows = surrogate.value_features(positions)
    scale = eq.column_scale
    penalty = eq.penalty
    floor = 1e-10 * max(float(np.max(np.diag(eq.gram))), 1.0)
    scaled = rows / scale
    coef = np.linalg.solve(
        scaled.T @ scaled + np.diag(np.maximum(penalty, floor)),
        scaled.T @ (potential(positions) - surrogate.target_offset_),
    ) / scale
    np.testing.assert_allclose(updated.predict(positions), surrogate.with_coefficients(coef).predict(positions), rtol=1e-8)
    assert np.std(updated.predict(later) - potential(later)) < np.std(surrogate.predict(later) - potential(later))


def test_update_cost_does_not_grow_with_data():
    rng = np.random.default_rng(2)
    learner = RecursiveLeastSquares(np.eye(20), np.zeros(20), np.ones(20))
    learner.update(rng.standard_normal((3000, 20)), rng.standard_normal(3000))
    assert learner.precision_inverse.shape == (20, 20) and learner.n_updates == 3000


def test_clipped_quadratic_is_the_constrained_minimum_of_the_learner():
    """Online weights whose quadratic is indefinite (a saddle): with the learner, the other
    weights are the minimum of the learner's objective given the clipped quadratic."""
    rng = np.random.default_rng(3)
    positions = rng.standard_normal((150, 2))
    saddle = lambda q: q[:, 0] ** 2 - 0.5 * q[:, 1] ** 2 + 0.2 * np.sin(2 * q[:, 0])
    surrogate = RandomNetworkSurrogate(n_hidden=10, alpha=1e-3, quadratic="full", random_state=0)
    surrogate.fit(positions[:100], saddle(positions[:100]))
    eq = surrogate.normal_equations_
    learner = RecursiveLeastSquares(eq.gram, eq.rhs, eq.penalty, eq.column_scale)
    learner.update(surrogate.value_features(positions[100:]),
                   saddle(positions[100:]) - surrogate.target_offset_)
    coef = learner.coef
    proper = proper_quadratic(surrogate.polynomial_, coef)
    assert proper is not None, "the test needs an indefinite quadratic"
    clipped = surrogate.with_coefficients(coef, learner)
    result = np.r_[clipped.polynomial_coef_, clipped.hidden_coef_]
    quad = np.arange(3, surrogate.polynomial_.size)
    rest = np.setdiff1d(np.arange(coef.size), quad)
    np.testing.assert_allclose(result[quad], proper)
    # Zero gradient of (c - coef)^T A (c - coef) in the free (non-quadratic) weights.
    gradient = learner.precision @ ((result - coef) * learner.column_scale)
    np.testing.assert_allclose(gradient[rest], 0.0, atol=1e-8 * np.abs(gradient[quad]).max())
