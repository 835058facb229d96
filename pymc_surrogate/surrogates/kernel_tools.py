"""What both kernel exponential families share: input checks, the whitening, the Gaussian
Gram matrix, and cross-validation of the bandwidth and penalty (kmc §4)."""

from __future__ import annotations


import numpy as np
import scipy.linalg
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree
from scipy.spatial.distance import cdist, pdist

from pymc_surrogate.surrogates.whitening import Whitening

__all__: list[str] = []  # private helpers of kernel_lite.py and kernel_finite.py

# Candidate bandwidths, relative to the median distance between whitened points.
SIGMA_GRID = 2.0 ** np.arange(-3.0, 2.01, 0.5)
# Candidate penalties, relative to the total weight of the points cross-validated on.
LAM_GRID = 10.0 ** np.arange(-7.0, -0.99, 1.0)
# Points a median distance is estimated from (O(k^2) distances).
MEDIAN_POINTS = 1000
# Cross-validation merges points closer than this many median distances (``_merge_near``).
NEAR_DUPLICATE = 0.01


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


def _gaussian_gram(x: np.ndarray, z: np.ndarray, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """``k(z_i, x_j) = exp(-|x_j - z_i|^2 / (2 sigma^2))`` (n_x, n_z), and ``|x_j - z_i|^2``."""
    sq = cdist(x, z, "sqeuclidean")
    return np.exp(-0.5 * sq / sigma**2), sq


def _base_precision(base_scale: float | None) -> float:
    """``1 / base_scale^2``: the base's ``d log q0/dx = -x / base_scale^2`` (0: no base)."""
    return 0.0 if base_scale is None else 1.0 / base_scale**2
