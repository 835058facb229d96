"""Tuning on the surrogate alone: on a finished run's store, and with batched exploration."""

import logging

import numpy as np
import pymc as pm
import pytest

from pymc_surrogate import SurrogateHMC
from pymc_surrogate.step_methods.tuning import TUNING
from tests.step_methods.evaluation.test_sharing import SCALES, black_box_model


def run(model, step_class, store, tune, draws=300, chains=1, seed=3):
    with model:
        return pm.sample(draws=draws, tune=tune, chains=chains, cores=1, random_seed=seed,
                         step=step_class(store=store), discard_tuned_samples=False,
                         progressbar=False,
                         compute_convergence_checks=False)


@pytest.fixture(scope="module")
def finished_store(tmp_path_factory):
    """The store of a finished run (one chain, 320 + 100)."""
    path = tmp_path_factory.mktemp("warm") / "run.sqlite"
    run(black_box_model(), SurrogateHMC, path, tune=320, draws=100, seed=1)
    return path


def copy_of(path, tmp_path):
    from pymc_surrogate.step_methods.evaluation.store import EvaluationStore

    copy = tmp_path / "copy.sqlite"
    EvaluationStore(path)._connect().execute(f"VACUUM INTO '{copy}'")
    return copy


def pool_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "poor where a chain went" in r.getMessage()]


def test_a_rerun_on_a_finished_store_tunes_without_corrections(finished_store, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="pymc")
    tune = 410  # tuning ends between checks: on a state with the surrogate's potential
    model = black_box_model()
    idata = run(model, SurrogateHMC, copy_of(finished_store, tmp_path), tune=tune)
    warmup = idata.warmup_sample_stats
    # Iteration 0 explores (the initial point and one proposal), then the fit; afterwards
    # only the checks evaluate the model.
    checks = tune // TUNING.surrogate_check_interval
    assert int(warmup["total_model_evals"].values[0, -1]) <= 2 + checks
    assert np.isnan(warmup["lp"].values[0, 1:]).mean() > 0.9
    assert not pool_warnings(caplog)
    # No surrogate value leaks out of tuning into a Metropolis test of the draws: the first
    # draw evaluates the state tuning left, and its proposal unless the inner move was
    # rejected on the surrogate (then nothing moved: seeds 3 and 6 of 3-6 on one machine;
    # seed 3 moved on another), and what the draws' stats call the model's logp is the model's.
    stats = idata.sample_stats
    proposal_tested = int(stats["accepted"].values[0, 0] > 0.5)
    assert int(stats["model_evals"].values[0, 0]) >= 1 + proposal_tested
    logp = model.compile_logp()
    draws = idata.posterior["x"].values[0]
    lp = idata.sample_stats["lp"].values[0]
    np.testing.assert_allclose(lp, [logp({"x": x}) for x in draws], rtol=1e-10)


def test_draws_after_tuning_on_the_surrogate_are_right(finished_store, tmp_path):
    import arviz as az

    idata = run(black_box_model(), SurrogateHMC, copy_of(finished_store, tmp_path),
                tune=400, draws=1000, chains=2, seed=4)
    x = idata.posterior["x"]
    mean, sd = x.mean(("chain", "draw")).values, x.std(("chain", "draw")).values
    mcse_mean = az.mcse(idata, var_names=["x"])["x"].values
    mcse_sd = az.mcse(idata, var_names=["x"], method="sd")["x"].values
    # |z| < 4 for 6 statistics: a false alarm about once in 2600 runs.
    assert np.all(np.abs(mean / mcse_mean) < 4), mean / mcse_mean
    assert np.all(np.abs((sd - SCALES) / mcse_sd) < 4), (sd - SCALES) / mcse_sd


class MisleadingCheck(SurrogateHMC):
    """The checks see a surrogate 3 nats off per unit of x[0] (the kernel is unchanged)."""

    def _surrogate_potential(self, q):
        return super()._surrogate_potential(q) + 3.0 * q[0]


def test_a_poor_surrogate_sends_the_chain_back_to_exact_tuning(finished_store, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="pymc")
    tune = 400
    idata = run(black_box_model(), MisleadingCheck, copy_of(finished_store, tmp_path),
                tune=tune)
    assert len(pool_warnings(caplog)) == 1
    lp = idata.warmup_sample_stats["lp"].values[0]
    # on the surrogate alone until the checks had a full window (a refit in between
    # starts the pairs again), exact from then on
    exact_from = int(np.flatnonzero(np.isnan(lp))[-1]) + 1
    interval, window = TUNING.surrogate_check_interval, TUNING.surrogate_check_window
    assert interval * (window + 1) <= exact_from <= interval * (window + 4), exact_from
    assert np.isnan(lp[1:exact_from]).mean() > 0.9


def test_a_killed_runs_store_is_refined_by_exact_tuning(finished_store, tmp_path):
    # A store with a full exploration but no finished tuning (a run killed in tune): the
    # rerun fits at once, then tunes with exact corrections, whose evaluations refine it.
    from pymc_surrogate.step_methods.evaluation.store import EvaluationStore

    path = copy_of(finished_store, tmp_path)
    EvaluationStore(path)._connect().execute("DELETE FROM meta WHERE name = 'tuned'")
    assert EvaluationStore(path).tuned == 0
    idata = run(black_box_model(), SurrogateHMC, path, tune=200)
    warmup = idata.warmup_sample_stats
    assert bool(warmup["uses_surrogate"].values[0, 1])
    assert np.all(np.isfinite(warmup["lp"].values[0]))
    assert EvaluationStore(path).tuned == 1
