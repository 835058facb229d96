"""Tests for the elliptic PDE inverse problem (benchmarks.models.elliptic_pde)."""

from __future__ import annotations

import pickle

import numpy as np
import pytensor
import pytest
import scipy.sparse.linalg as spla
from pytensor.gradient import NullTypeGradError

from benchmarks.models.elliptic_pde import (
    EllipticPDEProblem,
    KLBasis,
    PDEForwardAdjointOp,
    PDEForwardOp,
    PDEVJPOp,
    assemble_q1_stiffness,
    make_data,
    make_pde_model,
    observation_points,
)


def series_solution(points: np.ndarray, n_terms: int = 4000) -> np.ndarray:
    """Exact solution for c == 1 (cosine series in x1).

    Note that the bilinear u = x1 + x2 (1 - 2 x1) is harmonic and matches the
    Dirichlet data but violates the zero-flux condition (du/dx1 = 1 - 2 x2),
    so it is *not* the solution; expanding the Dirichlet data in the Neumann
    eigenfunctions cos(k pi x1) gives
    u = 1/2 + sum_{k odd} 4/(k pi)^2 cos(k pi x1)
              [sinh(k pi x2) - sinh(k pi (1 - x2))] / sinh(k pi).
    """
    x1, x2 = points[:, :1], points[:, 1:]
    a = np.pi * np.arange(1, 2 * n_terms, 2)[None, :]
    den = 1.0 - np.exp(-2 * a)
    # Overflow-free sinh ratios.
    r_top = np.exp(a * (x2 - 1)) * (1 - np.exp(-2 * a * x2)) / den
    r_bot = np.exp(-a * x2) * (1 - np.exp(-2 * a * (1 - x2))) / den
    return 0.5 + (4.0 / a**2 * np.cos(a * x1) * (r_top - r_bot)).sum(axis=1)


@pytest.fixture(scope="module")
def problem20() -> EllipticPDEProblem:
    return EllipticPDEProblem(n_modes=20, mesh_size=30)


@pytest.fixture(scope="module")
def blackbox_model():
    return make_pde_model(n_modes=20, mesh_size=30, gradient=False)


@pytest.fixture(scope="module")
def adjoint_model():
    return make_pde_model(n_modes=20, mesh_size=30, gradient=True)


# ------------------------------------------------------------------ solver
def test_q1_patch_test_reproduces_bilinear_exactly():
    # A harmonic bilinear function with Dirichlet data on the whole boundary
    # lies in the Q1 space, so Galerkin must reproduce it to round-off.
    n = 12
    K = assemble_q1_stiffness(n, np.ones(n * n)).tocsr()
    xs = np.linspace(0, 1, n + 1)
    X1, X2 = np.meshgrid(xs, xs, indexing="xy")
    x1, x2 = X1.ravel(), X2.ravel()
    u_exact = x1 + x2 * (1 - 2 * x1)
    bnd = (x1 == 0) | (x1 == 1) | (x2 == 0) | (x2 == 1)
    inner = ~bnd
    rhs = -K[inner][:, bnd] @ u_exact[bnd]
    u_in = spla.spsolve(K[inner][:, inner].tocsc(), rhs)
    np.testing.assert_allclose(u_in, u_exact[inner], atol=1e-12)
    # Row sums vanish (constants are in the kernel) and K is symmetric.
    np.testing.assert_allclose(K @ np.ones(K.shape[0]), 0, atol=1e-12)
    assert abs(K - K.T).max() < 1e-14


def test_precomputed_assembly_matches_reference(problem20):
    p = problem20
    rng = np.random.default_rng(0)
    c = np.exp(rng.standard_normal(p.mesh_size**2))
    K = assemble_q1_stiffness(p.mesh_size, c).tocsr()
    A = p.stiffness(c)
    A_ref = K[p.free_nodes][:, p.free_nodes]
    assert abs(A - A_ref).max() < 1e-12
    u_d = p._u_dirichlet_full
    b_ref = -(K[p.free_nodes] @ u_d)
    np.testing.assert_allclose(p._c_to_rhs @ c, b_ref, atol=1e-12)


