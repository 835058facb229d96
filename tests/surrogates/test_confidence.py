"""QuadraticConfidence: the predictive sd of a weighted quadratic fit, and its gradient."""

from __future__ import annotations

import numpy as np
import pytest

from pymc_surrogate.surrogates.confidence import QuadraticConfidence


@pytest.fixture
def fitted():
    rng = np.random.default_rng(0)
    positions = rng.standard_normal((400, 3)) * [1.0, 2.0, 0.5] + [1.0, -1.0, 0.0]
    white = (positions - [1.0, -1.0, 0.0]) / [1.0, 2.0, 0.5]
    potentials = 0.5 * np.sum(white**2, axis=1) + 0.3 * white[:, 0] ** 3 + 0.1 * rng.standard_normal(400)
    return QuadraticConfidence.fit(positions, potentials, np.ones(400)), positions


def test_the_gradient_is_the_derivative_of_the_sd(fitted):
    confidence, _ = fitted
    q = np.array([2.5, 1.0, -0.7])
    sd, grad = confidence.sd_and_grad(q)
    step = 1e-6
    numeric = [(confidence.sd_and_grad(q + step * e)[0] - confidence.sd_and_grad(q - step * e)[0])
               / (2 * step) for e in np.eye(3)]
    assert sd > 0
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-9)


def test_the_sd_grows_where_the_data_thin_out(fitted):
    confidence, positions = fitted
    centre = confidence.sd_and_grad(positions.mean(0))[0]
    far = confidence.sd_and_grad(positions.mean(0) + 4 * positions.std(0))[0]
    assert far > 5 * centre


def test_the_lowered_field_subtracts_kappa_sds(fitted):
    confidence, _ = fitted
    field = lambda q: (float(q @ q), 2 * q)  # noqa: E731
    lowered = confidence.lower(field, 5.0)
    q = np.array([0.3, -2.0, 1.0])
    sd, grad_sd = confidence.sd_and_grad(q)
    value, grad = lowered(q)
    assert value == pytest.approx(q @ q - 5 * sd)
    np.testing.assert_allclose(grad, 2 * q - 5 * grad_sd)


def test_the_cap_bounds_the_lowering_and_keeps_the_gradient_exact(fitted):
    confidence, positions = fitted
    field = lambda q: (float(q @ q), 2 * q)  # noqa: E731
    lowered = confidence.lower(field, 5.0, cap=2.0)
    near, far = positions.mean(0), positions.mean(0) + 20 * positions.std(0)
    assert 5 * confidence.sd_and_grad(far)[0] > 50  # uncapped: lowered by more than 50
    assert field(far)[0] - lowered(far)[0] == pytest.approx(2.0, abs=1e-6)
    small = 5 * confidence.sd_and_grad(near)[0]
    assert small < 0.5
    # the smooth minimum of kappa sd and the cap: kappa sd less log(1 + exp(kappa sd - cap))
    assert field(near)[0] - lowered(near)[0] == pytest.approx(small - np.log1p(np.exp(small - 2.0)))
    q, step = np.array([3.0, 4.0, 0.8]), 1e-6
    numeric = [(lowered(q + step * e)[0] - lowered(q - step * e)[0]) / (2 * step) for e in np.eye(3)]
    np.testing.assert_allclose(lowered(q)[1], numeric, rtol=1e-5, atol=1e-7)


def test_too_few_points_give_no_confidence():
    rng = np.random.default_rng(1)
    positions = rng.standard_normal((15, 3))  # 10 coefficients: fewer than 2 points each
    assert QuadraticConfidence.fit(positions, np.zeros(15), np.ones(15)) is None
