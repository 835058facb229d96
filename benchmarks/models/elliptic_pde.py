"""Elliptic PDE inverse problem (log-diffusivity field) as a PyMC model.

This is the benchmark of Zhang, Shahbaba & Zhao (RNS-HMC, §5.2) and of
Zhang et al. (sparse-grid HMC, §4.4), both following Dashti & Stuart (2011).
The forward model is

.. math::

    \\nabla\\cdot\\big(c(x, \\theta)\\, \\nabla u(x, \\theta)\\big) = 0,
    \\qquad x = (x_1, x_2) \\in [0, 1]^2,

with Dirichlet data :math:`u = x_1` on :math:`x_2 = 0`, :math:`u = 1 - x_1` on
:math:`x_2 = 1` and zero flux :math:`\\partial u / \\partial x_1 = 0` on the
sides :math:`x_1 \\in \\{0, 1\\}`.  The log-diffusivity is a truncated
Karhunen-Loève (KL) expansion of a zero-mean Gaussian field with squared-
exponential covariance (variance 1, length scale 0.2),

.. math::

    \\log c(x, \\theta) = \\sum_{k=1}^{d} \\theta_k \\sqrt{\\lambda_k}\\, \\phi_k(x),
    \\qquad \\theta_k \\sim \\mathcal{N}(0, 0.5^2).

Observations are :math:`u` on a uniform 11 x 11 grid "covering the unit
square" plus :math:`\\mathcal{N}(0, 0.1^2)` noise.  We read "covering" as the
grid ``linspace(0, 1, 11)`` in each direction, *including* the boundary
points (this is the default, ``obs_include_boundary=True``).  The 22 points on
:math:`x_2 \\in \\{0, 1\\}` then carry no information about :math:`\\theta`
(their mean is fixed by the Dirichlet data) but are kept so that N = 121 as in
the papers.  ``obs_include_boundary=False`` gives the alternative reading: an
11 x 11 grid of strictly interior points ``linspace(0, 1, 13)[1:-1]``.

Numerics
--------
* KL modes: the squared-exponential kernel on the square is separable,
  :math:`C(x, y) = k(x_1, y_1)\\,k(x_2, y_2)`, so the 2-D eigenpairs are
  products of 1-D eigenpairs.  The 1-D integral operator on [0, 1] is
  discretised by Nyström with Gauss-Legendre quadrature, and eigenfunctions
  are evaluated at *arbitrary* points through the Nyström interpolation
  formula.  The basis therefore does not depend on any mesh, and the
  data-generating fine mesh and the inference mesh use exactly the same
  field.
* Solver: bilinear (Q1) finite elements on a uniform ``n x n`` mesh with the
  diffusivity piecewise constant per element (evaluated at element centres).
  Everything that does not depend on :math:`\\theta` is precomputed: the
  sparsity pattern, a sparse matrix mapping element coefficients to the CSC
  data array of the reduced stiffness matrix, the Dirichlet lift, and the
  bilinear-interpolation observation operator.  A solve is then one sparse
  mat-vec, one ``splu`` and one triangular solve pair.
* Gradients: adjoint method.  The LU factorisation of the last forward solve is
  cached (keyed on :math:`\\theta`), so a vector-Jacobian product at the same
  :math:`\\theta` -- which is what PyMC's joint ``logp``/``dlogp`` evaluation
  does -- costs a single extra pair of triangular solves.

Evaluation counters (``n_forward``, ``n_adjoint``, ``n_factorizations``) live
on the :class:`EllipticPDEProblem` object and are incremented where the work
happens.  Note that PyMC unpickles a separate copy of the problem in every
worker process when sampling with ``cores > 1``; counters of the parent
object then only see work done in the parent process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray
from pytensor.gradient import grad_not_implemented
from pytensor.graph.basic import Apply
from scipy.sparse.linalg import splu

from pymc_surrogate.compat import VJPOp

__all__ = [
    "KLBasis",
    "EllipticPDEProblem",
    "PDEData",
    "PDEModelInfo",
    "PDEForwardOp",
    "PDEForwardAdjointOp",
    "PDEVJPOp",
    "observation_points",
    "make_data",
    "make_pde_model",
    "q1_element_stiffness",
    "assemble_q1_stiffness",
]

DEFAULT_DATA_SEED = 2015

# Stiffness matrix of -div(grad) for a bilinear element on a square, local
# node order (0,0), (1,0), (1,1), (0,1).  In 2-D it is independent of the
# element size h, so the global matrix is sum_e c_e * K_REF scattered.
_K_REF = (
    np.array(
        [
            [4.0, -1.0, -2.0, -1.0],
            [-1.0, 4.0, -1.0, -2.0],
            [-2.0, -1.0, 4.0, -1.0],
            [-1.0, -2.0, -1.0, 4.0],
        ]
    )
    / 6.0
)


def q1_element_stiffness() -> NDArray[np.float64]:
    """Return the 4 x 4 Q1 stiffness matrix of a unit-coefficient square.

    Local node order is (0, 0), (1, 0), (1, 1), (0, 1) (counter-clockwise).

    Returns
    -------
    numpy.ndarray
        Copy of the reference element stiffness matrix.
    """
    return _K_REF.copy()


def _mesh_connectivity(n: int) -> NDArray[np.int64]:
    """Node indices (n*n, 4) of each element; node (i, j) has index i + (n+1) j."""
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="xy")
    i = i.ravel()
    j = j.ravel()  # element e = i + n j
    n1 = n + 1
    return np.stack(
        [i + n1 * j, i + 1 + n1 * j, i + 1 + n1 * (j + 1), i + n1 * (j + 1)], axis=1
    ).astype(np.int64)


def assemble_q1_stiffness(n: int, c: ArrayLike) -> sp.csr_matrix:
    """Assemble the full (unconstrained) Q1 stiffness matrix, vectorised.

    Reference implementation (no boundary conditions) used for testing and
    for non-standard boundary conditions; :class:`EllipticPDEProblem` uses a
    faster precomputed scatter of the same entries.

    Parameters
    ----------
    n : int
        Number of elements per side of the uniform mesh on [0, 1]^2.
    c : array_like, shape (n*n,)
        Piecewise-constant coefficient, element ``e = i + n*j``.

    Returns
    -------
    scipy.sparse.csr_matrix
        ``(n+1)^2 x (n+1)^2`` stiffness matrix; node ``(i, j)`` has index
        ``i + (n+1)*j`` and coordinates ``(i/n, j/n)``.
    """
    c = np.asarray(c, dtype=float).ravel()
    conn = _mesh_connectivity(n)
    rows = np.repeat(conn, 4, axis=1).ravel()
    cols = np.tile(conn, (1, 4)).ravel()
    vals = (c[:, None] * _K_REF.ravel()[None, :]).ravel()
    nn = (n + 1) ** 2
    return sp.coo_matrix((vals, (rows, cols)), shape=(nn, nn)).tocsr()


def _bilinear_interpolation_matrix(n: int, points: NDArray[np.float64]) -> sp.csr_matrix:
    """Sparse (n_points, (n+1)^2) matrix of Q1 nodal-basis values at ``points``."""
    pts = np.atleast_2d(np.asarray(points, dtype=float))
    s = pts * n
    # Clip the cell index so that points on x = 1 fall in the last cell.
    cell = np.clip(np.floor(s).astype(np.int64), 0, n - 1)
    t = s - cell  # local coordinates in [0, 1]
    i, j = cell[:, 0], cell[:, 1]
    tx, ty = t[:, 0], t[:, 1]
    n1 = n + 1
    cols = np.stack(
        [i + n1 * j, i + 1 + n1 * j, i + 1 + n1 * (j + 1), i + n1 * (j + 1)], axis=1
    )
    vals = np.stack(
        [(1 - tx) * (1 - ty), tx * (1 - ty), tx * ty, (1 - tx) * ty], axis=1
    )
    rows = np.repeat(np.arange(len(pts)), 4)
    m = sp.coo_matrix((vals.ravel(), (rows, cols.ravel())), shape=(len(pts), n1 * n1))
    m = m.tocsr()
    m.eliminate_zeros()
    return m


def observation_points(n_per_side: int = 11, include_boundary: bool = True) -> NDArray[np.float64]:
    """Uniform grid of observation locations on the unit square.

    Parameters
    ----------
    n_per_side : int, default 11
        Number of points per direction.
    include_boundary : bool, default True
        If True the grid is ``linspace(0, 1, n_per_side)`` (the papers'
        "uniform 11 x 11 grid covering the unit square", boundary included);
        otherwise the strictly interior ``linspace(0, 1, n_per_side + 2)[1:-1]``.

    Returns
    -------
    numpy.ndarray, shape (n_per_side**2, 2)
        Points ``(x1, x2)``, x1 varying fastest.
    """
    if include_boundary:
        g = np.linspace(0.0, 1.0, n_per_side)
    else:
        g = np.linspace(0.0, 1.0, n_per_side + 2)[1:-1]
    x1, x2 = np.meshgrid(g, g, indexing="xy")
    return np.column_stack([x1.ravel(), x2.ravel()])


class KLBasis:
    """Truncated KL basis of a squared-exponential Gaussian field on [0, 1]^2.

    Uses separability of the kernel: 2-D eigenpairs are products
    ``(mu_i mu_j, psi_i(x1) psi_j(x2))`` of the 1-D pairs, which are computed by
    Nyström on Gauss-Legendre nodes.  Modes are sorted by decreasing eigenvalue,
    ties broken by ``(i + j, i)``, so the basis is deterministic.  Symmetry of
    the square makes ``(i, j)`` and ``(j, i)`` exactly degenerate for
    ``i != j``; a truncation may split such a pair (e.g. ``d = 5`` keeps
    ``(0, 2)`` but not ``(2, 0)``), exactly as a generic eigensolver would
    keep an arbitrary vector of the degenerate eigenspace.  ``d = 20`` ends on
    the non-degenerate mode ``(3, 3)``.

    Parameters
    ----------
    n_modes : int
        Number of retained 2-D modes ``d``.
    length_scale : float, default 0.2
        Kernel length scale ``l`` in ``exp(-|x - y|^2 / (2 l^2))``.
    variance : float, default 1.0
        Kernel variance ``sigma^2``.
    n_quad : int, default 64
        Number of 1-D Gauss-Legendre nodes for the Nyström discretisation.

    Attributes
    ----------
    eigenvalues : numpy.ndarray, shape (n_modes,)
        2-D eigenvalues ``lambda_k`` (decreasing).
    index_pairs : numpy.ndarray, shape (n_modes, 2)
        1-D mode indices ``(i, j)`` of each 2-D mode (``i`` along ``x1``).
    """

    def __init__(
        self,
        n_modes: int,
        length_scale: float = 0.2,
        variance: float = 1.0,
        n_quad: int = 64,
    ) -> None:
        if n_modes < 1:
            raise ValueError("n_modes must be >= 1")
        self.n_modes = int(n_modes)
        self.length_scale = float(length_scale)
        self.variance = float(variance)
        self.n_quad = int(n_quad)

        t, w = np.polynomial.legendre.leggauss(self.n_quad)
        self._t = 0.5 * (t + 1.0)  # nodes on [0, 1]
        self._w = 0.5 * w
        sw = np.sqrt(self._w)
        # Symmetric form W^1/2 K W^1/2 keeps eigh applicable.
        k = self._kernel_1d(self._t, self._t)
        mu, v = np.linalg.eigh(sw[:, None] * k * sw[None, :])
        order = np.argsort(mu)[::-1]
        # Every retained 2-D mode uses 1-D indices < n_modes, since
        # mu_i mu_0 >= mu_i mu_j; keep n_modes 1-D modes (at most n_quad).
        m1 = min(self.n_modes, self.n_quad)
        mu = mu[order[:m1]]
        psi_nodes = v[:, order[:m1]] / sw[:, None]  # L2-normalised nodal values
        # Fix signs deterministically: psi(0) > 0 (via the Nyström formula).
        psi0 = self._nystrom_1d(np.zeros(1), mu, psi_nodes)[0]
        psi_nodes = psi_nodes * np.where(psi0 < 0, -1.0, 1.0)[None, :]

        ii, jj = np.meshgrid(np.arange(m1), np.arange(m1), indexing="ij")
        ii, jj = ii.ravel(), jj.ravel()
        lam = self.variance * mu[ii] * mu[jj]
        # Sort by eigenvalue (descending); ties (exact for (i,j)/(j,i) since
        # float multiplication commutes) broken by i + j then i.
        order2 = np.lexsort((ii, ii + jj, -lam))[: self.n_modes]
        if len(order2) < self.n_modes:
            raise ValueError("n_modes too large for n_quad")
        self.eigenvalues = lam[order2]
        self.index_pairs = np.column_stack([ii[order2], jj[order2]])
        # Keep only the 1-D modes actually used: the Nyström formula divides
        # by mu, so unused modes with tiny mu would just carry round-off.
        m_used = int(self.index_pairs.max()) + 1
        if mu[m_used - 1] < 1e-10 * mu[0]:
            raise ValueError(
                f"n_modes={n_modes} needs 1-D KL modes with eigenvalue ratio "
                f"{mu[m_used - 1] / mu[0]:.1e} < 1e-10; they are not numerically resolved"
            )
        self._mu = mu[:m_used]
        self._psi_nodes = psi_nodes[:, :m_used]

    def _kernel_1d(self, a: NDArray, b: NDArray) -> NDArray:
        return np.exp(-((a[:, None] - b[None, :]) ** 2) / (2.0 * self.length_scale**2))

    def _nystrom_1d(self, x: NDArray, mu: NDArray, psi_nodes: NDArray) -> NDArray:
        # psi(x) = (1/mu) sum_j w_j k(x, t_j) psi(t_j)
        return (self._kernel_1d(x, self._t) * self._w[None, :]) @ psi_nodes / mu[None, :]

    def eigenfunctions_1d(self, x: ArrayLike) -> NDArray[np.float64]:
        """Evaluate the 1-D eigenfunctions at points ``x`` (shape (len(x), m1))."""
        x = np.asarray(x, dtype=float).ravel()
        return self._nystrom_1d(x, self._mu, self._psi_nodes)

    def eigenfunctions(self, points: ArrayLike) -> NDArray[np.float64]:
        """Evaluate the 2-D eigenfunctions ``phi_k`` at arbitrary points.

        Parameters
        ----------
        points : array_like, shape (m, 2)
            Points ``(x1, x2)`` in the unit square.

        Returns
        -------
        numpy.ndarray, shape (m, n_modes)
            ``phi_k(points)``, normalised in L2([0, 1]^2).
        """
        p = np.atleast_2d(np.asarray(points, dtype=float))
        f1 = self.eigenfunctions_1d(p[:, 0])
        f2 = self.eigenfunctions_1d(p[:, 1])
        return f1[:, self.index_pairs[:, 0]] * f2[:, self.index_pairs[:, 1]]

    def design_matrix(self, points: ArrayLike) -> NDArray[np.float64]:
        """Matrix ``Phi`` with ``log c(points) = Phi @ theta``.

        Returns
        -------
        numpy.ndarray, shape (m, n_modes)
            ``sqrt(lambda_k) phi_k(points)``.
        """
        return self.eigenfunctions(points) * np.sqrt(self.eigenvalues)[None, :]


class EllipticPDEProblem:
    """Q1 finite-element forward model and adjoint gradients.

    Plain picklable Python object: the only unpicklable state (the cached
    ``splu`` factorisation) is dropped on pickling and rebuilt lazily.

    Parameters
    ----------
    n_modes : int, default 20
        Number of KL modes ``d`` (dimension of ``theta``).
    mesh_size : int, default 30
        Elements per side ``n`` of the uniform mesh.
    length_scale, variance : float
        Squared-exponential kernel parameters of the log-diffusivity prior.
    obs_per_side : int, default 11
        Observation grid is ``obs_per_side x obs_per_side``.
    obs_include_boundary : bool, default True
        See :func:`observation_points`.
    n_quad : int, default 64
        1-D Nyström quadrature size for the KL basis.

    Attributes
    ----------
    n_forward, n_adjoint, n_factorizations : int
        Counters of forward-model evaluations (calls of :meth:`forward`,
        also via :meth:`forward_and_vjp` and :meth:`jacobian`), of adjoint
        solves (:meth:`vjp`), and of LU factorisations actually performed
        (a ``vjp`` at the last forward point re-uses the cached factors).
        :meth:`solve_nodal` (diagnostics) only touches ``n_factorizations``.
    obs_points : numpy.ndarray, shape (n_obs, 2)
    basis : KLBasis
    """

    def __init__(
        self,
        n_modes: int = 20,
        mesh_size: int = 30,
        length_scale: float = 0.2,
        variance: float = 1.0,
        obs_per_side: int = 11,
        obs_include_boundary: bool = True,
        n_quad: int = 64,
    ) -> None:
        n = int(mesh_size)
        if n < 2:
            raise ValueError("mesh_size must be >= 2 (need interior nodes)")
        self.n_modes = int(n_modes)
        self.mesh_size = n
        self.basis = KLBasis(n_modes, length_scale, variance, n_quad)
        self.obs_points = observation_points(obs_per_side, obs_include_boundary)
        self.n_obs = len(self.obs_points)
        self.reset_counters()
        self._cache: tuple | None = None

        n1 = n + 1
        h = 1.0 / n
        xs = np.arange(n1) * h
        node_i, node_j = np.meshgrid(np.arange(n1), np.arange(n1), indexing="xy")
        node_i, node_j = node_i.ravel(), node_j.ravel()
        self.nodes = np.column_stack([xs[node_i], xs[node_j]])
        n_elem = n * n

        # Element centres and the (n_elem, d) map theta -> log c_e.
        centres_1d = (np.arange(n) + 0.5) * h
        cx, cy = np.meshgrid(centres_1d, centres_1d, indexing="xy")
        self.element_centres = np.column_stack([cx.ravel(), cy.ravel()])
        self.Phi = self.basis.design_matrix(self.element_centres)

        # Dirichlet nodes: bottom (x2 = 0) and top (x2 = 1) rows.
        dirichlet = (node_j == 0) | (node_j == n)
        free = ~dirichlet
        self.free_nodes = np.flatnonzero(free)
        self.dirichlet_nodes = np.flatnonzero(dirichlet)
        self.n_free = len(self.free_nodes)
        x1 = self.nodes[:, 0]
        u_dir = np.where(node_j == 0, x1, 1.0 - x1)
        u_dir[free] = 0.0
        self._u_dirichlet_full = u_dir  # full-length vector, zero at free nodes

        self._conn = _mesh_connectivity(n)
        self._build_pattern(self.free_nodes)
        # Fill-reducing ordering: the sparsity pattern is independent of theta,
        # so compute a symmetric minimum-degree ordering once (from a trial
        # factorisation), renumber the free nodes by it and factor with
        # permc_spec="NATURAL" thereafter (saves the ordering on every solve).
        trial = splu(
            self.stiffness(np.ones(n_elem)),
            permc_spec="MMD_AT_PLUS_A",
            diag_pivot_thresh=0.0,
            options={"SymmetricMode": True},
        )
        self.free_nodes = self.free_nodes[np.argsort(trial.perm_c)]
        self._build_pattern(self.free_nodes)

        # Observation operator split into free part and a constant offset.
        O = _bilinear_interpolation_matrix(n, self.obs_points).tocsc()
        self._O_free = O[:, self.free_nodes].tocsr()
        self._O_free_T = self._O_free.T.tocsr()
        self._obs_offset = O @ u_dir

    def _build_pattern(self, free_nodes: NDArray[np.int64]) -> None:
        """Precompute theta-independent assembly maps for a free-node numbering."""
        nf = len(free_nodes)
        n_elem = len(self._conn)
        full_to_free = -np.ones(len(self.nodes), dtype=np.int64)
        full_to_free[free_nodes] = np.arange(nf)
        conn = self._conn
        rows = np.repeat(conn, 4, axis=1).ravel()
        cols = np.tile(conn, (1, 4)).ravel()
        elem = np.repeat(np.arange(n_elem), 16)
        kval = np.tile(_K_REF.ravel(), n_elem)
        fr, fc = full_to_free[rows], full_to_free[cols]

        # Free-free block: CSC pattern plus a sparse map c -> A.data, so that
        # assembly is a single mat-vec (duplicate entries summed in advance).
        m = (fr >= 0) & (fc >= 0)
        key = fc[m] * nf + fr[m]  # column-major key -> CSC ordering
        ukey, inv = np.unique(key, return_inverse=True)
        self._A_indices = (ukey % nf).astype(np.int32)
        self._A_indptr = np.searchsorted(ukey // nf, np.arange(nf + 1)).astype(np.int32)
        self._c_to_Adata = sp.csr_matrix((kval[m], (inv, elem[m])), shape=(len(ukey), n_elem))
        # Free-Dirichlet block: the lifted right-hand side b = -A_fd u_d is
        # linear in c, so precompute B with b = B @ c.
        m = (fr >= 0) & (fc < 0)
        u_dir = self._u_dirichlet_full
        self._c_to_rhs = sp.csr_matrix(
            (-kval[m] * u_dir[cols[m]], (fr[m], elem[m])), shape=(nf, n_elem)
        )

    # ------------------------------------------------------------------ utils
    def reset_counters(self) -> None:
        """Set ``n_forward``, ``n_adjoint`` and ``n_factorizations`` to zero."""
        self.n_forward = 0
        self.n_adjoint = 0
        self.n_factorizations = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = None  # SuperLU objects are not picklable
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _theta(self, theta: ArrayLike) -> NDArray[np.float64]:
        th = np.ascontiguousarray(theta, dtype=np.float64).ravel()
        if th.shape != (self.n_modes,):
            raise ValueError(f"theta must have shape ({self.n_modes},), got {th.shape}")
        return th

    def log_diffusivity(self, theta: ArrayLike, points: ArrayLike | None = None) -> NDArray[np.float64]:
        """Evaluate ``log c(x, theta)``.

        Parameters
        ----------
        theta : array_like, shape (n_modes,)
        points : array_like, shape (m, 2), optional
            Evaluation points; default: the element centres of this mesh.

        Returns
        -------
        numpy.ndarray, shape (m,)
        """
        th = self._theta(theta)
        if points is None:
            return self.Phi @ th
        return self.basis.design_matrix(points) @ th

    def stiffness(self, c: ArrayLike) -> sp.csc_matrix:
        """Reduced (free-free) stiffness matrix for element coefficients ``c``."""
        data = self._c_to_Adata @ np.asarray(c, dtype=float)
        nf = self.n_free
        return sp.csc_matrix((data, self._A_indices, self._A_indptr), shape=(nf, nf))

    def _solve(self, th: NDArray[np.float64]) -> tuple[Any, NDArray, NDArray]:
        """Factor and solve at ``th``; returns (lu, u_free, c). Uses the cache."""
        if self._cache is not None and np.array_equal(self._cache[0], th):
            return self._cache[1], self._cache[2], self._cache[3]
        c = np.exp(self.Phi @ th)
        A = self.stiffness(c)
        b = self._c_to_rhs @ c
        # A is SPD and already in fill-reducing order: no pivoting needed.
        lu = splu(
            A, permc_spec="NATURAL", diag_pivot_thresh=0.0, options={"SymmetricMode": True}
        )
        self.n_factorizations += 1
        u_free = lu.solve(b)
        self._cache = (th.copy(), lu, u_free, c)
        return lu, u_free, c

    # --------------------------------------------------------------- public
    def solve_nodal(self, theta: ArrayLike) -> NDArray[np.float64]:
        """Full nodal FE solution (length ``(n+1)^2``, node ``i + (n+1) j``).

        Does not touch the evaluation counters (diagnostic use).
        """
        _, u_free, _ = self._solve(self._theta(theta))
        u = self._u_dirichlet_full.copy()
        u[self.free_nodes] = u_free
        return u

    def forward(self, theta: ArrayLike) -> NDArray[np.float64]:
        """Solve the PDE and return ``u`` at the observation points.

        Parameters
        ----------
        theta : array_like, shape (n_modes,)

        Returns
        -------
        numpy.ndarray, shape (n_obs,)
        """
        self.n_forward += 1
        _, u_free, _ = self._solve(self._theta(theta))
        return self._O_free @ u_free + self._obs_offset

    def vjp(self, theta: ArrayLike, cotangent: ArrayLike) -> NDArray[np.float64]:
        """Vector-Jacobian product ``J(theta)^T cotangent`` by the adjoint method.

        For a scalar ``f(u_obs)`` with ``cotangent = df/du_obs`` this is
        ``df/dtheta``.  Costs one adjoint solve, reusing the cached LU
        factorisation if ``theta`` equals the last solved point (otherwise the
        forward problem is re-factored and re-solved first).

        Parameters
        ----------
        theta : array_like, shape (n_modes,)
        cotangent : array_like, shape (n_obs,)

        Returns
        -------
        numpy.ndarray, shape (n_modes,)
        """
        self.n_adjoint += 1
        th = self._theta(theta)
        g = np.asarray(cotangent, dtype=np.float64).ravel()
        lu, u_free, c = self._solve(th)
        # Adjoint: A^T lam = O_f^T g.  Then with residual r = A(c) u_f - b(c),
        # df/dc_e = -lam^T dr/dc_e = -lam_e^T K_ref u_e (element-local, lam = 0
        # on Dirichlet nodes, u including Dirichlet values).
        lam_free = lu.solve(self._O_free_T @ g, trans="T")
        lam = np.zeros(len(self.nodes))
        lam[self.free_nodes] = lam_free
        u = self._u_dirichlet_full.copy()
        u[self.free_nodes] = u_free
        lam_loc = lam[self._conn]
        u_loc = u[self._conn]
        df_dc = -np.einsum("ea,ea->e", lam_loc, u_loc @ _K_REF.T)
        # c = exp(Phi theta)  =>  df/dtheta = Phi^T (c * df/dc).
        return self.Phi.T @ (c * df_dc)

    def forward_and_vjp(
        self, theta: ArrayLike, cotangent: ArrayLike
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Return ``(forward(theta), vjp(theta, cotangent))`` with one factorisation."""
        return self.forward(theta), self.vjp(theta, cotangent)

    def jacobian(self, theta: ArrayLike) -> NDArray[np.float64]:
        """Dense Jacobian ``du_obs/dtheta`` (n_obs, n_modes), via ``n_modes`` tangent solves.

        Diagnostic helper (e.g. Fisher metrics); counts as one forward solve.
        """
        self.n_forward += 1
        th = self._theta(theta)
        lu, u_free, c = self._solve(th)
        u = self._u_dirichlet_full.copy()
        u[self.free_nodes] = u_free
        # dr/dc_e = K_ref u_e scattered to free rows: build (nf, n_elem) matrix.
        ku = u[self._conn] @ _K_REF.T  # (n_elem, 4)
        rows = self._conn.ravel()
        keep = np.isin(rows, self.free_nodes)
        f2f = -np.ones(len(self.nodes), dtype=np.int64)
        f2f[self.free_nodes] = np.arange(self.n_free)
        elem = np.repeat(np.arange(len(self._conn)), 4)
        dr_dc = sp.csr_matrix(
            (ku.ravel()[keep], (f2f[rows[keep]], elem[keep])),
            shape=(self.n_free, len(self._conn)),
        )
        dr_dtheta = (dr_dc @ (c[:, None] * self.Phi))
        du_free = -lu.solve(np.asarray(dr_dtheta))
        return np.asarray(self._O_free @ du_free)


