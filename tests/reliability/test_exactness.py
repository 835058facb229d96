"""Exactness on posteriors known in closed form or by quadrature.

Every tolerance is a multiple of the Monte Carlo standard error, from each chain's own
ESS and combined over chains (``helpers.check_moments``), the multiple set by a Bonferroni
bound over the comparisons a test makes (family-wise false-alarm rate 1e-3); the chains'
means and sds must also agree (a chi-square test with a fixed limit). Runs once per entry of
``registry.EXACTNESS_STEPS`` (every step method with its default settings, plus variants
such as ``SurrogateHMC(kernel=HMCKernel(correction="hamiltonian"))``).
"""

from __future__ import annotations

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy import stats as sps

from benchmarks.models import make_banana
from tests.conftest import correlated_gaussian, gaussian_model
from tests.reliability.helpers import (
    SEED,
    BlackBoxLogp,
    assert_gaussian,
    assert_healthy,
    assert_moments,
    check_moments,
    black_box_step,
    sample,
)


# ------------------------------------------------------------ correlated Gaussians
@pytest.mark.parametrize(
    "dim,condition,tune",
    [
        (2, 10.0, 500),
        (5, 10.0, 500),
        (10, 100.0, 600),
        pytest.param(20, 100.0, 800, marks=pytest.mark.slow),
        # Ill-conditioned: eigenvalues from 1 to 1000, times scales from 0.5 to 3.
        pytest.param(50, 1000.0, 1000, marks=pytest.mark.slow),
    ],
    ids=lambda v: str(v),
)
def test_correlated_gaussian(exact_step, dim, condition, tune):
    mean, cov = correlated_gaussian(dim, seed=dim, condition=condition)
    with gaussian_model(mean, cov):
        idata = sample(exact_step(), tune=tune)
    assert_healthy(idata)
    assert_gaussian(idata, "x", mean, cov)


test_correlated_gaussian.ci_rotation = 2  # CI: 2 entries a case


@pytest.mark.parametrize(
    "dim,tune",
    [(3, 600), pytest.param(10, 1500, marks=pytest.mark.slow)],
    ids=lambda v: str(v),
)
def test_black_box_gaussian(exact_step, dim, tune):
    # tests.conftest.BlackBoxGaussianLogp: a Python Op with no gradient.
    mean, cov = correlated_gaussian(dim, seed=100 + dim, condition=10.0)
    with gaussian_model(mean, cov, black_box=True):
        step = black_box_step(exact_step)
        idata = sample(step, tune=tune)
    assert_healthy(idata)
    grads = int(idata.sample_stats["total_gradient_evals"].max())
    if step.functions.finite_difference:  # each counted with its 2 d logp evaluations
        assert int(idata.sample_stats["total_model_evals"].max()) >= (1 + 2 * dim) * grads
    else:
        assert grads == 0
    assert_gaussian(idata, "x", mean, cov)


# ---------------------------------------------------- conjugate linear regression
def linear_regression(n_obs=40, n_coef=3, sigma=0.7, tau=2.0, seed=3):
    """y = X beta + N(0, sigma^2), beta ~ N(0, tau^2 I): posterior N(m, S) in closed form."""
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n_obs), rng.normal(size=(n_obs, n_coef - 1))])
    x[:, 1:] += 1.5  # correlated with the intercept: a tilted posterior
    beta = rng.normal(0, tau, n_coef)
    y = x @ beta + sigma * rng.normal(size=n_obs)
    cov = np.linalg.inv(x.T @ x / sigma**2 + np.eye(n_coef) / tau**2)
    mean = cov @ x.T @ y / sigma**2
    return x, y, sigma, tau, mean, cov


@pytest.mark.parametrize("black_box", [False, True], ids=["gradient", "black_box"])
def test_conjugate_linear_regression(exact_step, black_box):
    x, y, sigma, tau, mean, cov = linear_regression()
    with pm.Model():
        beta = pm.Normal("beta", 0.0, tau, shape=len(mean))
        if black_box:
            def loglik(b):
                r = y - x @ b
                return -0.5 * (r @ r) / sigma**2

            pm.Potential("lik", BlackBoxLogp(loglik, "regression")(beta))
        else:
            pm.Normal("y", pt_dot(x, beta), sigma, observed=y)
        step = black_box_step(exact_step)
        idata = sample(step, tune=800 if black_box else 500)
    assert_healthy(idata)
    assert_gaussian(idata, "beta", mean, cov)


test_conjugate_linear_regression.ci_rotation = 4  # CI: 4 entries a gradient source, every entry once


def pt_dot(a, b):
    import pytensor.tensor as pt

    return pt.dot(a, b)


# ----------------------------------------------------------------- banana
@pytest.mark.parametrize("black_box", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["gradient", "black_box"])
def test_banana_against_quadrature(exact_step, black_box):
    """sparse-grid-hmc §4.2: curved, non-Gaussian; the surrogate is only approximate here,
    so the exact correction does real work. Reference moments by 1-d quadrature.

    The narrow curved ridge mixes slowly for any HMC: PyMC's NUTS gets a bulk-ESS of 30-101
    from 2 x 1500 draws (seeds 5, 7, 9, 20240), below the suite's minimum of 100, so the run
    is longer than the suite's default."""
    model, info = make_banana()
    with model:
        step = black_box_step(exact_step, use_gradient=False) if black_box else exact_step()
        idata = sample(step, tune=1000, draws=4000)
    assert_healthy(idata)
    assert_moments(idata, "beta", info.ref_mean["beta"], info.ref_sd["beta"])