def test_solver_converges_to_series_solution():
    errs = []
    for n in (10, 20, 40):
        p = EllipticPDEProblem(n_modes=5, mesh_size=n)
        u = p.solve_nodal(np.zeros(5))  # theta = 0  <=>  c == 1
        inner = (p.nodes[:, 1] > 0) & (p.nodes[:, 1] < 1)
        e = u[inner] - series_solution(p.nodes[inner])
        errs.append(np.sqrt(np.mean(e**2)))
        # Dirichlet values are imposed exactly.
        bottom = p.nodes[:, 1] == 0
        top = p.nodes[:, 1] == 1
        np.testing.assert_allclose(u[bottom], p.nodes[bottom, 0], atol=1e-14)
        np.testing.assert_allclose(u[top], 1 - p.nodes[top, 0], atol=1e-14)
        # Symmetry u(x1, x2) + u(x1, 1 - x2) = 1 holds exactly on the mesh.
        mid = np.isclose(p.nodes[:, 1], 0.5)
        np.testing.assert_allclose(u[mid], 0.5, atol=1e-12)
    errs = np.array(errs)
    # Roughly second order in RMS (the Dirichlet/Neumann corners are mildly
    # singular, so require a bit less than 4x per halving).
    assert np.all(errs[:-1] / errs[1:] > 3.0), errs
    assert errs[-1] < 1e-4


def test_observation_operator_bilinear_interpolation():
    # n = 25: observation points are not all mesh nodes; interpolation of a
    # bilinear nodal field must be exact anyway.
    from benchmarks.models.elliptic_pde import _bilinear_interpolation_matrix

    n = 25
    pts = observation_points(11)
    O = _bilinear_interpolation_matrix(n, pts)
    xs = np.linspace(0, 1, n + 1)
    X1, X2 = np.meshgrid(xs, xs, indexing="xy")
    f = lambda a, b: 0.3 + 2 * a - b + 1.7 * a * b  # noqa: E731
    np.testing.assert_allclose(O @ f(X1.ravel(), X2.ravel()), f(pts[:, 0], pts[:, 1]), atol=1e-13)
    np.testing.assert_allclose(O.sum(axis=1), 1.0, atol=1e-14)


def test_forward_observations_and_shapes(problem20):
    p = problem20
    assert p.obs_points.shape == (121, 2)
    theta = 0.5 * np.random.default_rng(1).standard_normal(20)
    u_obs = p.forward(theta)
    assert u_obs.shape == (121,)
    # n = 30: observation points are nodes; forward == nodal values there.
    u = p.solve_nodal(theta)
    idx = [np.argmin(np.sum((p.nodes - x) ** 2, axis=1)) for x in p.obs_points]
    np.testing.assert_allclose(u_obs, u[idx], atol=1e-13)
    # Boundary observations equal the Dirichlet data (theta independent).
    np.testing.assert_allclose(u_obs[:11], p.obs_points[:11, 0], atol=1e-14)
    np.testing.assert_allclose(u_obs[-11:], 1 - p.obs_points[-11:, 0], atol=1e-14)
    # Maximum principle.
    assert u.min() >= -1e-12 and u.max() <= 1 + 1e-12
    with pytest.raises(ValueError):
        p.forward(np.zeros(19))


def test_interior_observation_grid():
    p = EllipticPDEProblem(n_modes=5, mesh_size=24, obs_include_boundary=False)
    assert p.obs_points.shape == (121, 2)
    assert p.obs_points.min() > 0 and p.obs_points.max() < 1
    assert np.all(np.isfinite(p.forward(np.ones(5))))


