"""Coverage (step_methods/adaptation/coverage.py): a surrogate narrower than the posterior is flagged by
the Pareto k of its weights and tempered until it covers; one that covers is not tempered."""

from __future__ import annotations


import arviz as az
import numpy as np
import pytest

from benchmarks.real_posteriors import tail_band
from pymc_surrogate import SurrogateHMC
from pymc_surrogate.step_methods.adaptation.coverage import Coverage, tempered
from tests.conftest import gaussian_model, with_tuning
from tests.reliability.broken import narrow_surrogate
from tests.reliability.helpers import SEED, check_moments, sample


def _quadratic(q):
    return float(q @ q) / 2, q.copy()


def test_tempered_field():
    assert tempered(_quadratic, 1.0) is _quadratic
    value, grad = tempered(_quadratic, 2.0)(np.array([1.0, 2.0]))
    assert value == 1.25 and np.array_equal(grad, [0.5, 1.0])


class _Gaussian:
    """``U~(q) = |q|^2 / (2 s^2) + wiggle * sin(3 q_0)``: sd ``s``, a bounded error."""

    def __init__(self, sd: float, wiggle: float = 0.0):
        self.sd, self.wiggle = sd, wiggle

    def value_and_grad(self, q):
        grad = q / self.sd**2
        grad[0] += 3 * self.wiggle * np.cos(3 * q[0])
        return float(q @ q / (2 * self.sd**2) + self.wiggle * np.sin(3 * q[0])), grad


def _coverage(sd: float, seed: int, wiggle: float = 0.0) -> Coverage:
    """The coverage a step measures for a surrogate of sd ``sd`` on N(0, I), d = 2, from
    500 tuning states and the 1000 evaluations a black-box exploration would make (its
    proposals spread 1.5 times the posterior)."""
    rng = np.random.default_rng([SEED, seed])
    with gaussian_model(np.zeros(2), np.eye(2), black_box=True):
        step = with_tuning(SurrogateHMC, coverage=True)()
    chain = step.chain
    for q in 1.5 * rng.standard_normal((1000, 2)):
        step.learned.training.append(q, 0.5 * q @ q, None)
    for q in rng.standard_normal((1000, 2)):
        step.learned.add_state(q, 0.5 * q @ q)
    step.learned.use(_Gaussian(sd, wiggle))
    step.refits.choose_coverage(step._access(chain))
    return step.coverage


def test_a_narrow_surrogate_is_flagged_and_tempered():
    """Power: an sd 0.6 of the posterior's is flagged at every one of 20 seeds and tempered
    to T = 2 (sd 0.85: k = 1 / (T s^2) - 1 = 0.39 on the posterior's draws) or 3 (the first
    tried with T s^2 >= 1, where its weights are bounded)."""
    for seed in range(20):
        coverage = _coverage(0.6, seed)
        assert coverage.khat > 0.7 and coverage.temperature in (2.0, 3.0), (seed, coverage)
        assert coverage.tempered_khat <= 0.7


@pytest.mark.parametrize("sd, wiggle", [(1.0, 0.0), (1.0, 0.3), (1.3, 0.0)])
def test_a_covering_surrogate_is_left_alone(sd, wiggle):
    """False alarms: the exact potential, the exact one with an error of 0.3 nats, and a
    wider one are never tempered (20 seeds each)."""
    for seed in range(20):
        coverage = _coverage(sd, seed, wiggle)
        assert coverage.temperature == 1.0 and not coverage.khat > 0.7, (seed, coverage)


def _right(idata) -> bool:
    """The issue's "right" on N(0, I): moments within MCSE, R-hat <= 1.01, and the shares
    below the 2.5% and above the 97.5% quantile within the 99% binomial band at the tail ESS."""
    x = idata.posterior["x"].values
    if not check_moments(x, 0.0, 1.0).passed or float(az.rhat(idata)["x"].max()) > 1.01:
        return False
    lo, hi = tail_band(float(az.ess(idata, method="tail")["x"].min()), 0.025, 0.99)
    flat = x.reshape(-1, x.shape[-1])
    shares = np.concatenate([(flat < -1.959964).mean(0), (flat > 1.959964).mean(0)])
    return bool(np.all((lo <= shares) & (shares <= hi)))


