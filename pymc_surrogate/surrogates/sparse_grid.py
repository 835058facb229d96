"""Grid interpolants of the potential over a domain of interest (sparse-grid-hmc §3.3-3.5).

Both surrogates are designed: ``design(domain)`` gives the nodes at which the true
potential must be evaluated before sampling, ``fit`` takes those values (and only those),
and the surrogate is trusted only where ``contains(q)``; outside, the step uses the exact
potential (sparse-grid-hmc eq. 3.11).

The domain is a box ``lower <= u <= upper``. By default ``u = q``; with a ``BoxTransform``
the box lies in the coordinates ``u`` of ``q = center + axes @ u``: ``principal_box``
builds one along the principal axes of a covariance (the Laplace approximation of §3.5),
which covers a correlated posterior with far fewer wasted cells than an axis-aligned box.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from os import PathLike

import numpy as np
import scipy.sparse

from pymc_surrogate.surrogates.base import Domain

__all__ = ["BoxTransform", "principal_box", "NaiveGrid", "SmolyakGrid", "smolyak_node_count"]

# Positions within this fraction of the box width of a face count as inside: nodes on a
# face must stay inside after the round trip through a rotation.
_FACE_TOLERANCE = 1e-12
# Positions handed to ``fit`` may differ from the nodes by rounding only.
_NODE_TOLERANCE = 1e-10
# value_and_grad_many works in chunks of (points, terms, d) arrays this size: 512 kB fit
# in cache (d = 5, 252 terms: 8 us a point against 33 us with 32 MB arrays).
_CHUNK_ELEMENTS = 65_536
# Largest dense (d * levels, subspaces) stride matrix of the Smolyak evaluation (32 MB).
_DENSE_NODE_MAP = 4_000_000
# Finest 1-d resolution is 2**level: integer node coordinates must stay exact in int64.
_MAX_LEVEL = 40


@dataclass(frozen=True)
class BoxTransform:
    """The affine map ``q = center + axes @ u`` from box coordinates ``u`` to parameters.

    Parameters
    ----------
    center : ndarray of shape (d,)
    axes : ndarray of shape (d, d)
        Invertible; its columns are the box's edges per unit of ``u`` (for
        ``principal_box``: orthonormal eigenvectors times standard deviations).
    """

    center: np.ndarray
    axes: np.ndarray
    inverse: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        center = np.asarray(self.center, dtype=np.float64).reshape(-1)
        axes = np.asarray(self.axes, dtype=np.float64)
        d = center.shape[0]
        if axes.shape != (d, d):
            raise ValueError(f"axes must have shape ({d}, {d}) to match center; got {axes.shape}.")
        if not (np.all(np.isfinite(center)) and np.all(np.isfinite(axes))):
            raise ValueError("center and axes must be finite.")
        if d and np.linalg.cond(axes) > 1e12:
            raise ValueError("axes must be an invertible matrix (condition number <= 1e12).")
        object.__setattr__(self, "center", center)
        object.__setattr__(self, "axes", axes)
        object.__setattr__(self, "inverse", np.linalg.inv(axes))

    @property
    def dim(self) -> int:
        return self.center.shape[0]

    def to_box(self, q: np.ndarray) -> np.ndarray:
        """Map points (rows, or one point) from parameter space to box coordinates."""
        return (np.asarray(q, dtype=np.float64) - self.center) @ self.inverse.T

    def from_box(self, u: np.ndarray) -> np.ndarray:
        """Map points (rows, or one point) from box coordinates to parameter space."""
        return self.center + np.asarray(u, dtype=np.float64) @ self.axes.T

    def gradient_from_box(self, grad_u: np.ndarray) -> np.ndarray:
        """Chain rule: ``dU/dq = axes^{-T} dU/du`` (rows, or one gradient)."""
        return np.asarray(grad_u) @ self.inverse


def principal_box(
    mean: np.ndarray, cov: np.ndarray, k: float = 3.0
) -> tuple[Domain, BoxTransform]:
    """A box of half-width ``k`` standard deviations along the principal axes of ``cov``.

    Returns the domain ``[-k, k]^d`` in box coordinates and the transform
    ``q = mean + V diag(sqrt(lambda)) u`` (``cov = V diag(lambda) V^T``). Under
    ``N(mean, cov)`` the box holds probability ``(2 Phi(k) - 1)^d``: choose ``k`` for the
    probability wanted (sparse-grid-hmc §3.5 takes the Laplace approximation).

    Parameters
    ----------
    mean : ndarray of shape (d,)
    cov : ndarray of shape (d, d)
        Symmetric positive (semi-)definite; eigenvalues below ``1e-12`` of the largest are
        lifted to it, so that a degenerate direction still gives a thin, invertible box.
    k : float
        Half-width in standard deviations.
    """
    mean = np.asarray(mean, dtype=np.float64).reshape(-1)
    cov = np.asarray(cov, dtype=np.float64)
    d = mean.shape[0]
    if cov.shape != (d, d):
        raise ValueError(f"cov must have shape ({d}, {d}) to match mean; got {cov.shape}.")
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(cov))):
        raise ValueError("mean and cov must be finite.")
    if not np.isfinite(k) or k <= 0:
        raise ValueError(f"k must be a positive number of standard deviations; got {k!r}.")
    vals, vecs = np.linalg.eigh(0.5 * (cov + cov.T))
    if vals[-1] <= 0:
        raise ValueError("cov must have a positive eigenvalue.")
    vals = np.maximum(vals, 1e-12 * vals[-1])
    # Each eigenvector's largest entry positive: the same box on every platform.
    signs = np.sign(vecs[np.argmax(np.abs(vecs), axis=0), np.arange(d)])
    axes = vecs * signs * np.sqrt(vals)
    return Domain(np.full(d, -float(k)), np.full(d, float(k))), BoxTransform(mean, axes)


class _BoxGrid:
    """What both grids share: the box and its transform, the node check, the interpolant in
    unit coordinates ``x = (u - lower) / (upper - lower)`` in ``[0, 1]^d``, save and load."""

    has_level = True  # fitted to values: the absolute level of U is meaningful

    def __init__(self, max_nodes: int, transform: BoxTransform | None):
        if int(max_nodes) != max_nodes or max_nodes < 1:
            raise ValueError(f"max_nodes must be a positive integer; got {max_nodes!r}.")
        if transform is not None and not isinstance(transform, BoxTransform):
            raise ValueError(
                f"transform must be a BoxTransform (see principal_box) or None; got {transform!r}."
            )
        self.max_nodes = int(max_nodes)
        self.transform = transform

    # -- design ---------------------------------------------------------------------------
    def design(self, domain: Domain) -> np.ndarray:
        """The nodes (n, d) at which the true potential must be evaluated, in parameter space.

        ``domain`` is in box coordinates when the grid has a ``transform``. ``fit`` needs the
        potentials at exactly these nodes, in this order.
        """
        lower, upper = _check_domain(domain)
        d = lower.shape[0]
        if self.transform is not None and self.transform.dim != d:
            raise ValueError(
                f"the domain has {d} dimensions but the transform {self.transform.dim}."
            )
        self._check_dim(d)
        unit_nodes = self._design_unit(d)
        self.domain_ = Domain(lower, upper)
        width = upper - lower
        u = lower + unit_nodes * width
        self.nodes_ = u if self.transform is None else self.transform.from_box(u)
        self.n_nodes_ = self.nodes_.shape[0]
        self.n_features_in_ = d
        # q -> x in one affine map, and its transpose for the gradient (the chain rule).
        inv_width = 1.0 / width
        if self.transform is None:
            self._map = None
            self._offset = lower
            self._inv_width = inv_width
        else:
            self._map = inv_width[:, None] * self.transform.inverse
            self._offset = self.transform.center + self.transform.axes @ lower
        for name in ("values_", "surpluses_", "surplus_by_level_"):
            self.__dict__.pop(name, None)  # a new design invalidates an earlier fit
        return self.nodes_

    # -- fit ------------------------------------------------------------------------------
    def fit(
        self,
        positions: np.ndarray,
        potentials: np.ndarray | None = None,
        gradients: np.ndarray | None = None,
        sample_weight: np.ndarray | None = None,
    ):
        """Interpolate the potentials at the design nodes.

        Parameters
        ----------
        positions : ndarray of shape (n, d)
            Exactly the nodes returned by ``design``, in the same order.
        potentials : ndarray of shape (n,)
            ``U = -logp`` at the nodes; all finite.
        gradients, sample_weight : ignored
            Accepted for the ``Surrogate`` protocol: the interpolant uses values only.

        Returns
        -------
        self
        """
        if not hasattr(self, "nodes_"):
            raise ValueError("call design(domain) before fit: the grid has no nodes yet.")
        if potentials is None:
            raise ValueError(f"{type(self).__name__} needs the potentials at the design nodes.")
        positions = np.asarray(positions, dtype=np.float64)
        nodes = self.nodes_
        if positions.shape != nodes.shape:
            raise ValueError(
                f"positions must be the {nodes.shape[0]} design nodes of shape {nodes.shape}, "
                f"in the order design() returned them; got shape {positions.shape}."
            )
        # Rounding only: relative to each coordinate's size and to the grid's extent in it.
        scale = np.abs(nodes) + (nodes.max(axis=0) - nodes.min(axis=0))
        off = np.abs(positions - nodes) > _NODE_TOLERANCE * scale
        if np.any(off):
            row = int(np.argmax(off.any(axis=1)))
            raise ValueError(
                "positions must be the design nodes in the order design() returned them: "
                f"row {row} is {positions[row].tolist()} but node {row} is {nodes[row].tolist()}."
            )
        values = np.asarray(potentials, dtype=np.float64).reshape(-1)
        if values.shape[0] != nodes.shape[0]:
            raise ValueError(
                f"potentials must have one value per node ({nodes.shape[0]}); "
                f"got {values.shape[0]}."
            )
        bad = ~np.isfinite(values)
        if np.any(bad):
            first = int(np.argmax(bad))
            raise ValueError(
                f"{int(bad.sum())} of {values.shape[0]} potentials at the nodes are not finite; "
                f"the first at node {first}, q = {nodes[first].tolist()} (U = {values[first]}). "
                "Shrink the domain to where the model's log-density is finite."
            )
        self.values_ = values.copy()
        self._fit_values(self.values_)
        return self

    # -- evaluation -----------------------------------------------------------------------
    def _to_unit(self, q: np.ndarray) -> np.ndarray:
        if self._map is None:
            return (q - self._offset) * self._inv_width
        return (q - self._offset) @ self._map.T

    def _grad_to_q(self, grad_x: np.ndarray) -> np.ndarray:
        if self._map is None:
            return grad_x * self._inv_width
        return grad_x @ self._map

    def value_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """Interpolated potential and its gradient at one position ``q`` of shape (d,).

        The interpolant is piecewise multilinear; on a cell face the gradient is the one of
        the cell above (a right derivative). Outside the domain the boundary cells are
        continued linearly: the step should use the exact potential there (``contains``).
        """
        self._check_fitted()
        q = np.asarray(q, dtype=np.float64)
        if q.size != self.n_features_in_:
            raise ValueError(f"q must have {self.n_features_in_} entries; got shape {q.shape}.")
        x = self._to_unit(q.reshape(1, -1))
        value, grad_x = self._unit_value_and_grad(x)
        return float(value[0]), self._grad_to_q(grad_x[0])

    def value_and_grad_many(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Values (n,) and gradients (n, d) at the rows of ``positions`` (n, d)."""
        self._check_fitted()
        positions = np.atleast_2d(np.asarray(positions, dtype=np.float64))
        if positions.ndim != 2 or positions.shape[1] != self.n_features_in_:
            raise ValueError(
                f"positions must have shape (n, {self.n_features_in_}); got {positions.shape}."
            )
        x = self._to_unit(positions)
        step = max(1, _CHUNK_ELEMENTS // max(1, self._terms_per_point() * x.shape[1]))
        values = np.empty(x.shape[0])
        grads = np.empty_like(x)
        for start in range(0, x.shape[0], step):
            values[start : start + step], grads[start : start + step] = self._unit_value_and_grad(
                x[start : start + step]
            )
        return values, self._grad_to_q(grads)

    def predict(self, positions: np.ndarray) -> np.ndarray:
        """Interpolated potentials (n,) at the rows of ``positions``."""
        return self.value_and_grad_many(positions)[0]

    def contains(self, q: np.ndarray) -> bool:
        """Whether ``q`` (d,) lies in the domain box (in box coordinates)."""
        if not hasattr(self, "domain_"):
            raise ValueError("call design(domain) first: the grid has no domain yet.")
        x = self._to_unit(np.asarray(q, dtype=np.float64).reshape(1, -1))[0]
        return bool(np.all((x >= -_FACE_TOLERANCE) & (x <= 1.0 + _FACE_TOLERANCE)))

    def _check_fitted(self) -> None:
        if not hasattr(self, "values_"):
            raise ValueError(
                f"this {type(self).__name__} is not fitted: call design(domain), evaluate the "
                "potential at the nodes, then fit(nodes, potentials)."
            )

    # -- persistence ----------------------------------------------------------------------
    def save(self, path: str | PathLike) -> str:
        """Write the fitted grid to an ``.npz`` file; returns the path written (numpy adds
        the ``.npz`` suffix when it is missing)."""
        self._check_fitted()
        transform = self.transform
        np.savez(
            path,
            kind=np.array(type(self).__name__),
            nodes=self.nodes_,
            values=self.values_,
            lower=self.domain_.lower,
            upper=self.domain_.upper,
            center=np.zeros(0) if transform is None else transform.center,
            axes=np.zeros((0, 0)) if transform is None else transform.axes,
            max_nodes=np.array(self.max_nodes),
            **{name: np.asarray(value) for name, value in self._settings().items()},
        )
        path = str(path)
        return path if path.endswith(".npz") else path + ".npz"

    @classmethod
    def load(cls, path: str | PathLike):
        """Restore a grid written by ``save``: same nodes, same values, same interpolant."""
        with np.load(path, allow_pickle=False) as data:
            stored = {name: data[name] for name in data.files}
        kind = str(stored["kind"])
        if kind != cls.__name__:
            raise ValueError(f"{path} holds a {kind}, not a {cls.__name__}.")
        transform = None
        if stored["center"].size:
            transform = BoxTransform(stored["center"], stored["axes"])
        grid = cls(
            max_nodes=int(stored["max_nodes"]),
            transform=transform,
            **cls._settings_from(stored),
        )
        nodes = grid.design(Domain(stored["lower"], stored["upper"]))
        if nodes.shape != stored["nodes"].shape or not np.allclose(
            nodes, stored["nodes"], rtol=_NODE_TOLERANCE, atol=0.0
        ):
            raise ValueError(f"{path}: the stored nodes do not match the stored settings.")
        return grid.fit(nodes, stored["values"])

    # -- what each grid supplies ----------------------------------------------------------
    def _check_dim(self, d: int) -> None:
        pass

    def _design_unit(self, d: int) -> np.ndarray:
        raise NotImplementedError

    def _fit_values(self, values: np.ndarray) -> None:
        raise NotImplementedError

    def _terms_per_point(self) -> int:
        raise NotImplementedError

    def _unit_value_and_grad(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _settings(self) -> dict:
        raise NotImplementedError

    @classmethod
    def _settings_from(cls, stored: dict) -> dict:
        raise NotImplementedError


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


def _sum_of_products(
    weight: np.ndarray, factor: np.ndarray, slope: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``sum_t w_t prod_k f_kt`` and its gradient ``sum_t w_t s_kt prod_{j != k} f_jt``.

    ``weight`` (n, T, 1), ``factor`` (n, d, T), ``slope`` (n or 1, d, T): the 1-d factors
    of T tensor-product basis functions at n points and their derivatives. The loops run
    over the d dimensions on (n, T) slices: a reduction along a short last axis costs more.
    """
    d = factor.shape[1]
    if d == 1:
        return np.matmul(factor, weight)[:, 0, 0], np.matmul(slope, weight)[:, :, 0]
    # Products of the factors before and after each dimension (no division: a hat is zero
    # on the nodes of coarser levels, the domain's centre among them).
    factors = [factor[:, k] for k in range(d)]
    before = [None, factors[0]]
    for k in range(2, d):
        before.append(before[-1] * factors[k - 1])
    after = [factors[d - 1]]
    for k in range(d - 3, -1, -1):
        after.append(after[-1] * factors[k + 1])
    after.reverse()  # after[k]: product of the factors after dimension k, k < d - 1
    others = np.empty_like(factor)
    others[:, 0] = after[0]
    others[:, d - 1] = before[d - 1]
    for k in range(1, d - 1):
        np.multiply(before[k], after[k], out=others[:, k])
    value = np.matmul((before[d - 1] * factors[d - 1])[:, None, :], weight)[:, 0, 0]
    others *= slope
    return value, np.matmul(others, weight)[:, :, 0]


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


def _check_domain(domain: Domain) -> tuple[np.ndarray, np.ndarray]:
    try:
        lower, upper = domain
    except (TypeError, ValueError):
        raise ValueError(f"domain must be a Domain(lower, upper); got {domain!r}.") from None
    lower = np.atleast_1d(np.asarray(lower, dtype=np.float64))
    upper = np.atleast_1d(np.asarray(upper, dtype=np.float64))
    if lower.ndim != 1 or lower.shape != upper.shape or lower.size == 0:
        raise ValueError(
            f"domain lower and upper must be 1-d arrays of one shape; got {lower.shape} "
            f"and {upper.shape}."
        )
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
        raise ValueError("domain bounds must be finite: a grid needs a bounded box.")
    if np.any(upper <= lower):
        k = int(np.argmax(upper <= lower))
        raise ValueError(
            f"domain upper must exceed lower in every dimension; dimension {k} has "
            f"[{lower[k]}, {upper[k]}]."
        )
    return lower, upper
