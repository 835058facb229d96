"""Online regularised least squares: one new equation at a time in O(p^2)."""

from __future__ import annotations

import numpy as np
import scipy.linalg

__all__ = ["RecursiveLeastSquares", "OnlineLinearWeights"]


class RecursiveLeastSquares:
    r"""Exact online ridge regression (rns-hmc Proposition 1, in covariance form).

    Keeps ``A = H^T H + diag(penalty)``, ``P = A^{-1}`` and ``coef = P H^T y`` for all
    equations seen.
    A new equation ``h . coef = y`` updates both by the Sherman-Morrison formula in
    ``O(p^2)`` time and memory, whatever the number of equations before it; the result is
    the batch regularised least-squares solution on the same data (Greville's recursion is
    the ``penalty -> 0`` limit). ``P`` is re-symmetrised every ``symmetrize_every`` updates
    so that round-off cannot accumulate into an indefinite matrix over long runs.

    Columns are used in the scaled coordinates of the normal equations they start from
    (``coef_scaled = coef * column_scale``), which keeps ``P`` well conditioned.

    Parameters
    ----------
    gram : ndarray of shape (p, p)
        ``H^T H`` of the equations so far (may be zeros).
    rhs : ndarray of shape (p,)
        ``H^T y``.
    penalty : ndarray of shape (p,)
        Ridge penalty per coefficient; zeros get a tiny floor so ``P`` exists.
    column_scale : ndarray of shape (p,), optional
    symmetrize_every : int
    """

    def __init__(
        self,
        gram: np.ndarray,
        rhs: np.ndarray,
        penalty: np.ndarray,
        column_scale: np.ndarray | None = None,
        symmetrize_every: int = 64,
    ):
        p = rhs.shape[0]
        self.column_scale = np.ones(p) if column_scale is None else np.asarray(column_scale)
        floor = 1e-10 * max(float(np.max(np.diag(gram), initial=0.0)), 1.0)
        system = gram + np.diag(np.maximum(penalty, floor))
        # A itself (O(p^2) more a step): a constrained re-solve then needs only a block of it.
        self.precision = np.asfortranarray(system)
        chol = scipy.linalg.cho_factor(system, lower=True)
        # Fortran order lets BLAS's rank-1 update (dger) work in place.
        self.precision_inverse = np.asfortranarray(scipy.linalg.cho_solve(chol, np.eye(p)))
        self.coef_scaled = scipy.linalg.cho_solve(chol, rhs)
        self.symmetrize_every = symmetrize_every
        self.n_updates = 0

    @property
    def coef(self) -> np.ndarray:
        """Coefficients in the original (unscaled) columns."""
        return self.coef_scaled / self.column_scale

    def update(self, rows: np.ndarray, targets: np.ndarray) -> None:
        """Add equations ``rows @ coef = targets`` one at a time (rows in original columns)."""
        rows = np.atleast_2d(rows) / self.column_scale
        targets = np.atleast_1d(targets)
        p_mat = self.precision_inverse
        for h, y in zip(rows, targets):
            ph = p_mat @ h
            denom = 1.0 + h @ ph
            self.coef_scaled += ph * ((y - h @ self.coef_scaled) / denom)
            p_mat = _rank_one_update(p_mat, -1.0 / denom, ph)
            self.precision = _rank_one_update(self.precision, 1.0, h)
            self.n_updates += 1
            if self.n_updates % self.symmetrize_every == 0:
                p_mat = np.asfortranarray(0.5 * (p_mat + p_mat.T))
        self.precision_inverse = p_mat

    def update_block(self, rows: np.ndarray, targets: np.ndarray) -> None:
        """Add the ``k`` equations of one observation at once (vhmc Proposition 1).

        Woodbury's identity with the ``k x k`` matrix ``I + H P H^T``: ``O(k p^2 + k^3)``,
        the same result as ``update`` row by row. A gradient observation gives ``k = d``
        equations.
        """
        rows = np.atleast_2d(rows) / self.column_scale
        targets = np.atleast_1d(targets)
        ph = self.precision_inverse @ rows.T  # (p, k)
        inner = np.eye(rows.shape[0]) + rows @ ph
        factor = scipy.linalg.cho_factor(0.5 * (inner + inner.T), lower=True)
        gain = scipy.linalg.cho_solve(factor, ph.T).T  # P H^T (I + H P H^T)^{-1}, (p, k)
        self.coef_scaled += gain @ (targets - rows @ self.coef_scaled)
        self.precision_inverse = np.asfortranarray(self.precision_inverse - gain @ ph.T)
        self.precision = np.asfortranarray(self.precision + rows.T @ rows)
        self.n_updates += 1
        if self.n_updates % self.symmetrize_every == 0:
            self.precision_inverse = np.asfortranarray(
                0.5 * (self.precision_inverse + self.precision_inverse.T))


def _rank_one_update(mat: np.ndarray, alpha: float, vec: np.ndarray) -> np.ndarray:
    """``mat + alpha vec vec^T`` in place (BLAS dger) when ``mat`` is Fortran-ordered."""
    return scipy.linalg.blas.dger(alpha, vec, vec, a=mat, overwrite_a=True)


class OnlineLinearWeights:
    """``partial_fit`` and ``snapshot`` (``OnlineSurrogate``) for a surrogate that is linear
    in its output weights and fitted by ridge: its online learner is a
    ``RecursiveLeastSquares`` started from the last fit's normal equations.

    The surrogate provides ``value_features(positions)``, ``target_offset_``,
    ``normal_equations_``, ``with_coefficients(coef, learner)`` and
    ``_set_coefficients(coef, learner)``; its predictions call ``_refresh`` when stale.
    """

    learner_: RecursiveLeastSquares | None = None
    _stale = False

    def partial_fit(self, positions, potentials=None, gradients=None, sample_weight=None):
        """Continue the last ``fit`` with new points: exact online ridge (rns-hmc Prop. 1).

        The output weights are updated by recursive least squares on the fit's basis, in
        ``O(p^2)`` a point for ``p`` weights; the result equals the batch ridge solution on
        all the data. Values only.
        """
        if potentials is None or gradients is not None:
            raise ValueError("partial_fit learns from potentials only (no gradients).")
        positions = np.atleast_2d(np.asarray(positions, dtype=np.float64))
        potentials = np.asarray(potentials, dtype=np.float64).reshape(-1)
        root = np.ones_like(potentials) if sample_weight is None else np.sqrt(sample_weight)
        rows = self.value_features(positions)
        self._online().update(root[:, None] * rows, root * (potentials - self.target_offset_))
        self._stale = True
        return self

    def snapshot(self):
        """A copy with the weights learned so far, fixed whatever the original learns next
        (trajectories need a surrogate that stays fixed within a transition)."""
        learner = self._online()
        return self.with_coefficients(learner.coef, learner)

    def _online(self) -> RecursiveLeastSquares:
        if self.learner_ is None:
            eq = self.normal_equations_
            self.learner_ = RecursiveLeastSquares(eq.gram, eq.rhs, eq.penalty, eq.column_scale)
        return self.learner_

    def _refresh(self) -> None:
        """Predictions from the online learner's weights (lazily, after ``partial_fit``)."""
        self._set_coefficients(self.learner_.coef, self.learner_)
        self._stale = False

