"""Pieces of ``benchmarks/variational.py`` (vhmc §4) that must be right before any timing.

The Amari distance, the numpy beta-binomial posterior behind the quadrature reference
(checked against the PyMC model), the grid divergences of the surrogate sweep, and the
ICA and probit models' log densities.  Fast: no sampling.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import norm

from benchmarks.models.betabinomial import (
    CANCER_N,
    CANCER_Y,
    log_posterior,
    log_rising,
    make_betabinomial,
    quadrature_reference,
)
from benchmarks.models.ica import align_rows, amari_distance, make_ica, simulate_ica_data
from benchmarks.models.probit import make_probit_regression
from benchmarks.variational import grid_divergences, parse_args


# ----------------------------------------------------------------------------- Amari distance


def test_amari_distance_is_zero_for_a_scaled_permutation():
    rng = np.random.default_rng(1)
    W0 = rng.normal(size=(5, 5))
    perm = np.eye(5)[[3, 0, 4, 1, 2]]
    scale = np.diag([2.0, -0.5, 3.0, -1.0, 0.1])
    W = scale @ perm @ W0
    assert amari_distance(W, W0) == pytest.approx(0.0, abs=1e-12)
    assert amari_distance(W, W0, normalize=False) == pytest.approx(0.0, abs=1e-11)


def test_amari_distance_known_value_and_bounds():
    W0 = np.eye(2)
    W = np.array([[1.0, 0.5], [0.0, 1.0]])
    # P = W: rows: (1.5/1 - 1) + (1/1 - 1) = 0.5; columns: (1/1 - 1) + (1.5/1 - 1) = 0.5
    assert amari_distance(W, W0, normalize=False) == pytest.approx(1.0)
    assert amari_distance(W, W0) == pytest.approx(1.0 / (2 * 2 * 1))
    # the worst case (all entries equal in magnitude) is 1 when normalised
    worst = np.array([[1.0, 1.0, 1.0], [1.0, -1.0, 1.0], [1.0, 1.0, -1.0]])
    assert amari_distance(worst, np.eye(3)) == pytest.approx(1.0)
    rng = np.random.default_rng(2)
    for _ in range(20):
        d = amari_distance(rng.normal(size=(4, 4)), rng.normal(size=(4, 4)))
        assert 0.0 < d <= 1.0


def test_amari_distance_rejects_bad_shapes():
    with pytest.raises(ValueError):
        amari_distance(np.eye(3), np.eye(2))


def test_align_rows_undoes_a_signed_permutation():
    rng = np.random.default_rng(6)
    W_ref = rng.normal(size=(5, 5))
    perm = np.array([2, 4, 0, 1, 3])
    signs = np.array([1.0, -1.0, -1.0, 1.0, -1.0])
    W = signs[:, None] * W_ref[perm] + 0.01 * rng.normal(size=(5, 5))
    order, s = align_rows(W, W_ref)
    aligned = s[:, None] * W[order]
    assert np.max(np.abs(aligned - W_ref)) < 0.05
    draws = np.stack([W, 2 * W])  # a stack of draws aligns the same way
    np.testing.assert_allclose(s[:, None] * draws[..., order, :], np.stack([aligned, 2 * aligned]))


def test_ica_data_true_unmixing_separates_the_sources():
    X, A, W0 = simulate_ica_data(n_obs=2000, seed=3)
    S = X @ W0.T  # recovered sources
    corr = np.corrcoef(S, rowvar=False)
    assert np.max(np.abs(corr - np.eye(5))) < 0.1
    assert np.linalg.cond(A) < 10


def test_ica_model_logp_matches_numpy():
    model, info = make_ica(n_obs=300, seed=4)
    X, _, _ = simulate_ica_data(n_obs=300, seed=4)
    rng = np.random.default_rng(5)
    W = np.eye(5) + 0.3 * rng.normal(size=(5, 5))
    Y = X @ W.T
    loglik = 300 * np.log(abs(np.linalg.det(W))) + np.sum(
        -np.logaddexp(Y / 2, -Y / 2) + np.log(2) - np.log(2 * np.pi)
    )
    logprior = np.sum(norm.logpdf(W, 0.0, 10.0))
    assert float(model.compile_logp()({"W": W})) == pytest.approx(loglik + logprior, rel=1e-8)
    assert info.counter.logp >= 1


# ----------------------------------------------------------------------------- beta-binomial


def test_betabinomial_numpy_posterior_matches_the_pymc_model():
    model, _ = make_betabinomial(with_reference=False)
    logp, dlogp = model.compile_logp(), model.compile_dlogp()
    points = [(-7.0, 6.0), (-6.5, 9.0), (-7.5, 4.0), (-5.0, 1.0)]
    values = [float(logp({"x1": np.array(a), "x2": np.array(b)})) for a, b in points]
    ours = [float(log_posterior(a, b)[0]) for a, b in points]
    # the same function up to a constant (binomial coefficients are left out of both)
    assert np.ptp(np.array(values) - np.array(ours)) < 1e-8
    for a, b in points:
        g = dlogp({"x1": np.array(a), "x2": np.array(b)})
        np.testing.assert_allclose(log_posterior(a, b)[1], g, rtol=1e-8, atol=1e-8)


def _exact_loglik(x1: float, x2: float) -> float:
    """sum_j log[(a)_y (b)_{n-y} / (a+b)_n] term by term, log a + log1p(i/a) (no cancellation)."""
    import math

    m = 1.0 / (1.0 + math.exp(-x1))
    K = math.exp(x2)
    a, b = K * m, K * (1.0 - m)
    terms = []
    for y, n in zip(CANCER_Y.astype(int), CANCER_N.astype(int)):
        i = np.arange(n, dtype=float)
        terms += [y * math.log(a), (n - y) * math.log(b), -n * math.log(a + b)]
        terms += list(np.log1p(i[:y] / a)) + list(np.log1p(i[: n - y] / b))
        terms += list(-np.log1p(i / (a + b)))
    return math.fsum(terms)


@pytest.fixture(scope="module")
def betabinomial_logp():
    model, _ = make_betabinomial(with_reference=False)
    return model.compile_logp()


@pytest.mark.parametrize("x1, x2", [(-7.5, 20.0), (-6.0, 45.0), (-9.0, 60.0)])
def test_betabinomial_likelihood_is_accurate_for_any_k(x1, x2, betabinomial_logp):
    # gammaln differences are garbage at K = e^45 (rounding ~1e3); the model must not be
    exact = _exact_loglik(x1, x2) + x2 - 2.0 * np.logaddexp(0.0, x2)
    assert float(log_posterior(x1, x2)[0]) == pytest.approx(exact, abs=1e-6)
    # PyMC's logp is ours up to a constant (fixed at the mode)
    at = {"x1": np.array(x1), "x2": np.array(x2)}
    mode = {"x1": np.array(-6.8), "x2": np.array(7.6)}
    assert float(betabinomial_logp(at)) - float(betabinomial_logp(mode)) == pytest.approx(
        exact - float(log_posterior(-6.8, 7.6)[0]), abs=1e-6
    )


def test_log_rising_series_and_exact_branches_agree():
    y = np.array([0.0, 1.0, 3.0, 54.0, 2000.0])
    for y_k in y:
        a_edge = 1e4 * (y_k + 1.0)
        lo, dlo = log_rising(a_edge * (1 - 1e-9), y_k)  # exact branch
        hi, dhi = log_rising(a_edge * (1 + 1e-9), y_k)  # series branch
        assert float(hi) == pytest.approx(float(lo), rel=1e-9, abs=1e-9)
        assert float(dhi) == pytest.approx(float(dlo), rel=1e-6, abs=1e-12)
    v, d = log_rising(2.5, 3.0)
    assert float(v) == pytest.approx(np.log(2.5 * 3.5 * 4.5))
    assert float(d) == pytest.approx(1 / 2.5 + 1 / 3.5 + 1 / 4.5)


def test_betabinomial_gradient_matches_finite_differences():
    x = np.array([-6.9, 7.3])
    _, g = log_posterior(x[0], x[1])
    eps = 1e-4  # logp ~ -600 is a sum of gammaln values ~ 5e5: finite differences are noisy
    for j in range(2):
        e = np.zeros(2)
        e[j] = eps
        fd = (log_posterior(*(x + e))[0] - log_posterior(*(x - e))[0]) / (2 * eps)
        assert g[j] == pytest.approx(fd, rel=1e-4)


def test_betabinomial_data_and_quadrature():
    assert len(CANCER_Y) == len(CANCER_N) == 20
    assert CANCER_Y.sum() == 71 and CANCER_N.sum() == 71478
    ref = quadrature_reference(251, 251)
    assert ref.edge_mass < 1e-9
    # Albert (2009) §5.4: posterior mode near (-6.82, 7.58) in (logit eta, log K)
    assert ref.mode[0] == pytest.approx(-6.82, abs=0.05)
    assert ref.mode[1] == pytest.approx(7.58, abs=0.15)
    # a smooth, fast-decaying integrand: the grid sums converge quickly
    fine = quadrature_reference(401, 401)
    np.testing.assert_allclose(ref.mean, fine.mean, atol=1e-6)
    np.testing.assert_allclose(ref.sd, fine.sd, rtol=1e-6)


# ----------------------------------------------------------------------------- grid divergences


def _grid(n=41):
    g1, g2 = np.meshgrid(np.linspace(-8, -5.5, n), np.linspace(4, 13, n), indexing="ij")
    pts = np.column_stack([g1.ravel(), g2.ravel()])
    lp, gr = log_posterior(pts[:, 0], pts[:, 1])
    return pts, lp, gr


def test_grid_divergences_vanish_for_the_exact_potential():
    pts, lp, gr = _grid()

    def exact(q):  # U = -logp + an arbitrary constant
        v, g = log_posterior(q[0], q[1])
        return -float(v) + 123.0, -np.asarray(g)

    d = grid_divergences(exact, pts, lp, gr)
    assert d["kl"] == pytest.approx(0.0, abs=1e-10)
    assert d["score_sq"] == pytest.approx(0.0, abs=1e-16)
    assert d["nonfinite"] == 0


def test_grid_divergences_of_a_shifted_gaussian():
    pts, lp, gr = _grid()
    p = np.exp(lp - logsumexp(lp))
    mean = p @ pts

    def shifted(q):  # isotropic unit Gaussian far from the posterior
        d = np.asarray(q) - mean - np.array([0.0, 2.0])
        return 0.5 * d @ d, d

    d = grid_divergences(shifted, pts, lp, gr)
    assert d["kl"] > 0.1 and d["score_sq"] > 0.1
    assert np.isfinite(d["kl"]) and np.isfinite(d["score_sq"])


# ----------------------------------------------------------------------------- probit, CLI


def test_probit_model_logp_matches_scipy():
    model, info = make_probit_regression(n_obs=200, n_features=3, seed=7)
    from benchmarks.models.probit import simulate_probit_data

    X, y, _ = simulate_probit_data(200, 3, 7)
    theta = np.array([0.3, -0.2, 0.5])
    expected = np.sum(norm.logcdf((2 * y - 1) * (X @ theta))) + np.sum(
        norm.logpdf(theta, 0.0, 10.0)
    )
    # PyMC's normal_lcdf goes through PyTensor's erfcx: agrees with scipy to ~1e-8 relative
    assert float(model.compile_logp()({"theta": theta})) == pytest.approx(expected, rel=1e-7)


def test_parse_args_quick_defaults():
    args = parse_args(["--quick", "--which", "betabinom,ica", "--samplers", "NUTS"])
    assert args.which == ["betabinom", "ica"] and args.samplers == ["NUTS"]
    assert (args.draws, args.tune, args.chains) == (100, 200, 2)
    assert args.hidden == [5, 20]
    full = parse_args(["--draws", "50"])
    assert full.draws == 50 and full.tune == 1000 and full.hidden == [5, 10, 20, 50, 100]
    with pytest.raises(SystemExit):
        parse_args(["--which", "nonsense"])