# --------------------------------------------------------------- gradients
def test_adjoint_gradient_matches_finite_differences(problem20):
    p = problem20
    rng = np.random.default_rng(2)
    theta = 0.5 * rng.standard_normal(20)
    y = rng.standard_normal(121) * 0.1 + 0.5

    def objective(th):  # Gaussian misfit, a generic nonlinear scalar of u_obs
        r = p.forward(th) - y
        return 0.5 * r @ r

    g_cached = p.forward_and_vjp(theta, p.forward(theta) - y)[1]  # cache hit
    r = p.forward(theta) - y
    p.forward(theta + 1.0)  # evict the cache: vjp must re-factor
    g_fresh = p.vjp(theta, r)
    eps = 1e-5
    fd = np.array(
        [(objective(theta + eps * e) - objective(theta - eps * e)) / (2 * eps) for e in np.eye(20)]
    )
    np.testing.assert_allclose(g_cached, fd, rtol=1e-5, atol=1e-7 * np.abs(fd).max())
    np.testing.assert_allclose(g_fresh, g_cached, rtol=1e-12, atol=1e-14)
    # Dense Jacobian agrees with the VJP.
    w = rng.standard_normal(121)
    np.testing.assert_allclose(p.jacobian(theta).T @ w, p.vjp(theta, w), rtol=1e-10, atol=1e-13)


# ---------------------------------------------------------------- KL basis
def test_kl_basis_orthonormal_and_decreasing():
    kl = KLBasis(20)
    lam = kl.eigenvalues
    assert np.all(lam > 0)
    assert np.all(np.diff(lam) <= 1e-15)
    assert lam.sum() < 1.0  # trace of the covariance operator = variance * area
    # Orthonormality under the midpoint rule on a 60 x 60 grid.
    m = 60
    g = (np.arange(m) + 0.5) / m
    X1, X2 = np.meshgrid(g, g, indexing="xy")
    phi = kl.eigenfunctions(np.column_stack([X1.ravel(), X2.ravel()]))
    gram = phi.T @ phi / m**2
    np.testing.assert_allclose(gram, np.eye(20), atol=5e-3)
    # Exact orthonormality of the 1-D factors under their own quadrature.
    psi = kl.eigenfunctions_1d(kl._t)
    np.testing.assert_allclose(psi.T @ (kl._w[:, None] * psi), np.eye(psi.shape[1]), atol=1e-10)


def test_kl_eigenvalues_match_direct_2d_nystrom():
    # Independent check of the separable construction: plain 2-D Nyström
    # (midpoint rule, 20 x 20, O(h^2) ~ 1% accurate) on the non-separated kernel.
    m = 20
    g = (np.arange(m) + 0.5) / m
    X1, X2 = np.meshgrid(g, g, indexing="xy")
    P = np.column_stack([X1.ravel(), X2.ravel()])
    d2 = ((P[:, None, :] - P[None, :, :]) ** 2).sum(-1)
    C = np.exp(-d2 / (2 * 0.2**2)) / m**2
    lam_direct = np.sort(np.linalg.eigvalsh(C))[::-1][:20]
    np.testing.assert_allclose(KLBasis(20).eigenvalues, lam_direct, rtol=2e-2)


def test_kl_field_is_mesh_independent():
    coarse = EllipticPDEProblem(n_modes=20, mesh_size=10)
    fine = EllipticPDEProblem(n_modes=20, mesh_size=90)
    theta = np.random.default_rng(3).standard_normal(20)
    pts = np.random.default_rng(4).uniform(size=(50, 2))
    np.testing.assert_array_equal(
        coarse.log_diffusivity(theta, pts), fine.log_diffusivity(theta, pts)
    )


# -------------------------------------------------------------------- data
def test_make_data_deterministic():
    a = make_data(n_modes=5, mesh_size=45, seed=7)
    b = make_data(n_modes=5, mesh_size=45, seed=7)
    c = make_data(n_modes=5, mesh_size=45, seed=8)
    np.testing.assert_array_equal(a.y, b.y)
    np.testing.assert_array_equal(a.theta_true, b.theta_true)
    assert not np.allclose(a.y, c.y)
    assert a.y.shape == (121,) and a.theta_true.shape == (5,)
    assert 0.07 < np.std(a.y - a.u_true) < 0.13