# ---------------------------------------------------------------------- data
@dataclass
class PDEData:
    """Synthetic data set.

    Attributes
    ----------
    theta_true : numpy.ndarray, shape (n_modes,)
    u_true : numpy.ndarray, shape (n_obs,)
        Noise-free fine-mesh solution at the observation points.
    y : numpy.ndarray, shape (n_obs,)
        Noisy observations.
    obs_points : numpy.ndarray, shape (n_obs, 2)
    noise_sd : float
    mesh_size : int
        Mesh used to generate the data.
    seed : int
    """

    theta_true: NDArray[np.float64]
    u_true: NDArray[np.float64]
    y: NDArray[np.float64]
    obs_points: NDArray[np.float64]
    noise_sd: float
    mesh_size: int
    seed: int


def make_data(
    n_modes: int = 20,
    mesh_size: int = 90,
    seed: int = DEFAULT_DATA_SEED,
    noise_sd: float = 0.1,
    prior_sd: float = 0.5,
    obs_per_side: int = 11,
    obs_include_boundary: bool = True,
    length_scale: float = 0.2,
) -> PDEData:
    """Generate synthetic observations, deterministically given ``seed``.

    ``theta_true ~ N(0, prior_sd^2)`` is drawn first and the noise second from
    one ``numpy.random.default_rng(seed)``.  The PDE is solved on a finer mesh
    (default 90 x 90, i.e. 3x the default inference mesh) to avoid an inverse
    crime; the KL basis is mesh independent, so the true field is the same
    function the inference model parameterises.

    Parameters
    ----------
    n_modes : int, default 20
    mesh_size : int, default 90
        Data-generating mesh size.
    seed : int
    noise_sd : float, default 0.1
    prior_sd : float, default 0.5
    obs_per_side : int, default 11
    obs_include_boundary : bool, default True
    length_scale : float, default 0.2

    Returns
    -------
    PDEData
    """
    rng = np.random.default_rng(seed)
    theta_true = prior_sd * rng.standard_normal(n_modes)
    fine = EllipticPDEProblem(
        n_modes=n_modes,
        mesh_size=mesh_size,
        length_scale=length_scale,
        obs_per_side=obs_per_side,
        obs_include_boundary=obs_include_boundary,
    )
    u_true = fine.forward(theta_true)
    y = u_true + noise_sd * rng.standard_normal(u_true.shape)
    return PDEData(theta_true, u_true, y, fine.obs_points, float(noise_sd), int(mesh_size), int(seed))


