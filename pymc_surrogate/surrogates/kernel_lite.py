"""The lite kernel exponential family: ``f`` a kernel expansion on the points themselves
(kmc §4.2, "KMC lite"), refitted in full."""

from __future__ import annotations

import copy

import numpy as np

from scipy.spatial.distance import cdist

from pymc_surrogate.surrogates.whitening import Whitening
from pymc_surrogate.surrogates.kernel_tools import (
    SIGMA_GRID,
    LAM_GRID,
    NEAR_DUPLICATE,
    _check_positive,
    _check_count,
    _check_fit_data,
    _collapse_repeats,
    _merge_near,
    _check_base_scale,
    _whitening_for,
    _median_distance,
    _folds,
    _grid_search,
    _solve_spd,
    _gaussian_gram,
    _base_precision,
)

__all__ = ["KernelExpFamilyLite"]


def _lite_system(
    x: np.ndarray, weight: np.ndarray, z: np.ndarray, sigma: float, base: float = 0.0,
    score_dims: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``C`` (n_z, n_z) and ``b`` (n_z,) of the score-matching objective of
    ``f = sum_i alpha_i k(z_i, .)`` over the points ``x`` (kmc Prop. 1), and the kernel
    matrix (n_x, n_z); ``base`` is the base measure's precision (``_base_precision``).

    With ``k_ji = k(z_i, x_j)``:
    ``df/dx_l (x_j) = -sum_i alpha_i (x_jl - z_il) k_ji / sigma^2``,
    ``sum_l d2f/dx_l^2 (x_j) = sum_i alpha_i k_ji (|x_j - z_i|^2 / sigma^4 - d / sigma^2)``
    and ``dphi_i/dx . d log q0/dx = base k_ji (|x_j|^2 - x_j . z_i) / sigma^2``;
    ``score_dims``: the derivatives (sums over ``l``) only in the first ``score_dims``
    coordinates (``KernelExpFamilyLite``'s ``score_dims``).
    """
    gram, sq = _gaussian_gram(x, z, sigma)
    dim = x.shape[1] if score_dims is None else score_dims
    xs, zs = x[:, :dim], z[:, :dim]
    if dim < x.shape[1]:
        sq = cdist(xs, zs, "sqeuclidean")
    laplacian = sq / sigma**4 - dim / sigma**2
    if base:
        laplacian = laplacian + base * (np.sum(xs**2, axis=1)[:, None] - xs @ zs.T) / sigma**2
    b = -(weight @ (gram * laplacian))
    c = np.zeros((z.shape[0], z.shape[0]))
    root = np.sqrt(weight)[:, None]
    for axis in range(dim):  # d products of (n_x, n_z) matrices: O(d n^3), no loop over points
        slope = (root * (x[:, axis, None] - z[None, :, axis])) * gram
        c += slope.T @ slope
    return c / sigma**4, b, gram


def _lite_objective(
    alpha: np.ndarray, x: np.ndarray, weight: np.ndarray, z: np.ndarray, sigma: float, gram, sq,
    base: float = 0.0, score_dims: int | None = None,
) -> float:
    """Score-matching objective per unit weight of ``f = sum_i alpha_i k(z_i, .)`` on ``x``
    (relative to the base's own: 0 is ``f = 0``), in the first ``score_dims`` coordinates."""
    dim = x.shape[1] if score_dims is None else score_dims
    if dim < x.shape[1]:
        x, z = x[:, :dim], z[:, :dim]
        sq = cdist(x, z, "sqeuclidean")
    k_alpha = gram @ alpha
    grad = -(x * k_alpha[:, None] - gram @ (alpha[:, None] * z)) / sigma**2
    laplacian = (gram * (sq / sigma**4 - dim / sigma**2)) @ alpha
    cross = -base * np.sum(grad * x, axis=1)  # df/dx . d log q0/dx
    return float(weight @ (laplacian + 0.5 * np.sum(grad**2, axis=1) + cross) / weight.sum())


def _lite_coefficients(
    c: np.ndarray, b: np.ndarray, gram: np.ndarray, lam: float
) -> np.ndarray:
    """``alpha = (C + lam (K + I))^{-1} b``: the penalty ``lam (|f|_H^2 + |alpha|^2) / 2``.

    The RKHS norm ``alpha^T K alpha`` does not depend on how many basis points represent
    ``f`` (so a penalty chosen on a sub-sample carries over); the ``|alpha|^2`` part is the
    ridge of kmc Prop. 1's formula, and keeps the system positive definite when ``K`` is
    singular (repeated chain states are common: every rejection repeats one).
    """
    system = c + lam * gram
    system[np.diag_indices_from(system)] += lam
    return _solve_spd(system, b)


class KernelExpFamilyLite:
    r"""Gaussian-kernel exponential family on a sub-sample, fitted by score matching
    (kmc §4.2, Proposition 1: "KMC lite").

    ``U~(q) = |x|^2 / (2 base_scale^2) - f(x)`` with
    ``f(x) = sum_i alpha_i exp(-|x - z_i|^2 / (2 sigma^2))`` in whitened coordinates
    ``x = L^{-1}(q - mean)``, the ``z_i`` a uniform random sub-sample of the training
    positions. ``f``'s gradient vanishes away from the data, where the Gaussian base alone
    pulls a trajectory back (without a base, ``base_scale=None``, it degrades to a random
    walk there: kmc Proposition 3).

    Parameters
    ----------
    sigma : float or "auto"
        Kernel length scale in whitened coordinates; "auto": K-fold cross-validation of
        the score-matching objective over multiples of the median inter-point distance.
    lam : float or "auto"
        Penalty ``lam (|f|_H^2 + |alpha|^2) / 2`` added to the objective *summed* over the
        points; "auto": cross-validated over multiples of the cross-validation
        sub-sample's total weight, and the chosen total kept for the full fit.
    max_points : int
        Largest sub-sample (basis and data alike); the fit costs ``O(d n^3)``.
    base_scale : float or None
        Standard deviation of the Gaussian base measure in whitened coordinates (module
        docstring); ``None``: no base, the paper's form, whose density is improper.
    temperature : float
        ``value_and_grad`` returns the fitted potential divided by it: above 1 the
        surrogate density is wider than the fit (``KernelHMC``'s defensive tails).
    score_dims : int or None
        Score matching in the first ``score_dims`` coordinates only (None: all): the fit
        of ``p(q | c)``'s score for inputs ``(q, c)``, whose ``c`` (a compound step's other
        blocks) the trajectories never move. Over ``c`` too it also fits ``c``'s
        density, which for a discrete ``c`` is a set of spikes the objective rewards
        chasing: next to k ~ Bernoulli(0.7), cross-validation took the smallest bandwidth
        and x's conditional came out with sd 0.66-1.40 of 2 on 300 exact draws (1.90-2.17
        with ``score_dims``).
    n_folds : int
        Folds of the cross-validation (contiguous blocks, the points in given order).
    cv_points : int
        Largest sub-sample the cross-validation runs on.
    whitening : Whitening, optional
        Fixed whitening; by default estimated from the training positions.
    random_state : int or numpy Generator, optional

    Notes
    -----
    Learns from positions only: ``potentials`` and ``gradients`` are accepted for the
    ``Surrogate`` protocol and ignored. ``sample_weight`` weights each point's term in the
    objective. The level of ``U~`` is arbitrary (``has_level = False``).

    Learned attributes: ``whitening_``, ``basis_`` (whitened sub-sample, (n, d)),
    ``alpha_``, ``sigma_``, ``lam_``, ``n_samples_fit_`` and ``cv_results_``: a dict of the
    ``sigma`` and ``lam`` grids and ``score``, the held-out objective per unit weight
    (NaN where not evaluated), or ``None`` when both were given.

    Kernel written ``exp(-|x - y|^2 / (2 sigma^2))``: the paper's ``sigma`` is ``2 sigma^2``
    here.

    References
    ----------
    Strathmann, Sejdinovic, Livingstone, Szabo, Gretton (2015). Gradient-free Hamiltonian
    Monte Carlo with efficient kernel exponential families. NeurIPS.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> surrogate = KernelExpFamilyLite(random_state=0).fit(rng.standard_normal((500, 2)))
    >>> value, grad = surrogate.value_and_grad(np.array([1.0, 0.0]))
    """

    has_level = False

    def __init__(
        self,
        sigma: float | str = "auto",
        lam: float | str = "auto",
        max_points: int = 2000,
        base_scale: float | None = 1.0,
        temperature: float = 1.0,
        score_dims: int | None = None,
        n_folds: int = 5,
        cv_points: int = 500,
        whitening: Whitening | None = None,
        random_state: int | np.random.Generator | None = None,
    ):
        _check_positive("sigma", sigma)
        _check_positive("lam", lam)
        _check_count("max_points", max_points, 2)
        _check_base_scale(base_scale)
        _check_positive("temperature", temperature, allow_auto=False)
        _check_count("n_folds", n_folds, 2)
        _check_count("cv_points", cv_points, 4)
        if score_dims is not None:
            _check_count("score_dims", score_dims, 1)
        self.score_dims = score_dims
        self.sigma = sigma
        self.lam = lam
        self.max_points = max_points
        self.base_scale = base_scale
        self.temperature = temperature
        self.n_folds = n_folds
        self.cv_points = cv_points
        self.whitening = whitening
        self.random_state = random_state

    def fit(
        self,
        positions: np.ndarray,
        potentials: np.ndarray | None = None,
        gradients: np.ndarray | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> KernelExpFamilyLite:
        """Fit the kernel weights to a sub-sample of ``positions`` (n, d).

        ``potentials`` and ``gradients`` are ignored: the model learns from where the chain
        has been, not from the model's values.
        """
        positions, weight = _check_fit_data(positions, sample_weight)
        rng = np.random.default_rng(self.random_state)
        whitening = _whitening_for(self.whitening, positions)
        n = positions.shape[0]
        positions, weight = _collapse_repeats(positions, weight)
        x = whitening.to_white(positions)
        if x.shape[0] > self.max_points:
            keep = np.sort(rng.choice(x.shape[0], self.max_points, replace=False))
            x, weight = x[keep], weight[keep]

        base = _base_precision(self.base_scale)
        sigma, lam, cv_results = self._choose(x, weight, rng)
        c, b, gram = _lite_system(x, weight, x, sigma, base, self.score_dims)
        alpha = _lite_coefficients(c, b, gram, lam)
        if not np.all(np.isfinite(alpha)):
            raise ValueError("The score-matching system gave non-finite weights.")

        self.whitening_ = whitening
        self.basis_ = x
        self.alpha_ = alpha
        self.sigma_ = sigma
        self.lam_ = lam
        self.cv_results_ = cv_results
        self.n_samples_fit_ = n
        self._base = base
        self._inverse_chol = whitening.inverse_chol()
        # Fortran order: the (n, d) matrix-vector products run several times faster.
        self._scaled_basis = np.asfortranarray(x / sigma**2)
        self._log_scale = -0.5 * np.sum(x**2, axis=1) / sigma**2
        return self

    def _choose(self, x, weight, rng) -> tuple[float, float, dict | None]:
        """``(sigma, lam, cv_results)``: cross-validated where "auto"."""
        median = _median_distance(x, rng)
        sigmas = median * SIGMA_GRID if self.sigma == "auto" else np.array([float(self.sigma)])
        if sigmas.size == 1 and self.lam != "auto":
            return float(sigmas[0]), float(self.lam), None
        x, weight = _merge_near(x, weight, NEAR_DUPLICATE * median)
        if x.shape[0] > self.cv_points:
            keep = np.sort(rng.choice(x.shape[0], self.cv_points, replace=False))
            x, weight = x[keep], weight[keep]
        # The penalty is a total, not per point: the value chosen on the sub-sample is used
        # as it is (a fixed prior against more data, as in ridge regression).
        lams = LAM_GRID * weight.sum() if self.lam == "auto" else np.array([float(self.lam)])
        folds = _folds(x.shape[0], self.n_folds)
        base = _base_precision(self.base_scale)

        def held_out(sigma: float) -> np.ndarray:
            scores = np.zeros(lams.size)
            for test in folds:
                train = np.setdiff1d(np.arange(x.shape[0]), test)
                xt, wt = x[train], weight[train]
                c, b, gram_train = _lite_system(xt, wt, xt, sigma, base, self.score_dims)
                gram_test, sq_test = _gaussian_gram(x[test], xt, sigma)
                for j, lam in enumerate(lams):
                    alpha = _lite_coefficients(c, b, gram_train, lam)
                    scores[j] += weight[test].sum() * _lite_objective(
                        alpha, x[test], weight[test], xt, sigma, gram_test, sq_test, base,
                        self.score_dims,
                    )
            return scores / weight.sum()

        return _grid_search(sigmas, lams, held_out)

    def value_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """Surrogate potential ``-f - log q0`` (arbitrary level) and its gradient in ``q``."""
        x = self._inverse_chol @ (np.asarray(q, dtype=np.float64) - self.whitening_.mean)
        # -|x - z_i|^2 / (2 sigma^2) expanded: one (n, d) product and no (n, d) temporary.
        exponent = self._log_scale + self._scaled_basis @ x - 0.5 * (x @ x) / self.sigma_**2
        k_alpha = np.exp(exponent) * self.alpha_
        total = float(k_alpha.sum())
        # grad_x f = -sum_i alpha_i k_i (x - z_i) / sigma^2; grad_q = L^{-T} grad_x.
        grad_x = k_alpha @ self._scaled_basis - x * (total / self.sigma_**2)
        base = 0.5 * self._base * float(x @ x)
        cool = 1.0 / self.temperature
        return cool * (base - total), cool * ((self._base * x - grad_x) @ self._inverse_chol)

    def base_only(self) -> KernelExpFamilyLite:
        """This fit with ``f = 0``: the Gaussian base measure alone (same whitening).

        Without a basis: a zero weight per basis point would still cost ``O(n d)`` a
        gradient in the leapfrog loop for nothing.
        """
        plain = copy.copy(self)
        plain.basis_ = self.basis_[:0]
        plain.alpha_ = self.alpha_[:0]
        plain._scaled_basis = self._scaled_basis[:0]
        plain._log_scale = self._log_scale[:0]
        return plain
