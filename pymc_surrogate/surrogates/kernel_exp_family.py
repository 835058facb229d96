"""Kernel exponential families fitted by score matching (kmc §4): KernelHMC's surrogates.

The model is an unnormalised log density ``f`` that is linear in its parameters,
``f(x) = theta . phi(x)``; score matching (Hyvarinen 2005) fits it from samples alone by
minimising, summed over the (weighted) points ``x``,

    J(theta) = sum_x w_x sum_l [ d2f/dx_l^2 (x) + (df/dx_l (x))^2 / 2 ]

plus a penalty ``lam theta^T R theta / 2``. ``J`` is quadratic in ``theta``: with
``b = -sum_x w_x sum_l d2phi/dx_l^2`` and ``C = sum_x w_x sum_l dphi/dx_l dphi/dx_l^T``,
``J = theta^T C theta / 2 - theta . b`` and the minimiser solves ``(C + lam R) theta = b``.
Every point adds ``w_x sum_l dphi/dx_l dphi/dx_l^T`` to ``C``, a term of rank at most
``d``: that is what makes the finite form's online update exact.

Both surrogates model ``log p = f + log q0`` with a Gaussian base measure
``q0 = N(0, base_scale^2 I)`` in whitened coordinates (the kernel exponential family of
Sriperumbudur et al. 2017 has one): ``f`` then fits only what the chain's states say
beyond their mean and covariance, and ``exp(-U~)`` is a proper density whatever ``f`` is.
Without it the lite form's ``f`` vanishes away from the data, so ``exp(f)`` has infinite
mass: a sampler of the surrogate alone (the surrogate transition's inner chain, the
warm-up that sets the step size) drifts off into the flat region and its step size grows
without bound (black-box 2-d Gaussian: 1e15, acceptance 0 in every draw). The base adds
``sum_l d log q0/dx_l df/dx_l`` to the objective, i.e. ``-sum_x w_x dphi/dx . d log q0/dx``
to ``b``; ``C`` is unchanged, and so is the online update.

The potential is ``U = -f - log q0`` up to an unknown constant, so both surrogates have no
level.
"""

from __future__ import annotations

import copy

import numpy as np
import scipy.linalg
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree
from scipy.spatial.distance import cdist, pdist

from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["KernelExpFamilyLite", "KernelExpFamilyFinite"]

# Candidate bandwidths, relative to the median distance between whitened points.
SIGMA_GRID = 2.0 ** np.arange(-3.0, 2.01, 0.5)
# Candidate penalties, relative to the total weight of the points cross-validated on.
LAM_GRID = 10.0 ** np.arange(-7.0, -0.99, 1.0)
# Points a median distance is estimated from (O(k^2) distances).
MEDIAN_POINTS = 1000
# Cross-validation merges points closer than this many median distances (``_merge_near``).
NEAR_DUPLICATE = 0.01
# Rows of features built at once when summing the finite form's system (memory bound).
CHUNK_ROWS = 4096


# ---------------------------------------------------------------------------- checks
def _check_positive(name: str, value, allow_auto: bool = True) -> None:
    if allow_auto and isinstance(value, str) and value == "auto":
        return
    if (
        isinstance(value, str | bool)
        or not np.isscalar(value)
        or not np.isfinite(value)
        or not value > 0
    ):
        expected = "a positive finite number" + (" or 'auto'" if allow_auto else "")
        raise ValueError(f"{name} must be {expected}; got {value!r}.")


def _check_count(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}.")


def _check_positions(positions, sample_weight, dim: int | None = None):
    """Positions (n, d) as float64 and weights (n,); ``ValueError`` with the reason."""
    positions = np.asarray(positions, dtype=np.float64)
    if positions.ndim == 1:
        positions = positions[None, :]
    if positions.ndim != 2 or positions.shape[0] == 0 or positions.shape[1] == 0:
        raise ValueError(f"positions must have shape (n, d) with n, d >= 1; got {positions.shape}.")
    if dim is not None and positions.shape[1] != dim:
        raise ValueError(f"positions have {positions.shape[1]} columns; the fit had {dim}.")
    if not np.all(np.isfinite(positions)):
        raise ValueError("positions must be finite (score matching has no use for NaN or inf).")
    n = positions.shape[0]
    if sample_weight is None:
        weight = np.ones(n)
    else:
        weight = np.asarray(sample_weight, dtype=np.float64).reshape(-1)
        if weight.shape[0] != n:
            raise ValueError(f"sample_weight has {weight.shape[0]} entries for {n} positions.")
        if not np.all(np.isfinite(weight) & (weight >= 0)):
            raise ValueError("sample_weight must be finite and non-negative.")
    return positions, weight


def _check_fit_data(positions, sample_weight):
    positions, weight = _check_positions(positions, sample_weight)
    keep = weight > 0
    positions, weight = positions[keep], weight[keep]
    if positions.shape[0] < 2 or np.unique(positions, axis=0).shape[0] < 2:
        raise ValueError(
            "fit needs at least 2 distinct positions with positive weight: a density "
            "cannot be learned from one point."
        )
    return positions, weight


