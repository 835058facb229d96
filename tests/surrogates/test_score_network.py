"""ScoreNetworkSurrogate: score matching, the online update (vhmc Proposition 1), the Laplace blend."""

import numpy as np
import pytest

from pymc_surrogate.surrogates.online import RecursiveLeastSquares
from pymc_surrogate.surrogates.score_network import LaplaceTerm, ScoreNetworkSurrogate


def _gaussian_data(n, dim=4, seed=0, wiggle=0.3):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((dim, dim))
    precision = a @ a.T + dim * np.eye(dim)
    positions = rng.multivariate_normal(np.ones(dim), np.linalg.inv(precision), size=n)

    def grad(q):
        return (q - 1.0) @ precision + wiggle * np.sin(3.0 * q)

    return positions, grad, precision


def _batch_solution(surrogate, positions, gradients):
    """The ridge solution on all the data with the fitted nodes, written out directly."""
    rows, targets = surrogate._equations(positions, gradients, np.ones(len(positions)))
    gram = rows.T @ rows
    learner = surrogate.learner_
    penalty = np.diag(learner.precision) - np.diag(gram)  # what fit() added to the Gram
    return np.linalg.solve(gram + np.diag(penalty), rows.T @ targets)


def test_online_update_equals_the_batch_fit():
    positions, grad, _ = _gaussian_data(300)
    gradients = grad(positions)
    surrogate = ScoreNetworkSurrogate(n_hidden=60, random_state=1).fit(
        positions[:100], gradients=gradients[:100])
    surrogate.partial_fit(positions[100:], gradients=gradients[100:])
    batch = _batch_solution(surrogate, positions, gradients)
    assert np.max(np.abs(surrogate.coef_ - batch)) <= 1e-8 * np.max(np.abs(batch))
    assert surrogate.n_seen_ == 300


