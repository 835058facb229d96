"""Black-box exploration in batches on an executor (multiple-try Metropolis), issue 36."""

import pickle
from concurrent.futures import ThreadPoolExecutor

import arviz as az
import cloudpickle
import numpy as np
import pymc as pm
import pytest

from pymc_surrogate import SurrogateHMC, WarmUp
from tests.conftest import correlated_gaussian, gaussian_model

MEAN, COV = correlated_gaussian(3, seed=5)


def first_surrogate_iteration(idata) -> list[int]:
    used = idata.warmup_sample_stats["uses_surrogate"].values
    return [int(np.argmax(row)) if row.any() else row.size for row in used]


@pytest.fixture(scope="module")
def batched_run():
    with gaussian_model(MEAN, COV, black_box=True), ThreadPoolExecutor(4) as pool:
        step = SurrogateHMC(executor=pool, store=False)
        idata = pm.sample(draws=600, tune=400, chains=2, cores=1, step=step, random_seed=7,
                          progressbar=False, compute_convergence_checks=False,
                          discard_tuned_samples=False)
    return idata, step


def test_batched_exploration_reaches_its_first_fit_sooner(batched_run):
    idata, step = batched_run
    # explore_steps = 300 model calls; 4 tries make 7 calls an iteration: 43 iterations,
    # where one call at a time takes 300.
    assert step.explore_executor is not None and step.explore_tries == 4
    assert first_surrogate_iteration(idata) == [44, 44]  # the fit ends iteration 43
    evals = idata.warmup_sample_stats["model_evals"].values[:, 1:20]
    # two rounds: 4 tries, then 3 reference points (and, every other iteration, the
    # exploration's Laplace probe at its mode, one call)
    assert np.all((evals == 7) | (evals == 8)) and np.mean(evals == 7) > 0.4, evals


def test_tuning_after_the_first_fit_evaluates_states_in_batches(batched_run):
    idata, _ = batched_run
    # On the surrogate alone (surrogate_tuning.py): no model call but at the checks, every
    # 20th iteration, the last 4 states at once.
    evals = idata.warmup_sample_stats["model_evals"].values[:, 45:]
    checks = (np.arange(45, evals.shape[1] + 45) + 1) % 20 == 0
    assert np.all(evals[:, checks] == 4), evals[:, checks]
    assert np.all(evals[:, ~checks] == 0)


def test_batched_exploration_recovers_the_posterior(batched_run):
    idata, _ = batched_run
    draws = idata.posterior["x"].values
    ess = np.array([float(az.ess(draws[:, :, j])) for j in range(3)])
    assert ess.min() > 400, ess
    mcse = draws.std((0, 1)) / np.sqrt(ess)
    assert np.all(np.abs(draws.mean((0, 1)) - MEAN) < 4.0 * mcse), (draws.mean((0, 1)), mcse)
    # the sd's own standard error: HMC's draws are anti-correlated in x (bulk ESS above the
    # draws) but not in x^2, so sd / sqrt(2 ESS) understated it about twofold
    mcse_sd = az.mcse(idata, var_names=["x"], method="sd")["x"].values
    z = (draws.std((0, 1)) - np.sqrt(np.diag(COV))) / mcse_sd
    assert np.all(np.abs(z) < 4.0), z


def test_the_executor_stays_behind_when_the_step_is_pickled():
    with gaussian_model(MEAN, COV, black_box=True), ThreadPoolExecutor(2) as pool:
        step = SurrogateHMC(executor=pool)
        clone = pickle.loads(cloudpickle.dumps(step))
    assert clone.explore_executor is None and clone._executor_left_behind
    assert step.explore_executor is pool


def test_bad_executor_settings_are_refused():
    with gaussian_model(MEAN, COV, black_box=True):
        with pytest.raises(ValueError, match="submit or map"):
            SurrogateHMC(executor="dask")
        with pytest.raises(ValueError, match="tries must be an integer"):
            SurrogateHMC(executor=ThreadPoolExecutor(1), warmup=WarmUp(tries=1))
    from pymc_surrogate import KernelHMC

    with gaussian_model(MEAN, COV, black_box=True):
        with pytest.raises(ValueError, match="exact logp"):
            KernelHMC(pseudo_marginal=True, executor=ThreadPoolExecutor(1))
    with pm.Model():
        a = pm.Normal("a")
        pm.Normal("b", a)
        with pytest.raises(ValueError, match="CompoundStep"):
            SurrogateHMC([a], executor=ThreadPoolExecutor(1))


def test_exploration_in_batches_on_a_dask_cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client, \
            gaussian_model(MEAN, COV, black_box=True):
        step = SurrogateHMC(executor=client.get_executor(), store=False)
        idata = pm.sample(draws=100, tune=120, chains=1, cores=1, step=step, random_seed=3,
                          progressbar=False, compute_convergence_checks=False,
                          discard_tuned_samples=False)
    assert first_surrogate_iteration(idata) == [44]
    assert np.all(np.isfinite(idata.posterior["x"].values))