# ------------------------------------------------------------ PyTensor/PyMC
def test_blackbox_model_has_no_gradient(blackbox_model):
    model, info = blackbox_model
    assert type(info.op) is PDEForwardOp
    with pytest.raises((NullTypeGradError, NotImplementedError)):
        pytensor.grad(model.logp(), model.value_vars)
    # The likelihood itself evaluates and counts forward solves.
    n0 = info.problem.n_forward
    logp = model.compile_logp()
    val = logp({"theta": info.theta_true})
    assert np.isfinite(val)
    assert info.problem.n_forward == n0 + 1
    assert info.problem.n_adjoint == 0
    assert info["problem"] is info.problem
    assert info.log_c_true.shape == (101, 101)
    assert info.data.shape == (121,)


def test_adjoint_model_logp_dlogp(adjoint_model):
    model, info = adjoint_model
    p = info.problem
    assert isinstance(info.op, PDEForwardAdjointOp)
    logp = model.compile_logp()
    dlogp = model.compile_dlogp()
    theta = info.theta_true + 0.1
    p.reset_counters()
    g = dlogp({"theta": theta})
    assert p.n_adjoint == 1 and p.n_forward == 1 and p.n_factorizations == 1
    eps = 1e-5
    fd = np.array(
        [
            (logp({"theta": theta + eps * e}) - logp({"theta": theta - eps * e})) / (2 * eps)
            for e in np.eye(20)
        ]
    )
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())
    assert p.n_forward == 1 + 40

    # Joint logp + dlogp (what NUTS uses) re-uses one LU factorisation.
    f = model.logp_dlogp_function(ravel_inputs=True)
    f.set_extra_values({})
    p.reset_counters()
    f(theta + 0.2)
    assert (p.n_forward, p.n_adjoint, p.n_factorizations) == (1, 1, 1)


def test_ops_pickle_roundtrip(adjoint_model):
    _, info = adjoint_model
    p = info.problem
    theta = np.linspace(-0.5, 0.5, 20)
    u = p.forward(theta)  # populate the (unpicklable) LU cache
    for op in (PDEForwardOp(p), PDEForwardAdjointOp(p), PDEVJPOp(p)):
        op2 = pickle.loads(pickle.dumps(op))
        assert type(op2) is type(op)
        assert op2.problem is not p
        assert op2.problem._cache is None
        assert op2.problem.n_forward == p.n_forward
        np.testing.assert_allclose(op2.problem.forward(theta), u, rtol=1e-13)
    # A compiled graph on an unpickled Op works.
    op2 = pickle.loads(pickle.dumps(PDEForwardAdjointOp(p)))
    th = pytensor.tensor.dvector("th")
    f = pytensor.function([th], [op2(th), pytensor.grad(op2(th).sum(), th)])
    out, grad = f(theta)
    np.testing.assert_allclose(out, u, rtol=1e-13)
    np.testing.assert_allclose(grad, p.vjp(theta, np.ones(121)), rtol=1e-10)


def test_counters_increment_in_perform(problem20):
    p = problem20
    p.reset_counters()
    th = pytensor.tensor.dvector("th")
    out = PDEForwardAdjointOp(p)(th)
    f = pytensor.function([th], out)
    g = pytensor.function([th], pytensor.grad(out @ np.ones(121), th))
    f(np.zeros(20))
    f(np.ones(20) * 0.1)
    assert (p.n_forward, p.n_adjoint) == (2, 0)
    g(np.ones(20) * 0.1)
    # grad graph needs only the VJP (cotangent is constant): one adjoint
    # solve, factorisation re-used from the cached forward at the same theta.
    assert p.n_adjoint == 1
    assert p.n_factorizations == 2


def test_five_modes_model():
    model, info = make_pde_model(n_modes=5, mesh_size=20, gradient=True, data_mesh_size=40)
    assert info.theta_true.shape == (5,)
    assert model.initial_point()["theta"].shape == (5,)
    dlogp = model.compile_dlogp()
    g = dlogp({"theta": np.zeros(5)})
    assert g.shape == (5,) and np.all(np.isfinite(g))
