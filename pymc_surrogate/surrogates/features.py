"""Feature maps of the random-network surrogate, with their input gradients.

Every feature block maps whitened positions ``x`` (n, d) to values (n, k) and to
gradients (n, d, k), so that value and gradient observations enter one least-squares
problem (each point gives d + 1 equations when the model has gradients).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.special import expit

__all__ = ["PolynomialFeatures", "RandomFeatures", "QUADRATIC_LEVELS", "polynomial_size"]

# From poorest to richest: the richest one the data supports is chosen automatically.
QUADRATIC_LEVELS = ("isotropic", "diagonal", "full")


def polynomial_size(dim: int, quadratic: str) -> int:
    """Number of coefficients of the polynomial block (intercept, linear, quadratic)."""
    n_quadratic = {"none": 0, "isotropic": 1, "diagonal": dim, "full": dim * (dim + 1) // 2}
    return 1 + dim + n_quadratic[quadratic]


@dataclass(frozen=True)
class PolynomialFeatures:
    """Intercept, linear and quadratic terms in whitened coordinates.

    ``quadratic`` is ``"none"``, ``"isotropic"`` (one term ``|x|^2 / 2``: a Gaussian base
    from the whitening covariance, as vhmc's Laplace regulariser), ``"diagonal"``
    (``x_i^2 / 2``) or ``"full"`` (all ``x_i x_j``).
    """

    dim: int
    quadratic: str

    def __post_init__(self):
        if self.quadratic not in ("none", *QUADRATIC_LEVELS):
            raise ValueError(
                f"quadratic must be one of 'none', {', '.join(map(repr, QUADRATIC_LEVELS))}; "
                f"got {self.quadratic!r}."
            )

    @cached_property
    def size(self) -> int:
        return polynomial_size(self.dim, self.quadratic)

    @cached_property
    def _pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The full level's ``(i, j)``, ``i <= j``, and each term's factor (1/2 for
        ``x_i^2``): built once, as the surrogates' draws evaluate one point at a time."""
        rows, cols = np.triu_indices(self.dim)
        return rows, cols, np.where(rows == cols, 0.5, 1.0)

    def values(self, x: np.ndarray) -> np.ndarray:
        n, d = x.shape
        out = np.empty((n, self.size))
        out[:, 0] = 1.0
        out[:, 1:1 + d] = x
        quadratic = out[:, 1 + d:]
        if self.quadratic == "isotropic":
            quadratic[:, 0] = 0.5 * (x * x).sum(axis=1)
        elif self.quadratic == "diagonal":
            np.multiply(0.5 * x, x, out=quadratic)
        elif self.quadratic == "full":
            rows, cols, factor = self._pairs
            np.multiply(x[:, rows], x[:, cols], out=quadratic)
            quadratic *= factor
        return out

    def gradients(self, x: np.ndarray) -> np.ndarray:
        n, d = x.shape
        out = np.zeros((n, d, self.size))
        out[:, np.arange(d), 1 + np.arange(d)] = 1.0
        start = 1 + d
        if self.quadratic == "isotropic":
            out[:, :, start] = x
        elif self.quadratic == "diagonal":
            out[:, np.arange(d), start + np.arange(d)] = x
        elif self.quadratic == "full":
            rows, cols, _ = self._pairs
            k = start + np.arange(rows.size)
            # d(x_i x_j)/dx_i = x_j and d(x_i x_j)/dx_j = x_i; the diagonal terms are
            # x_i^2 / 2, whose derivative x_i the two assignments below give once.
            out[:, rows, k] = x[:, cols]
            out[:, cols, k] = x[:, rows]
        return out

    def coef_gradient(self, coef: np.ndarray, x: np.ndarray) -> np.ndarray:
        """``d(coef . phi(x)) / dx`` at one position ``x`` (d,): the linear coefficients
        plus ``A x``, ``A`` the ``quadratic_matrix`` of ``coef``, without building ``A``
        (a surrogate's draws ask for it at every leapfrog step)."""
        d = self.dim
        grad = coef[1:1 + d].copy()
        quad = coef[1 + d:self.size]
        if self.quadratic == "isotropic":
            grad += quad[0] * x
        elif self.quadratic == "diagonal":
            grad += quad * x
        elif self.quadratic == "full":
            # x_i x_j gives x_j to i and x_i to j; x_i^2 / 2 (factor 1/2) gives x_i to i.
            rows, cols, factor = self._pairs
            weights = quad * factor
            grad += np.bincount(rows, weights * x[cols], minlength=d)
            grad += np.bincount(cols, weights * x[rows], minlength=d)
        return grad

    def quadratic_matrix(self, coef: np.ndarray) -> np.ndarray:
        """The symmetric ``A`` with quadratic part ``x^T A x / 2`` for coefficients ``coef``."""
        d = self.dim
        quad = coef[1 + d : self.size]
        if self.quadratic == "none":
            return np.zeros((d, d))
        if self.quadratic == "isotropic":
            return quad[0] * np.eye(d)
        if self.quadratic == "diagonal":
            return np.diag(quad)
        rows, cols, _ = self._pairs
        mat = np.zeros((d, d))
        mat[rows, cols] = quad
        mat[cols, rows] = quad
        return mat

    def quadratic_coefficients(self, mat: np.ndarray) -> np.ndarray:
        """Coefficients of the quadratic block for a symmetric ``A`` this level can express."""
        if self.quadratic == "none":
            return np.zeros(0)
        if self.quadratic == "isotropic":
            return np.array([np.mean(np.diag(mat))])
        if self.quadratic == "diagonal":
            return np.diag(mat).copy()
        rows, cols, _ = self._pairs
        return mat[rows, cols]


@dataclass(frozen=True)
class RandomFeatures:
    """Random hidden nodes of a shallow network (rns-hmc §3.2).

    ``activation="softplus"``: additive nodes ``softplus(w . x + b)``.
    ``activation="rbf"``: radial nodes ``exp(-|x - c|^2 / (2 l^2))``.
    """

    activation: str
    weights: np.ndarray  # (s, d): input weights, or RBF centres
    offsets: np.ndarray  # (s,): biases, or RBF inverse squared widths

    @classmethod
    def draw(
        cls, activation: str, n_hidden: int, x_train: np.ndarray, rng: np.random.Generator
    ) -> RandomFeatures:
        """Draw hidden nodes adapted to whitened training inputs ``x_train``.

        Softplus nodes get random directions with log-uniform sharpness in [0.3, 3] (a
        multiscale basis) and biases that put each kink at the projection of a random
        training point, so no node is flat over the data. RBF nodes are centred on random
        training points with widths spread around the median inter-point distance.
        """
        n, d = x_train.shape
        anchors = x_train[rng.integers(0, n, size=n_hidden)]
        if activation == "softplus":
            directions = rng.standard_normal((n_hidden, d))
            directions /= np.linalg.norm(directions, axis=1, keepdims=True)
            sharpness = np.exp(rng.uniform(np.log(0.3), np.log(3.0), size=n_hidden))
            weights = directions * sharpness[:, None]
            offsets = -np.einsum("sd,sd->s", weights, anchors)
            return cls(activation, weights, offsets)
        if activation == "rbf":
            pairs = rng.integers(0, n, size=(min(2000, max(n, 2)), 2))
            distances = np.linalg.norm(x_train[pairs[:, 0]] - x_train[pairs[:, 1]], axis=1)
            median = float(np.median(distances[distances > 0])) if np.any(distances > 0) else 1.0
            widths = median * np.exp(rng.uniform(np.log(0.5), np.log(2.0), size=n_hidden))
            return cls(activation, anchors.copy(), 1.0 / widths**2)
        raise ValueError(f"activation must be 'softplus' or 'rbf'; got {activation!r}.")

    @property
    def size(self) -> int:
        return self.offsets.shape[0]

    def values_and_slopes(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Node outputs (n, s) and, for softplus, the slopes sigmoid(z) (n, s)."""
        if self.activation == "softplus":
            z = x @ self.weights.T + self.offsets
            return np.logaddexp(0.0, z), expit(z)
        sq = (
            np.sum(x**2, axis=1, keepdims=True)
            - 2.0 * x @ self.weights.T
            + np.sum(self.weights**2, axis=1)
        )
        return np.exp(-0.5 * np.maximum(sq, 0.0) * self.offsets), None

    def values(self, x: np.ndarray) -> np.ndarray:
        return self.values_and_slopes(x)[0]

    def gradients(self, x: np.ndarray) -> np.ndarray:
        """Input gradients of every node at every point, shape (n, d, s)."""
        h, slopes = self.values_and_slopes(x)
        if self.activation == "softplus":
            return slopes[:, None, :] * self.weights.T[None, :, :]
        diff = x[:, :, None] - self.weights.T[None, :, :]
        return -(h * self.offsets)[:, None, :] * diff
