"""Benchmark models: they build, count their evaluations, and their references are right."""

from __future__ import annotations

import cloudpickle
import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from scipy.stats import multivariate_normal

from benchmarks.models import (
    MODELS,
    SIZES,
    EvaluationCounter,
    build_model,
    count_evaluations,
    evaluation_counts,
    make_banana,
    make_correlated_gaussian,
    make_gp_model,
    make_logistic_regression,
    make_narrow_gaussian,
)
from benchmarks.models.banana import banana_log_density

OWN_MODELS = ["logistic", "banana", "gp", "narrow_gaussian", "correlated_gaussian"]


def _point(model, **values):
    point = model.initial_point()
    point.update({k: np.asarray(v, dtype=float) for k, v in values.items()})
    return point


# --- counting ---------------------------------------------------------------------------


def test_counter_counts_compiled_logp_and_dlogp_calls():
    model, info = make_banana()
    counter = info.counter
    logp_fn = model.compile_logp()
    dlogp_fn = model.compile_dlogp()
    point = _point(model, beta=[0.3, -0.7])
    assert counter.snapshot() == (0, 0)  # compiling evaluates nothing

    for _ in range(5):
        logp_fn(point)
    assert (counter.logp, counter.grad) == (5, 0)

    counter.reset()
    for _ in range(3):
        dlogp_fn(point)
    # A gradient needs the forward pass too: both count once per call.
    assert (counter.logp, counter.grad) == (3, 3)


def test_joint_logp_dlogp_function_counts_each_pass_once():
    model, info = make_logistic_regression(n_obs=200, n_features=3)
    fn = model.logp_dlogp_function(ravel_inputs=True)
    fn.set_extra_values({})
    for _ in range(4):
        fn(np.zeros(3))
    assert info.counter.snapshot() == (4, 4)


def test_counting_survives_constant_gradient():
    # A likelihood linear in the parameter has a constant gradient, which PyTensor would
    # constant-fold away without do_constant_folding=False.
    counter = EvaluationCounter()
    with pm.Model() as model:
        x = pm.Flat("x", shape=2)
        pm.Potential("lin", pt.sum(3.0 * count_evaluations(x, counter)))
    dlogp_fn = model.compile_dlogp()
    for _ in range(2):
        np.testing.assert_allclose(dlogp_fn(model.initial_point()), [3.0, 3.0])
    assert counter.grad == 2


def test_gradient_counted_once_per_forward_pass_with_several_value_variables():
    # PyMC's compile_dlogp differentiates once per value variable; the copies of the
    # backward graph must still count one gradient evaluation per call.
    model, info = make_gp_model(n_obs=10)
    dlogp_fn = model.compile_dlogp()
    for _ in range(3):
        dlogp_fn(model.initial_point())
    assert info.counter.snapshot() == (3, 3)


def test_two_points_in_one_function_count_twice():
    # Like PyMC's delta_logp: one function holding the likelihood at two different points.
    counter = EvaluationCounter()
    a, b = pt.dvector("a"), pt.dvector("b")
    la = pt.sum(count_evaluations(a, counter) ** 2)
    lb = pt.sum(count_evaluations(b, counter) ** 2)
    f = pytensor.function([a, b], [la - lb, *pytensor.grad(la + lb, [a, b])])
    f(np.ones(2), np.zeros(2))
    assert counter.snapshot() == (2, 2)


def test_counting_identity_is_exact_identity_with_identity_gradient():
    counter = EvaluationCounter()
    x = pt.dvector("x")
    y = count_evaluations(x, counter)
    f = pytensor.function([x], [y, pytensor.grad(pt.sum(y**2), x)])
    value, grad = f(np.array([1.0, -2.0]))
    np.testing.assert_array_equal(value, [1.0, -2.0])
    np.testing.assert_array_equal(grad, [2.0, -4.0])
    assert counter.snapshot() == (1, 1)


