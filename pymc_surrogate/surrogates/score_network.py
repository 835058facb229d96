"""Random network fitted by score matching, with a Laplace regulariser (vhmc §3.3-3.4)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_surrogate.surrogates.data import TrainingData
from pymc_surrogate.surrogates.features import PolynomialFeatures, RandomFeatures
from pymc_surrogate.surrogates.online import RecursiveLeastSquares
from pymc_surrogate.surrogates.quadratic import condition_on_proper_quadratic
from pymc_surrogate.surrogates.ridge import NormalEquations, solve_ridge
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["FULL_QUADRATIC_DIM", "LaplaceTerm", "ScoreNetworkSurrogate"]

#: Ridge penalty of the linear and quadratic base, relative to the mean squared column:
#: only there to keep the system positive definite (the base is what must be learnt).
BASE_PENALTY = 1e-8
#: ``quadratic="auto"`` is full up to this dimension, diagonal above (whitened coordinates).
FULL_QUADRATIC_DIM = 10


class LaplaceTerm(NamedTuple):
    """``(q - mode)^T precision (q - mode) / 2`` over the first ``len(mode)`` inputs."""

    mode: np.ndarray
    precision: np.ndarray


class ScoreNetworkSurrogate:
    r"""Shallow random network whose output weights are fitted to gradients only.

    ``V(q) = mu z(q) + (1 - mu) (q - q_L)^T H (q - q_L) / 2`` with
    ``z(x) = a.x + x^T A x / 2 + sum_i v_i softplus(w_i . x + b_i)`` in whitened
    coordinates ``x``. The weights ``(a, A, v)`` minimise
    ``sum_n w_n |grad z(q_n) - grad U(q_n)|^2 + lambda |v|^2`` (score matching, vhmc eq. 18);
    there is no intercept, so ``V`` has no meaningful level (``has_level = False``): only
    differences of ``V`` may be used. ``mu = 1 - exp(-t / tau)`` with ``t`` the number of
    gradients learnt, blending in the Laplace approximation ``(q_L, H)`` while the data are
    few (vhmc §3.4).

    Parameters
    ----------
    n_hidden : int or "auto"
        Random softplus nodes ``s``; "auto": a quarter of the equations, at least 20 and
        at most ``max_hidden``.
    quadratic : {"auto", "full", "diagonal", "isotropic", "none"}
        Quadratic terms of the base (ours; the paper has the nodes alone): "auto" is
        "full" up to d = 10, else "diagonal" (in whitened coordinates, where a Gaussian
        posterior is nearly isotropic).
    alpha : float or "auto"
        Ridge penalty ``lambda`` of each node weight, relative to the squared norm of its
        column of the score-matching equations. "auto": chosen at each batch fit by
        generalised cross-validation (``ridge.solve_ridge``) and kept by the online
        updates that follow.
    laplace : LaplaceTerm, optional
        The regulariser's mode and Hessian; None: no regulariser (``mu = 1``).
    tau : float or "auto"
        Time constant of ``mu``, in learnt gradients; "auto": ``2 p / g`` for ``p``
        weights and ``g`` equations a gradient (``mu`` is 0.86 once the system is twice
        overdetermined).
    max_hidden, max_equations : int
        Bounds on the nodes and on the batch system (points are sub-sampled beyond it).
    whitening : Whitening, optional
        Fixed whitening; by default estimated from the training positions.
    random_state : int or numpy Generator, optional

    Notes
    -----
    Learned attributes: ``whitening_``, ``polynomial_``, ``hidden_``, ``coef_`` (linear,
    quadratic, then node weights), ``n_seen_`` (``t``), ``tau_``, ``mu_``, ``learner_`` (the
    recursive least squares that ``partial_fit`` continues: vhmc Proposition 1, one
    gradient's ``g`` equations at a time in ``O(g p^2 + g^3)``, equal to the batch fit).
    """

    has_level = False

    def __init__(
        self,
        n_hidden: int | str = "auto",
        quadratic: str = "auto",
        alpha: float | str = "auto",
        laplace: LaplaceTerm | None = None,
        tau: float | str = "auto",
        max_hidden: int = 500,
        max_equations: int = 20_000,
        whitening: Whitening | None = None,
        random_state: int | np.random.Generator | None = None,
    ):
        if n_hidden != "auto" and (not isinstance(n_hidden, int | np.integer) or n_hidden < 0):
            raise ValueError(f"n_hidden must be a non-negative integer or 'auto'; got {n_hidden!r}.")
        if quadratic not in ("auto", "none", "isotropic", "diagonal", "full"):
            raise ValueError(f"quadratic must be 'auto', 'none', 'isotropic', 'diagonal' or "
                             f"'full'; got {quadratic!r}.")
        if alpha != "auto" and (isinstance(alpha, str) or not (np.isscalar(alpha) and np.isfinite(alpha) and alpha > 0)):
            raise ValueError(f"alpha must be a positive number or 'auto'; got {alpha!r}.")
        if tau != "auto" and (isinstance(tau, str) or not (np.isscalar(tau) and np.isfinite(tau) and tau > 0)):
            raise ValueError(f"tau must be a positive number or 'auto'; got {tau!r}.")
        if max_hidden < 0 or max_equations < 1:
            raise ValueError("max_hidden must be >= 0 and max_equations >= 1.")
        self.n_hidden = n_hidden
        self.quadratic = quadratic
        self.alpha = alpha
        self.laplace = laplace
        self.tau = tau
        self.max_hidden = max_hidden
        self.max_equations = max_equations
        self.whitening = whitening
        self.random_state = random_state

    # ------------------------------------------------------------------ fitting
    def fit(
        self,
        positions: np.ndarray,
        potentials: np.ndarray | None = None,
        gradients: np.ndarray | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> ScoreNetworkSurrogate:
        """Draw the nodes and fit the weights to the gradients (potentials are ignored).

        Parameters
        ----------
        positions : ndarray of shape (n, d)
        potentials : ignored
            Score matching needs no values.
        gradients : ndarray of shape (n, g)
            ``dU/dq`` for the first ``g`` inputs (the others are conditioning inputs, and
            then need a whitening that does not mix them with the first ``g``).
        sample_weight : ndarray of shape (n,), optional
        """
        if gradients is None:
            raise ValueError("ScoreNetworkSurrogate learns from gradients; none were given.")
        data = TrainingData.check(positions, None, gradients, sample_weight)
        rng = np.random.default_rng(self.random_state)
        keep = np.flatnonzero(data.usable)
        n_grad, dim = data.n_grad, data.positions.shape[1]
        if keep.size * n_grad > self.max_equations:
            keep = np.sort(rng.choice(keep, max(1, self.max_equations // n_grad), replace=False))
        points = data.positions[keep]
        whitening = self.whitening
        if whitening is None:
            whitening = Whitening.from_samples(points, dense=points.shape[0] > dim)
        elif n_grad < dim and whitening.dense and np.any(whitening.chol[n_grad:, :n_grad]):
            raise ValueError("Partial gradients need a whitening that does not mix the "
                             "differentiated inputs with the others (Whitening.block_diagonal).")
        x = whitening.to_white(points)
        n_equations = keep.size * n_grad
        quadratic = self.quadratic
        if quadratic == "auto":
            quadratic = "full" if dim <= FULL_QUADRATIC_DIM else "diagonal"
        self.polynomial_ = PolynomialFeatures(dim, quadratic)
        n_hidden = self.n_hidden
        if n_hidden == "auto":
            n_hidden = int(min(self.max_hidden, max(20, n_equations // 4)))
        self.hidden_ = RandomFeatures.draw("softplus", int(n_hidden), x, rng)
        self.whitening_ = whitening
        self.n_grad_ = n_grad

        rows, targets = self._equations(points, data.gradients[keep], data.weight[keep])
        equations = NormalEquations.from_design(rows, targets)
        gram = equations.gram
        n_base = self.polynomial_.size - 1
        # The penalty is chosen (or given) relative to the equilibrated node columns, the
        # units of ``solve_ridge``; in the raw units the online updates work in, a column
        # of norm c carries alpha c^2. A fixed 1e-4 of the mean squared column was 30x too
        # strong on a 2-d banana (held-out score error 0.06 against 0.002 at the GCV choice):
        # a surrogate too flat across the ridge, whose proposals the model rejected.
        solution = solve_ridge(equations, n_base, None if self.alpha == "auto" else float(self.alpha))
        self.alpha_ = solution.alpha
        penalty = solution.penalty * solution.column_scale**2
        scale = max(float(np.mean(np.diag(gram))), 1e-300)
        penalty[:n_base] = BASE_PENALTY * scale
        self.learner_ = RecursiveLeastSquares(gram, equations.rhs, penalty)
        self.tau_ = 2.0 * gram.shape[0] / n_grad if self.tau == "auto" else float(self.tau)
        self.n_seen_ = int(keep.size)
        residual = targets - rows @ self.learner_.coef
        norm = float(np.linalg.norm(targets))
        self.training_error_ = float(np.linalg.norm(residual) / norm) if norm > 0 else 0.0
        # The whitening folded into the nodes once: only the weights change after this.
        self._inv_chol = whitening.inverse_chol()
        self._mean = whitening.mean
        self._node_weights = self.hidden_.weights @ self._inv_chol
        self._node_offsets = self.hidden_.offsets - self._node_weights @ self._mean
        self._set_coefficients(self.learner_.coef, self.n_seen_)
        return self

    def gradient_features(self, positions: np.ndarray) -> np.ndarray:
        """Rows of the score-matching equations at ``positions`` (n, d): ``(n g, p)``, the
        whitened input gradients of the base (no intercept) and of the nodes."""
        x = self.whitening_.to_white(np.atleast_2d(positions))
        g = self.n_grad_
        base = self.polynomial_.gradients(x)[:, :g, 1:]  # the intercept has no gradient
        nodes = self.hidden_.gradients(x)[:, :g]
        return np.concatenate([base, nodes], axis=2).reshape(x.shape[0] * g, -1)

    def _equations(self, positions, gradients, weights) -> tuple[np.ndarray, np.ndarray]:
        g = self.n_grad_
        chol = self.whitening_.chol
        block = Whitening(self.whitening_.mean[:g], chol[:g, :g] if chol.ndim == 2 else chol[:g])
        targets = block.gradient_to_white(np.atleast_2d(gradients)[:, :g]).reshape(-1)
        root = np.repeat(np.sqrt(np.atleast_1d(weights)), g)
        return root[:, None] * self.gradient_features(positions), root * targets

    def partial_fit(self, positions, potentials=None, gradients=None, sample_weight=None):
        """Add new gradients to the fit, one point's ``g`` equations at a time (vhmc
        Proposition 1); equal to refitting on all the data with the same nodes."""
        if gradients is None:
            raise ValueError("partial_fit learns from gradients; none were given.")
        positions = np.atleast_2d(np.asarray(positions, dtype=np.float64))
        gradients = np.asarray(gradients, dtype=np.float64).reshape(positions.shape[0], -1)
        weights = np.ones(positions.shape[0]) if sample_weight is None else np.asarray(sample_weight)
        for q, grad, weight in zip(positions, gradients, weights):
            if not (np.all(np.isfinite(q)) and np.all(np.isfinite(grad)) and weight > 0):
                continue
            rows, targets = self._equations(q[None], grad[None], weight)
            self.learner_.update_block(rows, targets)
            self.n_seen_ += 1
        self._set_coefficients(self.learner_.coef, self.n_seen_)
        return self

    def snapshot(self) -> ScoreNetworkSurrogate:
        """A copy with the weights (and ``mu``) learnt so far, unaffected by later
        ``partial_fit`` (trajectories need a surrogate fixed within a transition)."""
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.learner_ = None
        return clone

    def score_error(self, positions: np.ndarray, gradients: np.ndarray) -> float:
        """Relative score-matching error ``|grad V - grad U| / |grad U|`` at held-out
        points (whitened coordinates, where every direction counts alike)."""
        rows, targets = self._equations(positions, gradients, np.ones(len(np.atleast_2d(positions))))
        norm = float(np.linalg.norm(targets))
        return float(np.linalg.norm(rows @ self.coef_ - targets) / norm) if norm > 0 else 0.0

    # --------------------------------------------------------------- prediction
    def _set_coefficients(self, coef: np.ndarray, n_seen: int) -> None:
        """Fold the whitening into the base's weights (after every update), so prediction
        costs a few mat-vecs.

        Trajectories must not run off along a direction the fit bent negative, so the
        quadratic block is clipped positive definite and the other weights re-solved with
        it held fixed. Clipping alone left a surrogate that no longer fitted its data: on a
        2-d banana, gradients 230% off at the training points while the unclipped fit was
        within 1% (the chains missed the arms, means 7 MCSE off on PyMC 6).
        """
        if np.all(np.isfinite(coef)):
            coef = condition_on_proper_quadratic(self.polynomial_, coef, self.learner_, intercept=False)
        self.coef_ = np.array(coef, dtype=np.float64)
        self.mu_ = 1.0 - np.exp(-n_seen / self.tau_) if self.laplace is not None else 1.0
        polynomial, d = self.polynomial_, self.polynomial_.dim
        n_base = polynomial.size - 1
        full = np.concatenate([[0.0], self.coef_[:n_base]])
        inv_chol = self._inv_chol
        quad = polynomial.quadratic_matrix(full)
        self._linear = inv_chol.T @ full[1 : 1 + d]
        self._quadratic = inv_chol.T @ quad @ inv_chol
        self._node_coef = self.coef_[n_base:]
        self.is_finite_ = bool(np.all(np.isfinite(self.coef_)))

    def value_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """``V`` (up to a constant) and its gradient at one position (the leapfrog hot path)."""
        r = q - self._mean
        quad_r = self._quadratic @ r
        value = self._linear @ r + 0.5 * (r @ quad_r)
        grad = self._linear + quad_r
        if self._node_coef.size:
            z = self._node_weights @ q + self._node_offsets
            value += self._node_coef @ np.logaddexp(0.0, z)
            grad = grad + self._node_weights.T @ (self._node_coef * (0.5 + 0.5 * np.tanh(0.5 * z)))
        if self.mu_ == 1.0:
            return float(value), grad
        mode, precision = self.laplace
        g = mode.shape[0]
        delta = q[:g] - mode
        pull = precision @ delta
        grad = self.mu_ * grad
        grad[:g] += (1.0 - self.mu_) * pull
        return float(self.mu_ * value + 0.5 * (1.0 - self.mu_) * (delta @ pull)), grad
