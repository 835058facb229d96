"""The finite kernel exponential family: ``f`` on random Fourier features (kmc §4.3, "KMC finite"), updated
online at O(d m^2) a point."""

from __future__ import annotations

import copy

import numpy as np
import scipy.linalg

from pymc_surrogate.surrogates.whitening import Whitening
from pymc_surrogate.surrogates.kernel_tools import (
    SIGMA_GRID,
    LAM_GRID,
    NEAR_DUPLICATE,
    _check_positive,
    _check_count,
    _check_positions,
    _check_fit_data,
    _collapse_repeats,
    _merge_near,
    _check_base_scale,
    _whitening_for,
    _median_distance,
    _folds,
    _grid_search,
    _solve_spd,
    _base_precision,
)

__all__ = ["KernelExpFamilyFinite"]

# Rows of features built at once when summing the finite form's system (memory bound).
CHUNK_ROWS = 4096


def _finite_sums(
    x: np.ndarray, weight: np.ndarray, omega: np.ndarray, offset: np.ndarray, base: float = 0.0,
    score_dims: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``C`` (m, m) and ``b`` (m,) of kmc Prop. 2 for random Fourier features
    ``phi_j(x) = sqrt(2/m) cos(omega_j . x + u_j)``, summed over the points (not averaged);
    ``base`` is the base measure's precision (``_base_precision``).

    ``dphi_j/dx_l = -sqrt(2/m) omega_jl sin(z_j)`` and ``d2phi_j/dx_l^2 = -omega_jl^2 phi_j``,
    so ``C = (2/m) (Omega Omega^T) * (S^T W S)`` with ``S_xj = sin(z_j(x))`` and
    ``b_j = sqrt(2/m) sum_x w_x (|omega_j|^2 cos z_j(x) - base sin z_j(x) omega_j . x)``;
    ``score_dims``: the derivatives only in the first ``score_dims`` coordinates (``l``, and
    the norms and products of ``omega_j`` and ``x`` above, over those alone).
    """
    m = omega.shape[0]
    scored = omega[:, :score_dims]
    sin_gram = np.zeros((m, m))
    b_sum = np.zeros(m)
    sq_norm = np.sum(scored**2, axis=1)
    for start in range(0, x.shape[0], CHUNK_ROWS):
        rows = x[start : start + CHUNK_ROWS]
        phase = rows @ omega.T + offset
        projection = rows[:, :score_dims] @ scored.T
        w = weight[start : start + CHUNK_ROWS]
        sin = np.sin(phase)
        s = np.sqrt(w)[:, None] * sin
        sin_gram += s.T @ s
        b_sum += w @ (sq_norm * np.cos(phase) - base * sin * projection)
    scale = 2.0 / m
    return scale * (scored @ scored.T) * sin_gram, np.sqrt(scale) * b_sum


def _regularised_inverse(c: np.ndarray, lam: float) -> np.ndarray:
    """``(C + lam I)^{-1}``, symmetric, by Cholesky (exact; clears the drift of updates)."""
    m = c.shape[0]
    system = c + lam * np.eye(m)
    try:
        inverse = scipy.linalg.cho_solve(scipy.linalg.cho_factor(system, lower=True), np.eye(m))
    except np.linalg.LinAlgError:
        inverse = scipy.linalg.pinvh(system)
    return 0.5 * (inverse + inverse.T)


class KernelExpFamilyFinite:
    r"""Random-Fourier-feature exponential family fitted by score matching, with exact
    online updates (kmc §4.3, Proposition 2: "KMC finite").

    ``U~(q) = |x|^2 / (2 base_scale^2) - theta . phi(x)`` with
    ``phi_j(x) = sqrt(2/m) cos(omega_j . x + u_j)``,
    ``omega_j ~ N(0, I / sigma^2)``, ``u_j ~ U[0, 2 pi)`` (the Gaussian kernel of length
    scale ``sigma``), in whitened coordinates ``x = L^{-1}(q - mean)``. ``theta`` solves
    ``(C + lam I) theta = b`` with ``C``, ``b`` summed over all points seen.

    Parameters
    ----------
    n_features : int
        Number ``m`` of random Fourier features: ``value_and_grad`` costs ``O(m d)``, an
        online point ``O(d m^2)``.
    sigma : float or "auto"
        Kernel length scale in whitened coordinates; "auto": K-fold cross-validation of
        the score-matching objective over multiples of the median inter-point distance.
    lam : float or "auto"
        Ridge penalty ``lam |theta|^2 / 2`` added to the objective *summed* over the
        points, so its relative weight shrinks as points arrive (as in recursive least
        squares);
        "auto": cross-validated over multiples of the total weight given to ``fit``.
    base_scale : float or None
        Standard deviation of the Gaussian base measure in whitened coordinates (module
        docstring); ``None``: no base, the paper's form.
    temperature, score_dims
        As ``KernelExpFamilyLite``.
    n_folds : int
        Folds of the cross-validation (contiguous blocks, the points in given order).
    whitening : Whitening, optional
        Fixed whitening; by default estimated from the positions of the first ``fit``.
    random_state : int or numpy Generator, optional
        Seeds the random features.

    Notes
    -----
    Learns from positions only: ``potentials`` and ``gradients`` are accepted for the
    protocol and ignored. The level of ``U~`` is arbitrary (``has_level = False``).

    Online learning (``OnlineSurrogate``): a point ``x`` with weight ``w`` adds
    ``A A^T`` to ``C``, ``A = sqrt(w) (dphi/dx_1, ..., dphi/dx_d)`` of shape (m, d),
    i.e. ``A = sqrt(2 w / m) diag(sin z(x)) Omega`` -- a rank-``d`` term. ``partial_fit``
    updates ``P = (C + lam I)^{-1}`` by the Woodbury identity
    ``P <- P - P A (I_d + A^T P A)^{-1} A^T P`` (``d`` Sherman-Morrison steps at once,
    ``O(d m^2)``), and ``theta = P b``; the result equals a batch ``fit`` on all the points
    with the same ``sigma_``, ``lam_``, whitening and features. Sigma, lam and the
    whitening stay those of the last ``fit``. A batch of at least ``m / d`` points is
    folded in by refactorising ``C + lam I`` instead, which is cheaper and as exact; so
    is every ``8 m / d``-th point, which bounds the rounding drift of the updates.

    Learned attributes: ``whitening_``, ``omega_`` (m, d), ``offset_`` (m,), ``theta_``,
    ``sigma_``, ``lam_``, ``cv_results_`` (as ``KernelExpFamilyLite``), ``n_samples_seen_``,
    ``weight_seen_``.

    Far from the data the cosines do not decay: without a base the gradient oscillates
    there (kmc §5); with one, the base's pull grows while theirs stays bounded.

    References
    ----------
    Strathmann, Sejdinovic, Livingstone, Szabo, Gretton (2015). Gradient-free Hamiltonian
    Monte Carlo with efficient kernel exponential families. NeurIPS.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> surrogate = KernelExpFamilyFinite(random_state=0).fit(rng.standard_normal((500, 2)))
    >>> surrogate = surrogate.partial_fit(rng.standard_normal((10, 2)))
    >>> value, grad = surrogate.snapshot().value_and_grad(np.array([1.0, 0.0]))
    """

    has_level = False

    def __init__(
        self,
        n_features: int = 300,
        sigma: float | str = "auto",
        lam: float | str = "auto",
        base_scale: float | None = 1.0,
        temperature: float = 1.0,
        score_dims: int | None = None,
        n_folds: int = 5,
        whitening: Whitening | None = None,
        random_state: int | np.random.Generator | None = None,
    ):
        _check_count("n_features", n_features, 1)
        _check_positive("sigma", sigma)
        _check_positive("lam", lam)
        _check_base_scale(base_scale)
        _check_positive("temperature", temperature, allow_auto=False)
        _check_count("n_folds", n_folds, 2)
        if score_dims is not None:
            _check_count("score_dims", score_dims, 1)
        self.score_dims = score_dims
        self.n_features = n_features
        self.sigma = sigma
        self.lam = lam
        self.base_scale = base_scale
        self.temperature = temperature
        self.n_folds = n_folds
        self.whitening = whitening
        self.random_state = random_state

    def fit(
        self,
        positions: np.ndarray,
        potentials: np.ndarray | None = None,
        gradients: np.ndarray | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> KernelExpFamilyFinite:
        """Fit ``theta`` to all ``positions`` (n, d); drops what earlier fits learned.

        ``potentials`` and ``gradients`` are ignored.
        """
        positions, weight = _check_fit_data(positions, sample_weight)
        rng = np.random.default_rng(self.random_state)
        whitening = _whitening_for(self.whitening, positions)
        n = positions.shape[0]
        x = whitening.to_white(_collapse_repeats(positions, weight)[0])
        weight = _collapse_repeats(positions, weight)[1]
        self._base = _base_precision(self.base_scale)
        # Unit-scale frequencies drawn once: every candidate sigma rescales the same draws,
        # so cross-validation compares bandwidths, not feature draws.
        unit = rng.standard_normal((self.n_features, x.shape[1]))
        offset = rng.uniform(0.0, 2.0 * np.pi, self.n_features)
        sigma, lam, cv_results = self._choose(x, weight, unit, offset, rng)

        omega = unit / sigma
        c, b = _finite_sums(x, weight, omega, offset, self._base, self.score_dims)
        p_mat = _regularised_inverse(c, lam)
        if not np.all(np.isfinite(p_mat @ b)):
            raise ValueError("The score-matching system gave non-finite weights.")
        self.whitening_ = whitening
        self.omega_ = omega
        self.offset_ = offset
        self.sigma_ = sigma
        self.lam_ = lam
        self.cv_results_ = cv_results
        self.n_samples_seen_ = n
        self.weight_seen_ = float(weight.sum())
        # Whitening folded into the features: phase = omega_q . q + offset_q.
        self._inverse_chol = whitening.inverse_chol()
        self._omega_q = omega @ self._inverse_chol
        self._offset_q = offset - self._omega_q @ whitening.mean
        self._set_state(c, b, p_mat, 0)
        return self

    def _choose(self, x, weight, unit, offset, rng) -> tuple[float, float, dict | None]:
        """``(sigma, lam, cv_results)``: cross-validated where "auto"."""
        median = _median_distance(x, rng)
        sigmas = median * SIGMA_GRID if self.sigma == "auto" else np.array([float(self.sigma)])
        if sigmas.size == 1 and self.lam != "auto":
            return float(sigmas[0]), float(self.lam), None
        x, weight = _merge_near(x, weight, NEAR_DUPLICATE * median)
        lams = LAM_GRID * weight.sum() if self.lam == "auto" else np.array([float(self.lam)])
        folds = _folds(x.shape[0], self.n_folds)
        eye = np.eye(unit.shape[0])

        def held_out(sigma: float) -> np.ndarray:
            # Sums per fold; a fold's training system is the total minus its own.
            parts = [_finite_sums(x[f], weight[f], unit / sigma, offset, self._base, self.score_dims)
                     for f in folds]
            c_all = sum(p[0] for p in parts)
            b_all = sum(p[1] for p in parts)
            scores = np.zeros(lams.size)
            for c_test, b_test in parts:
                for j, lam in enumerate(lams):
                    theta = _solve_spd(c_all - c_test + lam * eye, b_all - b_test)
                    # sum_x w_x [lap f + |grad f|^2 / 2] on the fold, in closed form.
                    scores[j] += 0.5 * theta @ c_test @ theta - theta @ b_test
            return scores / weight.sum()

        return _grid_search(sigmas, lams, held_out)

    def _set_state(self, c: np.ndarray, b: np.ndarray, p_mat: np.ndarray, rank: int) -> None:
        """Install a new system and its solution, or raise and keep the old one."""
        theta = p_mat @ b
        if not np.all(np.isfinite(theta)):
            raise ValueError("The score-matching system gave non-finite weights.")
        # Arrays are rebound, never modified in place: snapshot() shares them.
        self._c_sum, self._b_sum, self._precision_inverse = c, b, p_mat
        self._rank_since_factor = rank
        self.theta_ = theta
        self._theta_q = np.sqrt(2.0 / theta.shape[0]) * theta

    def partial_fit(
        self,
        positions: np.ndarray,
        potentials: np.ndarray | None = None,
        gradients: np.ndarray | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> KernelExpFamilyFinite:
        """Add new positions (k, d) to everything seen since the last ``fit``, exactly.

        ``O(d m^2)`` a point by rank-``d`` Woodbury updates of ``(C + lam I)^{-1}``; equal
        to a batch ``fit`` on all the points with this fit's ``sigma_``, ``lam_``, whitening
        and features. Before any ``fit`` it is ``fit``. ``potentials`` and ``gradients`` are
        ignored.
        """
        if not hasattr(self, "theta_"):
            return self.fit(positions, potentials, gradients, sample_weight)
        positions, weight = _check_positions(positions, sample_weight, dim=self.whitening_.dim)
        keep = weight > 0
        positions, weight = positions[keep], weight[keep]
        if positions.shape[0] == 0:
            return self
        x = self.whitening_.to_white(positions)
        m = self.omega_.shape[0]
        dim = self.omega_.shape[1] if self.score_dims is None else self.score_dims
        c_new, b_new = _finite_sums(x, weight, self.omega_, self.offset_, self._base,
                                    self.score_dims)
        c_sum, b_sum = self._c_sum + c_new, self._b_sum + b_new
        rank = x.shape[0] * dim
        # Refactorise (O(m^3)) for a batch whose updates would cost more than that, and
        # after 8 m ranks of updates: bounds their rounding drift at amortised O(d m^2 / 6).
        if rank >= m or self._rank_since_factor + rank > 8 * m:
            self._set_state(c_sum, b_sum, _regularised_inverse(c_sum, self.lam_), 0)
        else:
            self._set_state(
                c_sum, b_sum, self._woodbury(x, weight), self._rank_since_factor + rank
            )
        self.n_samples_seen_ += x.shape[0]
        self.weight_seen_ += float(weight.sum())
        return self

    def _woodbury(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """``(C + sum_x A_x A_x^T + lam I)^{-1}`` from ``P = (C + lam I)^{-1}``, a point at a
        time: ``P <- P - P A (I_d + A^T P A)^{-1} A^T P``, ``O(d m^2)`` each."""
        m = self.omega_.shape[0]
        scored = self.omega_[:, :self.score_dims]
        dim = scored.shape[1]
        p_mat = self._precision_inverse
        phase = x @ self.omega_.T + self.offset_
        scale = np.sqrt(2.0 * weight / m)[:, None] * np.sin(phase)  # (k, m)
        for row in scale:
            factor = row[:, None] * scored  # A = sqrt(2w/m) diag(sin z) Omega: (m, d)
            p_a = p_mat @ factor
            inner = np.eye(dim) + factor.T @ p_a  # I_d + A^T P A: positive definite
            p_mat = p_mat - p_a @ _solve_spd(inner, p_a.T)
        return 0.5 * (p_mat + p_mat.T)

    def base_only(self) -> KernelExpFamilyFinite:
        """This fit with ``f = 0``: the Gaussian base measure alone (same whitening)."""
        plain = copy.copy(self)
        plain.theta_ = np.zeros_like(self.theta_)
        # The features stay: an online learner continues from this object (partial_fit
        # rebuilds the weights over all of them).
        plain._theta_q = np.zeros_like(self._theta_q)
        return plain

    def snapshot(self) -> KernelExpFamilyFinite:
        """A copy with what was learned so far, fixed whatever ``partial_fit`` does next.

        Shallow: ``partial_fit`` rebinds its arrays and never writes into them.
        """
        return copy.copy(self)

    def value_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """Surrogate potential ``-f - log q0`` (arbitrary level) and its gradient in ``q``."""
        q = np.asarray(q, dtype=np.float64)
        phase = self._omega_q @ q + self._offset_q
        f = float(self._theta_q @ np.cos(phase))
        # grad_q f = -sum_j theta_j sqrt(2/m) sin(phase_j) omega_q,j (chain rule folded in).
        grad = -((self._theta_q * np.sin(phase)) @ self._omega_q)
        cool = 1.0 / self.temperature
        if not self._base:
            return -cool * f, -cool * grad
        x = self._inverse_chol @ (q - self.whitening_.mean)
        return (cool * (0.5 * self._base * float(x @ x) - f),
                cool * (self._base * (x @ self._inverse_chol) - grad))