def test_counter_and_model_pickle():
    model, info = make_banana()
    model.compile_logp()(model.initial_point())
    clone_model, clone_info = cloudpickle.loads(cloudpickle.dumps((model, info)))
    assert clone_info.counter.snapshot() == (1, 0)
    clone_model.compile_logp()(clone_model.initial_point())
    # The unpickled graph holds the unpickled counter, not the original.
    assert clone_info.counter.logp == 2 and info.counter.logp == 1


def test_nuts_in_pm_sample_counts_every_leapfrog_step():
    model, info = make_banana()
    with model:
        idata = pm.sample(
            draws=30,
            tune=30,
            chains=1,
            cores=1,
            random_seed=1,
            progressbar=False,
            quiet=True,
            compute_convergence_checks=False,
            discard_tuned_samples=False,
        )
    n_steps = int(idata.sample_stats.n_steps.sum() + idata.warmup_sample_stats.n_steps.sum())
    logp, grad = evaluation_counts(info)
    assert logp == grad > 0
    # One evaluation per leapfrog step plus one at the start of each of the 60 iterations,
    # plus a few during initialisation.
    assert n_steps + 60 <= logp <= n_steps + 60 + 5


# --- every model ------------------------------------------------------------------------


@pytest.mark.parametrize("name", OWN_MODELS)
def test_model_builds_with_finite_logp_and_counts(name):
    model, info = MODELS[name]("smoke")
    assert info.name == name
    assert [rv.name for rv in model.free_RVs] == info.param_names or set(info.param_names) <= {
        rv.name for rv in model.free_RVs
    }
    point = model.initial_point()
    assert np.isfinite(model.compile_logp()(point))
    grads = model.compile_dlogp()(point)
    assert np.all(np.isfinite(grads))
    assert info.counter.snapshot() == (2, 1)
    if info.ref_mean is not None:
        for k in info.param_names:
            shape = point[k].shape
            assert np.shape(info.ref_mean[k]) == shape and np.shape(info.ref_sd[k]) == shape
            assert np.all(np.asarray(info.ref_sd[k]) > 0)


def test_registry_sizes_and_errors():
    assert {"logistic", "banana", "gp", "narrow_gaussian", "pde_blackbox", "pde_adjoint"} <= set(
        MODELS
    )
    assert SIZES == ("smoke", "default", "paper")
    _, info = MODELS["logistic"]("smoke", seed=3)
    assert info.extra["seed"] == 3 and info.extra["n_features"] == 5
    with pytest.raises(KeyError):
        build_model("no_such_model")
    with pytest.raises(ValueError):
        build_model("banana", "huge")


@pytest.mark.parametrize("name", ["pde_blackbox", "pde_adjoint"])
def test_pde_entries_build_when_available(name):
    pytest.importorskip("benchmarks.models.elliptic_pde")
    model, info = MODELS[name]("smoke")
    before = evaluation_counts(info)
    assert np.isfinite(model.compile_logp()(model.initial_point()))
    assert evaluation_counts(info)[0] > before[0]


# --- Gaussians --------------------------------------------------------------------------


def test_narrow_gaussian_matches_paper_definition_and_is_exact():
    d = 32
    model, info = make_narrow_gaussian(d)
    cov = info.extra["cov"]
    evals, evecs = np.linalg.eigh(cov)
    np.testing.assert_allclose(evals[:-1], 0.01, rtol=1e-10)
    np.testing.assert_allclose(evals[-1], 1.0, rtol=1e-10)
    np.testing.assert_allclose(np.abs(evecs[:, -1]), 1 / np.sqrt(d), rtol=1e-10)
    np.testing.assert_allclose(info.ref_sd["x"], np.sqrt(np.diag(cov)))
    np.testing.assert_allclose(info.ref_sd["x"], np.sqrt(0.01 + 0.99 / d))
    np.testing.assert_array_equal(info.ref_mean["x"], np.zeros(d))
    # The model logp is the normalised Gaussian density itself.
    x = np.random.default_rng(0).normal(scale=0.2, size=d)
    np.testing.assert_allclose(
        model.compile_logp()(_point(model, x=x)),
        multivariate_normal(np.zeros(d), cov).logpdf(x),
        rtol=1e-10,
    )


