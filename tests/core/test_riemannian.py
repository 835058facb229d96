"""Riemannian HMC with the SoftAbs metric (``core/riemannian.py``)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from pymc_surrogate.compat import bulk_ess
from pymc_surrogate.core import riemannian, softabs as softabs_geometry
from pymc_surrogate.core.riemannian import hamiltonian, leapfrog_step, riemannian_move
from pymc_surrogate.core.softabs import framed, geometry, softabs
from pymc_surrogate.surrogates.third_derivatives import RankOneCubes, SymmetrisedOuter, pull_back
from pymc_surrogate.surrogates.whitening import Whitening

ALPHA = 1.0
FUNNEL_SD = 3.0


def funnel(q: np.ndarray):
    """Neal's funnel ``v ~ N(0, 3^2)``, ``x_j | v ~ N(0, e^v)``: U and its first three
    derivatives, in closed form."""
    v, x = q[0], q[1:]
    n, e, s = x.size, np.exp(-q[0]), float(q[1:] @ q[1:])
    value = v * v / (2 * FUNNEL_SD**2) + 0.5 * e * s + 0.5 * n * v
    grad = np.concatenate([[v / FUNNEL_SD**2 - 0.5 * e * s + 0.5 * n], e * x])
    hess = np.zeros((n + 1, n + 1))
    hess[0, 0] = 1 / FUNNEL_SD**2 + 0.5 * e * s
    hess[0, 1:] = hess[1:, 0] = -e * x
    hess[1:, 1:] = e * np.eye(n)
    third = np.zeros((n + 1,) * 3)
    third[0, 0, 0] = -0.5 * e * s
    for j in range(1, n + 1):
        for idx in ((0, 0, j), (0, j, 0), (j, 0, 0)):
            third[idx] = e * x[j - 1]
        for idx in ((0, j, j), (j, 0, j), (j, j, 0)):
            third[idx] = -e
    return value, grad, hess, third


def test_softabs_is_lam_coth_alpha_lam_with_its_derivative():
    lam = np.array([-30.0, -2.0, -1e-3, 1e-9, 0.0, 5e-6, 0.7, 40.0])
    alpha = 3.0
    f, df = softabs(lam, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = np.where(lam == 0, 1 / alpha, lam / np.tanh(alpha * lam))
    np.testing.assert_allclose(f, expected, rtol=1e-10)
    h = 1e-6
    numeric = (softabs(lam + h, alpha)[0] - softabs(lam - h, alpha)[0]) / (2 * h)
    np.testing.assert_allclose(df, numeric, rtol=1e-5, atol=1e-8)
    big, dbig = softabs(np.array([-1e8, 1e8]), 1e6)  # no overflow: |lam| and its sign
    np.testing.assert_allclose(big, [1e8, 1e8])
    np.testing.assert_allclose(dbig, [-1.0, 1.0])


@pytest.mark.parametrize("alpha", [0.5, 1e6])
def test_hamiltonian_gradient_matches_finite_differences(alpha):
    rng = np.random.default_rng(1)
    q, p = np.array([0.3, -0.8, 0.5]), rng.standard_normal(3)
    geom = geometry(q, funnel, alpha)
    analytic = riemannian._grad_q(geom, p)
    h = 1e-6
    numeric = np.array([
        (hamiltonian(geometry(q + h * e, funnel, alpha), p)
         - hamiltonian(geometry(q - h * e, funnel, alpha), p)) / (2 * h)
        for e in np.eye(3)
    ])
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


def test_leapfrog_retraces_itself_and_conserves_energy_to_second_order():
    rng = np.random.default_rng(2)
    start = geometry(np.array([1.0, 0.4, -0.9]), funnel, ALPHA)
    p0 = riemannian.sample_momentum(start, rng)
    errors = []
    for eps in (0.1, 0.05):
        geom, p = start, p0
        for _ in range(int(round(0.5 / eps))):
            step = leapfrog_step(geom, p, eps, funnel, ALPHA, tol=1e-10)
            assert step.converged
            geom, p = step.geom, step.p
        errors.append(abs(hamiltonian(geom, p) - hamiltonian(start, p0)))
        back, pb = geom, -p
        for _ in range(int(round(0.5 / eps))):
            step = leapfrog_step(back, pb, eps, funnel, ALPHA, tol=1e-10)
            back, pb = step.geom, step.p
        np.testing.assert_allclose(back.q, start.q, atol=1e-8)
        np.testing.assert_allclose(-pb, p0, atol=1e-7)
    # halving the step divides the energy error by about 4
    assert errors[1] < errors[0] / 2.5


def test_a_step_that_does_not_converge_is_a_divergence():
    start = geometry(np.array([1.0, 0.4, -0.9]), funnel, ALPHA)
    move = riemannian_move(start, funnel, ALPHA, step_size=5.0, n_steps=3,
                           rng=np.random.default_rng(3), max_iter=3)
    assert move.diverged and not move.accepted
    assert move.geom is start


def _funnel_draws(n_draws: int, seed: int) -> np.ndarray:
    """v of RMHMC draws on the 2-d funnel, a jittered number of steps each."""
    rng = np.random.default_rng(seed)
    geom = riemannian.geometry(np.array([0.0, 0.5]), funnel, ALPHA)
    draws = np.empty(n_draws)
    for i in range(n_draws):
        n_steps = int(rng.integers(3, 8))  # a jittered path: no periodicity
        geom = riemannian_move(geom, funnel, ALPHA, 0.35, n_steps, rng).geom
        draws[i] = geom.q[0]
    return draws


def _z_scores(v: np.ndarray) -> tuple[float, float]:
    """Mean and sd of ``v`` against N(0, 3^2) in Monte Carlo standard errors (bulk ESS;
    a Gaussian's sd has standard error sd / sqrt(2 ESS))."""
    ess = bulk_ess(v)
    z_mean = v.mean() / (FUNNEL_SD / np.sqrt(ess))
    z_sd = (v.std(ddof=1) - FUNNEL_SD) / (FUNNEL_SD / np.sqrt(2 * ess))
    return float(z_mean), float(z_sd)


@pytest.mark.slow
def test_funnel_neck_and_mouth_are_sampled():
    """v's mean and sd within 4 MCSE and its 2.5% tails within the binomial band of its ESS.

    Power: the same run without the log-determinant term (a wrong target) is flagged
    (`test_funnel_check_flags_a_sampler_without_the_log_determinant`)."""
    v = _funnel_draws(3000, seed=4)
    z_mean, z_sd = _z_scores(v)
    assert abs(z_mean) < 4 and abs(z_sd) < 4, (z_mean, z_sd)
    n = int(bulk_ess(v))
    lo, hi = scipy.stats.binom.ppf([0.0005, 0.9995], n, 0.025) / n
    lower, upper = scipy.stats.norm.ppf([0.025, 0.975], scale=FUNNEL_SD)
    assert lo <= np.mean(v < lower) <= hi and lo <= np.mean(v > upper) <= hi


@pytest.mark.slow
def test_funnel_check_flags_a_sampler_without_the_log_determinant(monkeypatch):
    original = riemannian.geometry

    def without_log_det(q, field, alpha):
        geom = original(q, field, alpha)
        return geom._replace(grad_phi=geom.grad)

    monkeypatch.setattr(riemannian, "geometry", without_log_det)
    monkeypatch.setattr(riemannian, "hamiltonian", lambda geom, p: float(
        geom.potential + 0.5 * np.sum((geom.eigvecs.T @ p) ** 2 / geom.metric_eigvals)))
    v = _funnel_draws(3000, seed=4)
    z_mean, z_sd = _z_scores(v)
    assert abs(z_mean) >= 4 or abs(z_sd) >= 4, (z_mean, z_sd)


def test_structured_third_derivatives_contract_as_their_dense_tensors():
    rng = np.random.default_rng(5)
    d, s = 4, 6
    coef, vectors = rng.standard_normal(s), rng.standard_normal((s, d))
    root = rng.standard_normal((d, d))
    matrix = root @ root.T
    cubes = RankOneCubes(coef, vectors)
    outer = SymmetrisedOuter(rng.standard_normal(d), matrix)
    dense = np.einsum("s,si,sj,sk->ijk", cubes.coef, vectors, vectors, vectors)
    a = outer.vector
    dense += (np.einsum("i,jk->ijk", a, matrix) + np.einsum("j,ik->ijk", a, matrix)
              + np.einsum("k,ij->ijk", a, matrix))
    hessian = matrix - 2 * np.eye(d)  # not convex: SoftAbs must matter
    q, p = rng.standard_normal(d), rng.standard_normal(d)
    structured = geometry(q, lambda q: (0.0, np.zeros(d), hessian, [cubes, outer]), 2.0)
    reference = geometry(q, lambda q: (0.0, np.zeros(d), hessian, dense), 2.0)
    np.testing.assert_allclose(structured.grad_phi, reference.grad_phi, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(riemannian._grad_q(structured, p), riemannian._grad_q(reference, p),
                               rtol=1e-10, atol=1e-12)


def test_each_parts_kinetic_contraction_is_its_rows_times_u():
    """``part.kinetic(J, u)`` (the kinetic gradient's cheaper form) is ``rows(J, u) @ u``
    for every rotated part: cubes, symmetrised outer products, dense and diagonal."""
    rng = np.random.default_rng(11)
    d, s = 5, 7
    root = rng.standard_normal((d, d))
    eigvecs = np.linalg.qr(rng.standard_normal((d, d)))[0]
    divided = rng.standard_normal((d, d))
    divided = divided + divided.T
    u = rng.standard_normal(d)
    parts = [RankOneCubes(rng.standard_normal(s), rng.standard_normal((s, d))),
             SymmetrisedOuter(rng.standard_normal(d), root @ root.T),
             rng.standard_normal((d, d, d))]
    rotated = softabs_geometry.rotate(parts, eigvecs)
    rotated.append(softabs_geometry.diagonal_derivative(parts).rotated(np.eye(d)))
    for part in rotated:
        np.testing.assert_allclose(part.kinetic(divided, u), part.rows(divided, u) @ u,
                                   rtol=1e-12, atol=1e-12)


def test_divided_differences_average_the_derivative_where_eigenvalues_meet():
    lam = np.array([-2.0, 0.5, 0.5 + 1e-13, 3.0])
    f, df = softabs(lam, ALPHA)
    divided = softabs_geometry._divided_differences(lam, f, df)
    assert divided[1, 2] == divided[2, 1] == 0.5 * (df[1] + df[2])
    np.testing.assert_array_equal(np.diag(divided), df)
    assert divided[0, 3] == (f[0] - f[3]) / (lam[0] - lam[3])
    apart = np.array([-2.0, 0.5, 1.0, 3.0])  # the fast path: only the diagonal is close
    f, df = softabs(apart, ALPHA)
    gap = apart[:, None] - apart[None, :]
    expected = np.where(np.eye(4, dtype=bool), df[:, None],
                        (f[:, None] - f[None, :]) / np.where(gap == 0, 1.0, gap))
    np.testing.assert_array_equal(softabs_geometry._divided_differences(apart, f, df), expected)


def test_framed_field_reuses_the_pulled_back_cubes_only_while_they_are_the_same():
    frame = _frame(3, 12)
    rng = np.random.default_rng(13)
    vectors = rng.standard_normal((4, 3))
    state = {"vectors": vectors}

    def field(q):
        cubes = RankOneCubes(np.full(4, float(q @ q)), state["vectors"])
        return 0.0, np.zeros(3), np.eye(3), [cubes]

    in_frame = framed(field, frame)
    first = in_frame(np.zeros(3))[3][0]
    second = in_frame(np.ones(3))[3][0]
    assert second.vectors is first.vectors  # the same array: the product kept
    np.testing.assert_array_equal(first.vectors, vectors @ frame.chol)
    assert second.coef[0] != first.coef[0]
    state["vectors"] = vectors * 2.0  # a new array (a refit): pulled back afresh
    np.testing.assert_array_equal(in_frame(np.zeros(3))[3][0].vectors,
                                  state["vectors"] @ frame.chol)


def _frame(dim: int, seed: int) -> Whitening:
    rng = np.random.default_rng(seed)
    chol = np.tril(rng.standard_normal((dim, dim)))
    chol[np.diag_indices(dim)] = rng.uniform(0.2, 3.0, dim)
    return Whitening(rng.standard_normal(dim), chol)


@pytest.mark.parametrize("dense", [True, False])
def test_framed_field_is_the_field_in_whitened_coordinates(dense):
    """Value, gradient and Hessian of ``U(m + L z)`` against finite differences in ``z``,
    and the framed Hamiltonian's ``dH/dz`` (the pulled-back third derivatives) too."""
    frame = _frame(3, 6)
    if not dense:
        frame = Whitening(frame.mean, np.diag(frame.chol).copy())
    field = framed(funnel, frame)
    z, h = np.array([0.2, -0.4, 0.3]), 1e-6
    value, grad, hessian, _ = field(z)
    assert value == funnel(frame.from_white(z))[0]
    basis = np.eye(3)
    np.testing.assert_allclose(
        grad, [(field(z + h * e)[0] - field(z - h * e)[0]) / (2 * h) for e in basis],
        rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(
        hessian, [(field(z + h * e)[1] - field(z - h * e)[1]) / (2 * h) for e in basis],
        rtol=1e-6, atol=1e-7)
    p = np.random.default_rng(7).standard_normal(3)
    numeric = [(hamiltonian(geometry(z + h * e, field, ALPHA), p)
                - hamiltonian(geometry(z - h * e, field, ALPHA), p)) / (2 * h) for e in basis]
    np.testing.assert_allclose(riemannian._grad_q(geometry(z, field, ALPHA), p), numeric,
                               rtol=1e-5, atol=1e-7)


def test_pulled_back_structured_parts_are_the_pulled_back_dense_tensors():
    rng = np.random.default_rng(8)
    d, s = 4, 5
    matrix = _frame(d, 9).chol
    root = rng.standard_normal((d, d))
    cubes = RankOneCubes(rng.standard_normal(s), rng.standard_normal((s, d)))
    outer = SymmetrisedOuter(rng.standard_normal(d), root @ root.T)
    dense = np.einsum("s,si,sj,sk->ijk", cubes.coef, cubes.vectors, cubes.vectors,
                      cubes.vectors)
    a, m = outer.vector, outer.matrix
    dense += (np.einsum("i,jk->ijk", a, m) + np.einsum("j,ik->ijk", a, m)
              + np.einsum("k,ij->ijk", a, m))
    pulled = pull_back([cubes, outer], matrix)
    structured = np.einsum("s,si,sj,sk->ijk", pulled[0].coef, pulled[0].vectors,
                           pulled[0].vectors, pulled[0].vectors)
    a, m = pulled[1].vector, pulled[1].matrix
    structured += (np.einsum("i,jk->ijk", a, m) + np.einsum("j,ik->ijk", a, m)
                   + np.einsum("k,ij->ijk", a, m))
    np.testing.assert_allclose(structured, pull_back(dense, matrix)[0], rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------ the diagonal form
DIAGONAL_FUNNEL = softabs_geometry.diagonal_field(funnel)


@pytest.mark.parametrize("alpha", [0.5, 1e6])
def test_diagonal_hamiltonian_gradient_matches_finite_differences(alpha):
    rng = np.random.default_rng(11)
    q, p = np.array([0.3, -0.8, 0.5]), rng.standard_normal(3)
    geom = geometry(q, DIAGONAL_FUNNEL, alpha)
    # G = diag(f(H_kk)): the metric ignores the funnel's off-diagonal curvature
    np.testing.assert_allclose(geom.metric_eigvals, softabs(np.diag(funnel(q)[2]), alpha)[0])
    h = 1e-6
    numeric = np.array([
        (hamiltonian(geometry(q + h * e, DIAGONAL_FUNNEL, alpha), p)
         - hamiltonian(geometry(q - h * e, DIAGONAL_FUNNEL, alpha), p)) / (2 * h)
        for e in np.eye(3)
    ])
    np.testing.assert_allclose(riemannian._grad_q(geom, p), numeric, rtol=1e-5, atol=1e-7)


def test_diagonal_leapfrog_retraces_itself():
    rng = np.random.default_rng(12)
    start = geometry(np.array([1.0, 0.4, -0.9]), DIAGONAL_FUNNEL, ALPHA)
    p0 = riemannian.sample_momentum(start, rng)
    geom, p = start, p0
    for _ in range(8):
        step = leapfrog_step(geom, p, 0.08, DIAGONAL_FUNNEL, ALPHA, tol=1e-10)
        assert step.converged
        geom, p = step.geom, step.p
    back, pb = geom, -p
    for _ in range(8):
        step = leapfrog_step(back, pb, 0.08, DIAGONAL_FUNNEL, ALPHA, tol=1e-10)
        back, pb = step.geom, step.p
    np.testing.assert_allclose(back.q, start.q, atol=1e-8)


def test_structured_diagonals_are_the_dense_tensors_diagonals():
    from pymc_surrogate.surrogates.third_derivatives import (
        RankOneCubes, SymmetrisedOuter, diagonal_derivative,
    )

    rng = np.random.default_rng(13)
    d = 4
    cubes = RankOneCubes(rng.standard_normal(6), rng.standard_normal((6, d)))
    s = rng.standard_normal((d, d))
    outer = SymmetrisedOuter(rng.standard_normal(d), s + s.T)
    dense_cubes = np.einsum("s,si,sj,sk->ijk", cubes.coef, *[cubes.vectors] * 3)
    a, m = outer.vector, outer.matrix
    dense_outer = (np.einsum("i,jk->ijk", a, m) + np.einsum("j,ik->ijk", a, m)
                   + np.einsum("k,ij->ijk", a, m))
    for part, dense in ((cubes, dense_cubes), (outer, dense_outer)):
        np.testing.assert_allclose(diagonal_derivative(part).matrix,
                                   np.einsum("ikk->ik", dense), rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_diagonal_metric_samples_the_funnel():
    """The 2-d funnel by RMHMC with the diagonal metric: v's mean and sd within 4 MCSE.
    Power: the check flags the full metric without its log-determinant (above)."""
    rng = np.random.default_rng(14)
    geom = geometry(np.array([0.0, 0.5]), DIAGONAL_FUNNEL, ALPHA)
    v = np.empty(3000)
    for i in range(v.size):
        geom = riemannian_move(geom, DIAGONAL_FUNNEL, ALPHA, 0.35, int(rng.integers(3, 8)),
                               rng).geom
        v[i] = geom.q[0]
    z_mean, z_sd = _z_scores(v)
    assert abs(z_mean) < 4 and abs(z_sd) < 4, (z_mean, z_sd)
