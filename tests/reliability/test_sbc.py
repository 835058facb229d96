"""Simulation-based calibration of every exact step method (see ``sbc.py``).

Short version: 40 replications, ranks among L = 19 draws, 5 bins, on both SBC models: the
normal-inverse-gamma model (``nig``, in CI) and the normal truncated at a hard boundary by a
-inf Potential (``bounded``, ``slow``: see below), the one on which a sampler without the
true-logp correction fails the short form (``test_power.py::test_short_sbc_flags_no_correction``,
in CI).
Thorough version (``python -m pytest -m slow tests/reliability/test_sbc.py -s``): 1000
replications, L = 99, 20 bins; ``SBC_REPLICATIONS`` overrides the count. Both write their
ranks, bin counts, statistics and p-values to
``tests/reliability/results/sbc_<model>_<step>_<short|thorough>.json`` (git-ignored) and print a
summary (visible with ``-s``).

Pass criterion (``SBCResult.passed``): every test of every parameter (bins, normal-score
location, normal-score scale) has a p-value above 0.001 / 6. Power, measured with exact
posterior draws (``power_table.py``, docs/reliability.md): the short form flags a posterior
sd halved 91% of the time and one 10% too small almost never; the thorough form flags an
sd 10% too small 90% of the time; on ``bounded``, the short form flags the sampler without
correction (docs/reliability.md has the seeds). At a fixed seed the outcome is deterministic.
The thorough form runs on ``nig`` only.
"""

from __future__ import annotations

import os

import pytest

from tests.reliability.sbc import BOUNDED, NIG, run_sbc
from tests.reliability.sbc_hierarchical import HIERARCHICAL

#: Thorough SBC replications: power about 0.9 against an sd 10% too small (docs/reliability.md).
THOROUGH_REPLICATIONS = 1000


def _check(result, results_dir, tag):
    path = result.save(results_dir, tag)
    print(f"\n{result.summary()}\n  -> {path}")
    assert result.passed, result.summary()


# The correct samplers mix slowly at the bounded model's hard boundary (most surrogate
# proposals land outside the support: 27 of 40 replications had ESS < L) and cost 3-4x the
# nig runs, so their bounded SBC is in the slow set; CI keeps the part that needs it: the
# short form flagging a sampler without the correction (test_power.py).
@pytest.mark.parametrize(
    "model", [NIG, pytest.param(BOUNDED, marks=pytest.mark.slow),
              pytest.param(HIERARCHICAL, marks=pytest.mark.slow)], ids=lambda m: m.name
)
@pytest.mark.parametrize("black_box", [False, True], ids=["gradient", "black_box"])
def test_sbc_short(exact_step, black_box, model, results_dir):
    result = run_sbc(exact_step, replications=40, n_ranks=19, n_bins=5, tune=300,
                     black_box=black_box, model=model)
    _check(result, results_dir, "short")


# CI's short form: each step method's black box (the package's main use); the gradient
# models and the SurrogateHMC variants under -m slow (1195 s a generation before, 356 after).
test_sbc_short.ci_entries = {f"{name}-black_box" for name in
                             ("SurrogateHMC", "AdaptiveSurrogateHMC", "VariationalHMC",
                              "KernelHMC", "SparseGridHMC")}


@pytest.mark.slow
@pytest.mark.parametrize("black_box", [False, True], ids=["gradient", "black_box"])
def test_sbc_thorough(exact_step, black_box, results_dir):
    replications = int(os.environ.get("SBC_REPLICATIONS", str(THOROUGH_REPLICATIONS)))
    result = run_sbc(exact_step, replications=replications, n_ranks=99, n_bins=20, tune=300,
                     seed=1806, black_box=black_box)
    _check(result, results_dir, "thorough")


@pytest.mark.slow
def test_hierarchical_exact_draws_agree_with_nuts():
    """The hierarchical model's exact draws (grid over log tau, then normals) against 4 x
    10000 NUTS draws of the PyMC model on one simulated data set: means and variances within
    4.5 Monte Carlo standard errors (ArviZ's, of x and of (x - mean)^2), tail shares below
    the exact 2.5% and above the 97.5% quantiles within 4.5 binomial standard errors at the
    NUTS run's tail ESS. Power: the Jacobian left out of p(log tau | y) moves tau's mean by
    1.4 sd (and mu's by 0.11 sd, about 10 MCSE here)."""
    import arviz as az
    import numpy as np
    import pymc as pm

    from tests.reliability.sbc_hierarchical import (hierarchical_model,
                                                    hierarchical_posterior_draws,
                                                    simulate_hierarchical)

    rng = np.random.default_rng(3)
    _, y = simulate_hierarchical(rng)
    exact = hierarchical_posterior_draws(y, 400_000, rng)
    with hierarchical_model():
        pm.set_data({"y": y})
        idata = pm.sample(draws=10_000, tune=2000, chains=4, cores=1, random_seed=2,
                          target_accept=0.99, progressbar=False, compute_convergence_checks=False)
    for name, truth in exact.items():
        x = idata.posterior[name]
        spread = (x - float(x.mean())) ** 2
        mcse_mean = float(az.mcse(az.convert_to_dataset(x.values))["x"])
        mcse_var = float(az.mcse(az.convert_to_dataset(spread.values))["x"])
        assert abs(float(x.mean()) - truth.mean()) < 4.5 * mcse_mean, name
        assert abs(float(spread.mean()) - truth.var()) < 4.5 * mcse_var, name
        ess_tail = float(az.ess(az.convert_to_dataset(x.values), method="tail")["x"])
        for share, q in ((np.mean(x.values < np.quantile(truth, 0.025)), 0.025),
                         (np.mean(x.values > np.quantile(truth, 0.975)), 0.025)):
            assert abs(share - q) < 4.5 * np.sqrt(q * (1 - q) / ess_tail), name