def _collapse_repeats(positions: np.ndarray, weight: np.ndarray):
    """Runs of identical consecutive rows as one row weighted by the run's total.

    Every rejection repeats a chain state. The objective is the same either way, but a run
    split by a contiguous fold boundary puts a training point exactly under a held-out
    one, and score matching rewards a spike there without bound: cross-validation then
    chose the smallest bandwidth and penalty (held-out score -6e4 on a black-box banana's
    history, 153 distinct of 500 states).
    """
    if positions.shape[0] < 2:
        return positions, weight
    new_run = np.any(positions[1:] != positions[:-1], axis=1)
    starts = np.flatnonzero(np.concatenate([[True], new_run]))
    return positions[starts], np.add.reduceat(weight, starts)


def _merge_near(x: np.ndarray, weight: np.ndarray, radius: float):
    """Points within ``radius`` of each other (transitively) as one, at the first one's
    place with their total weight; first-occurrence order kept (for contiguous folds).

    For cross-validation only. A chain returns to (nearly) where it was: a black-box
    exploration's differential-evolution jumps are differences of a few fixed draws, so a
    jump and its reverse land within 1e-3 of an earlier state (12 of 62 distinct states of
    a 2-d Gaussian's history had such a twin, some exact, far apart in time). Held out, a
    twin of a training point rewards the narrowest bandwidth: the CV chose median / 8 with
    held-out scores of -10 to -50 per state, where the base Gaussian alone scores 0.
    """
    pairs = cKDTree(x).query_pairs(radius, output_type="ndarray")
    if pairs.size == 0:
        return x, weight
    n = x.shape[0]
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    first = np.full(labels.max() + 1, n)
    np.minimum.at(first, labels, np.arange(n))
    total = np.bincount(labels, weights=weight)
    order = np.argsort(first)
    return x[first[order]], total[order]


def _check_base_scale(base_scale) -> None:
    if base_scale is None:
        return
    _check_positive("base_scale", base_scale, allow_auto=False)


def _whitening_for(whitening: Whitening | None, positions: np.ndarray) -> Whitening:
    if whitening is None:
        return Whitening.from_samples(positions, dense=True)
    if whitening.dim != positions.shape[1]:
        raise ValueError(
            f"whitening has dimension {whitening.dim}; positions have {positions.shape[1]}."
        )
    return whitening


def _median_distance(x: np.ndarray, rng: np.random.Generator) -> float:
    """Median distance between distinct points (the usual kernel-bandwidth heuristic)."""
    if x.shape[0] > MEDIAN_POINTS:
        x = x[rng.choice(x.shape[0], MEDIAN_POINTS, replace=False)]
    distances = pdist(x)
    distances = distances[distances > 0]
    return float(np.median(distances)) if distances.size else 1.0


def _folds(n: int, n_folds: int) -> list[np.ndarray]:
    """Contiguous blocks: autocorrelated chain states then cannot predict their own
    neighbours, which would favour over-fitted (small) bandwidths."""
    return [block for block in np.array_split(np.arange(n), min(n_folds, n)) if block.size]


def _grid_search(
    sigmas: np.ndarray, lams: np.ndarray, held_out
) -> tuple[float, float, dict]:
    """The ``(sigma, lam)`` with the lowest held-out objective, ``held_out(sigma)`` giving
    it for every ``lam`` at once (the costly part depends on sigma only).

    Every other bandwidth first, then the two neighbours of the best one: 8 of the 11
    bandwidths of ``SIGMA_GRID``, and the same choice unless the objective is multimodal.
    """
    table = np.full((sigmas.size, lams.size), np.nan)

    def visit(i: int) -> None:
        if 0 <= i < sigmas.size and np.isnan(table[i, 0]):
            scores = np.asarray(held_out(float(sigmas[i])), dtype=np.float64)
            table[i] = np.where(np.isfinite(scores), scores, np.inf)

    for i in range(0, sigmas.size, 2):
        visit(i)
    visited = np.flatnonzero(~np.isnan(table[:, 0]))
    best = int(visited[np.argmin(table[visited].min(axis=1))])
    visit(best - 1)
    visit(best + 1)
    i, j = np.unravel_index(np.nanargmin(table), table.shape)
    return float(sigmas[i]), float(lams[j]), {"sigma": sigmas, "lam": lams, "score": table}


