"""A model evaluation that fails at a proposal is a rejection there, not the end of the run.

Stan's rule: an exception in the log density (or a NaN / +inf) at a proposal rejects that
proposal, and only a failure at the initial point stops the run. The failure is counted in
the stat ``eval_failures``, the first of each kind logged (through the steps' pending
warnings, which PyMC logs in the parent process), a warning given when they pass 10% of a
chain's evaluations; a failed evaluation never becomes training data. Runs once per step
method in ``registry.STEPS``; the full-size runs (2 x 1000 + 1000) are ``slow``
(``benchmarks/eval_failures.py`` records their figures).
"""

from __future__ import annotations

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy import stats as sps

from pymc_surrogate import ModelEvaluationError, SurrogateHMC
from tests.reliability.helpers import (
    BlackBoxLogp,
    assert_healthy,
    assert_moments,
    black_box_step,
    chain_mcse,
    recorded_warnings,
    sample,
    warning_messages,
)
from tests.reliability.registry import designed

EDGE = 2.0  # the solver fails for x[0] > EDGE
MESSAGE = "solver did not converge"
TRUNCATED = sps.truncnorm(-np.inf, EDGE)  # x[0]'s law: N(0, 1) below the edge
#: |z| bound on a mean (az.mcse) or an sd (its MCSE); a correct sampler passes each with
#: probability 1 - 6e-5.
Z_LIMIT = 4.0


def failing_region_model(kind: str):
    """x ~ N(0, I_2) through a black box that raises (or returns NaN) for x[0] > EDGE."""
    def logp(q):
        if q[0] > EDGE:
            if kind == "raise":
                raise ValueError(f"{MESSAGE} at {q}")
            return np.nan
        return -0.5 * q @ q

    model = pm.Model()
    with model:
        x = pm.Flat("x", shape=2, initval=np.zeros(2))
        pm.Potential("lik", BlackBoxLogp(logp, f"fails_{kind}")(x))
    return model


def mcse_of(values) -> float:
    """``az.mcse`` of one coordinate's draws (a Dataset on ArviZ 0.x, a DataArray on 1.x)."""
    result = az.mcse(values)
    return float(np.asarray(result.to_array() if hasattr(result, "to_array") else result).squeeze())


def truncation_figures(idata) -> dict:
    """x[0]'s mean z (az.mcse), sd ratio and sd z (the sd's MCSE), the largest draw, and
    each chain's eval_failures."""
    x0 = idata.posterior["x"].values[..., 0]
    mcse = mcse_of(idata.posterior["x"].isel(x_dim_0=0))
    _, _, _, chain_mcse_sd, _ = chain_mcse(x0[..., None])
    sd_mcse = np.sqrt((chain_mcse_sd**2).sum()) / x0.shape[0]
    return {
        "max": float(x0.max()),
        "mean_z": float((x0.mean() - TRUNCATED.mean()) / mcse),
        "sd_ratio": float(x0.std() / TRUNCATED.std()),
        "sd_z": float((x0.std() - TRUNCATED.std()) / sd_mcse),
        "eval_failures": idata.sample_stats["eval_failures"].values[:, -1].tolist(),
    }


@pytest.mark.parametrize("size", ["ci", pytest.param("full", marks=pytest.mark.slow)])
@pytest.mark.parametrize("kind", ["raise", "nan"])
def test_failing_region_is_rejected(step, kind, size):
    tune, draws = (1000, 1000) if size == "full" else (500, 500)
    with failing_region_model(kind), recorded_warnings() as caught:
        idata = sample(black_box_step(step), tune=tune, draws=draws, chains=2)
    assert_healthy(idata)
    figures = truncation_figures(idata)
    assert idata.posterior.sizes["draw"] == draws  # every draw kept
    assert figures["max"] <= EDGE, figures
    assert min(figures["eval_failures"]) > 0, figures  # counted, in the stats ArviZ shows
    assert abs(figures["mean_z"]) <= Z_LIMIT, figures
    if size == "full":
        assert abs(figures["sd_ratio"] - 1) <= 0.1, figures
    else:
        assert abs(figures["sd_z"]) <= Z_LIMIT, figures
    x1 = idata.posterior["x"].values[..., 1]
    assert abs(x1.mean() / mcse_of(idata.posterior["x"].isel(x_dim_0=1))) <= Z_LIMIT
    if kind == "raise":  # the first failure is logged with the Op's message and the point
        told = warning_messages(caught, "rejected and sampling goes on")
        assert any(MESSAGE in m and "x = [" in m for m in told), told


