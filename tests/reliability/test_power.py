"""Power tests: each statistical check of the suite flags deliberately broken samplers.

A check that passes a correct sampler proves something only if it fails a wrong one. Each
check here meets the broken samplers of ``broken.py``: one chain shifted by 0.5 sd, draws
with an sd 15% too small, no Metropolis correction (every surrogate proposal accepted), and
tail jumps off on the Student-t(3) target (``slow``). The false-alarm side is the rest of
the suite (every exactness test is a correct sampler passing) plus the calibration tests
below. Many-seed rates are measured by ``power_table.py``; docs/reliability.md has the table.

Synthetic chains (AR(1), exact posterior draws) are seeded and cheap; each power test asks
for a rate well below the measured one (power about 1), so it holds at other seeds.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest
from scipy import stats

from pymc_surrogate import HMCKernel, SurrogateHMC
from tests.conftest import correlated_gaussian, gaussian_model
from tests.reliability.broken import no_metropolis_correction, shift_one_chain, shrink
from tests.reliability.helpers import SEED, check_gaussian, check_moments, sample
from tests.reliability.power_table import ar1
from tests.reliability.sbc import (ALPHA, BOUNDED, N_TESTS, NIG, PARAMS, exact_sbc_ranks,
                                   rank_tests, run_sbc)


def _flag_rate(make, check, n: int, seed: int) -> float:
    """Share of ``n`` draws from ``make(rng)`` that ``check`` fails."""
    rng = np.random.default_rng([SEED, seed])
    return float(np.mean([not check(make(rng)) for _ in range(n)]))


def _moments_pass(x) -> bool:
    return check_moments(x, 0.0, 1.0).passed


# ------------------------------------------------------------ moment / convergence check
@pytest.mark.parametrize("phi", [-0.3, 0.8])
def test_moment_check_false_alarm_rate(phi):
    """Calibration: at family rate 0.05, correct AR(1) chains (2 x 1000, d = 2, ESS per
    chain 1900 (antithetic) / 110) fail at most at the binomial 1e-3 bound of 100 trials at
    5% (``power_table.py`` measures the rate at the suite's 1e-3)."""
    rate = _flag_rate(lambda r: ar1(r, 2, 1000, 2, phi),
                      lambda x: check_moments(x, 0.0, 1.0, family_alpha=0.05).passed, 100, 1)
    assert rate <= stats.binom(100, 0.05).isf(1e-3) / 100, rate


def test_moment_check_flags_a_shifted_chain():
    """One chain of two moved by 0.5 sd (AR(1), phi = 0.5): R-hat's limit at the check's
    ESS let two chains 0.6 sd apart pass; the chain-means test does not."""
    rate = _flag_rate(lambda r: shift_one_chain(ar1(r, 2, 1000, 2, 0.5), 1.0, 0.5),
                      _moments_pass, 50, 2)
    assert rate >= 0.9, rate


def test_moment_check_flags_a_too_small_sd():
    rate = _flag_rate(lambda r: shrink(ar1(r, 2, 1000, 2, 0.5), 0.85), _moments_pass, 50, 4)
    assert rate >= 0.9, rate


def test_moment_check_flags_a_stuck_chain():
    x = ar1(np.random.default_rng([SEED, 5]), 2, 1000, 2, 0.5)
    x[1] = x[1, 0]
    assert check_moments(x, 0.0, 1.0).failures == ("a chain is constant",)


def test_moment_check_flags_no_metropolis_correction():
    """SurrogateHMC accepting every surrogate proposal, on the bad-region test's model (a
    Gaussian cut at x0 < 1 by a -inf logp, which no smooth surrogate shows): about 15% of
    its draws land where the posterior has no mass, and the check sees the moments (z of
    the mean 11-13 at seeds 1-3). On the banana the surrogate is close enough that the same
    broken sampler passes (0 of 5 seeds flagged, docs/reliability.md)."""
    from tests.reliability.test_faults import BAD_REGIONS, EDGE, first_coordinate_moments

    term, _, log_density = BAD_REGIONS["-inf"]
    with pm.Model(), no_metropolis_correction():
        x = pm.Normal("x", 0.0, 1.0, shape=2, initval=np.array([-0.5, 0.0]))
        pm.Potential("bad", term(x))
        idata = sample(SurrogateHMC(), tune=300, draws=300)
    draws = idata.posterior["x"].values
    assert (draws[..., 0] > EDGE).any()
    mean0, sd0 = first_coordinate_moments(log_density)
    check = check_moments(draws, [mean0, 0.0], [sd0, 1.0])
    assert not check.passed, check.report("x")


# ------------------------------------------------------------------- Gaussian check
@pytest.fixture(scope="module")
def gaussian_draws():
    """Real SurrogateHMC draws of a correlated d = 2 Gaussian, and its mean and cov."""
    mean, cov = correlated_gaussian(2, seed=2, condition=10.0)
    with gaussian_model(mean, cov):
        idata = sample(SurrogateHMC())
    return idata.posterior["x"].values, mean, cov


def _gaussian_pass(x, mean, cov) -> bool:
    return all(c.passed for c in check_gaussian(x, mean, cov))


def test_gaussian_check_passes_the_real_draws(gaussian_draws):
    x, mean, cov = gaussian_draws
    assert _gaussian_pass(x, mean, cov)


def test_gaussian_check_flags_a_shifted_chain(gaussian_draws):
    x, mean, cov = gaussian_draws
    assert not _gaussian_pass(shift_one_chain(x, np.sqrt(np.diag(cov)), 0.5), mean, cov)


def test_gaussian_check_flags_a_too_small_sd(gaussian_draws):
    x, mean, cov = gaussian_draws
    assert not _gaussian_pass(shrink(x, 0.85), mean, cov)


def test_gaussian_check_flags_a_wrong_correlation():
    """Right marginals, correlation of the wrong sign: only the eigen-coordinates see it."""
    mean, cov = correlated_gaussian(2, seed=2, condition=10.0)
    flipped = cov * np.array([[1.0, -1.0], [-1.0, 1.0]])
    rate = _flag_rate(lambda r: mean + ar1(r, 2, 1000, 2, 0.5) @ np.linalg.cholesky(flipped).T,
                      lambda x: all(c.passed for c in check_gaussian(x, mean, cov)), 20, 6)
    assert rate >= 0.9, rate


# ----------------------------------------------------------------------------- SBC
def _sbc_flags(reps: int, n_ranks: int, n_bins: int, scale: float, rng) -> bool:
    ranks = exact_sbc_ranks(reps, n_ranks, rng, scale)
    p = min(min(rank_tests(ranks[k], n_ranks, n_bins)[2].values()) for k in PARAMS)
    return p <= ALPHA / (N_TESTS * len(PARAMS))


@pytest.mark.parametrize("model", [NIG, BOUNDED], ids=lambda m: m.name)
def test_sbc_rank_tests_false_alarm_rate(model):
    """Exact posterior draws, 40 replications, L = 19: calibration at the 5% level (the
    chi-square approximations are least accurate at the short form's size)."""
    rng = np.random.default_rng([SEED, 7])
    flagged = 0
    for _ in range(150):
        ranks = exact_sbc_ranks(40, 19, rng, model=model)
        p = min(min(rank_tests(r, 19, 5)[2].values()) for r in ranks.values())
        flagged += p <= 0.05 / (N_TESTS * len(ranks))
    assert flagged <= stats.binom(150, 0.05).isf(1e-3), flagged


#: Replications of the no-correction SBC test: the short form's L, bins and tuning, fewer
#: replications to stay near a minute (power at this size: docs/reliability.md).
NO_CORRECTION_REPLICATIONS = 20


def test_short_sbc_flags_no_correction():
    """SurrogateHMC accepting every surrogate proposal, in the short SBC's settings on the
    bounded model (a normal truncated at 0 by a -inf Potential, posterior mass at the
    boundary): the chain follows the smooth surrogate below 0 and the true values rank too
    high. On the normal-inverse-gamma model the same broken sampler passes (all p >= 0.31)."""
    with no_metropolis_correction():
        result = run_sbc(SurrogateHMC, NO_CORRECTION_REPLICATIONS, n_ranks=19, n_bins=5,
                         tune=300, model=BOUNDED)
    assert not result.passed, result.summary()


def test_short_sbc_flags_a_halved_sd():
    """The CI form (40 replications, L = 19, 5 bins): power 0.91 (power_table.py); at
    least 6 of 10 flagged fails a check of that power with probability 1e-3."""
    rng = np.random.default_rng([SEED, 8])
    assert sum(_sbc_flags(40, 19, 5, 0.5, rng) for _ in range(10)) >= 6


def test_thorough_sbc_flags_a_too_small_sd():
    """The slow form (1000 replications, L = 99, 20 bins) against an sd 15% too small
    (power about 1; about 0.9 against 10%, power_table.py)."""
    rng = np.random.default_rng([SEED, 9])
    assert _sbc_flags(1000, 99, 20, 0.85, rng)


# ---------------------------------------------------------------------- heavy tails
@pytest.mark.slow
def test_heavy_tail_check_flags_tail_jumps_off():
    """The pooled t(3) check of ``test_exactness.test_heavy_tails`` against SurrogateHMC
    with tail jumps off: tail excursions rare and long (2% tail 0.013-0.014 at seeds 1-8
    before tail jumps, docs/reliability.md)."""
    from tests.reliability.test_exactness import check_tail_frequencies, pooled_student_t_runs

    idata = pooled_student_t_runs(lambda: SurrogateHMC(kernel=HMCKernel(tail_jumps=0)))
    checks = check_tail_frequencies(idata.posterior["t"].values)
    assert not all(c.passed for c in checks), "\n".join(c.report() for c in checks)


def test_heavy_tail_check_flags_shifted_and_shrunk_chains():
    """The same check on synthetic t(3) chains (a Gaussian copula of AR(1), 16 x 2000)."""
    from tests.reliability.test_exactness import HEAVY_TAIL_NU, check_tail_frequencies

    rng = np.random.default_rng([SEED, 10])
    x = stats.t.ppf(stats.norm.cdf(ar1(rng, 16, 2000, 3, 0.8)), HEAVY_TAIL_NU)

    def passes(y):
        return all(c.passed for c in check_tail_frequencies(y))

    assert passes(x)
    assert not passes(shift_one_chain(x, np.sqrt(3.0), 0.5))
    assert not passes(shrink(x, 0.85))
