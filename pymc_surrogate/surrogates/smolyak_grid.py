"""The Smolyak sparse grid of hierarchical piecewise-linear interpolation (sparse-grid-hmc
§3.3-3.4)."""

from __future__ import annotations

import numpy as np
import scipy.sparse

from pymc_surrogate.surrogates.box import BoxTransform
from pymc_surrogate.surrogates.grid_base import _BoxGrid, _sum_of_products

__all__ = ["SmolyakGrid", "smolyak_node_count"]

# Largest dense (d * levels, subspaces) stride matrix of the Smolyak evaluation (32 MB).
_DENSE_NODE_MAP = 4_000_000
# Finest 1-d resolution is 2**level: integer node coordinates must stay exact in int64.
_MAX_LEVEL = 40


def _new_points_1d(level: np.ndarray) -> np.ndarray:
    """Nodes a 1-d level adds: 1 (the centre), 2 (the two faces), then 2**(level-1)."""
    level = np.asarray(level, dtype=np.int64)
    return np.where(level == 0, 1, np.where(level == 1, 2, 2 ** np.maximum(level - 1, 0)))


def smolyak_node_count(dim: int, level: int) -> int:
    """Nodes of the Clenshaw-Curtis-type sparse grid of ``level`` in ``dim`` dimensions.

    ``N = sum over l in N_0^d, |l| <= level, of prod_k m(l_k)``, with ``m(0) = 1``,
    ``m(1) = 2`` and ``m(l) = 2**(l-1)`` the nodes 1-d level ``l`` adds (1-d levels have
    1, 3, 5, 9, 17, ... nodes). For d = 2: 1, 5, 13, 29, 65, 145, 321, ...
    """
    if dim < 1 or level < 0:
        raise ValueError(f"dim must be >= 1 and level >= 0; got dim={dim}, level={level}.")
    new = [1, 2] + [2 ** (m - 1) for m in range(2, level + 1)]
    # counts[s]: nodes of the subspaces of total level exactly s (Python ints: no overflow).
    counts = [1] + [0] * level
    for _ in range(dim):
        counts = [sum(counts[s - m] * new[m] for m in range(s + 1)) for s in range(level + 1)]
    return sum(counts)