def test_block_update_equals_row_by_row_updates():
    rng = np.random.default_rng(3)
    design, target = rng.standard_normal((40, 12)), rng.standard_normal(40)
    gram, rhs, penalty = design[:10].T @ design[:10], design[:10].T @ target[:10], np.full(12, 0.1)
    by_block = RecursiveLeastSquares(gram, rhs, penalty)
    by_row = RecursiveLeastSquares(gram, rhs, penalty)
    for start in range(10, 40, 5):
        by_block.update_block(design[start:start + 5], target[start:start + 5])
        by_row.update(design[start:start + 5], target[start:start + 5])
    exact = np.linalg.solve(design.T @ design + np.diag(penalty), design.T @ target)
    np.testing.assert_allclose(by_block.coef, exact, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(by_row.coef, exact, rtol=1e-10, atol=1e-12)


def test_score_matching_recovers_the_gradient_on_held_out_points():
    positions, grad, _ = _gaussian_data(400, wiggle=1.0)
    surrogate = ScoreNetworkSurrogate(n_hidden=200, random_state=0).fit(positions, gradients=grad(positions))
    held_out = _gaussian_data(200, seed=9)[0]
    # relative error, whitened: 0.064 (node seeds 0-2: 0.062-0.085); the quadratic base
    # alone cannot follow the sine: 0.176
    assert surrogate.score_error(held_out, grad(held_out)) < 0.11
    base_only = ScoreNetworkSurrogate(n_hidden=0, random_state=0).fit(positions, gradients=grad(positions))
    assert base_only.score_error(held_out, grad(held_out)) > 0.15
    # a gradient-only fit has no level
    assert ScoreNetworkSurrogate.has_level is False


def test_differences_of_the_value_match_the_gradient():
    positions, grad, _ = _gaussian_data(300)
    surrogate = ScoreNetworkSurrogate(n_hidden=40, random_state=0).fit(positions, gradients=grad(positions))
    q, step = positions[0], 1e-6 * np.eye(4)
    value, gradient = surrogate.value_and_grad(q)
    numeric = [(surrogate.value_and_grad(q + e)[0] - surrogate.value_and_grad(q - e)[0]) / 2e-6 for e in step]
    np.testing.assert_allclose(gradient, numeric, rtol=1e-5, atol=1e-6)


def test_laplace_blend_fades_with_the_data():
    positions, grad, precision = _gaussian_data(50, wiggle=0.0)
    laplace = LaplaceTerm(np.zeros(4), 10.0 * precision)  # deliberately off-centre, too narrow
    surrogate = ScoreNetworkSurrogate(n_hidden=10, tau=20.0, laplace=laplace, random_state=0)
    surrogate.fit(positions[:2], gradients=grad(positions[:2]))
    assert surrogate.mu_ == pytest.approx(1 - np.exp(-2 / 20))
    # early, V is mostly the Laplace term: its gradient at the Laplace mode is small
    early = np.linalg.norm(surrogate.value_and_grad(np.zeros(4))[1])
    surrogate.partial_fit(positions[2:], gradients=grad(positions[2:]))
    assert surrogate.mu_ == pytest.approx(1 - np.exp(-50 / 20))
    late = surrogate.value_and_grad(np.zeros(4))[1]
    np.testing.assert_allclose(late, grad(np.zeros((1, 4)))[0], rtol=0.1)
    assert early < 0.5 * np.linalg.norm(late)


def test_snapshot_is_unaffected_by_later_learning():
    positions, grad, _ = _gaussian_data(200)
    surrogate = ScoreNetworkSurrogate(n_hidden=30, random_state=0).fit(positions[:50], gradients=grad(positions[:50]))
    frozen = surrogate.snapshot()
    before = frozen.value_and_grad(positions[0])[1].copy()
    surrogate.partial_fit(positions[50:], gradients=grad(positions[50:]))
    np.testing.assert_array_equal(frozen.value_and_grad(positions[0])[1], before)
    assert not np.allclose(surrogate.value_and_grad(positions[0])[1], before)


@pytest.mark.parametrize(
    "settings, message",
    [({"n_hidden": -1}, "n_hidden"), ({"n_hidden": 2.5}, "n_hidden"), ({"tau": 0}, "tau"),
     ({"tau": "slow"}, "tau"), ({"alpha": 0}, "alpha"), ({"quadratic": "cubic"}, "quadratic")],
)
def test_bad_settings_raise(settings, message):
    with pytest.raises(ValueError, match=message):
        ScoreNetworkSurrogate(**settings)


def test_fit_without_gradients_raises():
    with pytest.raises(ValueError, match="gradients"):
        ScoreNetworkSurrogate().fit(np.zeros((5, 2)), potentials=np.zeros(5))


def test_predicted_gradients_are_the_fitted_ones_when_the_quadratic_is_clipped():
    """A banana (sparse-grid-hmc §4.2): the unconstrained quadratic base bends negative
    where the nodes compensate. Clipping it positive definite without re-solving the other
    weights left gradients 230% off at the training points while the fit was within 1%
    (the chains missed the arms); with the re-solve, ``value_and_grad`` is the fit, before
    and after online updates."""
    rng = np.random.default_rng(0)
    y_sum, n_obs, noise_var = 100.0, 100, 4.0

    def grad(b):
        r = (y_sum - n_obs * (b[:, 0] + b[:, 1] ** 2)) / noise_var
        return np.column_stack([b[:, 0] - r, b[:, 1] - 2.0 * r * b[:, 1]])

    beta2 = rng.uniform(-1.8, 1.8, 400)
    positions = np.column_stack([1.0 - beta2**2 + 0.2 * rng.standard_normal(400), beta2])
    surrogate = ScoreNetworkSurrogate(quadratic="full", random_state=1).fit(
        positions[:300], gradients=grad(positions[:300]))
    for stage in ("fit", "online"):
        predicted = np.array([surrogate.value_and_grad(q)[1] for q in positions])
        error = np.linalg.norm(predicted - grad(positions)) / np.linalg.norm(grad(positions))
        assert error < 0.05, (stage, error)
        assert np.linalg.eigvalsh(surrogate._quadratic).min() > 0
        surrogate.partial_fit(positions[300:], gradients=grad(positions[300:]))
