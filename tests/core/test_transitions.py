"""Each kernel must leave the *true* target invariant even with a wrong surrogate."""

import numpy as np
import pytest

from pymc.step_methods.hmc.quadpotential import QuadPotentialDiag

from pymc_surrogate.core.transitions import (
    ChainPoint,
    differential_evolution_transition,
    exact_hmc_transition,
    differential_evolution_jump,
    independence_transition,
    multiple_try_transition,
    surrogate_hmc_transition,
    surrogate_transition,
)

# Target: N(mean, sd^2) per coordinate, independent, in 2-D.
MEAN, SD = np.array([1.0, -2.0]), np.array([0.5, 2.0])


def true_point(q, with_grad=True):
    z = (q - MEAN) / SD
    return ChainPoint(q, 0.5 * z @ z, z / SD if with_grad else None)


def wrong_surrogate(q):
    # Wrong scale, wrong centre, a wiggle: the correction must repair all of it.
    z = (q - MEAN - 0.3) / (1.4 * SD)
    return 0.5 * z @ z + 0.1 * np.sin(3 * q[0]), z / (1.4 * SD) + np.array([0.3 * np.cos(3 * q[0]), 0])


def run_chain(kernel, n=6000, seed=0):
    rng = np.random.default_rng(seed)
    current = true_point(MEAN.copy())
    out = np.empty((n, 2))
    for i in range(n):
        current = kernel(current, rng).point
        out[i] = current.q
    return out


def assert_moments(draws):
    import arviz as az

    dataset = az.convert_to_dataset(draws[None])
    ess = az.ess(dataset)["x"].values
    mcse_mean = draws.std(0) / np.sqrt(ess)
    assert np.all(np.abs(draws.mean(0) - MEAN) < 4.5 * mcse_mean), (draws.mean(0), mcse_mean)
    # sd's Monte Carlo error for Gaussian draws ~ sd / sqrt(2 ess)
    assert np.all(np.abs(draws.std(0) - SD) < 4.5 * SD / np.sqrt(2 * ess)), draws.std(0)


METRIC = QuadPotentialDiag(SD**2, rng=np.random.default_rng(42))


def test_exact_hmc_targets_the_posterior():
    kernel = lambda cur, rng: exact_hmc_transition(
        cur, true_point, METRIC, 0.4, 1.5, 1000.0, rng
    )
    assert_moments(run_chain(kernel))


def test_surrogate_hmc_with_a_wrong_surrogate_is_exact():
    kernel = lambda cur, rng: surrogate_hmc_transition(
        cur, lambda q: true_point(q, False), wrong_surrogate, METRIC, 0.4, 1.5, 1000.0, rng
    )
    assert_moments(run_chain(kernel))


@pytest.mark.parametrize("n_inner", [1, 3])
def test_surrogate_transition_with_a_wrong_surrogate_is_exact(n_inner):
    kernel = lambda cur, rng: surrogate_transition(
        cur, lambda q: true_point(q, False), wrong_surrogate, METRIC, 0.4, 1.5, 1000.0, n_inner, rng
    )
    assert_moments(run_chain(kernel))


def test_differential_evolution_with_a_fixed_history_is_exact():
    history = np.random.default_rng(3).normal(MEAN, SD, size=(200, 2))
    kernel = lambda cur, rng: differential_evolution_transition(
        cur, lambda q: true_point(q, False), history, 1.0, rng
    )
    assert_moments(run_chain(kernel, n=20000))


def _multiple_try_kernel(n_tries=4, broken=False):
    history = np.random.default_rng(3).normal(MEAN, SD, size=(200, 2))
    jump = lambda rng: differential_evolution_jump(history, 1.5, 2, rng)  # noqa: E731
    evaluate = lambda points: [true_point(q, False) for q in points]  # noqa: E731

    def best_try_by_metropolis(cur, rng):
        # The tempting shortcut: pick the best-weighted try and test it against x alone.
        # It over-weights the mode (draws too narrow), which the moments test must catch.
        tries = [true_point(cur.q + jump(rng), False) for _ in range(n_tries)]
        w = np.exp(-np.array([t.potential for t in tries]))
        chosen = tries[rng.choice(n_tries, p=w / w.sum())]
        if rng.uniform() < np.exp(cur.potential - chosen.potential):
            cur = chosen
        return type("Info", (), {"point": cur})

    if broken:
        return best_try_by_metropolis
    return lambda cur, rng: multiple_try_transition(cur, evaluate, jump, n_tries, rng)


