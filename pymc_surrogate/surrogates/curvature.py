"""Second and third derivatives of the random-network surrogate, in closed form.

RNS-RMHMC (rns-hmc §3.4) builds its metric from the surrogate's Hessian and integrates
with the metric's derivatives, the surrogate's third derivatives. Every term of
``RandomNetworkSurrogate`` has them analytically: the whitened quadratic (Hessian ``A``,
no third derivative), the trust-region wall ``1/2 (|x| - R)_+^2`` with ``x = L^-1 (q - m)``,
softplus ridge nodes ``a softplus(w . q + b)`` (third derivative ``a s'''(z) w (x) w (x) w``,
a rank-one cube) and radial nodes ``a exp(-omega |x - c|^2 / 2)`` (a rank-one cube plus a
symmetrised outer product with ``L^-T L^-1``). The third derivatives are returned as
``core.riemannian`` parts, contracted in ``O(s d^2)``.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from pymc_surrogate.surrogates.third_derivatives import RankOneCubes, SymmetrisedOuter

__all__ = ["random_network_derivatives"]


def random_network_derivatives(surrogate, q: np.ndarray):
    """``(U~, dU~/dq, d2U~/dq2, third)`` of a fitted ``RandomNetworkSurrogate`` at ``q``.

    ``third`` is a list of ``RankOneCubes`` / ``SymmetrisedOuter`` parts (empty where the
    surrogate is quadratic). The value and gradient are the surrogate's own
    ``value_and_grad``, so the Riemannian trajectories run on the same function as the
    Euclidean ones.
    """
    # (refreshes a stale fit first; z = W q + b of softplus nodes, as value_and_grad's)
    nodes = getattr(surrogate, "_value_grad_nodes", None)
    value, grad, z = (*surrogate.value_and_grad(q), None) if nodes is None else nodes(q)
    inv_chol = surrogate._inv_chol
    hessian = surrogate._quadratic
    third: list = []
    r = q - surrogate._mean
    white = inv_chol @ r
    radius = float(np.sqrt(white @ white))
    if radius > surrogate.trust_radius_:
        hessian = hessian.copy()
        _add_wall(hessian, third, white, radius, surrogate.trust_radius_, inv_chol)
    coef = surrogate._node_coef
    if coef.size and surrogate.hidden_.activation == "softplus":
        weights = surrogate._node_weights
        sig = expit(weights @ q + surrogate._node_offsets if z is None else z)
        second = sig * (1.0 - sig)
        scaled = coef * second
        hessian = hessian + weights.T @ (scaled[:, None] * weights)
        third.append(RankOneCubes(scaled * (1.0 - 2.0 * sig), weights))
    elif coef.size:
        hessian = hessian.copy()
        _add_radial(hessian, third, surrogate, white, inv_chol)
    return value, grad, hessian if hessian is not surrogate._quadratic else hessian.copy(), third


def _add_wall(hessian, third, white, radius, wall, inv_chol) -> None:
    """``1/2 (rho - R)^2`` beyond ``rho = |x| > R``: in ``x``, Hessian ``(1 - R/rho) I +
    R x x^T / rho^3``, third ``R / rho^3 sym(x (x) I) - 3 R / rho^5 x (x) x (x) x``."""
    hessian += inv_chol.T @ ((1.0 - wall / radius) * np.eye(white.size)
                             + (wall / radius**3) * np.outer(white, white)) @ inv_chol
    pulled = inv_chol.T @ white  # x pulled back to q: (L^-1)^T x
    third.append(SymmetrisedOuter((wall / radius**3) * pulled, inv_chol.T @ inv_chol))
    third.append(RankOneCubes(np.array([-3.0 * wall / radius**5]), pulled[None, :]))


def _add_radial(hessian, third, surrogate, white, inv_chol) -> None:
    """``a h``, ``h = exp(-omega |x - c|^2 / 2)``, ``e = x - c``: in ``x``, Hessian
    ``a omega h (omega e e^T - I)``, third ``a omega^2 h (sym(e (x) I) - omega e (x) e (x) e)``."""
    diff = white - surrogate.hidden_.weights  # (s, d)
    omega = surrogate.hidden_.offsets
    h = np.exp(-0.5 * np.sum(diff**2, axis=1) * omega)
    scale = surrogate._node_coef * omega * h
    pulled = diff @ inv_chol  # rows: (L^-1)^T e
    hessian += pulled.T @ ((scale * omega)[:, None] * pulled) - np.sum(scale) * (inv_chol.T @ inv_chol)
    third.append(SymmetrisedOuter(pulled.T @ (scale * omega), inv_chol.T @ inv_chol))
    third.append(RankOneCubes(-scale * omega**2, pulled))