def _solve_spd(matrix: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Solve a symmetric positive definite system; least squares if rounding broke it."""
    try:
        return scipy.linalg.cho_solve(scipy.linalg.cho_factor(matrix, lower=True), rhs)
    except np.linalg.LinAlgError:
        return scipy.linalg.lstsq(matrix, rhs)[0]


# ------------------------------------------------------------------------ lite form
def _gaussian_gram(x: np.ndarray, z: np.ndarray, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """``k(z_i, x_j) = exp(-|x_j - z_i|^2 / (2 sigma^2))`` (n_x, n_z), and ``|x_j - z_i|^2``."""
    sq = cdist(x, z, "sqeuclidean")
    return np.exp(-0.5 * sq / sigma**2), sq


def _base_precision(base_scale: float | None) -> float:
    """``1 / base_scale^2``: the base's ``d log q0/dx = -x / base_scale^2`` (0: no base)."""
    return 0.0 if base_scale is None else 1.0 / base_scale**2


def _lite_system(
    x: np.ndarray, weight: np.ndarray, z: np.ndarray, sigma: float, base: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``C`` (n_z, n_z) and ``b`` (n_z,) of the score-matching objective of
    ``f = sum_i alpha_i k(z_i, .)`` over the points ``x`` (kmc Prop. 1), and the kernel
    matrix (n_x, n_z); ``base`` is the base measure's precision (``_base_precision``).

    With ``k_ji = k(z_i, x_j)``:
    ``df/dx_l (x_j) = -sum_i alpha_i (x_jl - z_il) k_ji / sigma^2``,
    ``sum_l d2f/dx_l^2 (x_j) = sum_i alpha_i k_ji (|x_j - z_i|^2 / sigma^4 - d / sigma^2)``
    and ``dphi_i/dx . d log q0/dx = base k_ji (|x_j|^2 - x_j . z_i) / sigma^2``.
    """
    dim = x.shape[1]
    gram, sq = _gaussian_gram(x, z, sigma)
    laplacian = sq / sigma**4 - dim / sigma**2
    if base:
        laplacian = laplacian + base * (np.sum(x**2, axis=1)[:, None] - x @ z.T) / sigma**2
    b = -(weight @ (gram * laplacian))
    c = np.zeros((z.shape[0], z.shape[0]))
    root = np.sqrt(weight)[:, None]
    for axis in range(dim):  # d products of (n_x, n_z) matrices: O(d n^3), no loop over points
        slope = (root * (x[:, axis, None] - z[None, :, axis])) * gram
        c += slope.T @ slope
    return c / sigma**4, b, gram


def _lite_objective(
    alpha: np.ndarray, x: np.ndarray, weight: np.ndarray, z: np.ndarray, sigma: float, gram, sq,
    base: float = 0.0,
) -> float:
    """Score-matching objective per unit weight of ``f = sum_i alpha_i k(z_i, .)`` on ``x``
    (relative to the base's own: 0 is ``f = 0``)."""
    dim = x.shape[1]
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
        c, b, gram = _lite_system(x, weight, x, sigma, base)
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
                c, b, gram_train = _lite_system(xt, wt, xt, sigma, base)
                gram_test, sq_test = _gaussian_gram(x[test], xt, sigma)
                for j, lam in enumerate(lams):
                    alpha = _lite_coefficients(c, b, gram_train, lam)
                    scores[j] += weight[test].sum() * _lite_objective(
                        alpha, x[test], weight[test], xt, sigma, gram_test, sq_test, base
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


# ---------------------------------------------------------------------- finite form
def _finite_sums(
    x: np.ndarray, weight: np.ndarray, omega: np.ndarray, offset: np.ndarray, base: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """``C`` (m, m) and ``b`` (m,) of kmc Prop. 2 for random Fourier features
    ``phi_j(x) = sqrt(2/m) cos(omega_j . x + u_j)``, summed over the points (not averaged);
    ``base`` is the base measure's precision (``_base_precision``).

    ``dphi_j/dx_l = -sqrt(2/m) omega_jl sin(z_j)`` and ``d2phi_j/dx_l^2 = -omega_jl^2 phi_j``,
    so ``C = (2/m) (Omega Omega^T) * (S^T W S)`` with ``S_xj = sin(z_j(x))`` and
    ``b_j = sqrt(2/m) sum_x w_x (|omega_j|^2 cos z_j(x) - base sin z_j(x) omega_j . x)``.
    """
    m = omega.shape[0]
    sin_gram = np.zeros((m, m))
    b_sum = np.zeros(m)
    sq_norm = np.sum(omega**2, axis=1)
    for start in range(0, x.shape[0], CHUNK_ROWS):
        projection = x[start : start + CHUNK_ROWS] @ omega.T
        phase = projection + offset
        w = weight[start : start + CHUNK_ROWS]
        sin = np.sin(phase)
        s = np.sqrt(w)[:, None] * sin
        sin_gram += s.T @ s
        b_sum += w @ (sq_norm * np.cos(phase) - base * sin * projection)
    scale = 2.0 / m
    return scale * (omega @ omega.T) * sin_gram, np.sqrt(scale) * b_sum


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
    temperature : float
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
        c, b = _finite_sums(x, weight, omega, offset, self._base)
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
            parts = [_finite_sums(x[f], weight[f], unit / sigma, offset, self._base)
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
        m, dim = self.omega_.shape
        c_new, b_new = _finite_sums(x, weight, self.omega_, self.offset_, self._base)
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
        m, dim = self.omega_.shape
        p_mat = self._precision_inverse
        phase = x @ self.omega_.T + self.offset_
        scale = np.sqrt(2.0 * weight / m)[:, None] * np.sin(phase)  # (k, m)
        for row in scale:
            factor = row[:, None] * self.omega_  # A = sqrt(2w/m) diag(sin z) Omega: (m, d)
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
