"""Affine whitening of parameter space from a posterior scale estimate."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

__all__ = ["Whitening", "robust_cholesky", "scaled_cholesky"]


@dataclass(frozen=True)
class Whitening:
    """The affine map ``x = L^{-1} (q - mean)`` with ``L L^T = cov``.

    Random features drawn in whitened coordinates see a roughly isotropic, unit-scale
    posterior, which is what makes a fixed feature distribution work across models.

    Parameters
    ----------
    mean : ndarray of shape (d,)
    chol : ndarray of shape (d, d) or (d,)
        Lower Cholesky factor of the covariance, or the standard deviations when the
        estimate is diagonal.
    """

    mean: np.ndarray
    chol: np.ndarray

    @property
    def dense(self) -> bool:
        return self.chol.ndim == 2

    @property
    def dim(self) -> int:
        return self.mean.shape[0]

    @classmethod
    def identity(cls, dim: int) -> Whitening:
        return cls(np.zeros(dim), np.ones(dim))

    @classmethod
    def from_samples(cls, samples: np.ndarray, dense: bool = False,
                     frame: Whitening | None = None) -> Whitening:
        """Estimate the whitening from draws, regularised in the draws' own scale.

        Stan's windowed-adaptation regulariser ``n/(n+5) * S + 1e-3 * 5/(n+5) * I``, made
        scale-free: the shrinkage ``n/(n+5)`` is kept, and the ridge acts on the
        correlation matrix instead of the covariance, as a floor on its eigenvalues. An
        absolute ridge is a scale: it floored kilpisjarvi's 0.0075 sd at 0.005 and swamped
        the narrow direction of a ridge regression (sds 29 and 7e-3, correlation
        -0.99999). A floor leaves every direction the draws determine alone and keeps a
        handful of draws, or a chain stuck on one value, from a singular scale.
        Coordinates without spread take the geometric mean of the others' sds (unit
        scale if none has any). ``frame``: estimate in ``frame``'s whitened coordinates.
        """
        if frame is not None:
            inner = cls.from_samples(frame.to_white(samples), dense=dense)
            factor = frame.chol if frame.dense else np.diag(frame.chol)
            mean = frame.from_white(inner.mean)
            if dense:  # a product of lower-triangular factors is the Cholesky factor
                return cls(mean, factor @ inner.chol)
            return cls(mean, np.sqrt(np.einsum("ij,j,ij->i", factor, inner.chol**2, factor)))
        samples = np.atleast_2d(np.asarray(samples, dtype=np.float64))
        n, dim = samples.shape
        if n == 0:
            return cls.identity(dim)
        mean = samples.mean(axis=0)
        shrink = n / (n + 5.0)
        ridge = 1e-3 * 5.0 / (n + 5.0)
        var = samples.var(axis=0, ddof=1) if n > 1 else np.zeros(dim)
        sd = _spread(var)
        if n <= dim:  # too few points to give each coordinate a scale (or correlations)
            sd = np.full(dim, np.sqrt(np.mean(sd**2)))
            return cls(mean, np.diag(sd) if dense else sd)
        if not dense:
            return cls(mean, sd * np.sqrt(shrink + ridge))
        cov = np.cov(samples, rowvar=False).reshape(dim, dim) if n > 1 else np.zeros((dim, dim))
        corr = cov / np.outer(sd, sd)
        vals, vecs = np.linalg.eigh(0.5 * (corr + corr.T))
        corr = (vecs * np.maximum(shrink * vals, ridge)) @ vecs.T
        return cls(mean, _cholesky(corr * np.outer(sd, sd)))

    @classmethod
    def block_diagonal(cls, first: Whitening, second: Whitening) -> Whitening:
        """The whitening of ``(q1, q2)`` that whitens each block on its own (dense)."""
        d1, d2 = first.dim, second.dim
        chol = np.zeros((d1 + d2, d1 + d2))
        chol[:d1, :d1] = first.chol if first.dense else np.diag(first.chol)
        chol[d1:, d1:] = second.chol if second.dense else np.diag(second.chol)
        return cls(np.concatenate([first.mean, second.mean]), chol)

    @property
    def covariance(self) -> np.ndarray:
        if self.dense:
            return self.chol @ self.chol.T
        return self.chol**2

    def to_white(self, q: np.ndarray) -> np.ndarray:
        """Map points (rows) from parameter space to whitened space."""
        centred = np.asarray(q) - self.mean
        if self.dense:
            return scipy.linalg.solve_triangular(self.chol, centred.T, lower=True).T
        return centred / self.chol

    def from_white(self, x: np.ndarray) -> np.ndarray:
        """Map points (rows) from whitened space back to parameter space."""
        x = np.asarray(x)
        if self.dense:
            return self.mean + x @ self.chol.T
        return self.mean + x * self.chol

    def gradient_to_white(self, grad_q: np.ndarray) -> np.ndarray:
        """Chain rule: dU/dx = L^T dU/dq (rows are gradients)."""
        grad_q = np.asarray(grad_q)
        if self.dense:
            return grad_q @ self.chol
        return grad_q * self.chol

    def inverse_chol(self) -> np.ndarray:
        """``L^{-1}`` as a dense (d, d) matrix, used to fold the map into linear layers."""
        if self.dense:
            return scipy.linalg.solve_triangular(self.chol, np.eye(self.dim), lower=True)
        return np.diag(1.0 / self.chol)


def _spread(var: np.ndarray) -> np.ndarray:
    """Standard deviations, those of coordinates without spread (or non-finite) replaced
    by the geometric mean of the others (1 if none has any)."""
    sd = np.sqrt(np.where(np.isfinite(var), var, 0.0))
    spread = sd > 0
    if not np.any(spread):
        return np.ones_like(sd)
    return np.where(spread, sd, np.exp(np.mean(np.log(sd[spread]))))


def _cholesky(cov: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor; when rounding made a covariance of points on very different
    scales indefinite (a random walk's points in an inverse problem with condition number
    1e8: the floor on the correlations is lost in the rounding of the largest variance),
    the scaled factor of :func:`scaled_cholesky`."""
    try:
        return scipy.linalg.cholesky(cov, lower=True)
    except np.linalg.LinAlgError:
        if not np.all(np.isfinite(cov)):
            raise ValueError("the covariance of the points is not finite") from None
        return scaled_cholesky(cov)


