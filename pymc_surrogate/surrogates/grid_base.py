"""What every grid interpolant shares: its box, design, fit, evaluation, save and load."""

from __future__ import annotations

from os import PathLike

import numpy as np

from pymc_surrogate.surrogates.base import Domain
from pymc_surrogate.surrogates.box import _FACE_TOLERANCE, BoxTransform, check_domain

__all__ = ["_BoxGrid"]

# Positions handed to ``fit`` may differ from the nodes by rounding only.
_NODE_TOLERANCE = 1e-10
# value_and_grad_many works in chunks of (points, terms, d) arrays this size: 512 kB fit
# in cache (d = 5, 252 terms: 8 us a point against 33 us with 32 MB arrays).
_CHUNK_ELEMENTS = 65_536


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
        lower, upper = check_domain(domain)
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
