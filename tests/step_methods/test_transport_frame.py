"""SurrogateHMC(frame="triangular"): the step in the reference coordinates of a fitted map."""

import logging
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pymc as pm
import pytest

from pymc_surrogate import EvaluationStore, KernelHMC, SparseGridHMC, SurrogateHMC, VariationalHMC
from pymc_surrogate.surrogates.triangular_map import TriangularMap
from tests.conftest import correlated_gaussian, gaussian_model
from tests.reliability.helpers import BlackBoxLogp

SAMPLE = dict(chains=1, cores=1, progressbar=False, compute_convergence_checks=False)


def black_box_banana():
    """b ~ N(0, I), b1 + b2^2 ~ N(1, 0.2^2): a banana whose arms reach 2 sd out."""
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=2)
        lik = BlackBoxLogp(lambda v: -0.5 * ((v[0] + v[1] ** 2 - 1.0) / 0.2) ** 2, "banana")
        pm.Potential("lik", lik(b))
    return model


def _sample(model, step, **kwargs):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("pymc").setLevel(logging.ERROR)
        return pm.sample(step=step, **{**SAMPLE, **kwargs})


def test_banana_runs_in_a_nonlinear_frame_that_stores_model_coordinates():
    model = black_box_banana()
    store = EvaluationStore()
    step = SurrogateHMC(frame="triangular", store=store, model=model)
    idata = _sample(model, step, tune=800, draws=600, random_seed=3)
    frame = step.frame.map
    assert isinstance(frame, TriangularMap) and not frame.affine
    assert list(frame.order_) == [1, 0] and frame.degrees_[1] == 2
    b = idata.posterior["b"].values.reshape(-1, 2)
    assert np.all(np.isfinite(b))
    # b2 is symmetric: both arms visited; b1 + b2^2 stays near 1 (the likelihood's ridge)
    assert 0.3 < np.mean(b[:, 1] > 0) < 0.7
    assert abs(np.mean(b[:, 0] + b[:, 1] ** 2) - 1.0) < 0.3
    # the stats speak of the model: its logp at the draws
    logp = model.compile_logp()
    stats = idata.sample_stats
    assert np.all(stats.frame_degree.values == 2)  # the banana's bend, frozen for the draws
    for i in range(0, 600, 97):
        if np.isfinite(stats.lp.values[0, i]):
            np.testing.assert_allclose(stats.lp.values[0, i],
                                       logp({"b": b[i]}), rtol=1e-8, atol=1e-8)
    # the store keeps the model's coordinates and potentials, whatever the frame
    rows = store.read(0, "nobody", 2, 0)
    assert rows.potentials.size > 500
    for q, u in list(zip(rows.positions, rows.potentials))[:: max(1, rows.potentials.size // 20)]:
        np.testing.assert_allclose(u, -logp({"b": q}), rtol=1e-8, atol=1e-8)


def test_gaussian_keeps_the_affine_frame():
    mean, cov = correlated_gaussian(3, seed=2)
    model = gaussian_model(mean, cov, black_box=True)
    step = SurrogateHMC(frame="triangular", model=model)
    idata = _sample(model, step, tune=700, draws=300, random_seed=4)
    assert step.frame.map is None  # every degree 0: the model's own coordinates
    x = idata.posterior["x"].values.reshape(-1, 3)
    # within 5 sd of the mean of 300 draws (at an ESS of 30 or more)
    error = np.abs(x.mean(0) - mean) / np.sqrt(np.diag(cov) / 30)
    assert np.all(error < 5), error


def test_frame_settings():
    model = black_box_banana()
    with pytest.raises(ValueError, match="frame must be one of"):
        SurrogateHMC(frame="flow", model=model)
    with pytest.raises(ValueError, match="euclidean"):
        SurrogateHMC(frame="triangular", kernel={"metric": "riemannian"}, model=model)
    step = SurrogateHMC(frame=TriangularMap(max_degree=1), model=model)
    assert step.frame.estimator.max_degree == 1
    assert SurrogateHMC(model=model).frame.learned  # the default: learned where it can run
    assert VariationalHMC(model=model, use_gradient="finite_difference").frame.learned
    assert not SurrogateHMC(kernel={"metric": "riemannian"}, model=model).frame.learned


def test_kernel_hmc_learns_the_frame_by_default():
    model = black_box_banana()
    step = KernelHMC(model=model)
    idata = _sample(model, step, tune=800, draws=600, random_seed=3)
    frame = step.frame.map
    assert isinstance(frame, TriangularMap) and frame.degrees_[1] == 2
    assert np.all(idata.sample_stats.frame_degree.values == 2)
    b = idata.posterior["b"].values.reshape(-1, 2)
    # both arms (b2 of either sign), on the likelihood's ridge b1 + b2^2 = 1
    assert 0.3 < np.mean(b[:, 1] > 0) < 0.7
    assert abs(np.mean(b[:, 0] + b[:, 1] ** 2) - 1.0) < 0.3


def test_frame_auto_is_affine_where_a_learned_frame_cannot_run():
    model = black_box_banana()
    with model:
        pm.Normal("other", 0.0, 1.0)
        b = model["b"]
    assert not KernelHMC([b], model=model).frame.learned  # a compound step's block
    assert KernelHMC(model=model, executor=ThreadPoolExecutor(1)).frame.learned is False
    assert not SurrogateHMC([b], model=model).frame.learned
    assert not SparseGridHMC(model=model).frame.learned  # its grid: affine only
    with pytest.raises(ValueError, match="whole model"):
        KernelHMC([b], frame="triangular", model=model)
    with pytest.raises(ValueError, match="affine frame only"):
        SparseGridHMC(frame="triangular", model=model)



def _slow_chain_in_a_box(n, seed, step=0.05):
    """A random walk reflected in [0, 1]^2: a slow chain's states on a flat density."""
    rng = np.random.default_rng(seed)
    x = np.empty((n, 2))
    x[0] = rng.uniform(size=2)
    for i in range(1, n):
        y = np.abs(x[i - 1] + step * rng.standard_normal(2))
        x[i] = 1.0 - np.abs(1.0 - y)
    return x


def test_a_map_is_kept_only_where_it_straightens_the_states_potentials():
    from pymc_surrogate.step_methods.adaptation.transport_frame import Frame
    from tests.surrogates.test_triangular_map import banana, funnel

    frame = Frame(TriangularMap(), 2)
    # A slow chain's clusters on a flat box: the map's capacity choice bends them, but the
    # potential is constant, quadratic in the affine frame and not in the map's.
    for seed in (1, 4):
        box = _slow_chain_in_a_box(500, seed)
        assert not TriangularMap().fit(box).affine
        assert frame.fitted(box, np.zeros(len(box))) is None
    b1, b2 = (states := banana(600, seed=4)).T
    potentials = 0.5 * b2**2 + 0.5 * ((b1 - 1.0 + b2**2) / 0.2) ** 2
    assert list(frame.fitted(states, potentials).degrees_) == [0, 2]
    # potentials unknown (moves on the surrogate alone) at most states: the rest decide
    some = np.where(np.arange(len(states)) % 4 == 0, potentials, np.nan)
    assert list(frame.fitted(states, some).degrees_) == [0, 2]
    v, x = (states := funnel(600, seed=4)).T
    potentials = v**2 / 18 + 0.5 * x**2 * np.exp(-v) + v / 2
    assert list(frame.fitted(states, potentials).degrees_) == [0, 1]