# ----------------------------------------------------------------- PyTensor
class PDEForwardOp(VJPOp):
    """Black-box Op ``theta (d,) -> u_obs (n_obs,)`` with no gradient.

    ``pytensor.grad`` through this Op raises ``NullTypeGradError`` -- the
    honest black-box case for gradient-free / surrogate samplers.  Every
    ``perform`` increments ``problem.n_forward``.

    Parameters
    ----------
    problem : EllipticPDEProblem
    """

    def __init__(self, problem: EllipticPDEProblem) -> None:
        self.problem = problem

    def make_node(self, theta: Any) -> Apply:
        theta = pt.as_tensor_variable(theta)
        if theta.ndim != 1:
            raise TypeError("theta must be a vector")
        theta = pt.cast(theta, "float64")
        out = pt.TensorType("float64", shape=(self.problem.n_obs,))()
        return Apply(self, [theta], [out])

    def perform(self, node: Apply, inputs: list, output_storage: list) -> None:
        output_storage[0][0] = self.problem.forward(inputs[0])

    def infer_shape(self, fgraph: Any, node: Apply, input_shapes: list) -> list:
        return [(self.problem.n_obs,)]

    def vjp(self, inputs: list, outputs: list, cotangents: list) -> list:
        return [
            grad_not_implemented(
                self, 0, inputs[0], "black-box PDE forward model: no gradient available"
            )
        ]

    def __str__(self) -> str:
        return f"{type(self).__name__}{{d={self.problem.n_modes}, n={self.problem.mesh_size}}}"


