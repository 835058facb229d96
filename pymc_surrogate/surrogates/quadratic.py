"""Keeping a fitted quadratic base positive definite, so the surrogate is a proper density.

In whitened coordinates the posterior's curvature is about 1: far flatter quadratic
directions are fitting artefacts along which trajectories would run away, hence the
absolute floor ``CURVATURE_FLOOR``.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from pymc_surrogate.surrogates.features import PolynomialFeatures
from pymc_surrogate.surrogates.online import RecursiveLeastSquares
from pymc_surrogate.surrogates.ridge import NormalEquations, solve_ridge

__all__ = [
    "CURVATURE_FLOOR",
    "positive_definite",
    "proper_quadratic",
    "fit_proper",
    "condition_on_proper_quadratic",
]

CURVATURE_FLOOR = 0.02


def positive_definite(mat: np.ndarray, floor: float = 1e-8, absolute_floor: float = 0.0) -> np.ndarray:
    """Clip the eigenvalues of a symmetric matrix to at least ``floor`` times the largest.

    A least-squares quadratic can come out indefinite from too few or too local data;
    the surrogate is then unbounded below and trajectories escape along the negative
    directions. Clipping keeps it a proper density (the exact correction pays for the
    change), and leaves a well-fitted positive-definite base untouched (the same object).
    The relative floor is low: a whitening from a chain that explored badly leaves true
    curvatures 1e4 apart (20-d linear inverse problem, precision condition number 1e8),
    and a floor of 1e-3 of the largest then bent a fit of an exact quadratic to a
    training error of 100%.

    Raises
    ------
    ValueError
        When ``mat`` is not finite (a numerically broken fit; ``eigh`` would raise an
        opaque ``LinAlgError``).
    """
    if not np.all(np.isfinite(mat)):
        raise ValueError("the fitted quadratic is not finite (a numerically broken fit)")
    vals, vecs = np.linalg.eigh(mat)
    lowest = max(floor * max(float(np.max(np.abs(vals))), 1e-12), absolute_floor)
    if vals.min() >= lowest:
        return mat
    return (vecs * np.maximum(vals, lowest)) @ vecs.T


def proper_quadratic(polynomial: PolynomialFeatures, coef: np.ndarray) -> np.ndarray | None:
    """The clipped quadratic block's coefficients, or None when no clip is needed."""
    if polynomial.quadratic == "none":
        return None
    quad = polynomial.quadratic_matrix(coef)
    proper = positive_definite(quad, absolute_floor=CURVATURE_FLOOR)
    return None if proper is quad else polynomial.quadratic_coefficients(proper)


def fit_proper(
    equations: NormalEquations, polynomial: PolynomialFeatures, n_free: int,
    alpha: float | None, min_alpha: float, free_inverse: tuple[np.ndarray, int] | None = None,
):
    """Least squares whose quadratic block is positive definite.

    The unconstrained fit can bend the quadratic negative where the hidden nodes
    compensate; clipping it afterwards alone would leave a surrogate that no longer
    fits the data (off by thousands on a banana), so the other weights are re-solved
    with the clipped quadratic held fixed. The returned normal equations stay those
    of the unconstrained problem, which an online learner continues.
    """
    solution = solve_ridge(equations, n_free, alpha, free_inverse=free_inverse, min_alpha=min_alpha)
    coef = np.concatenate([solution.free, solution.penalised])
    proper = proper_quadratic(polynomial, coef)
    if proper is not None:
        linear = 1 + polynomial.dim
        rest = solve_ridge(
            equations.fix_columns(np.arange(linear, n_free), proper), linear,
            solution.alpha if solution.penalised.size else None,
        )
        coef = np.concatenate([rest.free, proper, rest.penalised])
    return solution, coef


def condition_on_proper_quadratic(
    polynomial: PolynomialFeatures, coef: np.ndarray, learner: RecursiveLeastSquares,
    intercept: bool = True,
) -> np.ndarray:
    """Minimise the learner's least-squares objective with the quadratic block clipped.

    The objective is ``(c - coef)^T A (c - coef)`` plus a constant (``A`` the learner's
    regularised Gram matrix, in its scaled columns), so fixing the quadratic block at
    ``q`` moves the rest by ``-A_rr^{-1} A_rq (q - coef_q)``: a solve with the small
    block of the other weights, not with the quadratic one (d = 50: 251 against 1275
    columns; the latter, at every adaptation, was 3/4 of AdaptiveSurrogateHMC's time).
    ``intercept=False``: ``coef`` and the learner have no intercept column (a fit to
    gradients alone).
    """
    offset = 0 if intercept else 1
    proper = proper_quadratic(polynomial, coef if intercept else np.concatenate([[0.0], coef]))
    if proper is None:
        return coef
    quad = np.arange(1 + polynomial.dim, polynomial.size) - offset
    rest = np.setdiff1d(np.arange(coef.size), quad)
    scale = learner.column_scale
    precision = learner.precision
    coupling = precision[np.ix_(rest, quad)] @ ((proper - coef[quad]) * scale[quad])
    try:
        shift = scipy.linalg.cho_solve(
            scipy.linalg.cho_factor(precision[np.ix_(rest, rest)], lower=True), coupling
        )
    except np.linalg.LinAlgError:
        shift = np.linalg.lstsq(precision[np.ix_(rest, rest)], coupling, rcond=None)[0]
    out = np.array(coef, dtype=np.float64)
    out[quad] = proper
    out[rest] -= shift / scale[rest]
    return out