def robust_cholesky(cov: np.ndarray) -> np.ndarray:
    """``numpy.linalg.cholesky(cov)``, or :func:`scaled_cholesky` where rounding left a
    covariance of coordinates on very different scales indefinite."""
    try:
        return np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        return scaled_cholesky(cov)


def scaled_cholesky(cov: np.ndarray, floor: float = 1e-12) -> np.ndarray:
    """A lower-triangular ``L`` with ``L L^T ~ cov`` for a covariance that rounding left
    indefinite: factored as ``diag(sd) C diag(sd)``, the correlation matrix ``C``'s
    eigenvalues raised to ``floor`` times its largest.

    The floor acts on the correlations, not on the covariance: coordinates whose sds are
    1e4 and 1e-4 have variances 1e16 apart, and a floor of 1e-12 on the covariance's
    eigenvalues widened the narrow one a hundredfold. Coordinates without positive
    variance take the geometric mean of the others' sds.
    """
    cov = 0.5 * (cov + cov.T)
    if not np.all(np.isfinite(cov)):
        raise ValueError("the covariance is not finite")
    sd = _spread(np.maximum(np.diag(cov), 0.0))
    corr = cov / np.outer(sd, sd)
    try:
        chol = scipy.linalg.cholesky(corr, lower=True)
    except np.linalg.LinAlgError:
        vals, vecs = np.linalg.eigh(corr)
        vals = np.maximum(vals, floor * max(float(vals.max()), 1e-300))
        corr = (vecs * vals) @ vecs.T
        inv = 1.0 / np.sqrt(np.diag(corr))  # a unit diagonal again
        chol = scipy.linalg.cholesky(corr * np.outer(inv, inv), lower=True)
    return sd[:, None] * chol