class PDEVJPOp(VJPOp):
    """Op ``(theta, cotangent) -> J(theta)^T cotangent`` by the adjoint method.

    Every ``perform`` increments ``problem.n_adjoint``; it reuses the LU
    factorisation of a forward solve at the same ``theta``.
    """

    def __init__(self, problem: EllipticPDEProblem) -> None:
        self.problem = problem

    def make_node(self, theta: Any, cotangent: Any) -> Apply:
        theta = pt.cast(pt.as_tensor_variable(theta), "float64")
        cotangent = pt.cast(pt.as_tensor_variable(cotangent), "float64")
        out = pt.TensorType("float64", shape=(self.problem.n_modes,))()
        return Apply(self, [theta, cotangent], [out])

    def perform(self, node: Apply, inputs: list, output_storage: list) -> None:
        output_storage[0][0] = self.problem.vjp(inputs[0], inputs[1])

    def infer_shape(self, fgraph: Any, node: Apply, input_shapes: list) -> list:
        return [(self.problem.n_modes,)]

    def vjp(self, inputs: list, outputs: list, cotangents: list) -> list:
        return [
            grad_not_implemented(self, 0, inputs[0], "second derivatives not implemented"),
            grad_not_implemented(self, 1, inputs[1], "second derivatives not implemented"),
        ]


