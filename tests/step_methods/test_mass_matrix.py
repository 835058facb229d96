"""The metric a chain leaves tuning with (``step_methods/mass_matrix.py``)."""

from __future__ import annotations

import numpy as np
import pymc as pm

from benchmarks.models.hard_geometry import make_served_gaussian, served_gaussian
from pymc_surrogate import SurrogateHMC


def test_narrow_tuning_states_do_not_become_the_metric(monkeypatch):
    """A 20-d Gaussian served whole on a Flat vector (condition 1e5, correlations to 0.99):
    the chain's late tuning states cover 0.03-1.4 of the true variances, and 200 surrogate
    draws made with that metric do not mix, so before ``Tuning.max_metric_samples`` the
    states' covariance stayed the metric (its variances 0.034-1.45 of the truth along the
    posterior's principal axes at this seed; min ESS 135 of 2 x 1000, R-hat 1.015). More
    surrogate draws, which cost no model evaluation, measure the scale: 0.33-1.8."""
    model, _ = make_served_gaussian(20, 1e5, 0.05)
    _, cov = served_gaussian(20, 1e5, 0.05)
    whiten = np.linalg.inv(np.linalg.cholesky(cov))
    metrics = []
    stop_tuning = SurrogateHMC.stop_tuning

    def keep_metric(step):
        stop_tuning(step)
        metrics.append(np.array(step.chain.metric._cov))

    monkeypatch.setattr(SurrogateHMC, "stop_tuning", keep_metric)
    with model:
        pm.sample(step=SurrogateHMC(), tune=1000, draws=1, chains=1, cores=1, random_seed=1,
                  progressbar=False, compute_convergence_checks=False)
    ratios = np.linalg.eigvalsh(whiten @ metrics[0] @ whiten.T)
    assert 0.2 < ratios.min() and ratios.max() < 5.0, ratios


def test_surrogate_draws_in_a_spurious_well_do_not_become_the_metric(monkeypatch):
    """The black-box banana at seed 0: 200 surrogate draws did not mix, the 800 drawn next
    found a well 100 sd out (U~ = -17 000), and their variance (187 against 0.5) became
    the draws' metric: every trajectory diverged, the chain never moved (R-hat 2.24).
    Here the longer warm-up is made to land in a well; the metric must stay the chain's."""
    from pymc_surrogate.core.adaptation import SurrogateWarmUp
    from tests.conftest import gaussian_model

    with gaussian_model(np.zeros(2), np.eye(2)):
        step = SurrogateHMC()
        pm.sample(step=step, tune=400, draws=1, chains=1, cores=1, random_seed=3,
                  progressbar=False, compute_convergence_checks=False)
    chain = step.chain
    rng = np.random.default_rng(0)
    walk = np.cumsum(0.01 * rng.standard_normal((200, 2)), axis=0)  # does not mix
    slow = SurrogateWarmUp(0.1, walk, np.full(200, 1.0))
    well = SurrogateWarmUp(0.1, 100.0 + rng.standard_normal((800, 2)) * 5, np.full(800, -1e4))
    calls = []

    def warm_up(chain, chain_scale, field, initial_step, n_samples=0):
        calls.append(n_samples)
        return well if n_samples else slow

    monkeypatch.setattr(step, "_warm_up", warm_up)
    before = chain.metric
    step._adapt_to_surrogate(chain, step._posterior_scale(chain, dense=False), slow)
    assert calls == [800], calls  # the longer run was drawn, then left alone
    assert chain.metric is before
