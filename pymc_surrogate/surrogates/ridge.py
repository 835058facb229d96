"""Ridge regression with an unpenalised block, regularisation chosen by GCV."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.linalg

__all__ = [
    "NormalEquations",
    "RidgeSolution",
    "solve_partially_penalised_ridge",
    "squared_error",
    "solve_ridge",
]


class NormalEquations(NamedTuple):
    """The sufficient statistics of a least-squares problem ``D c ~ y``.

    Tall problems (rows >> columns) cost one BLAS-3 product ``D^T D``; everything after
    works on these small matrices. Sums over row blocks add up, so a fit on part of the
    rows (cross-validation) and on all of them share one pass over the data.
    """

    gram: np.ndarray  # D^T D
    rhs: np.ndarray  # D^T y
    target_norm2: float  # y^T y
    n_rows: int

    @classmethod
    def from_design(cls, design: np.ndarray, target: np.ndarray) -> NormalEquations:
        return cls(design.T @ design, design.T @ target, float(target @ target), target.shape[0])

    def plus(self, other: NormalEquations) -> NormalEquations:
        """The problem with the rows of both."""
        return NormalEquations(
            self.gram + other.gram, self.rhs + other.rhs,
            self.target_norm2 + other.target_norm2, self.n_rows + other.n_rows,
        )

    def columns(self, keep: np.ndarray) -> NormalEquations:
        """The problem restricted to the columns ``keep``."""
        return NormalEquations(
            self.gram[np.ix_(keep, keep)], self.rhs[keep], self.target_norm2, self.n_rows
        )

    def fix_columns(self, fixed: np.ndarray, values: np.ndarray) -> NormalEquations:
        """The problem in the other columns once ``fixed`` are held at ``values``.

        Its target is ``y - D_fixed values``; its columns keep their order.
        """
        rest = np.setdiff1d(np.arange(self.rhs.shape[0]), fixed)
        g_fixed = self.gram[np.ix_(fixed, fixed)]
        return NormalEquations(
            self.gram[np.ix_(rest, rest)],
            self.rhs[rest] - self.gram[np.ix_(rest, fixed)] @ values,
            self.target_norm2 - 2.0 * float(values @ self.rhs[fixed]) + float(values @ g_fixed @ values),
            self.n_rows,
        )


class RidgeSolution(NamedTuple):
    """Coefficients of the unpenalised (``free``) and penalised blocks.

    ``gram``, ``rhs`` and ``penalty`` are the normal equations in column-scaled
    coordinates (``coef_scaled = coef * column_scale``): ``(gram + diag(penalty))
    coef_scaled = rhs``, which an online learner continues from. ``free_inverse`` is the
    pseudo-inverse of the free block's scaled Gram matrix and its rank: another solve with
    the same free columns of the same rows can reuse it.
    """

    free: np.ndarray
    penalised: np.ndarray
    alpha: float
    gcv: float
    gram: np.ndarray
    rhs: np.ndarray
    penalty: np.ndarray
    column_scale: np.ndarray
    dof: float
    free_inverse: tuple[np.ndarray, int]


def _pseudo_inverse_psd(gram: np.ndarray, rtol: float = 1e-12) -> tuple[np.ndarray, int]:
    """Pseudo-inverse and numerical rank of a symmetric positive semi-definite matrix."""
    if gram.shape[0] == 0:
        return gram, 0
    vals, vecs = scipy.linalg.eigh(gram)
    keep = vals > rtol * max(vals.max(), 0.0)
    inv = (vecs[:, keep] / vals[keep]) @ vecs[:, keep].T
    return inv, int(keep.sum())


def solve_partially_penalised_ridge(
    free_design: np.ndarray,
    penalised_design: np.ndarray,
    target: np.ndarray,
    alpha: float | None = None,
    alpha_grid: int = 40,
) -> RidgeSolution:
    r"""Minimise ``||y - P a - R w||^2 + alpha ||w||^2`` over ``(a, w)``.

    The polynomial block ``P`` (intercept, linear, quadratic terms) carries the bulk of a
    potential whose values can be ~1e5 with a spread of ~10; penalising it wrecks the fit.
    By Frisch-Waugh-Lovell, ``a`` is eliminated by projecting on the orthogonal complement
    of ``P``'s columns; what remains is plain ridge on the projected ``R``, whose
    eigen-decomposition makes every ``alpha`` of a grid cheap, so generalised
    cross-validation can pick it. Everything is computed from one Gram matrix (a single
    BLAS-3 product over the rows), since the systems are tall: rows >> columns.

    Parameters
    ----------
    free_design : ndarray of shape (n, p)
    penalised_design : ndarray of shape (n, s)
    target : ndarray of shape (n,)
    alpha : float, optional
        Fixed regularisation of the penalised block, whose columns are scaled to unit norm
        first. ``None`` selects it by GCV over a log grid relative to the largest
        eigenvalue of the projected Gram matrix.
    alpha_grid : int
        Number of grid points for GCV.

    Returns
    -------
    RidgeSolution
    """
    return solve_ridge(
        NormalEquations.from_design(np.hstack([free_design, penalised_design]), target),
        free_design.shape[1], alpha, alpha_grid,
    )


def solve_ridge(
    equations: NormalEquations,
    n_free: int,
    alpha: float | None = None,
    alpha_grid: int = 40,
    free_inverse: tuple[np.ndarray, int] | None = None,
    min_alpha: float = 1e-12,
) -> RidgeSolution:
    """:func:`solve_partially_penalised_ridge` from the normal equations.

    The first ``n_free`` columns are unpenalised, the others penalised. ``free_inverse``
    (from the ``RidgeSolution`` of a solve with the same free columns of the same rows)
    skips the eigendecomposition of the free block, the costly part when it is large.
    ``min_alpha`` is the smallest penalty generalised cross-validation may choose,
    relative to the largest eigenvalue of the penalised block (columns equilibrated).
    """
    n, p = equations.n_rows, n_free
    # Equilibrate columns: features of very different scales (1, x, x^2) would otherwise
    # lose precision first in the Gram matrix, whose condition number is squared.
    norms = np.sqrt(np.maximum(np.diag(equations.gram), 0.0))
    norms[norms == 0] = 1.0
    gram = equations.gram / np.outer(norms, norms)
    rhs = equations.rhs / norms
    n_penalised = rhs.shape[0] - p
    g_ff, g_fr, g_rr = gram[:p, :p], gram[:p, p:], gram[p:, p:]
    b_f, b_r = rhs[:p], rhs[p:]
    g_ff_inv, rank = _pseudo_inverse_psd(g_ff) if free_inverse is None else free_inverse

    # Projected ("residualised") normal equations of the penalised block.
    proj_gram = g_rr - g_fr.T @ g_ff_inv @ g_fr
    proj_rhs = b_r - g_fr.T @ (g_ff_inv @ b_f)
    y_norm2 = float(equations.target_norm2 - b_f @ g_ff_inv @ b_f)

    if n_penalised:
        vals, vecs = scipy.linalg.eigh((proj_gram + proj_gram.T) / 2)
        top = max(vals.max(), 1e-300)
        vals = np.where(vals > 1e-14 * top, vals, 0.0)
        vtr = vecs.T @ proj_rhs
        # (U^T y)^2 of the projected SVD, from the eigenpairs: (v^T R'^T y)^2 / s^2.
        uty2 = np.divide(vtr**2, vals, out=np.zeros_like(vals), where=vals > 0)
        outside = max(y_norm2 - float(uty2.sum()), 0.0)
        if alpha is None:
            grid = top * np.logspace(np.log10(min_alpha), 1, alpha_grid)
        else:
            grid = np.array([alpha])
        scores = []
        for a in grid:
            rss = outside + float(np.sum((a / (vals + a)) ** 2 * uty2))
            dof = rank + float(np.sum(vals / (vals + a)))
            scores.append(n * rss / max(n - dof, 1e-3 * n) ** 2)
        best = int(np.argmin(scores))
        chosen, gcv = float(grid[best]), float(scores[best])
        dof = rank + float(np.sum(vals / (vals + chosen)))
        weights = vecs @ (vtr / (vals + chosen))
    else:
        weights = np.zeros(0)
        chosen = 0.0 if alpha is None else float(alpha)
        gcv = n * max(y_norm2, 0.0) / max(n - rank, 1) ** 2
        dof = float(rank)
    coef_free = g_ff_inv @ (b_f - g_fr @ weights)
    penalty = np.concatenate([np.zeros(p), np.full(n_penalised, chosen)])
    return RidgeSolution(
        coef_free / norms[:p], weights / norms[p:], chosen, gcv, gram, rhs, penalty, norms, dof,
        (g_ff_inv, rank),
    )


def squared_error(design: np.ndarray, target: np.ndarray, coef: np.ndarray) -> float:
    """The residual sum of squares of ``coef`` on ``(design, target)`` (inf if not finite)."""
    residual = target - design @ coef
    return float(residual @ residual) if np.all(np.isfinite(residual)) else np.inf
