"""PolynomialFeatures: the values, the gradients, and the gradient of ``coef . phi``."""

from __future__ import annotations

import numpy as np
import pytest

from pymc_surrogate.surrogates.features import PolynomialFeatures


@pytest.mark.parametrize("quadratic", ["none", "isotropic", "diagonal", "full"])
def test_coef_gradient_is_the_gradients_times_the_coefficients(quadratic):
    rng = np.random.default_rng(1)
    features = PolynomialFeatures(5, quadratic)
    x, coef = rng.standard_normal(5), rng.standard_normal(features.size)
    np.testing.assert_allclose(features.coef_gradient(coef, x),
                               features.gradients(x[None])[0] @ coef, rtol=1e-12, atol=1e-12)
    # and the derivative of coef . phi, by central differences
    step = 1e-6
    numeric = [(features.values((x + step * e)[None])[0] - features.values((x - step * e)[None])[0])
               @ coef / (2 * step) for e in np.eye(5)]
    np.testing.assert_allclose(features.coef_gradient(coef, x), numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("quadratic", ["none", "isotropic", "diagonal", "full"])
def test_the_quadratic_part_is_half_x_a_x(quadratic):
    rng = np.random.default_rng(2)
    features = PolynomialFeatures(4, quadratic)
    x, coef = rng.standard_normal(4), rng.standard_normal(features.size)
    value = features.values(x[None])[0] @ coef
    matrix = features.quadratic_matrix(coef)
    assert value == pytest.approx(coef[0] + coef[1:5] @ x + 0.5 * x @ matrix @ x, rel=1e-12)