class PDEForwardAdjointOp(PDEForwardOp):
    """Forward Op whose gradient is the adjoint :class:`PDEVJPOp` (NUTS-ready)."""

    def vjp(self, inputs: list, outputs: list, cotangents: list) -> list:
        return [PDEVJPOp(self.problem)(inputs[0], cotangents[0])]


# -------------------------------------------------------------------- model
@dataclass
class PDEModelInfo:
    """Side information returned by :func:`make_pde_model`.

    Supports ``info["problem"]``-style access as well as attributes.

    Attributes
    ----------
    problem : EllipticPDEProblem
        Inference-mesh problem; its counters count model evaluations.
    op : PDEForwardOp
        The Op used in the model (a :class:`PDEForwardAdjointOp` if
        ``gradient=True``).
    theta_true : numpy.ndarray, shape (n_modes,)
    data : numpy.ndarray, shape (n_obs,)
        Observed (noisy) values.
    u_true : numpy.ndarray, shape (n_obs,)
        Noise-free data-mesh values at the observation points.
    obs_points : numpy.ndarray, shape (n_obs, 2)
    grid : numpy.ndarray, shape (n_grid,)
        1-D coordinates of the plotting grid.
    log_c_true : numpy.ndarray, shape (n_grid, n_grid)
        True log-diffusivity, ``log_c_true[j, i] = log c(grid[i], grid[j])``
        (row index is x2, as expected by ``imshow(origin="lower")``).
    noise_sd, prior_sd : float
    data_mesh_size, data_seed : int
    """

    problem: EllipticPDEProblem
    op: PDEForwardOp
    theta_true: NDArray[np.float64]
    data: NDArray[np.float64]
    u_true: NDArray[np.float64]
    obs_points: NDArray[np.float64]
    grid: NDArray[np.float64]
    log_c_true: NDArray[np.float64]
    noise_sd: float
    prior_sd: float
    data_mesh_size: int
    data_seed: int
    extra: dict = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