def test_correlated_gaussian_spectrum_and_exact_density():
    model, info = make_correlated_gaussian(d=6, condition_number=50.0, scale=2.0, seed=4)
    cov, mean = info.extra["cov"], info.extra["mean"]
    evals = np.linalg.eigvalsh(cov)
    np.testing.assert_allclose(evals.max() / evals.min(), 50.0, rtol=1e-8)
    np.testing.assert_allclose(evals.max(), 4.0, rtol=1e-8)
    np.testing.assert_allclose(info.ref_sd["x"], np.sqrt(np.diag(cov)))
    np.testing.assert_allclose(info.ref_mean["x"], mean)
    x = mean + np.random.default_rng(1).normal(size=6)
    np.testing.assert_allclose(
        model.compile_logp()(_point(model, x=x)),
        multivariate_normal(mean, cov).logpdf(x),
        rtol=1e-10,
    )


# --- banana -----------------------------------------------------------------------------


def test_banana_density_is_the_model_density():
    model, info = make_banana()
    logp_fn = model.compile_logp()
    pts = np.random.default_rng(0).normal(size=(5, 2))
    y = info.extra["y"]
    diffs = [logp_fn(_point(model, beta=p)) - banana_log_density(p[0], p[1], y) for p in pts]
    np.testing.assert_allclose(diffs, diffs[0], rtol=0, atol=1e-9)


def test_banana_reference_against_2d_grid_and_rejection_sample():
    _, info = make_banana()
    y = info.extra["y"]
    mean, sd = info.ref_mean["beta"], info.ref_sd["beta"]
    assert mean[1] == pytest.approx(0.0, abs=1e-12)  # symmetric in beta2

    # Fine 2-D grid.
    g = np.linspace(-6.0, 6.0, 1201)
    b1, b2 = np.meshgrid(g, g, indexing="ij")
    lp = banana_log_density(b1, b2, y)
    w = np.exp(lp - lp.max())
    w /= w.sum()
    grid_mean = np.array([(w * b1).sum(), (w * b2).sum()])
    grid_sd = np.sqrt(np.array([(w * b1**2).sum(), (w * b2**2).sum()]) - grid_mean**2)
    np.testing.assert_allclose(mean, grid_mean, atol=1e-8)
    np.testing.assert_allclose(sd, grid_sd, rtol=1e-8)

    # Independent exact sample: rejection from the N(0, I) prior, accepting with the
    # likelihood relative to its maximum.
    rng = np.random.default_rng(12345)
    prop = rng.normal(size=(2_000_000, 2))
    n, ybar = len(y), y.mean()
    loglik = -n * (ybar - prop[:, 0] - prop[:, 1] ** 2) ** 2 / (2 * 2.0**2)
    sample = prop[np.log(rng.uniform(size=len(prop))) < loglik]
    assert len(sample) > 50_000
    mc_se = sd / np.sqrt(len(sample))
    np.testing.assert_array_less(np.abs(sample.mean(0) - mean), 5 * mc_se)
    np.testing.assert_allclose(sample.std(0), sd, rtol=0.02)


# --- logistic regression ----------------------------------------------------------------


def test_logistic_data_follow_the_paper_design():
    _, info = make_logistic_regression(n_obs=20_000, n_features=10, seed=2)
    from benchmarks.models.logistic import simulate_logistic_data

    X, y, beta = simulate_logistic_data(20_000, 10, 2)
    np.testing.assert_array_equal(beta, info.extra["beta_true"])
    np.testing.assert_array_equal(X[:, 0], 0.1)
    assert X[:, 1:].std() == pytest.approx(0.1, rel=0.02)
    assert np.all((beta >= 0) & (beta <= 1))
    assert set(np.unique(y)) == {0.0, 1.0}


