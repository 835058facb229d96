"""Boxes in which grid interpolants live: axis-aligned, or along the principal axes of a
covariance (sparse-grid-hmc §3.5's Laplace approximation, rotated)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pymc_surrogate.surrogates.base import Domain

__all__ = ["BoxTransform", "check_domain", "principal_box"]

# Positions within this fraction of the box width of a face count as inside: nodes on a
# face must stay inside after the round trip through a rotation.
_FACE_TOLERANCE = 1e-12


@dataclass(frozen=True)
class BoxTransform:
    """The affine map ``q = center + axes @ u`` from box coordinates ``u`` to parameters.

    Parameters
    ----------
    center : ndarray of shape (d,)
    axes : ndarray of shape (d, d)
        Invertible; its columns are the box's edges per unit of ``u`` (for
        ``principal_box``: orthonormal eigenvectors times standard deviations).
    """

    center: np.ndarray
    axes: np.ndarray
    inverse: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        center = np.asarray(self.center, dtype=np.float64).reshape(-1)
        axes = np.asarray(self.axes, dtype=np.float64)
        d = center.shape[0]
        if axes.shape != (d, d):
            raise ValueError(f"axes must have shape ({d}, {d}) to match center; got {axes.shape}.")
        if not (np.all(np.isfinite(center)) and np.all(np.isfinite(axes))):
            raise ValueError("center and axes must be finite.")
        if d and _scaled_condition(axes) > 1e12:
            raise ValueError("axes must be an invertible matrix (condition number <= 1e12, "
                             "each coordinate's row scaled to unit length).")
        object.__setattr__(self, "center", center)
        object.__setattr__(self, "axes", axes)
        object.__setattr__(self, "inverse", np.linalg.inv(axes))

    @property
    def dim(self) -> int:
        return self.center.shape[0]

    def to_box(self, q: np.ndarray) -> np.ndarray:
        """Map points (rows, or one point) from parameter space to box coordinates."""
        return (np.asarray(q, dtype=np.float64) - self.center) @ self.inverse.T

    def from_box(self, u: np.ndarray) -> np.ndarray:
        """Map points (rows, or one point) from box coordinates to parameter space."""
        return self.center + np.asarray(u, dtype=np.float64) @ self.axes.T

    def gradient_from_box(self, grad_u: np.ndarray) -> np.ndarray:
        """Chain rule: ``dU/dq = axes^{-T} dU/du`` (rows, or one gradient)."""
        return np.asarray(grad_u) @ self.inverse


def principal_box(
    mean: np.ndarray, cov: np.ndarray, k: float = 3.0
) -> tuple[Domain, BoxTransform]:
    """A box of half-width ``k`` standard deviations along the principal axes of ``cov``.

    Returns the domain ``[-k, k]^d`` in box coordinates and the transform
    ``q = mean + V diag(sqrt(lambda)) u`` (``cov = V diag(lambda) V^T``). Under
    ``N(mean, cov)`` the box holds probability ``(2 Phi(k) - 1)^d``: choose ``k`` for the
    probability wanted (sparse-grid-hmc §3.5 takes the Laplace approximation).

    Parameters
    ----------
    mean : ndarray of shape (d,)
    cov : ndarray of shape (d, d)
        Symmetric positive (semi-)definite. Where its eigenvalues span more than ``1e12``
        (coordinates on very different scales, or a degenerate direction), the box's axes
        are those of the correlation matrix, scaled by each coordinate's sd, and only its
        eigenvalues below ``1e-12`` of the largest are lifted to it: a degenerate direction
        still gives a thin, invertible box, and a coordinate with sd 1e-4 next to one with
        sd 1e4 keeps its own width (a floor on the covariance's eigenvalues widened it a
        hundredfold).
    k : float
        Half-width in standard deviations.
    """
    mean = np.asarray(mean, dtype=np.float64).reshape(-1)
    cov = np.asarray(cov, dtype=np.float64)
    d = mean.shape[0]
    if cov.shape != (d, d):
        raise ValueError(f"cov must have shape ({d}, {d}) to match mean; got {cov.shape}.")
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(cov))):
        raise ValueError("mean and cov must be finite.")
    if not np.isfinite(k) or k <= 0:
        raise ValueError(f"k must be a positive number of standard deviations; got {k!r}.")
    cov = 0.5 * (cov + cov.T)
    vals, vecs = np.linalg.eigh(cov)
    if vals[-1] <= 0:
        raise ValueError("cov must have a positive eigenvalue.")
    sd = np.ones(d)
    if vals[0] <= 1e-12 * vals[-1]:
        # In the correlation matrix's coordinates: only a degenerate direction is lifted.
        variance = np.diag(cov)
        positive = variance > 0
        sd = np.where(positive, np.sqrt(np.where(positive, variance, 1.0)),
                      np.sqrt(1e-12 * vals[-1]))
        vals, vecs = np.linalg.eigh(cov / np.outer(sd, sd))
        vals = np.maximum(vals, 1e-12 * vals[-1])
    # Each eigenvector's largest entry positive: the same box on every platform.
    signs = np.sign(vecs[np.argmax(np.abs(vecs), axis=0), np.arange(d)])
    axes = sd[:, None] * (vecs * signs * np.sqrt(vals))
    return Domain(np.full(d, -float(k)), np.full(d, float(k))), BoxTransform(mean, axes)


def _scaled_condition(axes: np.ndarray) -> float:
    """Condition number of ``axes`` with each row (a coordinate of ``q``) scaled to unit
    length: invertibility judged per coordinate, so that a box 1e4 wide in one coordinate
    and 1e-4 in another (condition number 1e8 as it stands) is not refused for its units."""
    norms = np.linalg.norm(axes, axis=1)
    if np.any(norms == 0):
        return np.inf
    return float(np.linalg.cond(axes / norms[:, None]))


def check_domain(domain: Domain) -> tuple[np.ndarray, np.ndarray]:
    """``(lower, upper)`` as 1-d float arrays; ``ValueError`` naming what is wrong if the box
    is not finite or has no width in some dimension."""
    try:
        lower, upper = domain
    except (TypeError, ValueError):
        raise ValueError(f"domain must be a Domain(lower, upper); got {domain!r}.") from None
    lower = np.atleast_1d(np.asarray(lower, dtype=np.float64))
    upper = np.atleast_1d(np.asarray(upper, dtype=np.float64))
    if lower.ndim != 1 or lower.shape != upper.shape or lower.size == 0:
        raise ValueError(
            f"domain lower and upper must be 1-d arrays of one shape; got {lower.shape} "
            f"and {upper.shape}."
        )
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
        raise ValueError("domain bounds must be finite: a grid needs a bounded box.")
    if np.any(upper <= lower):
        k = int(np.argmax(upper <= lower))
        raise ValueError(
            f"domain upper must exceed lower in every dimension (a domain of zero width has "
            f"no grid); dimension {k} has "
            f"[{lower[k]}, {upper[k]}]."
        )
    return lower, upper