def make_pde_model(
    n_modes: int = 20,
    mesh_size: int = 30,
    gradient: bool = False,
    data_seed: int = DEFAULT_DATA_SEED,
    noise_sd: float = 0.1,
    prior_sd: float = 0.5,
    data_mesh_size: int = 90,
    obs_include_boundary: bool = True,
    n_grid: int = 101,
) -> tuple[pm.Model, PDEModelInfo]:
    """Build the PyMC model of the elliptic PDE inverse problem.

    ``theta ~ N(0, prior_sd^2)`` (shape ``n_modes``) and
    ``u_obs ~ N(G(theta), noise_sd^2)`` observed, where ``G`` is the
    ``mesh_size`` FE solution at the observation points.

    Parameters
    ----------
    n_modes : int, default 20
        KL truncation ``d`` (the sgHMC paper uses 5).
    mesh_size : int, default 30
        Inference mesh (30 x 30 as in the RNS-HMC paper).
    gradient : bool, default False
        False: black-box :class:`PDEForwardOp` (``pytensor.grad`` raises).
        True: :class:`PDEForwardAdjointOp` with adjoint gradients (NUTS).
    data_seed : int
    noise_sd : float, default 0.1
    prior_sd : float, default 0.5
    data_mesh_size : int, default 90
        Finer data-generating mesh (avoids an inverse crime).
    obs_include_boundary : bool, default True
        See :func:`observation_points`.
    n_grid : int, default 101
        Resolution of the plotting grid for ``info.log_c_true``.

    Returns
    -------
    model : pymc.Model
    info : PDEModelInfo
    """
    data = make_data(
        n_modes=n_modes,
        mesh_size=data_mesh_size,
        seed=data_seed,
        noise_sd=noise_sd,
        prior_sd=prior_sd,
        obs_include_boundary=obs_include_boundary,
    )
    problem = EllipticPDEProblem(
        n_modes=n_modes, mesh_size=mesh_size, obs_include_boundary=obs_include_boundary
    )
    op = PDEForwardAdjointOp(problem) if gradient else PDEForwardOp(problem)

    grid = np.linspace(0.0, 1.0, n_grid)
    gx, gy = np.meshgrid(grid, grid, indexing="xy")
    log_c_true = problem.log_diffusivity(
        data.theta_true, np.column_stack([gx.ravel(), gy.ravel()])
    ).reshape(n_grid, n_grid)

    with pm.Model() as model:
        theta = pm.Normal("theta", mu=0.0, sigma=prior_sd, shape=n_modes)
        pm.Normal("u_obs", mu=op(theta), sigma=noise_sd, observed=data.y)

    info = PDEModelInfo(
        problem=problem,
        op=op,
        theta_true=data.theta_true,
        data=data.y,
        u_true=data.u_true,
        obs_points=data.obs_points,
        grid=grid,
        log_c_true=log_c_true,
        noise_sd=float(noise_sd),
        prior_sd=float(prior_sd),
        data_mesh_size=int(data_mesh_size),
        data_seed=int(data_seed),
    )
    return model, info
