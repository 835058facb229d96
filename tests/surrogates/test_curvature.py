"""Closed-form Hessians and third derivatives of the random-network surrogate
(``surrogates/curvature.py``), against finite differences of its own gradient."""

from __future__ import annotations

import numpy as np
import pytest

from pymc_surrogate.surrogates.third_derivatives import RankOneCubes, SymmetrisedOuter
from pymc_surrogate.surrogates.curvature import random_network_derivatives
from pymc_surrogate.surrogates.random_network import RandomNetworkSurrogate
from pymc_surrogate.surrogates.whitening import Whitening


def _dense(parts, d):
    """The third-derivative tensor the parts stand for."""
    out = np.zeros((d, d, d))
    for part in parts:
        if isinstance(part, RankOneCubes):
            out += np.einsum("s,si,sj,sk->ijk", part.coef, part.vectors, part.vectors, part.vectors)
        else:
            assert isinstance(part, SymmetrisedOuter)
            a = part.vector
            out += (np.einsum("i,jk->ijk", a, part.matrix) + np.einsum("j,ik->ijk", a, part.matrix)
                    + np.einsum("k,ij->ijk", a, part.matrix))
    return out


def _banana_fit(activation: str) -> RandomNetworkSurrogate:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 3)) * [1.0, 0.6, 2.0]
    value = 0.5 * x[:, 0] ** 2 + 2.0 * (x[:, 1] - 0.3 * x[:, 0] ** 2) ** 2 + 0.1 * x[:, 2] ** 2
    grad = np.column_stack([x[:, 0] - 2.4 * x[:, 0] * (x[:, 1] - 0.3 * x[:, 0] ** 2),
                            4.0 * (x[:, 1] - 0.3 * x[:, 0] ** 2), 0.2 * x[:, 2]])
    whitening = Whitening.from_samples(x, dense=True)
    return RandomNetworkSurrogate(n_hidden=40, activation=activation, alpha=1e-4,
                                  whitening=whitening, random_state=1).fit(x, value, grad)


@pytest.mark.parametrize("activation", ["softplus", "rbf"])
@pytest.mark.parametrize("where", ["inside", "past the trust wall"])
def test_derivatives_match_finite_differences(activation, where):
    surrogate = _banana_fit(activation)
    q = np.array([0.7, -0.2, 1.1])
    if where != "inside":
        q = q / np.linalg.norm(q) * 3.0 * surrogate.trust_radius_ * np.abs(surrogate.whitening_.chol).max()
        white = surrogate.whitening_.to_white(q)
        assert np.linalg.norm(white) > surrogate.trust_radius_
    value, grad, hessian, third = random_network_derivatives(surrogate, q)
    assert (value, grad.tolist()) == (surrogate.value_and_grad(q)[0], surrogate.value_and_grad(q)[1].tolist())
    h = 1e-5 * (1.0 + np.abs(q).max())
    eye = np.eye(3)
    fd_hessian = np.array([(surrogate.value_and_grad(q + h * e)[1]
                            - surrogate.value_and_grad(q - h * e)[1]) / (2 * h) for e in eye])
    scale = np.abs(hessian).max()
    np.testing.assert_allclose(hessian, fd_hessian, atol=1e-5 * scale)
    fd_third = np.array([(random_network_derivatives(surrogate, q + h * e)[2]
                          - random_network_derivatives(surrogate, q - h * e)[2]) / (2 * h) for e in eye])
    np.testing.assert_allclose(_dense(third, 3), fd_third, atol=1e-5 * max(1.0, np.abs(fd_third).max()))