test_banana_against_quadrature.known_defects = {
    # Issue 34: with its gradient, a chain can miss the arms' tips for all its draws. At
    # the suite's seed on PyMC 6 (AVX-512 machines, this and CI's): chain 0's tuning never
    # reached beta1 < -1.8, its fit lies 4.5 nats too high at (-2, +-1.8) (3 nats above
    # the mode) and 11-13 at beta1 = -2.5; no draw below -1.96 where chain 1 reached -2.76
    # (chain sds 0.64 / 0.71, chi2 30.7 against 14.7). Seeds 0-9: the check passes at all,
    # but the chains' shares below the reference's 1% quantile range 0.001-0.020 (pooled
    # 0.0099): the tails come in bursts. Tempering its tuning (as a black box's): the
    # same spread (0.003-0.017) at 60% of the ESS, 4 seeds; not landed.
    "SurrogateHMC-gradient": "a chain's fit can miss the arms' tips (comment above)",
}
# CI: SurrogateHMC and SparseGridHMC (the curved posterior's two failure modes: a fit that
# rises too fast, a box); the others under -m slow (45-60 s each on PyMC 6).
test_banana_against_quadrature.ci_entries = {"SurrogateHMC", "SparseGridHMC"}


# ------------------------------------------------------------------ heavy tails
#: Independent runs pooled by the heavy-tail test (each 2 chains x 2000 draws).
HEAVY_TAIL_RUNS = 8
#: Degrees of freedom of the heavy-tailed posterior.
HEAVY_TAIL_NU = 3.0


@pytest.mark.slow
def test_heavy_tails(exact_step):
    """Student-t(3), d = 3: the frequencies of the two-sided 20% and 2% tails.

    A surrogate with Gaussian tails proposes the far tail almost never (exact in the
    limit, but not in a run of this length), which moments of a t(3) barely show (its
    sd's MCSE is huge); tail indicators do, with their own MCSE. Pooled over
    ``HEAVY_TAIL_RUNS`` runs at consecutive seeds (their chains side by side): in one run
    the 2% tail indicator has so few effective draws that a tail a third too light passes
    at most seeds (SurrogateHMC's 2% tail before tail jumps, over 8 seeds x 3 coordinates:
    mean 0.0134, 22 of 24 below 0.02, and the single-run test passed at the suite's seed).
    """
    idata = pooled_student_t_runs(exact_step)
    assert_healthy(idata)
    assert_tail_frequencies(idata)


@pytest.mark.slow
def test_heavy_tails_is_passable():
    """The heavy-tail check is one a good sampler passes: PyMC's NUTS, same runs.

    (PyMC's fixed-length ``HamiltonianMC`` fails it at the suite's seed: R-hat of the 2%
    tail indicator 1.0082 against 1.0065, its ESS 2800-3900 against NUTS's 5400-7600.)
    """
    assert_tail_frequencies(pooled_student_t_runs(pm.NUTS))


def pooled_student_t_runs(make_step):
    """``HEAVY_TAIL_RUNS`` runs of ``make_step()`` on a Student-t(3), d = 3, at consecutive
    seeds, their chains side by side."""
    runs = []
    for offset in range(HEAVY_TAIL_RUNS):
        with pm.Model():
            pm.StudentT("t", nu=HEAVY_TAIL_NU, mu=0.0, sigma=1.0, shape=3)
            runs.append(sample(make_step(), tune=1000, draws=2000, random_seed=SEED + offset))
    return az.concat(runs, dim="chain")


#: Two-sided tail probabilities the heavy-tail check tests.
TAIL_PROBABILITIES = (0.2, 0.02)


def tail_indicator(x: np.ndarray, prob: float) -> np.ndarray:
    """1.0 where ``x`` lies in the two-sided ``prob`` tail of the Student-t(``HEAVY_TAIL_NU``)."""
    return (np.abs(x) > sps.t.isf(prob / 2, HEAVY_TAIL_NU)).astype(float)


def check_tail_frequencies(x: np.ndarray) -> list:
    """``helpers.check_moments`` of draws ``x`` (chain, draw, d) of the Student-t(``HEAVY_TAIL_NU``):
    the two-sided 20% and 2% tail indicators (means and sds), and the location (means only:
    the sd of a t(3) has no usable MCSE), each at family rate 1e-3 / 3.

    The location check is what sees one chain of 16 shifted by half an sd: a tail
    indicator moves little under a shift (power_table.py)."""
    dim = x.shape[-1]
    checks = [check_moments(tail_indicator(x, prob), np.full(dim, prob),
                            np.full(dim, np.sqrt(prob * (1 - prob))), family_alpha=1e-3 / 3)
              for prob in TAIL_PROBABILITIES]
    return checks + [check_moments(x, np.zeros(dim), None, family_alpha=1e-3 / 3)]


def assert_tail_frequencies(idata) -> None:
    """The two-sided 20% and 2% tail frequencies of ``t``, and its location, against MCSE."""
    names = [f"tail_{prob:g}" for prob in TAIL_PROBABILITIES] + ["t"]
    for name, check in zip(names, check_tail_frequencies(idata.posterior["t"].values)):
        assert check.passed, check.report(name)


# The test that approximate modes (``exact=False``) warn and leave a mark on the result
# (``test_approximate_mode_is_flagged``) was removed: no step method has an ``exact``
# setting today, so it was skipped for every entry. VariationalHMC and SparseGridHMC
# (docs/GUIDE §1) bring it back, parametrised over the entries that accept ``exact``.