def test_logistic_logp_value_and_gradient_match_numpy_and_finite_differences():
    from benchmarks.models.logistic import simulate_logistic_data

    n_obs, d = 3000, 6
    model, info = make_logistic_regression(n_obs=n_obs, n_features=d, seed=1)
    X, y, _ = simulate_logistic_data(n_obs, d, 1)
    beta = np.random.default_rng(5).uniform(-1, 2, size=d)
    logp_fn, dlogp_fn = model.compile_logp(), model.compile_dlogp()

    def numpy_logp(b):
        eta = X @ b
        return np.sum(y * eta - np.logaddexp(0, eta)) - 0.5 * np.sum(b**2) / 100 - d * np.log(
            10 * np.sqrt(2 * np.pi)
        )

    np.testing.assert_allclose(logp_fn(_point(model, beta=beta)), numpy_logp(beta), rtol=1e-9)
    h = 1e-5
    fd = np.array(
        [
            (logp_fn(_point(model, beta=beta + h * e)) - logp_fn(_point(model, beta=beta - h * e)))
            / (2 * h)
            for e in np.eye(d)
        ]
    )
    np.testing.assert_allclose(dlogp_fn(_point(model, beta=beta)), fd, rtol=1e-6, atol=1e-6)


# --- Gaussian process -------------------------------------------------------------------


def test_gp_logp_is_minus_the_papers_potential():
    model, info = make_gp_model(n_obs=30, seed=3)
    x, y = info.extra["x"], info.extra["y"]
    d2 = np.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)

    def paper_U(theta):
        eta, l, J = np.exp(theta)
        cov = eta * np.exp(-l * d2) + J * np.eye(len(y))
        _, logdet = np.linalg.slogdet(cov)
        return 0.5 * logdet + 0.5 * y @ np.linalg.solve(cov, y) + 0.5 * np.sum((theta + 1) ** 2)

    logp_fn = model.compile_logp()
    thetas = [np.array([0.0, 0.0, -0.5]), np.array([-1.0, 0.5, -1.5]), np.array([0.7, -0.3, 0.1])]
    sums = [
        logp_fn(_point(model, log_eta=t[0], log_l=t[1], log_J=t[2])) + paper_U(t) for t in thetas
    ]
    np.testing.assert_allclose(sums, sums[0], atol=1e-8)
    assert info.ref_mean is None and info.param_names == ["log_eta", "log_l", "log_J"]


# --- served Gaussian --------------------------------------------------------------------


@pytest.mark.parametrize("condition,sd_min,max_corr", [(1e5, 0.05, (0.95, 0.999)),
                                                       (2e8, 1e-4, (0.3, 0.8))])
def test_served_gaussian_has_the_stated_condition_and_scales(condition, sd_min, max_corr):
    from benchmarks.models.hard_geometry import served_gaussian

    _, cov = served_gaussian(20, condition, sd_min)
    eigs = np.linalg.eigvalsh(cov)
    np.testing.assert_allclose(eigs.max() / eigs.min(), condition, rtol=1e-6)
    sd = np.sqrt(np.diag(cov))
    np.testing.assert_allclose([sd.min(), sd.max()], [sd_min, 1.0], rtol=1e-9)
    corr = cov / np.outer(sd, sd) - np.eye(20)
    assert max_corr[0] < np.abs(corr).max() < max_corr[1]


def test_served_gaussian_is_a_flat_vector_behind_one_black_box():
    model, info = MODELS["served_gaussian"]("smoke")
    assert [rv.name for rv in model.free_RVs] == ["x"] and not info.has_gradient
    mean, cov = info.extra["mean"], info.extra["cov"]
    logp = model.compile_logp()
    x = mean + np.linalg.cholesky(cov) @ np.ones(len(mean))
    # the whole log-posterior, up to a constant: half the squared Mahalanobis distance
    assert logp({"x": x}) - logp({"x": mean}) == pytest.approx(-0.5 * len(mean), rel=1e-9)
    with pytest.raises(NotImplementedError):
        model.compile_dlogp()
