"""A lower-triangular transport map fitted to posterior states: a nonlinear frame.

The affine frame (``whitening.py``) sends a Gaussian posterior to ``N(0, I)``; a curved
posterior (a banana) or one whose scale changes across its typical set (a funnel) stays
curved or scale-varying in it, and a surrogate fitted there has to represent that. The map
``q = T(z)`` here sends such posteriors close to ``N(0, I)``:

    y = L^{-1} (P q - mean)                    (an order P, then the affine frame)
    y_k = m_k(y_<k) + s_k(y_<k) z_k            (k = 1 .. d, z_k entering affinely)

with ``m_k`` a polynomial of degree 0-2 in the earlier coordinates and ``log s_k`` one of
degree 0-1 (a quadratic log-scale extrapolates as ``exp(c y^2)``, which overflows a few sd
outside the states). Each ``(m_k, s_k)`` is a heteroscedastic Gaussian regression of
``y_k`` on ``y_<k``, fitted by maximum likelihood of the states; the map's log-likelihood of
the states is the sum of these regressions', so each coordinate's degree is chosen on
held-out states on its own. Degree 0 everywhere is the affine frame.

The inverse is explicit (``z_k = (y_k - m_k) / s_k``), the forward map sequential, and
``log |det dq/dz| = log |det L| + sum_k log s_k(y_<k)``.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from pymc_surrogate.surrogates.heteroscedastic import (
    LOG_SCALE_MARGIN,
    feature_derivatives,
    features,
    fit_regression,
    held_out,
    held_out_loglik,
    mean_terms,
    saturate,
    scale_terms,
)
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["TriangularMap"]



class TriangularMap:
    """A lower-triangular map ``q = T(z)`` that sends the states close to ``N(0, I)``.

    Parameters
    ----------
    max_degree : int
        Highest polynomial degree of the conditional means (0: the affine frame; 1: linear
        means and log-scales, for scales that change along earlier coordinates; 2: also
        quadratic means, for curved posteriors). Log-scales are at most linear.
    ridge : float
        Penalty on the non-constant coefficients (per state, in whitened units): keeps
        the fit unique when features are collinear.
    holdout : float
        Share of the states held out to choose each coordinate's degree and the order of
        the coordinates. They are held out in contiguous blocks: a chain's states are
        autocorrelated, and a random state held out sits next to the states fitted.
    min_gain_se : float
        A higher degree is chosen only where it raises the held-out log-likelihood by more
        than this many standard errors of the (paired, per-state) gain: the capacity
        must earn its parameters on states it was not fitted to.
    order : "auto" or sequence of int
        The order in which the model's coordinates enter. "auto": the
        coordinate best explained by all others goes last, then the same among the rest
        (backward elimination on held-out log-likelihood), so that a banana's bent
        coordinate is a function of its straight one and a funnel's scale comes first.

    Attributes
    ----------
    order_ : ndarray of int
        The model's coordinates in the order they enter the map.
    whitening_ : Whitening
        The affine frame of the states in that order (dense).
    degrees_ : ndarray of int
        The degree chosen for each position of ``order_``.
    mean_coef_, log_scale_coef_ : list of ndarray
        Coefficients of each position's conditional mean and log-scale.
    log_scale_bounds_ : ndarray of shape (d, 2)
        The range each log-scale takes on the states, widened by ``LOG_SCALE_MARGIN``;
        beyond it the log-scale saturates smoothly.
    held_out_gain_ : ndarray
        Per position, the held-out mean log-likelihood gain (nats per state) of the chosen
        degree over degree 0 (0 where degree 0 was chosen).
    n_states_ : int
    """

    def __init__(self, max_degree: int = 2, ridge: float = 1e-3, holdout: float = 0.3,
                 min_gain_se: float = 2.0, order="auto"):
        self.max_degree = max_degree
        self.ridge = ridge
        self.holdout = holdout
        self.min_gain_se = min_gain_se
        self.order = order

    # ------------------------------------------------------------------ fit
    def fit(self, states: np.ndarray, scores: np.ndarray | None = None) -> TriangularMap:
        """Fit the map to ``states`` (rows, in time order), by maximum likelihood.

        Parameters
        ----------
        states : ndarray of shape (n, d)
            Posterior states (a chain's, or several chains' one after another).
        scores : ndarray of shape (n, d), optional
            Gradients of the log density at the states. Not used by the maximum-likelihood
            fit (a score-matching fit would use them); accepted so that callers need not
            know which fit a frame makes.

        Returns
        -------
        TriangularMap
            ``self``, fitted.
        """
        states = np.atleast_2d(np.asarray(states, dtype=np.float64))
        n, dim = states.shape
        if self.max_degree not in (0, 1, 2):
            raise ValueError(f"max_degree must be 0, 1 or 2; got {self.max_degree!r}.")
        held = held_out(n, self.holdout)
        if self.order == "auto":  # chosen on the standardised states (linear terms see correlations)
            order = self._choose_order(Whitening.from_samples(states, dense=False).to_white(states),
                                       held)
        else:
            order = np.asarray(self.order, dtype=int)
            if sorted(order.tolist()) != list(range(dim)):
                raise ValueError(f"order must be a permutation of range({dim}); got {self.order!r}.")
        # The affine frame in the map's own order: its Cholesky factor is then triangular in
        # the same order, so y_k is q_k less its linear regression on the earlier ones (a
        # factor in another order would mix a banana's straight coordinate with its bent one).
        self.whitening_ = Whitening.from_samples(states[:, order], dense=n > dim)
        y = self.whitening_.to_white(states[:, order])
        degrees, gains, means, scales = [], [], [], []
        for k in range(dim):
            degree, gain = self._choose_degree(y[:, :k], y[:, k], held)
            a, b = fit_regression(y[:, :k], y[:, k], degree, self.ridge)
            degrees.append(degree)
            gains.append(gain)
            means.append(a)
            scales.append(b)
        self.order_ = order
        self.degrees_ = np.array(degrees, dtype=int)
        self.held_out_gain_ = np.array(gains)
        self.mean_coef_, self.log_scale_coef_ = means, scales
        self.log_scale_bounds_ = np.zeros((dim, 2))
        for k in range(dim):  # the range the states reach, before saturation
            eta = features(y[:, :k], scale_terms(k, degrees[k])) @ scales[k]
            self.log_scale_bounds_[k] = (eta.min() - LOG_SCALE_MARGIN,
                                         eta.max() + LOG_SCALE_MARGIN)
        self.n_states_ = n
        self._log_det_white = float(np.sum(np.log(np.abs(np.diag(self.whitening_.chol)))))
        return self

    def _choose_degree(self, inputs: np.ndarray, target: np.ndarray,
                       held: np.ndarray) -> tuple[int, float]:
        """The degree of one regression and its held-out gain over degree 0."""
        top = self.max_degree if inputs.shape[1] else 0
        if top == 0 or held.sum() < 10:
            return 0, 0.0
        fit_rows = ~held
        base = held_out_loglik(inputs, target, fit_rows, held, 0, self.ridge)
        chosen, chosen_ll = 0, base
        for degree in range(1, top + 1):
            ll = held_out_loglik(inputs, target, fit_rows, held, degree, self.ridge)
            if self._significant(ll - chosen_ll):
                chosen, chosen_ll = degree, ll
        return chosen, float(np.mean(chosen_ll - base))

    def _significant(self, gain: np.ndarray) -> bool:
        """Whether a per-state held-out gain is positive by more than ``min_gain_se``
        standard errors of its mean."""
        mean = gain.mean()
        return bool(mean > 0 and mean > self.min_gain_se * gain.std(ddof=1) / np.sqrt(gain.size))

    def _choose_order(self, x: np.ndarray, held: np.ndarray) -> np.ndarray:
        """Backward elimination: the coordinate best explained by the others goes last.

        Each candidate is scored by one held-out fit at ``max_degree`` (its gain over the
        Gaussian of the standardised coordinate): the order only has to tell a
        coordinate that is a function of the others from one that is not. The scoring
        mean has no products of two coordinates (squares only): with them a fit on d - 1
        inputs has about ``d^2 / 2`` terms, and the search (about ``d^2 / 2`` fits) is
        most of the map's cost in 20 dimensions. With one input (d = 2) the scoring is the same.
        The search stops where no remaining coordinate is explained by the others better
        than the Gaussian by ``min_gain_se`` standard errors (fewer inputs explain no
        more): they stay in the model's order, and a Gaussian posterior costs one round.
        """
        remaining = list(range(x.shape[1]))
        last_first = []
        fit_rows = ~held
        while len(remaining) > 1 and self.max_degree > 0 and held.sum() >= 10:
            gains, explained = [], False
            for j in remaining:
                others = x[:, [i for i in remaining if i != j]]
                ll = held_out_loglik(others, x[:, j], fit_rows, held, self.max_degree,
                                     self.ridge, cross=False)
                base = held_out_loglik(others, x[:, j], fit_rows, held, 0, self.ridge)
                gains.append(float(np.mean(ll - base)))
                explained |= self._significant(ll - base)
            if not explained:
                break
            best = remaining[int(np.argmax(gains))]
            last_first.append(best)
            remaining.remove(best)
        return np.array(remaining + last_first[::-1], dtype=int)

    # ------------------------------------------------------------ the map
    @property
    def dim(self) -> int:
        return self.whitening_.dim

    @property
    def affine(self) -> bool:
        """Whether every coordinate took degree 0 (the map is the affine frame)."""
        return bool(np.all(self.degrees_ == 0))

    def inverse(self, q: np.ndarray) -> np.ndarray:
        """``z = T^{-1}(q)`` for points (rows or one point)."""
        q = np.asarray(q, dtype=np.float64)
        y = self._to_y(np.atleast_2d(q))
        z = np.empty_like(y)
        for k in range(y.shape[1]):
            mean, log_scale = self._conditional(y, k)
            z[:, k] = (y[:, k] - mean) * np.exp(-log_scale)
        return z.reshape(q.shape)

    def forward(self, z: np.ndarray) -> np.ndarray:
        """``q = T(z)`` for points (rows or one point): coordinate by coordinate."""
        z = np.asarray(z, dtype=np.float64)
        zz = np.atleast_2d(z)
        y = np.zeros_like(zz)
        for k in range(zz.shape[1]):
            mean, log_scale = self._conditional(y, k)
            y[:, k] = mean + np.exp(log_scale) * zz[:, k]
        return self._from_y(y).reshape(z.shape)

    def log_det_jacobian(self, z: np.ndarray) -> np.ndarray:
        """``log |det dT/dz|`` at ``z`` (rows or one point)."""
        z = np.asarray(z, dtype=np.float64)
        y = self._to_y(np.atleast_2d(self.forward(z)))
        return self._log_det_y(y).reshape(z.shape[:-1])

    def pull_back(self, q: np.ndarray, potential: np.ndarray, grad: np.ndarray | None = None):
        """A model evaluation in the reference coordinates: ``z = T^{-1}(q)``,
        ``U_z = U(q) - log |det J_T(z)|`` and ``grad_z U_z = J_T^T grad_q U - grad_z log|det J_T|``.

        Parameters
        ----------
        q : ndarray of shape (n, d) or (d,)
        potential : ndarray of shape (n,) or float
            ``U = -logp`` at ``q`` (non-finite values are kept as they are).
        grad : ndarray like ``q``, optional
            ``dU/dq`` (NaN rows where none was computed).

        Returns
        -------
        z, potential_z, grad_z
            ``grad_z`` is None when ``grad`` is.
        """
        q = np.asarray(q, dtype=np.float64)
        y = self._to_y(np.atleast_2d(q))
        z, b_matrix, scale = self._jacobian_parts(y)
        potential_z = np.asarray(potential, dtype=np.float64) - self._log_det_y(y).reshape(
            np.shape(potential))
        if grad is None:
            return z.reshape(q.shape), potential_z, None
        g_y = self._grad_to_y(np.atleast_2d(grad)) - self._grad_log_det_y(y)
        # J = (I - B)^{-1} D: J^T w = D (I - B)^{-T} w, a back substitution
        u = g_y.copy()
        for j in range(u.shape[1] - 2, -1, -1):
            u[:, j] += np.einsum("nk,nk->n", b_matrix[:, j + 1:, j], u[:, j + 1:])
        return z.reshape(q.shape), potential_z, (scale * u).reshape(q.shape)

    def push_forward(self, z: np.ndarray, potential_z: np.ndarray,
                     grad_z: np.ndarray | None = None):
        """The inverse of :meth:`pull_back`: ``(q, U, grad_q U)`` from ``(z, U_z, grad_z U_z)``."""
        z = np.asarray(z, dtype=np.float64)
        q = np.atleast_2d(self.forward(z))
        y = self._to_y(q)
        _, b_matrix, scale = self._jacobian_parts(y)
        potential = np.asarray(potential_z, dtype=np.float64) + self._log_det_y(y).reshape(
            np.shape(potential_z))
        if grad_z is None:
            return q.reshape(z.shape), potential, None
        v = np.atleast_2d(grad_z) / scale  # J^{-T} = (I - B)^T D^{-1}
        w = v - np.einsum("nkj,nk->nj", b_matrix, v)
        g_y = w + self._grad_log_det_y(y)
        return q.reshape(z.shape), potential, self._grad_from_y(g_y).reshape(z.shape)

    # ---------------------------------------------------------- internals
    def _to_y(self, q: np.ndarray) -> np.ndarray:
        return self.whitening_.to_white(q[:, self.order_])

    def _from_y(self, y: np.ndarray) -> np.ndarray:
        q = np.empty_like(y)
        q[:, self.order_] = self.whitening_.from_white(y)
        return q

    def _grad_to_y(self, grad_q: np.ndarray) -> np.ndarray:
        return self.whitening_.gradient_to_white(grad_q[:, self.order_])

    def _grad_from_y(self, grad_y: np.ndarray) -> np.ndarray:
        chol = self.whitening_.chol
        if chol.ndim == 2:  # dU/dq = L^{-T} dU/dy
            # rows without a gradient (NaN) stay NaN; each column is solved on its own
            g = scipy.linalg.solve_triangular(chol, grad_y.T, lower=True, trans="T",
                                              check_finite=False).T
        else:
            g = grad_y / chol
        out = np.empty_like(g)
        out[:, self.order_] = g
        return out

    def _conditional(self, y: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``m_k(y_<k)`` and the saturated ``log s_k(y_<k)``."""
        degree = self.degrees_[k]
        inputs = y[:, :k]
        mean = features(inputs, mean_terms(k, degree)) @ self.mean_coef_[k]
        eta = features(inputs, scale_terms(k, degree)) @ self.log_scale_coef_[k]
        return mean, saturate(eta, *self.log_scale_bounds_[k])[0]

    def _log_det_y(self, y: np.ndarray) -> np.ndarray:
        total = np.full(y.shape[0], self._log_det_white)
        for k in range(y.shape[1]):
            total += self._conditional(y, k)[1]
        return total

    def _derivatives(self, y: np.ndarray, k: int):
        """``d m_k / d y_j`` and ``d log s_k / d y_j`` (j < k), shapes (n, k)."""
        degree = self.degrees_[k]
        inputs = y[:, :k]
        d_mean = feature_derivatives(inputs, mean_terms(k, degree)) @ self.mean_coef_[k]
        terms = scale_terms(k, degree)
        eta = features(inputs, terms) @ self.log_scale_coef_[k]
        slope = saturate(eta, *self.log_scale_bounds_[k])[1]
        d_eta = feature_derivatives(inputs, terms) @ self.log_scale_coef_[k]
        return d_mean, slope[:, None] * d_eta

    def _jacobian_parts(self, y: np.ndarray):
        """``z``, the strictly lower ``B = d(m + s z)/dy`` at fixed z, and ``s``."""
        n, dim = y.shape
        z, scale = np.empty_like(y), np.empty_like(y)
        b_matrix = np.zeros((n, dim, dim))
        for k in range(dim):
            mean, log_scale = self._conditional(y, k)
            scale[:, k] = np.exp(log_scale)
            z[:, k] = (y[:, k] - mean) / scale[:, k]
            if k:
                d_mean, d_log_scale = self._derivatives(y, k)
                b_matrix[:, k, :k] = d_mean + (z[:, k] * scale[:, k])[:, None] * d_log_scale
        return z, b_matrix, scale

    def _grad_log_det_y(self, y: np.ndarray) -> np.ndarray:
        """``d/dy sum_k log s_k(y_<k)``."""
        grad = np.zeros_like(y)
        for k in range(1, y.shape[1]):
            grad[:, :k] += self._derivatives(y, k)[1]
        return grad


# ------------------------------------------------------------------ features
