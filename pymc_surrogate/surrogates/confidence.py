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
        # sd_and_grad runs at every leapfrog step of the draws: the quadratic terms'
        # index pairs once here, not per call (PolynomialFeatures builds them per call).
        dim = polynomial.dim
        if polynomial.quadratic == "full":
            self._rows, self._cols = np.triu_indices(dim)
        elif polynomial.quadratic == "diagonal":
            self._rows = self._cols = np.arange(dim)
        else:  # "isotropic" (one term |x|^2 / 2) or "none"
            self._rows = self._cols = None
        self._halved = None if self._rows is None else self._rows == self._cols
        if self._rows is not None:  # the x_i x_j with i < j (derivative in both i and j)
            self._off = ~self._halved
            self._off_rows, self._off_cols = self._rows[self._off], self._cols[self._off]

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
        dim, quadratic = x.size, self.polynomial.quadratic
        # phi = (1, x, quadratic terms) as PolynomialFeatures.values: x_i x_j, x_i^2 / 2
        if self._rows is not None:
            terms = x[self._rows] * x[self._cols]
            terms[self._halved] *= 0.5
        else:
            terms = np.array([0.5 * x @ x]) if quadratic == "isotropic" else np.empty(0)
        phi = np.concatenate(([1.0], x, terms))
        c_phi = self.covariance @ phi
        sd = float(np.sqrt(max(phi @ c_phi, 1e-300)))
        # d sd / dx = J^T C phi / sd, J = d phi / dx; then dx/dq = L^{-1}
        weights = c_phi[1 + dim:]
        grad_x = c_phi[1:1 + dim].copy()
        if self._rows is not None:  # d(x_i x_j) = x_j dx_i + x_i dx_j; d(x_i^2 / 2) = x_i dx_i
            grad_x += np.bincount(self._rows, weights * x[self._cols], minlength=dim)
            grad_x += np.bincount(self._off_cols, weights[self._off] * x[self._off_rows],
                                  minlength=dim)
        elif quadratic == "isotropic":
            grad_x += weights[0] * x
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