def _narrow_run(cover: bool, seed: int):
    # the coverage temperature alone: tuning's own tempering (a black box's) is off
    step_class = with_tuning(narrow_surrogate(SurrogateHMC, 0.6), coverage=cover,
                             tune_tempering=0.0)
    with gaussian_model(np.zeros(2), np.eye(2), black_box=True):
        step = step_class()
        idata = sample(step, tune=1000, draws=1000, random_seed=seed)
    return _right(idata), idata.sample_stats["surrogate_temperature"].values[:, -1]


def test_coverage_is_off_by_default():
    """Measured harm on an existing check (docs/design.md, "Coverage"): opt-in for now."""
    assert not SurrogateHMC.tuning.coverage


def test_a_narrow_surrogate_samples_right_once_tempered():
    """A surrogate with 0.6 of the posterior's sd (black box, N(0, I), d = 2), tempered: the
    draws are right. Without the check the same runs are wrong (R-hat 1.027-1.084) at 7 of
    seeds 0-7 and right at seed 7 and at this suite's seed: a per-seed power of about 7/8,
    so the comparison is ``test_coverage_power``'s (slow), not a one-seed assertion. Tuning's
    own tempering is off here: with it too, right at 9 of 11 seeds on PyMC 6 (this suite's seed
    not: a lower-tail share 0.0145 against the band's 0.0155; pooled tail shares over the 11 seeds
    0.024-0.026, sds 0.99-1.00) and 11 of 11 on PyMC 5."""
    right, temperature = _narrow_run(cover=True, seed=SEED)
    assert right and np.all(temperature >= 2.0), temperature


@pytest.mark.slow
def test_coverage_power():
    """Ten seeds: tempered, right at >= 9; without the check, wrong at >= 6 (measured 7 of
    seeds 0-7 wrong without it; the tempered side at 6 of 6 seeds with a whitening since
    reverted and at the suite's seed here). Not run in the session that wrote it."""
    right = sum(_narrow_run(True, seed)[0] for seed in range(10))
    wrong = sum(not _narrow_run(False, seed)[0] for seed in range(10))
    assert right >= 9 and wrong >= 6, (right, wrong)


def test_black_box_tuning_is_tempered_and_the_draws_are_not():
    """A black box's surrogate steps in tuning run on ``U~ / T``, ``T = 1 + 4 / d`` (3 at
    d = 2, the ``surrogate_temperature`` stat); the draws at the coverage temperature, 1."""
    with gaussian_model(np.zeros(2), np.eye(2), black_box=True):
        idata = sample(SurrogateHMC(), tune=500, draws=100, discard_tuned_samples=False,
                       random_seed=SEED)
    warm = idata.warmup_sample_stats
    used = warm["uses_surrogate"].values
    assert used.sum() > 100
    assert np.allclose(warm["surrogate_temperature"].values[used], 3.0)
    assert np.allclose(idata.sample_stats["surrogate_temperature"].values, 1.0)


def test_tuning_with_a_gradient_is_not_tempered():
    """Exploration with a gradient is exact HMC, which reaches what a random walk misses."""
    with gaussian_model(np.zeros(2), np.eye(2)):
        idata = sample(SurrogateHMC(), tune=300, draws=50, discard_tuned_samples=False,
                       random_seed=SEED)
    assert np.allclose(idata.warmup_sample_stats["surrogate_temperature"].values, 1.0)


@pytest.mark.shared_between_generations
def test_black_box_banana_covers_both_arms():
    """``benchmarks/banana_coverage.py`` at its seed 5, SurrogateHMC, 2 x (1000 + 2000):
    untempered in tuning, no chain's tuning reached b2 below -0.86, and the draws held no
    draw below the reference's 2.5% quantile of b2 (mean z 7.5, sd ratios 0.86 and 0.84,
    R-hat 1.002, no warning: wrong in silence; seeds 2 and 4 the same way, 3 of 10). Tempered
    (and refitted at growth 1.2), right at 10 of 10 seeds (docs/design.md, "Tempered tuning of a black box").
    Here with 1000 draws a chain (CI time): that failure's mean z is then about 7.5 /
    sqrt(2) = 5.3, still past the limit of 4, and its empty tail share still outside
    the band."""
    from benchmarks.banana_coverage import black_box_banana, banana_reference_quantiles, run
    from benchmarks.models.banana import make_banana

    _, info = make_banana()
    ref = (info.ref_mean["beta"], info.ref_sd["beta"],
           banana_reference_quantiles(info.extra["y"], [0.025, 0.975]))
    row = run("SurrogateHMC", 5, tune=1000, draws=1000, chains=2,
              models={"black_box": black_box_banana()}, ref=ref)
    assert row["status"] == "right", row["reasons"]
