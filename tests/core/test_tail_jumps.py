"""The heavy-tail check decides from a few dozen true evaluations; its pieces are exact
importance-sampling estimates."""

import numpy as np
import pytest
from scipy import stats as sps

from pymc_surrogate.core.tail_jumps import (
    CauchyJumps,
    assess_tail_jumps,
    independence_acceptance,
    mass_beyond,
)
from pymc_surrogate.surrogates.whitening import Whitening

N_STATES, N_TRIALS = 500, 60  # as the step methods use them (tune = 1000)


def test_log_density_is_the_product_cauchy_up_to_a_constant():
    scale = Whitening(np.array([1.0, -2.0]), np.array([[2.0, 0.0], [0.5, 1.0]]))
    jumps = CauchyJumps(scale)
    q = jumps.draw(np.random.default_rng(0), size=5)
    exact = np.sum(sps.cauchy.logpdf(scale.to_white(q)), axis=1) - np.log(2.0 * 1.0)
    assert np.allclose(jumps.log_density(q) - exact, (jumps.log_density(q) - exact)[0])


def test_cut_jumps_stay_within_their_cut_follow_the_cut_cauchy_and_have_no_density_beyond():
    """The cut: every whitened coordinate within it, distributed as the cut Cauchy
    (Kolmogorov-Smirnov against its CDF), the density unchanged inside and -inf outside,
    and no rejection loop, so even d = 200 draws at once (a cut of the norm at 20 keeps
    one 2-d draw in 0.94 but not one in 20 000 in d = 200)."""
    scale = Whitening(np.array([1.0, -2.0]), np.array([3.0, 0.5]))
    cut, uncut = CauchyJumps(scale, cut=10.0), CauchyJumps(scale)
    white = scale.to_white(cut.draw(np.random.default_rng(2), size=20000))
    assert np.abs(white).max() <= 10.0
    cdf = lambda x: 0.5 + np.arctan(x) / (2.0 * np.arctan(10.0))  # noqa: E731
    assert sps.kstest(white[:, 0], cdf).pvalue > 1e-3
    assert sps.kstest(2.0 * white[:, 0], cdf).pvalue < 1e-6  # the check can fail
    inside = scale.from_white(white[:5])
    assert np.allclose(cut.log_density(inside), uncut.log_density(inside))
    far = scale.from_white(np.array([[12.0, 0.0]]))
    assert cut.log_density(far)[0] == -np.inf and np.isfinite(uncut.log_density(far)[0])
    assert cut.draw(np.random.default_rng(3)).shape == (2,)
    wide = CauchyJumps(Whitening.identity(200), cut=10.0).draw(np.random.default_rng(4), 60)
    assert wide.shape == (60, 200) and np.abs(wide).max() <= 10.0


def test_a_target_equal_to_the_proposal_is_always_accepted_and_its_mass_is_the_cauchy_tail():
    jumps = CauchyJumps(Whitening.identity(1))
    rng = np.random.default_rng(1)
    states, proposals = jumps.draw(rng, size=200), jumps.draw(rng, size=4000)
    potential = lambda q: -jumps.log_density(q)  # pi = g: every weight equal
    assert independence_acceptance(
        jumps, states, potential(states), proposals, potential(proposals)
    ) == pytest.approx(1.0)
    radius = 3.0
    truth = 1.0 - 2.0 / np.pi * np.arctan(radius)
    estimate = mass_beyond(jumps, proposals, potential(proposals), radius)
    assert abs(estimate - truth) < 4.0 * np.sqrt(truth * (1 - truth) / proposals.shape[0])


def test_non_finite_potentials_weigh_nothing():
    jumps = CauchyJumps(Whitening.identity(2))
    proposals = np.array([[0.0, 0.0], [50.0, 0.0], [100.0, 0.0]])
    potentials = np.array([0.0, np.inf, np.nan])
    assert mass_beyond(jumps, proposals, potentials, 10.0) == 0.0


def _check(draw_posterior, potential, dim, seed):
    """The step methods' check, with exact posterior draws as the tuning states."""
    rng = np.random.default_rng(seed)
    states = draw_posterior(rng, (N_STATES, dim))
    jumps = CauchyJumps(Whitening.from_samples(states, dense=True))
    proposals = jumps.draw(rng, size=N_TRIALS)
    return assess_tail_jumps(jumps, states, potential(states), proposals, potential(proposals))


@pytest.mark.parametrize("seed", range(5))
def test_student_t3_tails_call_for_jumps(seed):
    nu = 3.0
    check = _check(lambda rng, shape: sps.t.rvs(nu, size=shape, random_state=rng),
                   lambda q: -np.sum(sps.t.logpdf(q, nu), axis=-1), 3, seed)
    assert check.worthwhile, check


@pytest.mark.parametrize("dim", [2, 5])
@pytest.mark.parametrize("seed", range(5))
def test_gaussian_tails_do_not(dim, seed):
    check = _check(lambda rng, shape: rng.standard_normal(shape),
                   lambda q: 0.5 * np.sum(q**2, axis=-1), dim, seed)
    assert not check.worthwhile, check
    assert check.acceptance > 0.05  # the jumps would move: it is the tails that say no


def test_one_dominant_weight_is_no_evidence_of_heavy_tails():
    """A "mass" resting on one proposal is 0 or 1 whatever the tails: no jumps (the
    beta-binomial of vhmc §4.1 got mass 1 this way, and its jumping chains stuck)."""
    rng = np.random.default_rng(0)
    states = rng.standard_normal((500, 2))
    jumps = CauchyJumps(Whitening.from_samples(states, dense=True))
    proposals = jumps.draw(rng, size=N_TRIALS)
    far = int(np.argmax(jumps.distance(proposals)))
    potentials = np.full(N_TRIALS, 50.0)  # every proposal but one weighs ~nothing
    potentials[far] = 0.0
    check = assess_tail_jumps(jumps, states, 0.5 * np.sum(states**2, axis=1), proposals, potentials)
    assert check.mass_beyond > 0.99 and check.acceptance > 0.0
    assert check.weight_ess < 1.5
    assert not check.worthwhile