def test_multiple_try_metropolis_with_a_fixed_history_is_exact():
    assert_moments(run_chain(_multiple_try_kernel(), n=8000))


@pytest.mark.parametrize("seed", [0, 1])
def test_the_moments_check_catches_multiple_tries_without_reference_points(seed):
    # Power: flagged at 5 of 5 seeds (0-4) when written; two run here.
    with pytest.raises(AssertionError):
        assert_moments(run_chain(_multiple_try_kernel(broken=True), n=8000, seed=seed))


def test_independence_with_a_heavy_tailed_proposal_is_exact():
    from pymc_surrogate.core.tail_jumps import CauchyJumps
    from pymc_surrogate.surrogates.whitening import Whitening

    # Off-centre and too wide, as the tuning scale may be: the ratio w = pi / g repairs it.
    jumps = CauchyJumps(Whitening(MEAN + 0.5, 2.0 * SD))
    kernel = lambda cur, rng: independence_transition(
        cur, lambda q: true_point(q, False), jumps, rng
    )
    assert_moments(run_chain(kernel, n=20000))


def test_surrogate_transition_costs_nothing_when_it_does_not_move():
    calls = []

    def evaluate(q):
        calls.append(q)
        return true_point(q, False)

    never = lambda q: (np.nan, np.full(2, np.nan))  # every inner trajectory diverges
    info = surrogate_transition(
        true_point(MEAN.copy()), evaluate, never, METRIC, 0.4, 1.5, 1000.0, 3, np.random.default_rng(0)
    )
    assert not calls and info.diverging and info.point.q is not None


def test_differential_evolution_steps_are_per_coordinate_on_a_badly_scaled_history():
    """History sds 1e4 and 1e-4: the uncorrelated steps and the noise on a difference are
    each coordinate's own size (one spread for both, their mean, moved the narrow
    coordinate by about 1e7 of its sds a step, and no such step was ever accepted)."""
    rng = np.random.default_rng(3)
    sds = np.array([1e4, 1e-4])
    history = rng.standard_normal((400, 2)) * sds
    steps = np.array([differential_evolution_jump(history, 1.0, 2, rng, isotropic_share=1.0)
                      for _ in range(2000)])
    np.testing.assert_allclose(steps.std(0) / history.std(0), 2.38 / np.sqrt(2), rtol=0.1)
    # differences of three states, 1e-4 apart in the narrow coordinate: jumps of at most
    # their size there, plus noise of 1e-3 of its spread (not of 1e4)
    jumps = np.array([differential_evolution_jump(history[:3], 1.0, 2, rng, isotropic_share=0.0)
                      for _ in range(500)])
    largest = 2.38 / 2 * np.ptp(history[:3, 1])
    assert np.all(np.abs(jumps[:, 1]) < largest + 5e-3 * history[:3, 1].std())


def test_differential_evolution_coordinate_without_spread_takes_the_others_scale():
    rng = np.random.default_rng(4)
    history = np.column_stack([rng.standard_normal(50) * 1e2, np.full(50, 3.0),
                               rng.standard_normal(50) * 1e-2])
    steps = np.array([differential_evolution_jump(history, 1.0, 3, rng, isotropic_share=1.0)
                      for _ in range(3000)])
    sd = history.std(0)
    expected = 2.38 / np.sqrt(3) * np.array([sd[0], np.sqrt(sd[0] * sd[2]), sd[2]])
    np.testing.assert_allclose(steps.std(0), expected, rtol=0.1)