class Flaky:
    """logp of N(0, I_2) that raises at random, one call in ``every``."""

    def __init__(self, every: int, seed: int):
        self.every, self.rng = every, np.random.default_rng(seed)

    def __call__(self, q):
        if self.rng.uniform() < 1.0 / self.every:
            raise RuntimeError("the model server could not answer")
        return -0.5 * q @ q


def test_one_call_in_fifty_fails_at_random(step):
    with pm.Model(), recorded_warnings() as caught:
        x = pm.Flat("x", shape=2, initval=np.zeros(2))
        pm.Potential("lik", BlackBoxLogp(Flaky(50, seed=3), "flaky")(x))
        idata = sample(black_box_step(step), tune=500, draws=600)
    assert_healthy(idata)
    assert idata.posterior.sizes["draw"] == 600
    failures = idata.sample_stats["eval_failures"].values[:, -1]
    evals = idata.sample_stats["total_model_evals"].values[:, -1]
    assert failures.sum() > 0
    assert np.all(failures < 0.05 * evals), (failures, evals)
    assert_moments(idata, "x", [0.0, 0.0], [1.0, 1.0])
    # 2% of calls: no "frequent failures" warning
    assert not warning_messages(caught, "Each is a rejected proposal"), warning_messages(caught)


def test_failure_at_the_initial_point_still_stops(step):
    with pm.Model():
        x = pm.Flat("x", shape=2, initval=np.array([3.0, 0.0]))

        def logp(q):
            if q[0] > EDGE:
                raise ValueError(MESSAGE)
            return -0.5 * q @ q

        pm.Potential("lik", BlackBoxLogp(logp, "fails_at_start")(x))
        with pytest.raises(Exception) as info:
            sample(black_box_step(step), chains=1, tune=200, draws=200)
    assert isinstance(info.value, ModelEvaluationError), repr(info.value)
    assert MESSAGE in str(info.value)


def test_failure_at_every_point_tried_stops(step):
    """The model answers at the initial point only (its first three calls there: PyMC's
    check and the chain's start; a zero jump proposes it again): the run stops."""
    answered = [0]

    with pm.Model():
        x = pm.Flat("x", shape=2, initval=np.array([0.5, 0.5]))

        def logp(q):
            if not np.allclose(q, 0.5) or answered[0] >= 3:
                raise ValueError(MESSAGE)
            answered[0] += 1
            return -0.5 * q @ q

        pm.Potential("lik", BlackBoxLogp(logp, "answers_once")(x))
        with pytest.raises(Exception) as info:
            sample(black_box_step(step), chains=1, tune=200, draws=200)
    text = str(info.value)
    assert MESSAGE in text, text[:500]
    if step.cls.learns_from_gradients:  # central differences beside the start fail: there
        assert "the chain's state" in text, text[:500]
    elif not designed(step.cls):  # (a grid's nodes all fail: the precompute's own error)
        assert "at each of the last" in text, text[:500]


@pytest.mark.parametrize("mp_ctx", ["fork", "spawn"])
def test_failures_counted_and_told_from_worker_processes(mp_ctx):
    with failing_region_model("raise"), recorded_warnings() as caught:
        idata = sample(SurrogateHMC(), chains=2, cores=2, tune=300, draws=300, mp_ctx=mp_ctx)
    assert idata.posterior["x"].values[..., 0].max() <= EDGE
    assert np.all(idata.sample_stats["eval_failures"].values[:, -1] > 0)
    told = warning_messages(caught, "rejected and sampling goes on")
    assert len([m for m in told if MESSAGE in m]) == 2, told  # once for each chain


def test_failed_evaluations_never_become_training_data():
    with failing_region_model("raise"):
        step = SurrogateHMC()
        sample(step, chains=1, tune=400, draws=200)
    training = step.learned.training
    assert len(training) > 0
    assert np.all(np.isfinite(training.potentials))
    assert np.all(training.positions[:, 0] <= EDGE)
    assert step.evaluator.counts.eval_failures > 0


def test_keyboard_interrupt_in_the_model_still_stops_the_run():
    calls = [0]

    def logp(q):
        calls[0] += 1
        if calls[0] > 1500:  # in the draws
            raise KeyboardInterrupt
        return -0.5 * q @ q

    with pm.Model():
        x = pm.Flat("x", shape=2, initval=np.zeros(2))
        pm.Potential("lik", BlackBoxLogp(logp, "interrupted")(x))
        try:
            idata = sample(SurrogateHMC(), chains=1, tune=300, draws=3000)
        except KeyboardInterrupt:
            return
    # PyMC keeps the partial trace of an interrupted run and returns it
    assert 0 < idata.posterior.sizes["draw"] < 3000