class SmolyakGrid(_BoxGrid):
    """Smolyak sparse grid with the piecewise-linear hierarchical basis (sparse-grid-hmc §3.4).

    The nested 1-d node sets of App. B (Klimke & Wohlmuth's Clenshaw-Curtis-type grid for
    piecewise-linear interpolation): level 0 is the centre, level 1 adds the two faces and
    level ``m >= 2`` the ``2**(m-1)`` midpoints between the nodes of level ``m - 1``,
    equidistant on ``[0, 1]``. The sparse grid of ``level`` n is the union of the tensor
    products of 1-d levels ``l`` with ``|l| <= n`` (the paper's ``A_{n+d,d}``), and the
    interpolant is the sum of the hat functions of its nodes times their hierarchical
    surpluses.

    Parameters
    ----------
    level : int or "auto"
        Sparse-grid level ``n >= 0`` (level 1 has ``2d + 1`` nodes). "auto": the largest
        level whose node count is within ``max_nodes``.
    max_nodes : int
        Budget of true-model evaluations: a level with more nodes raises ``ValueError``.
    transform : BoxTransform, optional
        The domain lies in box coordinates ``u`` of ``q = center + axes @ u``
        (``principal_box``).

    Notes
    -----
    Surpluses are computed by the unidirectional principle: along each dimension in turn,
    a node's value minus the mean of its two 1-d parents (minus the centre's value for a
    face node), O(N d) for N nodes. Evaluation visits one hat per subspace, the only one whose
    support holds the point: ``C(n + d, d)`` terms, vectorised, whatever the node count.
    The interpolant is piecewise multilinear on the full grid of spacing ``2**-n``. For
    ``U`` with bounded mixed second derivatives the error is
    ``O(2**(-2n) n**(d-1))`` (§3.4).

    Learned attributes: ``domain_``, ``nodes_`` (n, d), ``n_nodes_``, ``level_``,
    ``multi_indices_`` (subspace levels, sorted by total level: the nodes of a lower level
    are a prefix of those of a higher one), ``values_`` (n,), ``surpluses_`` (n,),
    ``surplus_by_level_`` (largest ``|surplus|`` per total level: the last one estimates the
    interpolation error, Bungartz).

    References
    ----------
    .. [1] Zhang, C., Shahbaba, B. and Zhao, H. (2017). Precomputing strategy for
       Hamiltonian Monte Carlo method based on regularity in parameter space.
       Computational Statistics 32, 253-279.
    .. [2] Klimke, A. and Wohlmuth, B. (2005). Algorithm 847: spinterp: piecewise
       multilinear hierarchical sparse grid interpolation in MATLAB. ACM TOMS 31, 561-579.

    Examples
    --------
    >>> grid = SmolyakGrid(level="auto", max_nodes=1000)
    >>> nodes = grid.design(Domain(-3.0 * np.ones(4), 3.0 * np.ones(4)))
    >>> grid = grid.fit(nodes, 0.5 * np.sum(nodes**2, axis=1))
    >>> value, grad = grid.value_and_grad(np.full(4, 0.3))
    """

    def __init__(
        self,
        level: int | str = "auto",
        max_nodes: int = 2000,
        transform: BoxTransform | None = None,
    ):
        super().__init__(max_nodes, transform)
        if isinstance(level, str):
            if level != "auto":
                raise ValueError(f"level must be a non-negative integer or 'auto'; got {level!r}.")
        elif int(level) != level or level < 0:
            raise ValueError(f"level must be a non-negative integer or 'auto'; got {level!r}.")
        elif level > _MAX_LEVEL:
            raise ValueError(f"level must be at most {_MAX_LEVEL}; got {level!r}.")
        self.level = level

    def _resolve_level(self, d: int) -> int:
        if self.level == "auto":
            if smolyak_node_count(d, 1) > self.max_nodes:
                raise ValueError(
                    f"max_nodes={self.max_nodes} is too small for level 1 in d = {d}, which "
                    f"has 2d + 1 = {2 * d + 1} nodes."
                )
            level = 1
            while level < _MAX_LEVEL and smolyak_node_count(d, level + 1) <= self.max_nodes:
                level += 1
            return level
        level = int(self.level)
        count = smolyak_node_count(d, level)
        if count > self.max_nodes:
            raise ValueError(
                f"level {level} in d = {d} has {count} nodes, more than "
                f"max_nodes={self.max_nodes}: raise max_nodes or lower the level."
            )
        return level

    def _design_unit(self, d: int) -> np.ndarray:
        n = self._resolve_level(d)
        self.level_ = n
        levels = _multi_indices(d, n)  # (M, d)
        sizes = _new_points_1d(levels)
        counts = np.prod(sizes, axis=1)
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
        # C-order strides of each subspace's tensor block.
        strides = np.ones_like(sizes)
        for k in range(d - 2, -1, -1):
            strides[:, k] = strides[:, k + 1] * sizes[:, k + 1]
        n_nodes = int(counts.sum())

        # Every node's subspace and 1-d index per dimension, then its integer coordinates
        # on the finest full grid (spacing 1 / resolution): exact, for parent lookups.
        sub = np.repeat(np.arange(levels.shape[0]), counts)
        local = np.arange(n_nodes) - offsets[sub]
        index = (local[:, None] // strides[sub]) % sizes[sub]
        node_levels = levels[sub]
        resolution = 2 ** max(n, 1)
        spacing = resolution >> np.minimum(node_levels, max(n, 1))  # 2**(n - m) for m >= 1
        integer = np.where(
            node_levels == 0,
            resolution // 2,
            np.where(node_levels == 1, index * resolution, (2 * index + 1) * spacing),
        )

        # 1-d parents along each dimension: the centre for a face node, the two neighbours
        # at distance 2**-m for a node of 1-d level m >= 2 (both are on the grid: its
        # multi-index set is downward closed).
        lookup = _RowLookup(integer)
        self._parents = []
        for k in range(d):
            on_face = np.flatnonzero(node_levels[:, k] == 1)
            inner = np.flatnonzero(node_levels[:, k] >= 2)
            centre = integer[on_face].copy()
            centre[:, k] = resolution // 2
            left = integer[inner].copy()
            left[:, k] -= spacing[inner, k]
            right = integer[inner].copy()
            right[:, k] += spacing[inner, k]
            self._parents.append(
                (on_face, lookup(centre), inner, lookup(left), lookup(right))
            )

        self.multi_indices_ = levels
        self._node_total_level = node_levels.sum(axis=1)
        # Gather indices into the (d, levels) hat tables, one column per subspace, and the
        # strides that turn the active hats' indices into node numbers.
        m = np.arange(n + 1)
        flat = np.ascontiguousarray((levels + (n + 1) * np.arange(d)).T)  # (d, M)
        shape = (d * (n + 1), levels.shape[0])
        columns = np.broadcast_to(np.arange(shape[1]), flat.shape)
        if shape[0] * shape[1] <= _DENSE_NODE_MAP:
            node_map = np.zeros(shape)
            node_map[flat, columns] = strides.T
        else:  # d nonzeros a column: sparse beyond a few MB
            node_map = scipy.sparse.csr_array(
                (strides.T.ravel().astype(np.float64), (flat.ravel(), columns.ravel())), shape
            )
        self._flat_levels = flat
        self._node_map = node_map
        self._sub_offsets = offsets.astype(np.float64)
        # Hat tables per level m, broadcast over (points, dimensions, levels): half-width
        # h = 2**-m (0.5 at m = 1), centres o + 2hi, i < number of hats of the level.
        half = 2.0 ** -np.maximum(m, 1)
        self._half = half
        origin = np.where(m == 1, 0.0, half)
        self._cell = 2.0 * half
        self._inv_cell = 1.0 / self._cell
        self._origin = origin
        self._shift = half - origin
        self._last_hat = (_new_points_1d(m) - 1).astype(np.float64)
        self._inv_half = np.where(m == 0, 0.0, 1.0 / half)
        # Level 1: hat 0 always falls and hat 1 always rises (diff < -1e300 or < 1e300).
        self._tilt = np.where(m == 1, 1e300, 0.0)
        self._tilt2 = 2.0 * self._tilt
        return integer / resolution

    def _fit_values(self, values: np.ndarray) -> None:
        surplus = values.copy()
        for on_face, centre, inner, left, right in self._parents:
            previous = surplus.copy()
            surplus[on_face] -= previous[centre]
            surplus[inner] -= 0.5 * (previous[left] + previous[right])
        self.surpluses_ = surplus
        by_level = np.zeros(self.level_ + 1)
        np.maximum.at(by_level, self._node_total_level, np.abs(surplus))
        self.surplus_by_level_ = by_level

    def _terms_per_point(self) -> int:
        return self.multi_indices_.shape[0]

    def _hat_tables(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per point, dimension and 1-d level, the one hat whose support holds x: its index
        within the level, shape (n, d * levels), and its value and slope, (2, n, d * levels)."""
        n_points, d = x.shape
        xs = x[:, :, None]
        # Hat i of level m is centred at o + 2hi on the cell [o + (2i-1)h, o + (2i+1)h);
        # level 0 has a zero slope (the constant 1), level 1 (o = 0) the two face hats.
        index = np.floor((xs + self._shift) * self._inv_cell)
        index = np.minimum(np.maximum(index, 0.0), self._last_hat)
        diff = xs - (self._origin + index * self._cell)
        # Rising side of the hat: left of its centre; a face hat of level 1 has one side
        # only, which it keeps beyond the face (the boundary cells continue linearly).
        rising = diff < index * self._tilt2 - self._tilt
        table = np.empty((2, n_points, d, self._half.shape[0]))
        np.multiply(np.where(rising, 1.0, -1.0), self._inv_half, out=table[1])
        np.multiply(table[1], diff, out=table[0])
        table[0] += 1.0
        return index.reshape(n_points, -1), table.reshape(2, n_points, -1)

    def _unit_value_and_grad(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # Layout (n, d, M): the loops below are over the d dimensions, on (n, M) slices
        # (a reduction along a short last axis costs more than d vector products).
        n_points, d = x.shape
        index, table = self._hat_tables(x)
        # Node of each subspace's active hat: offset + sum_k index_k * stride_k, as one
        # product with a (d * levels, M) matrix of strides (exact: integers below 2**53).
        node = (index @ self._node_map + self._sub_offsets).astype(np.int64)
        weight = self.surpluses_[node][:, :, None]  # (n, M, 1)
        hat, slope = np.take(table, self._flat_levels, axis=2)  # (n, d, M) each
        return _sum_of_products(weight, hat, slope)

    def _settings(self) -> dict:
        return {"level": np.array(self.level_, dtype=np.int64)}

    @classmethod
    def _settings_from(cls, stored: dict) -> dict:
        return {"level": int(stored["level"])}


def _multi_indices(d: int, n: int) -> np.ndarray:
    """All ``l`` in ``N_0^d`` with ``|l| <= n``, sorted by ``|l|`` then lexicographically
    (descending), so the subspaces of a lower level come first in the same order."""
    rows = np.zeros((1, 0), dtype=np.int64)
    for _ in range(d):
        budget = n - rows.sum(axis=1)
        reps = budget + 1
        head = np.repeat(rows, reps, axis=0)
        tail = np.arange(reps.sum()) - np.repeat(np.cumsum(reps) - reps, reps)
        rows = np.column_stack([head, tail])
    order = np.lexsort(tuple(-rows[:, k] for k in range(d - 1, -1, -1)) + (rows.sum(axis=1),))
    return rows[order]


class _RowLookup:
    """Index of each query row in a table of distinct integer rows (sort + binary search on
    the rows' bytes: no key arithmetic that could overflow in high dimension)."""

    def __init__(self, table: np.ndarray):
        self._keys = _row_keys(table)
        self._order = np.argsort(self._keys)
        self._sorted = self._keys[self._order]

    def __call__(self, queries: np.ndarray) -> np.ndarray:
        keys = _row_keys(queries)
        if keys.size == 0:
            return np.zeros(0, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self._sorted, keys), self._sorted.size - 1)
        if not np.all(self._sorted[pos] == keys):
            raise AssertionError("a sparse-grid parent is missing from the grid")  # a bug
        return self._order[pos]


def _row_keys(rows: np.ndarray) -> np.ndarray:
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    return rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
