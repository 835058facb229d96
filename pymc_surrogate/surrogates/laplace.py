"""A Gaussian (Laplace) approximation from potential values alone: a quadratic regression.

For a black-box model a random walk that cannot move (an ill-conditioned posterior) gathers
no spread to estimate the geometry from; but the potentials it *evaluates*, accepted or
rejected, still fix a quadratic: ``(d + 1)(d + 2) / 2`` values determine a d-dimensional
quadratic exactly (231 for d = 20). The fitted quadratic's minimum and inverse Hessian give
the proposal shape and scale for the next exploration steps.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_surrogate.surrogates.features import PolynomialFeatures, polynomial_size
from pymc_surrogate.surrogates.whitening import Whitening, robust_cholesky

__all__ = ["Gaussian", "laplace_at", "laplace_from_values", "within_trust_region"]

#: Points per quadratic coefficient: the fit uses the lowest potentials up to this many.
POINTS_PER_COEFFICIENT = 3.0
#: A level is fitted only with at least this many points per coefficient.
MIN_POINTS_PER_COEFFICIENT = 1.2
#: Largest full quadratic fitted (d <= 33); beyond, a diagonal one: the least squares
#: costs O(n p^2) with n = 3p rows, seconds a fit at p = 1326 (d = 50).
MAX_FULL_COEFFICIENTS = 600
#: Eigenvalues of the fitted Hessian below this share of the largest are not trusted.
RELATIVE_CURVATURE_FLOOR = 1e-12
#: Trust region of a fit from values, in units of the spread of all the points evaluated
#: (not only the lowest ones the fit uses, which cluster at the mode): the Gaussian's mean
#: lies within this many times their radius of their centre, and its sds are at most this
#: many times their sds. A quadratic extrapolated far beyond its data is a guess: on the
#: 20-d PDE showcase an early diagonal fit put its mean at 4e5 (points spread 1.4), where
#: the PDE solver fails ("Factor is exactly singular").
TRUST_FACTOR = 2.0


class Gaussian(NamedTuple):
    """``N(mean, cov)`` with its level of detail (``"full"`` or ``"diagonal"``)."""

    mean: np.ndarray
    cov: np.ndarray
    quadratic: str

    def factor(self) -> np.ndarray:
        """A lower-triangular ``L`` with ``L L^T = cov``: the Cholesky factor, or where
        rounding left ``cov`` indefinite (sds 1e4 and 1e-4 are variances 1e16 apart)
        the factor of its correlation matrix, scaled by the sds, with eigenvalues below
        1e-12 of the largest raised to it (``whitening.scaled_cholesky``)."""
        return robust_cholesky(self.cov)

    def draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return self.mean + rng.standard_normal((size, self.mean.shape[0])) @ self.factor().T


def laplace_from_values(positions: np.ndarray, potentials: np.ndarray,
                        trust_region: bool = True) -> Gaussian | None:
    """Fit ``U(q) ~ c + b.q + q^T A q / 2`` to the lowest potentials; return ``N(-A^-1 b, A^-1)``.

    The lowest potentials are used (a trust region in energy): a local quadratic model of
    a non-Gaussian posterior, the exact one of a Gaussian. Directions the fit finds flat
    or concave (too little data along them, or a non-convex posterior) get the smallest
    trusted curvature, so the result is always a proper Gaussian.

    Parameters
    ----------
    positions : ndarray of shape (n, d)
    potentials : ndarray of shape (n,)
        ``-logp`` at ``positions``; non-finite ones are ignored.
    trust_region : bool
        Hold the mean and sds to ``TRUST_FACTOR`` times the points' spread (default);
        ``False`` returns the fit as it is (a caller that judges it against the values).

    Returns
    -------
    Gaussian or None
        None when there are too few finite points for even a diagonal quadratic, or the
        fit is not finite.
    """
    positions = np.asarray(positions, dtype=np.float64)
    potentials = np.asarray(potentials, dtype=np.float64)
    finite = np.isfinite(potentials) & np.all(np.isfinite(positions), axis=1)
    positions, potentials = positions[finite], potentials[finite]
    n, dim = positions.shape
    level = next(
        (name for name in ("full", "diagonal")
         if n >= MIN_POINTS_PER_COEFFICIENT * polynomial_size(dim, name)
         and (name != "full" or polynomial_size(dim, name) <= MAX_FULL_COEFFICIENTS)),
        None,
    )
    if level is None:
        return None
    n_use = min(n, int(POINTS_PER_COEFFICIENT * polynomial_size(dim, level)))
    lowest = np.argsort(potentials)[:n_use]
    points, values = positions[lowest], potentials[lowest]
    # Whitened by the points' own spread: only for the conditioning of the least squares
    # (the quadratic fitted does not depend on an affine change of coordinates).
    whitening = Whitening.from_samples(points, dense=True)
    x = whitening.to_white(points)
    polynomial = PolynomialFeatures(dim, level)
    # Rows in relative units: a point 1e8 above the minimum (an early prior-scale jump)
    # would otherwise set the absolute precision of the whole fit, and the quadratic near
    # the minimum, where the chain goes, would drown in its rounding (an exact quadratic
    # fitted to 300 such points: a mode 1e7 posterior sds off). Exact data stay exact.
    excess = values - values.min()
    row_weight = 1.0 / (1.0 + excess)
    design = polynomial.values(x) * row_weight[:, None]
    scale = np.linalg.norm(design, axis=0)
    scale[scale == 0] = 1.0
    coef, *_ = np.linalg.lstsq(design / scale, excess * row_weight, rcond=None)
    coef = coef / scale
    if not np.all(np.isfinite(coef)):
        return None
    hessian = polynomial.quadratic_matrix(coef)
    gaussian = _gaussian(hessian, coef[1 : 1 + dim], whitening, level)
    if gaussian is None or not trust_region:
        return gaussian
    return within_trust_region(gaussian, positions)


def within_trust_region(gaussian: Gaussian, positions: np.ndarray) -> Gaussian:
    """``gaussian`` with its mean and sds held to ``TRUST_FACTOR`` times the spread of
    ``positions``, in the coordinates where those are white."""
    cloud = Whitening.from_samples(positions, dense=positions.shape[0] > positions.shape[1])
    radius = TRUST_FACTOR * float(np.max(np.linalg.norm(cloud.to_white(positions), axis=1)))
    mean_white = cloud.to_white(gaussian.mean[None])[0]
    norm = float(np.linalg.norm(mean_white))
    if norm > radius:
        mean_white *= radius / norm
    inv_chol = cloud.inverse_chol()
    vals, vecs = np.linalg.eigh(inv_chol @ gaussian.cov @ inv_chol.T)
    cov_white = (vecs * np.minimum(vals, TRUST_FACTOR**2)) @ vecs.T
    chol = cloud.chol if cloud.dense else np.diag(cloud.chol)
    cov = chol @ cov_white @ chol.T
    return Gaussian(cloud.from_white(mean_white[None])[0], 0.5 * (cov + cov.T), gaussian.quadratic)


def laplace_at(q: np.ndarray, grad: np.ndarray, hessian: np.ndarray) -> Gaussian | None:
    """``N(q - A^-1 g, A^-1)``: the Gaussian of the quadratic with gradient ``g`` and Hessian
    ``A`` at ``q`` (a Newton step and its local covariance).

    Computed in Jacobi-scaled coordinates (unit diagonal curvature), where the trusted
    curvature floor is relative: raw curvatures of a regression on an uncentred covariate
    span 1e-3 to 1e9, and a floor relative to the largest raw one would erase the ridge.

    Parameters
    ----------
    q, grad : ndarray of shape (d,)
        A point and ``grad U`` there.
    hessian : ndarray of shape (d, d)
        ``U``'s Hessian at ``q`` (symmetrised here), e.g. by finite differences.

    Returns
    -------
    Gaussian or None
        None when the Hessian is not finite or has no positive diagonal.
    """
    q, grad = np.asarray(q, dtype=np.float64), np.asarray(grad, dtype=np.float64)
    hessian = np.asarray(hessian, dtype=np.float64)
    if q.ndim != 1 or grad.shape != q.shape or hessian.shape != 2 * q.shape:
        raise ValueError(f"laplace_at needs q and grad of shape (d,) and a (d, d) Hessian; "
                         f"got {q.shape}, {grad.shape}, {hessian.shape}.")
    hessian = 0.5 * (hessian + hessian.T)
    diagonal = np.diag(hessian)
    if not (np.all(np.isfinite(hessian)) and np.all(np.isfinite(grad)) and np.all(diagonal > 0)):
        return None
    scale = 1.0 / np.sqrt(diagonal)
    # x = (q' - q) / scale: U(x) = (scale * g).x + x^T (scale A scale) x / 2
    return _gaussian(hessian * np.outer(scale, scale), scale * grad, Whitening(q, scale), "full")


def _gaussian(hessian: np.ndarray, linear: np.ndarray, whitening: Whitening,
              level: str) -> Gaussian | None:
    """``N(-A^-1 b, A^-1)`` for ``U(x) = b.x + x^T A x / 2`` in ``whitening``'s
    coordinates, mapped back; curvatures below the trusted floor are raised to it."""
    vals, vecs = np.linalg.eigh(hessian)
    if not np.all(np.isfinite(vals)) or vals.max() <= 0:
        return None
    trusted = vals[vals > RELATIVE_CURVATURE_FLOOR * vals.max()]
    vals = np.maximum(vals, trusted.min())
    cov_white = (vecs / vals) @ vecs.T
    mode_white = -cov_white @ linear
    chol = whitening.chol if whitening.dense else np.diag(whitening.chol)
    cov = chol @ cov_white @ chol.T
    cov = 0.5 * (cov + cov.T)
    mean = whitening.from_white(mode_white[None, :])[0]
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(cov))):
        return None
    gaussian = Gaussian(mean, cov, level)
    try:
        gaussian.factor()
    except (np.linalg.LinAlgError, ValueError):
        return None
    return gaussian
