"""The full tensor grid of multilinear interpolation (d <= 3)."""

from __future__ import annotations

import numpy as np

from pymc_surrogate.surrogates.box import BoxTransform
from pymc_surrogate.surrogates.grid_base import _BoxGrid, _sum_of_products

__all__ = ["NaiveGrid"]


class NaiveGrid(_BoxGrid):
    """Regular grid with multilinear interpolation of the potential (sparse-grid-hmc §3.3).

    The full tensor grid costs ``points_per_dim ** d`` model evaluations, so it is offered
    for ``d <= 3`` only; use ``SmolyakGrid`` beyond.

    Parameters
    ----------
    points_per_dim : int, sequence of int or "auto"
        Grid points per dimension, faces included (at least 2). "auto": the most points,
        the same in every dimension, whose total is within ``max_nodes``.
    max_nodes : int
        Budget of true-model evaluations: a grid with more nodes raises ``ValueError``.
    transform : BoxTransform, optional
        The domain lies in box coordinates ``u`` of ``q = center + axes @ u``.

    Notes
    -----
    The paper's Grid HMC (Alg. 2) reads a piecewise-constant force at the cell centres;
    here the force is the exact gradient of the multilinear interpolant of ``U`` from the
    cell's ``2**d`` corners, so the surrogate energy and its force agree. Like the paper's,
    the force jumps across cell faces (the interpolant itself is continuous).

    Learned attributes: ``domain_``, ``nodes_`` (n, d), ``n_nodes_``, ``shape_`` (points
    per dimension), ``values_`` (n,) potentials at the nodes, in ``nodes_`` order (C order
    over ``shape_``).

    References
    ----------
    .. [1] Zhang, C., Shahbaba, B. and Zhao, H. (2017). Precomputing strategy for
       Hamiltonian Monte Carlo method based on regularity in parameter space.
       Computational Statistics 32, 253-279.

    Examples
    --------
    >>> grid = NaiveGrid(points_per_dim=21)
    >>> nodes = grid.design(Domain(np.array([-3.0, -3.0]), np.array([3.0, 3.0])))
    >>> grid = grid.fit(nodes, 0.5 * np.sum(nodes**2, axis=1))
    >>> value, grad = grid.value_and_grad(np.array([0.5, -1.0]))
    """

    def __init__(
        self,
        points_per_dim: int | tuple[int, ...] | str = "auto",
        max_nodes: int = 2000,
        transform: BoxTransform | None = None,
    ):
        super().__init__(max_nodes, transform)
        if isinstance(points_per_dim, str):
            if points_per_dim != "auto":
                raise ValueError(
                    f"points_per_dim must be an integer >= 2, a sequence of them or 'auto'; "
                    f"got {points_per_dim!r}."
                )
        else:
            points = np.atleast_1d(np.asarray(points_per_dim))
            if (
                points.ndim != 1
                or points.size == 0
                or not np.all(np.equal(np.mod(points, 1), 0))
                or np.any(points < 2)
            ):
                raise ValueError(
                    f"points_per_dim must be an integer >= 2 (a cell needs two faces), a "
                    f"sequence of them or 'auto'; got {points_per_dim!r}."
                )
        self.points_per_dim = points_per_dim

    def _check_dim(self, d: int) -> None:
        if d > 3:
            raise ValueError(
                f"NaiveGrid is for d <= 3 (its nodes grow as points**d); the domain has "
                f"d = {d}: use SmolyakGrid."
            )

    def _resolve_shape(self, d: int) -> tuple[int, ...]:
        if isinstance(self.points_per_dim, str):
            # Integer d-th root of the budget, guarded against floating-point rounding.
            p = int(np.floor(self.max_nodes ** (1.0 / d) + 1e-9))
            while p**d > self.max_nodes:
                p -= 1
            if p < 2:
                raise ValueError(
                    f"max_nodes={self.max_nodes} is too small for a grid in d = {d}: "
                    f"it needs at least 2**{d} = {2**d} nodes."
                )
            return (p,) * d
        points = np.atleast_1d(np.asarray(self.points_per_dim)).astype(int)
        if points.size == 1:
            points = np.repeat(points, d)
        if points.size != d:
            raise ValueError(
                f"points_per_dim has {points.size} entries but the domain has d = {d}."
            )
        total = int(np.prod(points))
        if total > self.max_nodes:
            raise ValueError(
                f"the grid {tuple(points.tolist())} has {total} nodes, more than "
                f"max_nodes={self.max_nodes}: raise max_nodes or lower points_per_dim."
            )
        return tuple(points.tolist())

    def _design_unit(self, d: int) -> np.ndarray:
        shape = self._resolve_shape(d)
        self.shape_ = shape
        axes_1d = [np.linspace(0.0, 1.0, p) for p in shape]
        mesh = np.meshgrid(*axes_1d, indexing="ij")
        self._cells = np.asarray(shape, dtype=np.float64) - 1.0
        strides = np.array([int(np.prod(shape[k + 1 :])) for k in range(d)], dtype=np.int64)
        self._strides = strides.astype(np.float64)
        # The 2**d corners of a cell: on the upper face of dimension k or not (d, 2**d),
        # their flat-index offsets, and d(weight)/dx of each corner's factor.
        corners = np.array(np.unravel_index(np.arange(2**d), (2,) * d))
        self._upper = corners.astype(bool)
        self._corner_offsets = strides @ corners
        self._corner_slopes = np.where(self._upper, 1.0, -1.0) * self._cells[:, None]
        return np.stack([m.ravel() for m in mesh], axis=1)

    def _fit_values(self, values: np.ndarray) -> None:
        pass  # the nodal values are the interpolant's coefficients

    def _terms_per_point(self) -> int:
        return self._upper.shape[1]

    def _unit_value_and_grad(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        t = x * self._cells
        cell = np.minimum(np.maximum(np.floor(t), 0.0), self._cells - 1.0)
        frac = (t - cell)[:, :, None]  # in [0, 1] inside; beyond a face its cell continues
        base = (cell @ self._strides).astype(np.int64)  # exact: integers below 2**53
        corner_values = self.values_[base[:, None] + self._corner_offsets][:, :, None]
        # Corner c's weight is prod_k (frac_k if c is on cell k's upper face else 1 - frac_k).
        weights = np.where(self._upper, frac, 1.0 - frac)  # (n, d, 2**d)
        return _sum_of_products(corner_values, weights, self._corner_slopes)

    def _settings(self) -> dict:
        return {"points_per_dim": np.asarray(self.shape_, dtype=np.int64)}

    @classmethod
    def _settings_from(cls, stored: dict) -> dict:
        return {"points_per_dim": tuple(int(p) for p in stored["points_per_dim"])}
