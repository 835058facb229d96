"""Random-network surrogate of the potential (rns-hmc §3, Algorithm 2)."""

from __future__ import annotations

import numpy as np

from pymc_surrogate.surrogates.data import TrainingData
from pymc_surrogate.surrogates.features import (
    QUADRATIC_LEVELS,
    PolynomialFeatures,
    RandomFeatures,
    polynomial_size,
)
from pymc_surrogate.surrogates.online import OnlineLinearWeights, RecursiveLeastSquares
from pymc_surrogate.surrogates.quadratic import (
    CURVATURE_FLOOR,
    condition_on_proper_quadratic,
    fit_proper,
    positive_definite,
)
from pymc_surrogate.surrogates.ridge import NormalEquations, squared_error
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["RandomNetworkSurrogate"]

# The surrogate is trusted out to this multiple of its farthest training point.
TRUST_FACTOR = 2.0


class RandomNetworkSurrogate(OnlineLinearWeights):
    r"""Shallow random network fitted to potential values and gradients (rns-hmc §3, Alg. 2).

    ``U~(q) = c + a.x + x^T A x / 2 + sum_i v_i h_i(x)`` in whitened coordinates
    ``x = L^{-1}(q - mean)``: a polynomial base for a near-Gaussian posterior plus random
    hidden nodes (extreme learning machine); only the output weights are learned, by ridge
    regression on one equation per value and ``d`` per gradient.

    Parameters
    ----------
    n_hidden : int or "auto"
        Hidden nodes; "auto" takes a quarter of the spare equations (at most
        ``max_hidden``), kept only if they predict held-out points better.
    activation : {"softplus", "rbf"}
    quadratic : {"auto", "full", "diagonal", "isotropic", "none"}
        Quadratic terms of the base; "auto" the richest with two equations a coefficient.
    alpha : float or "auto"
        Ridge penalty on the hidden weights; "auto" (default): generalised
        cross-validation (``None``, the old spelling, does the same).
    min_alpha : float
        Smallest relative penalty cross-validation may choose (wells: docs/design.md).
    max_hidden, max_equations : int
        Bounds on the network and on the least-squares system (random sub-sampling).
    gradient_weight : float
        Weight of gradient equations relative to value equations.
    whitening : Whitening, optional
        Fixed whitening; by default estimated from the training positions.
    random_state : int or numpy Generator, optional
    max_training_error : float, optional
        ``fit`` raises ``ValueError`` when a coefficient is not finite or the relative
        training error is not below this (an unusable fit); ``None`` never raises.

    Notes
    -----
    Learned attributes: ``whitening_``, ``polynomial_``, ``hidden_``, ``alpha_``,
    ``target_offset_`` (mean potential), ``normal_equations_`` (what ``partial_fit``
    continues), ``training_error_``, ``is_finite_``, ``trust_radius_`` (beyond it a finite
    wall ``(|x| - R)^2 / 2``). Online learning: ``partial_fit`` / ``snapshot``
    (``OnlineLinearWeights``). Details and measurements: docs/design.md.
    """

    def __init__(
        self,
        n_hidden: int | str = "auto",
        activation: str = "softplus",
        quadratic: str = "auto",
        alpha: float | str = "auto",
        min_alpha: float = 1e-12,
        max_hidden: int = 500,
        max_equations: int = 20_000,
        gradient_weight: float = 1.0,
        whitening: Whitening | None = None,
        random_state: int | np.random.Generator | None = None,
        max_training_error: float | None = None,
    ):
        if n_hidden != "auto" and (not isinstance(n_hidden, int | np.integer) or n_hidden < 0):
            raise ValueError(f"n_hidden must be a non-negative integer or 'auto'; got {n_hidden!r}.")
        if activation not in ("softplus", "rbf"):
            raise ValueError(f"activation must be 'softplus' or 'rbf'; got {activation!r}.")
        if quadratic not in ("auto", "none", *QUADRATIC_LEVELS):
            raise ValueError(
                "quadratic must be 'auto', 'none', 'isotropic', 'diagonal' or 'full'; "
                f"got {quadratic!r}."
            )
        if alpha is not None and alpha != "auto" and not (np.isscalar(alpha) and alpha > 0):
            raise ValueError(f"alpha must be a positive number or 'auto'; got {alpha!r}.")
        if not 0 < min_alpha < 10:
            raise ValueError(f"min_alpha must lie in (0, 10); got {min_alpha!r}.")
        if max_hidden < 0 or max_equations < 1:
            raise ValueError("max_hidden must be >= 0 and max_equations >= 1.")
        if not gradient_weight > 0:
            raise ValueError(f"gradient_weight must be positive; got {gradient_weight!r}.")
        self.n_hidden = n_hidden
        self.activation = activation
        self.quadratic = quadratic
        self.alpha = alpha
        self.min_alpha = min_alpha
        self.max_hidden = max_hidden
        self.max_equations = max_equations
        self.gradient_weight = gradient_weight
        self.whitening = whitening
        self.random_state = random_state
        self.max_training_error = max_training_error

    # ------------------------------------------------------------------ fitting
    def _penalty(self) -> float | None:
        """The fixed ridge penalty, or None for cross-validation ("auto")."""
        return None if self.alpha in (None, "auto") else float(self.alpha)

    def fit(
        self,
        positions: np.ndarray,
        potentials: np.ndarray | None = None,
        gradients: np.ndarray | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> RandomNetworkSurrogate:
        """Fit the output weights to potentials and/or gradients at ``positions``.

        Parameters
        ----------
        positions : ndarray of shape (n, d)
            In the order they were gathered: with ``n_hidden="auto"`` the last fifth is
            held out to decide whether hidden nodes generalise.
        potentials : ndarray of shape (n,), optional
        gradients : ndarray of shape (n, d) or (n, g), optional
            Gradients of the potential (not of logp); ``g < d`` columns are the partial
            derivatives with respect to the first ``g`` inputs only (the others are
            conditioning inputs, e.g. other blocks of a compound step), which needs a
            whitening that does not mix the two groups.
        sample_weight : ndarray of shape (n,), optional
            Weight of each point's equations in the least squares (value and gradient
            alike): where the fit should be most accurate.
        """
        data = TrainingData.check(positions, potentials, gradients, sample_weight)
        positions, potentials, gradients = data.positions, data.potentials, data.gradients
        has_value, has_grad, weight_of, usable = data.has_value, data.has_grad, data.weight, data.usable
        dim, n_grad = positions.shape[1], data.n_grad
        rng = np.random.default_rng(self.random_state)

        keep = np.flatnonzero(usable)
        equations = has_value[keep] + n_grad * has_grad[keep]
        if equations.sum() > self.max_equations:
            n_keep = max(1, int(keep.size * self.max_equations / equations.sum()))
            keep = np.sort(rng.choice(keep, n_keep, replace=False))
        positions, has_value, has_grad = positions[keep], has_value[keep], has_grad[keep]
        root_weight = np.sqrt(weight_of[keep])
        n = keep.size
        n_equations = int(has_value.sum() + n_grad * has_grad.sum())

        whitening = self.whitening
        if whitening is None and n_grad < dim:
            whitening = Whitening.block_diagonal(
                Whitening.from_samples(positions[:, :n_grad], dense=True),
                Whitening.from_samples(positions[:, n_grad:], dense=True),
            )
        elif whitening is None:
            whitening = Whitening.from_samples(positions, dense=True)
        elif n_grad < dim and whitening.dense and np.any(whitening.chol[n_grad:, :n_grad]):
            raise ValueError(
                "Partial gradients need a whitening that does not mix the differentiated "
                "inputs with the others (use Whitening.block_diagonal)."
            )
        x = whitening.to_white(positions)

        quadratic = self._choose_quadratic(dim, n_equations)
        polynomial = PolynomialFeatures(dim, quadratic)
        if self.n_hidden == "auto":
            n_hidden = int(min(self.max_hidden, max(0, (n_equations - polynomial.size) // 4)))
        else:
            n_hidden = int(self.n_hidden)
        hidden = RandomFeatures.draw(self.activation, n_hidden, x, rng)

        free_rows, penalised_rows, targets, row_points = [], [], [], []
        offset = 0.0
        if has_value.any():
            values = potentials[keep][has_value]
            # Centring makes the intercept's scale irrelevant to the conditioning.
            offset = float(np.mean(values))
            w = root_weight[has_value, None]
            free_rows.append(w * polynomial.values(x[has_value]))
            penalised_rows.append(w * hidden.values(x[has_value]))
            targets.append(w[:, 0] * (values - offset))
            row_points.append(np.flatnonzero(has_value))
        if has_grad.any():
            weight = np.sqrt(self.gradient_weight) * np.repeat(root_weight[has_grad], n_grad)[:, None]
            xg = x[has_grad]
            # dU/dx = L^T dU/dq; with a block-diagonal L the first block needs only the
            # first block of the gradient.
            grad_block = Whitening(whitening.mean[:n_grad], whitening.chol[:n_grad, :n_grad]
                                   if whitening.dense else whitening.chol[:n_grad])
            gx = grad_block.gradient_to_white(gradients[keep][has_grad])
            n_rows = xg.shape[0] * n_grad
            free_rows.append(weight * polynomial.gradients(xg)[:, :n_grad].reshape(n_rows, -1))
            penalised_rows.append(weight * hidden.gradients(xg)[:, :n_grad].reshape(n_rows, -1))
            targets.append(weight[:, 0] * gx.reshape(-1))
            row_points.append(np.repeat(np.flatnonzero(has_grad), n_grad))
        design = np.hstack([np.vstack(free_rows), np.vstack(penalised_rows)])
        target = np.concatenate(targets)
        n_free = polynomial.size
        self.polynomial_ = polynomial
        base_columns = np.arange(n_free)
        choose_nodes = bool(hidden.size) and self.n_hidden == "auto"
        if choose_nodes:
            # The hidden nodes must earn their place on points the fit has not seen: the
            # last fifth gathered (closest to where the chain is going). On value-only
            # data in moderate dimension the nodes often overfit, which generalised
            # cross-validation does not catch on a chain's clustered points (PDE, d = 20:
            # error on posterior draws 1.2-2.3 with the nodes GCV kept, 0.8 without); on
            # gradient data they usually help. Held-out rows go last, so that the fits on
            # the others and on all rows share one pass over the design.
            held_out = np.concatenate(row_points) >= n - max(1, n // 5)
            order = np.argsort(held_out, kind="stable")
            design, target = design[order], target[order]
            n_fold = int(np.sum(~held_out))
            fold = NormalEquations.from_design(design[:n_fold], target[:n_fold])
            equations = fold.plus(NormalEquations.from_design(design[n_fold:], target[n_fold:]))
        else:
            equations = NormalEquations.from_design(design, target)
        solution, coef = fit_proper(equations, polynomial, n_free, self._penalty(), self.min_alpha)
        if hidden.size:
            # The base fits share the free block (and its eigendecomposition) with the full ones.
            base_solution, base_coef = fit_proper(
                equations.columns(base_columns), polynomial, n_free, self._penalty(),
                self.min_alpha, solution.free_inverse,
            )
            if choose_nodes:
                fold_solution, fold_coef = fit_proper(fold, polynomial, n_free, self._penalty(), self.min_alpha)
                _, fold_base = fit_proper(
                    fold.columns(base_columns), polynomial, n_free, self._penalty(),
                    self.min_alpha, fold_solution.free_inverse,
                )
                held_design, held_target = design[n_fold:], target[n_fold:]
                drop = squared_error(held_design, held_target, fold_coef) >= squared_error(
                    held_design[:, :n_free], held_target, fold_base
                )
            else:  # the nodes asked for, unless the solve broke down numerically
                drop = squared_error(design, target, coef) > squared_error(
                    design[:, :n_free], target, base_coef
                )
            if drop:
                hidden = RandomFeatures(hidden.activation, hidden.weights[:0], hidden.offsets[:0])
                solution, coef, design = base_solution, base_coef, design[:, :n_free]
        residual = target - design @ coef
        scale = np.linalg.norm(target)
        self.training_error_ = float(np.linalg.norm(residual) / scale) if scale > 0 else 0.0

        self.whitening_ = whitening
        self.trust_radius_ = TRUST_FACTOR * float(np.max(np.linalg.norm(x, axis=1)))
        # Below this |q - mean|^2 no point reaches the wall (|L^-1 r| <= |L^-1|_2 |r|).
        self._wall_check = (self.trust_radius_ / np.linalg.norm(whitening.inverse_chol(), 2)) ** 2
        self.hidden_ = hidden
        self.n_train_ = n
        self.alpha_ = solution.alpha
        self.polynomial_coef_ = coef[: polynomial.size]
        self.hidden_coef_ = coef[polynomial.size :]
        self.target_offset_ = offset
        self.normal_equations_ = solution
        self.learner_ = None
        self._stale = False
        self._prepare_prediction(offset)
        if self.max_training_error is not None and not (
            self.is_finite_ and self.training_error_ < self.max_training_error
        ):
            raise ValueError(
                f"the fit is unusable (relative training error {self.training_error_:.3g})"
            )
        return self

    def value_features(self, positions: np.ndarray) -> np.ndarray:
        """Rows of the value equations at ``positions`` (n, d): polynomial, then hidden."""
        x = self.whitening_.to_white(np.atleast_2d(positions))
        return np.hstack([self.polynomial_.values(x), self.hidden_.values(x)])

    def with_coefficients(
        self, coef: np.ndarray, learner: RecursiveLeastSquares | None = None
    ) -> RandomNetworkSurrogate:
        """A copy on the same basis with output weights ``coef`` (polynomial, then hidden).

        The intercept is relative to ``target_offset_``, as in the fitted coefficients.
        When ``learner`` (the least-squares problem ``coef`` solves) is given and the
        quadratic block is not positive definite, the other weights are re-solved for the
        clipped quadratic, so that the surrogate still fits the data.
        """
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.learner_, clone._stale = None, False  # fixed weights, no online learner
        clone._set_coefficients(coef, learner)
        return clone

    def _set_coefficients(self, coef: np.ndarray, learner: RecursiveLeastSquares | None) -> None:
        if learner is not None:
            coef = condition_on_proper_quadratic(self.polynomial_, coef, learner)
        p = self.polynomial_.size
        self.polynomial_coef_ = np.array(coef[:p], dtype=np.float64)
        self.hidden_coef_ = np.array(coef[p:], dtype=np.float64)
        self._prepare_prediction(self.target_offset_)

    def _choose_quadratic(self, dim: int, n_equations: int) -> str:
        if self.quadratic != "auto":
            return self.quadratic
        # At least the isotropic term, whatever the data: without a quadratic the surrogate
        # is unbounded (softplus grows linearly) and trajectories on it run off.
        chosen = "isotropic"
        for level in QUADRATIC_LEVELS:
            if n_equations >= 2 * polynomial_size(dim, level):
                chosen = level
        return chosen

    def _prepare_prediction(self, offset: float) -> None:
        """Fold the whitening into the polynomial so prediction costs two mat-vecs."""
        d = self.polynomial_.dim
        coef = self.polynomial_coef_
        inv_chol = self.whitening_.inverse_chol()
        self._intercept = float(coef[0]) + offset
        self._linear = inv_chol.T @ coef[1 : 1 + d]
        quad = self.polynomial_.quadratic_matrix(coef)
        if self.polynomial_.quadratic != "none":
            # A no-op after fit; a safety net for weights given without their learner.
            quad = positive_definite(quad, absolute_floor=CURVATURE_FLOOR)
        self._quadratic = inv_chol.T @ quad @ inv_chol
        self._inv_chol = inv_chol
        self._mean = self.whitening_.mean
        # Hidden nodes act on whitened inputs: fold L^{-1} into their weights too.
        if self.hidden_.activation == "softplus":
            self._node_weights = self.hidden_.weights @ inv_chol
            self._node_offsets = self.hidden_.offsets - self._node_weights @ self._mean
        self._node_coef = self.hidden_coef_
        self.is_finite_ = bool(
            np.isfinite(self._intercept)
            and np.all(np.isfinite(self._linear))
            and np.all(np.isfinite(self._quadratic))
            and np.all(np.isfinite(self._node_coef))
        )

    # --------------------------------------------------------------- prediction
    def value_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """Surrogate potential and gradient at one position (the leapfrog hot path)."""
        value, grad, _ = self._value_grad_nodes(q)
        return value, grad

    def _value_grad_nodes(self, q: np.ndarray) -> tuple[float, np.ndarray, np.ndarray | None]:
        """``value_and_grad`` and the softplus nodes' inputs ``W q + b`` (None for radial
        nodes), which ``curvature.random_network_derivatives`` needs again."""
        z = None
        if self._stale:
            self._refresh()
        r = q - self._mean
        quad_r = self._quadratic @ r
        value = self._intercept + self._linear @ r + 0.5 * (r @ quad_r)
        grad = self._linear + quad_r
        white = None
        # |L^-1 r| <= |L^-1|_2 |r|: the O(d^2) whitening is only needed near the wall.
        if r @ r > self._wall_check:
            white = self._inv_chol @ r
            radius = np.sqrt(white @ white)
            if radius > self.trust_radius_:
                excess = radius - self.trust_radius_
                value += 0.5 * excess**2
                grad = grad + (excess / radius) * (self._inv_chol.T @ white)
        if self._node_coef.size:
            if self.hidden_.activation == "softplus":
                z = self._node_weights @ q + self._node_offsets
                value += self._node_coef @ np.logaddexp(0.0, z)
                # sigmoid(z) = exp(-softplus(-z)) would cost a second log; 0.5(1+tanh(z/2)) is exact.
                grad = grad + self._node_weights.T @ (self._node_coef * (0.5 + 0.5 * np.tanh(0.5 * z)))
            else:
                diff = (self._inv_chol @ r if white is None else white) - self.hidden_.weights
                h = np.exp(-0.5 * np.sum(diff**2, axis=1) * self.hidden_.offsets)
                value += self._node_coef @ h
                grad_x = -diff.T @ (self._node_coef * h * self.hidden_.offsets)
                grad = grad + self._inv_chol.T @ grad_x
        return float(value), grad, z

    def predict(self, positions: np.ndarray) -> np.ndarray:
        """Surrogate potentials at positions (n, d): the same function as ``value_and_grad``."""
        if self._stale:
            self._refresh()
        q = np.atleast_2d(np.asarray(positions, dtype=np.float64))
        r = q - self._mean
        white = r @ self._inv_chol.T
        values = self._intercept + r @ self._linear + 0.5 * np.einsum("ni,ij,nj->n", r, self._quadratic, r)
        if self._node_coef.size:
            if self.hidden_.activation == "softplus":
                z = q @ self._node_weights.T + self._node_offsets
                values = values + np.logaddexp(0.0, z) @ self._node_coef
            else:
                values = values + self.hidden_.values(white) @ self._node_coef
        excess = np.maximum(np.sqrt(np.einsum("ni,ni->n", white, white)) - self.trust_radius_, 0.0)
        return values + 0.5 * excess**2
