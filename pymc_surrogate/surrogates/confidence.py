"""How sure a quadratic fit of the potential is, point by point: its predictive sd."""

from __future__ import annotations

import numpy as np

from pymc_surrogate.surrogates.features import PolynomialFeatures
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["QuadraticConfidence"]


class QuadraticConfidence:
    """Predictive sd of a weighted least-squares quadratic fit of the potential.

    ``sd(q)^2 = s^2 phi(x)^T (Phi^T W Phi)^{-1} phi(x)``, ``x`` the whitened ``q`` and
    ``phi`` the intercept, linear and quadratic terms, ``s^2`` the weighted residual
    variance: small where the training points are dense, growing where they thin out.

    Parameters
    ----------
    whitening : Whitening
    polynomial : PolynomialFeatures
    covariance : ndarray of shape (p, p)
        ``s^2 (Phi^T W Phi)^{-1}``, the coefficients' covariance.
    """

    def __init__(self, whitening: Whitening, polynomial: PolynomialFeatures,
                 covariance: np.ndarray):
        self.whitening = whitening
        self.polynomial = polynomial
        self.covariance = covariance
        self._inv_chol = whitening.inverse_chol()

    @classmethod
    def fit(cls, positions: np.ndarray, potentials: np.ndarray, weights: np.ndarray,
            quadratic: str = "full") -> QuadraticConfidence | None:
        """The confidence of the fit to ``positions`` (n, d), or None with fewer than two
        points a coefficient (no residual variance to speak of)."""
        n, dim = positions.shape
        polynomial = PolynomialFeatures(dim, quadratic)
        if n < 2 * polynomial.size:
            return None
        whitening = Whitening.from_samples(positions, dense=True)
        root = np.sqrt(weights)
        design = polynomial.values(whitening.to_white(positions)) * root[:, None]
        target = (potentials - potentials.mean()) * root
        inverse = np.linalg.pinv(design.T @ design)
        residual = design @ (inverse @ (design.T @ target)) - target
        noise = float(residual @ residual) / (n - polynomial.size)
        return cls(whitening, polynomial, inverse * noise)

    def sd_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """The predictive sd at one position and its gradient in ``q``."""
        x = self._inv_chol @ (q - self.whitening.mean)
        phi = self.polynomial.values(x[None])[0]
        c_phi = self.covariance @ phi
        sd = float(np.sqrt(max(phi @ c_phi, 1e-300)))
        # d sd / dx = J^T C phi / sd, J = d phi / dx, and J^T c = d(c . phi) / dx; dx/dq = L^{-1}
        grad_x = self.polynomial.coef_gradient(c_phi, x)
        return sd, self._inv_chol.T @ (grad_x / sd)

    def lower(self, field, kappa: float, cap: float = np.inf):
        """``q -> (U~ - L, its gradient)`` of a field ``q -> (U~, dU~/dq)``, with ``L`` the
        smooth minimum ``-log(exp(-kappa sd) + exp(-cap))`` of ``kappa sd`` and ``cap``.

        ``sd`` grows like ``|q|^2`` far from the data, as fast as ``U~`` itself: lowered
        without a cap the field need not be bounded below, and it moves the surrogate's
        mass to where there are no data. Capped it is lowered by less than ``cap`` nats
        anywhere (by nearly ``kappa sd`` where that is well below ``cap``), and proper
        wherever ``U~`` is.
        """
        def value_and_grad(q: np.ndarray) -> tuple[float, np.ndarray]:
            value, grad = field(q)
            sd, grad_sd = self.sd_and_grad(q)
            lowering = -np.logaddexp(-kappa * sd, -cap)
            share = np.exp(lowering - kappa * sd)  # d lowering / d (kappa sd), in (0, 1]
            return value - lowering, grad - share * kappa * grad_sd

        return value_and_grad
