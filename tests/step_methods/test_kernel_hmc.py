"""KernelHMC's own behaviour: known posteriors (black box), the pseudo-marginal guarantee,
vanishing adaptation, stats and bad settings.

Tolerances are MCSE-derived: a mean within 4 Monte Carlo standard errors (bulk ESS of the
coordinate), a variance within 4 standard errors of the second moment (ESS of the squared
deviation, whose autocorrelation differs from the coordinate's).
"""

import logging
import warnings

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

from benchmarks.models.haario_banana import haario_banana_moments, make_haario_banana
from benchmarks.models.random_effects import make_random_effects
from pymc_surrogate.compat import bulk_ess
from pymc_surrogate.step_methods.kernel_hmc import KernelHMC
from pymc_surrogate.surrogates import KernelExpFamilyFinite
from tests.conftest import gaussian_model

SAMPLE = dict(cores=1, progressbar=False, compute_convergence_checks=False)
COV = np.array([[4.0, 1.6], [1.6, 1.0]])  # correlation 0.8


def assert_moments(draws, mean, sd, z_limit=4.0):
    """Means and variances of ``draws`` (n, d; chains concatenated) within ``z_limit``
    standard errors of the exact ones."""
    for column, m, s in zip(draws.T, mean, sd):
        mean_z = (column.mean() - m) / (s / np.sqrt(bulk_ess(column)))
        dev2 = (column - m) ** 2
        var_se = np.std(dev2) / np.sqrt(bulk_ess(dev2))
        var_z = (dev2.mean() - s**2) / var_se
        assert abs(mean_z) < z_limit and abs(var_z) < z_limit, (m, s, mean_z, var_z)


def _draws(idata, name):
    values = idata.posterior[name].values
    return values.reshape(-1, values.shape[-1])


def _surrogate(form: str):
    """The step's default lite fit, or the finite form with its default features."""
    return None if form == "lite" else KernelExpFamilyFinite()


@pytest.mark.parametrize("form", ["lite", "finite"])
@pytest.mark.shared_between_generations
def test_recovers_a_correlated_gaussian_black_box(form):
    with gaussian_model(np.zeros(2), COV, black_box=True):
        idata = pm.sample(draws=1000, tune=1000, chains=2, step=KernelHMC(surrogate=_surrogate(form)),
                          random_seed=1, **SAMPLE)
    assert_moments(_draws(idata, "x"), np.zeros(2), np.sqrt(np.diag(COV)))
    stats = idata.sample_stats
    assert bool(stats.uses_surrogate.values.all())
    # measured, min bulk ESS of the 2000 draws at seed 1 (seeds 2, 3): PyMC 6 lite 2450
    # (2308, 1586), finite 1552 (2429, 1610); PyMC 5 lite 2576 (2081, 2404), finite 2165
    # (2529, 3051). Acceptance 0.67-0.81 a chain, 0.87-0.92 model evaluations a draw.
    assert min(bulk_ess(c) for c in _draws(idata, "x").T) > 400
    assert stats.model_evals.values.max() <= 1 and stats.gradient_evals.values.max() == 0


@pytest.mark.parametrize("form", ["lite", "finite"])
@pytest.mark.shared_between_generations
def test_ten_dimensional_gaussian_from_a_short_tune(form):
    """N(0, I), d = 10, black box, 2 x (1000 + 1000): the base measure from the model's
    values (the tuning states' covariance had eigenvalues 0.15-0.7 of the truth's) and a
    fit judged out of sample. Before both, the states' base and f gave acceptance 0.1-0.3,
    min bulk ESS 4-220 and R-hat up to 1.7 (benchmarks/results/kernel_hmc_sweep_iid.md:
    lite 11-132, finite 16-27 at seeds 0-2); after, at seed 0 lite 2905, acceptance 0.85.
    The ESS floor of 800 fails every one of those runs."""
    dim = 10
    with gaussian_model(np.zeros(dim), np.eye(dim), black_box=True):
        idata = pm.sample(draws=1000, tune=1000, chains=2, step=KernelHMC(surrogate=_surrogate(form)),
                          random_seed=0, **SAMPLE)
    draws = _draws(idata, "x")
    assert_moments(draws, np.zeros(dim), np.ones(dim))
    assert min(bulk_ess(c) for c in draws.T) > 800


def test_auto_temperature_keeps_the_surrogate_no_steeper_than_the_model():
    """``T``: the largest rise ratio surrogate / model over the points evaluated, in
    [1, MAX_TEMPERATURE]; a fit right in the bulk but steeper in a tail is tempered by the
    tail's ratio (a slope fitted by least squares followed the bulk and missed it)."""
    from pymc_surrogate.step_methods.adaptation.kernel_fit import MAX_TEMPERATURE, _tempered_misfit

    rng = np.random.default_rng(0)
    potentials = rng.chisquare(5, size=200) / 2
    assert _tempered_misfit(potentials + 3.0, potentials) == pytest.approx((0.0, 1.0), abs=1e-9)
    assert _tempered_misfit(2.0 * potentials, potentials) == pytest.approx((0.0, 2.0), abs=1e-9)
    assert _tempered_misfit(0.5 * potentials, potentials)[1] == 1.0  # never sharpened
    steep_tail = np.where(potentials > np.quantile(potentials, 0.9), 3.0, 1.0) * potentials
    assert 3.0 <= _tempered_misfit(steep_tail, potentials)[1] < MAX_TEMPERATURE
    assert _tempered_misfit(10.0 * potentials, potentials)[1] == MAX_TEMPERATURE
    assert _tempered_misfit(2.0 * potentials, potentials, temperature=1.0)[0] > 0.1
    assert _tempered_misfit(np.full(200, np.inf), potentials)[0] == np.inf


# Issue 19 is open: the chain under-explores the banana's arms. The surrogate learns from the
# chain's own states, and those of a 1000-iteration tune (a DE-MCz random walk, then the
# surrogate's own kernel) span too little of them. Measured (seeds 2, 3; both generations):
# variance z of x_1 -5 to -7, of x_2 -9 to -14, while min bulk ESS is 325-549 (it measures
# mixing inside the explored region only). `pytest -m experimental` runs it.
@pytest.mark.experimental
def test_recovers_a_banana_black_box():
    dim, b, v = 2, 0.1, 10.0  # sd of x_2: sqrt(1 + 2 b^2 V^2) = sqrt(3)
    model, _ = make_haario_banana(dim, b, v, gradient=False)
    with model:
        idata = pm.sample(draws=1000, tune=1000, chains=2, step=KernelHMC(), random_seed=2,
                          **SAMPLE)
    mean, sd = haario_banana_moments(dim, b, v)
    draws = _draws(idata, "x")
    assert_moments(draws, mean, sd)
    assert min(bulk_ess(c) for c in draws.T) > 100


# ------------------------------------------------------------------ pseudo-marginal
PM_MODEL = dict(n_importance=4)


def _pm_errors(idata, info):
    draws = _draws(idata, "theta")
    ref_mean, ref_sd = info.ref_mean["theta"], info.ref_sd["theta"]
    ess = np.array([bulk_ess(c) for c in draws.T])
    z = (draws.mean(0) - ref_mean) / (ref_sd / np.sqrt(ess))
    return z, draws.std(0) / ref_sd, ess


def test_pseudo_marginal_reuses_the_current_estimate():
    """Every rejected draw keeps the previous draw's logp to the last bit: re-evaluating
    the noisy Op at the current state would give a different value."""
    model, _ = make_random_effects(**PM_MODEL)
    with model:
        idata = pm.sample(draws=300, tune=600, chains=1,
                          step=KernelHMC(pseudo_marginal=True), random_seed=4, **SAMPLE)
    stats = idata.sample_stats
    logp = stats["lp"].values[0]  # the step's model_logp stat, as ArviZ names it
    accepted = stats.accepted.values[0].astype(bool)
    rejected = np.flatnonzero(~accepted[1:]) + 1
    assert rejected.size > 20
    np.testing.assert_array_equal(logp[rejected], logp[rejected - 1])
    assert stats.model_evals.values.max() <= 1
    assert not bool(stats.tail_jump.values.any())


@pytest.mark.shared_between_generations
def test_pseudo_marginal_posterior_is_exact_where_metropolis_is_not():
    """The importance-sampling likelihood of a Gaussian random-effects model (exact
    posterior by quadrature): KernelHMC recovers it; pm.Metropolis, which re-estimates the
    current state's likelihood at every step, does not (its log tau is too low)."""
    model, info = make_random_effects(**PM_MODEL)
    with model:
        kmc = pm.sample(draws=2000, tune=1000, chains=2, step=KernelHMC(pseudo_marginal=True),
                        random_seed=3, **SAMPLE)
    z, sd_ratio, ess = _pm_errors(kmc, info)
    assert np.all(np.abs(z) < 4), (z, sd_ratio, ess)
    assert np.all(np.abs(sd_ratio - 1) < 4 * np.sqrt(1 / (2 * ess)) + 0.05), (sd_ratio, ess)
    model, info = make_random_effects(**PM_MODEL)
    with model:
        metropolis = pm.sample(draws=6000, tune=1000, chains=2, step=pm.Metropolis(),
                               random_seed=3, **SAMPLE)
    z_metropolis, _, _ = _pm_errors(metropolis, info)
    # measured (K = 4, seed 3, 2 x 2000 draws): KernelHMC z = (-1.7, 0.3) on PyMC 6 and
    # (1.5, 0.6) on PyMC 5, sd ratios 0.97-1.04, ESS 1130-1930; Metropolis log tau z = -3.1
    # at ESS 616, so about -5.6 here (not re-measured)
    assert z_metropolis[1] < -3, z_metropolis


@pytest.mark.slow
def test_pseudo_marginal_at_the_noise_of_two_importance_samples(caplog):
    """K = 2 importance samples per group (data seed 7: var log L^ = 1.58 at the posterior
    mean, 0.09-12.7 across it), 2 x (1000 + 8000) at seeds 0-4: right (means within 4
    MCSE, sds within 4 standard errors plus 5%, R-hat <= 1.01) at 3 of 5 or more, and a
    seed that is not right is loud (the step's warnings or PyMC's R-hat check). Measured:
    PyMC 5 right at 5 of 5 (R-hat <= 1.004, sd ratios 0.94-1.02); PyMC 6 at 3 of 5 (R-hat
    1.010-1.014 at the other two, ESS 334-477; sd ratios 0.98-1.09). The power: with
    DE-MCz's scale dual-averaged toward acceptance 0.3, as before (the noise alone caps it
    at 0.38), right at 0 of seeds 0-2 (R-hat 1.012, 1.49, 1.43; log tau z 9.6 at seed 2);
    with the scale fixed at 1, 4 of 5 and at seed 4 a chain stuck on one point for all
    8000 draws (R-hat 2.2)."""
    import arviz as az

    right, loud = 0, 0
    for seed in range(5):
        model, info = make_random_effects(n_groups=10, n_importance=2, seed=7,
                                          op_seed=1000 + seed)
        caplog.clear()
        with model, caplog.at_level(logging.WARNING, logger="pymc"):
            idata = pm.sample(draws=8000, tune=1000, chains=2, random_seed=seed,
                              step=KernelHMC(pseudo_marginal=True), **SAMPLE)
        z, sd_ratio, ess = _pm_errors(idata, info)
        rhat = float(az.rhat(idata, var_names=["theta"])["theta"].max())
        ok = (np.all(np.abs(z) < 4)
              and np.all(np.abs(sd_ratio - 1) < 4 * np.sqrt(1 / (2 * ess)) + 0.05)
              and rhat <= 1.01)
        right += ok
        # loud: the step's own warnings, or PyMC's R-hat check (it warns above 1.01)
        loud += not ok and (rhat > 1.01 or any(r.getMessage().startswith("KernelHMC")
                                                for r in caplog.records))
    assert right >= 3 and right + loud == 5, (right, loud)


def test_pseudo_marginal_in_a_compound_step_warns():
    with pm.Model():
        a = pm.Normal("a")
        pm.Normal("b", a)
        with pytest.warns(UserWarning, match="not an exact pseudo-marginal"):
            KernelHMC([a], pseudo_marginal=True)


# ----------------------------------------------------------- adaptation and stats
@pytest.mark.parametrize("adapt_in_draws", [True, False])
def test_vanishing_adaptation_in_the_draws_or_frozen(adapt_in_draws):
    with gaussian_model(np.zeros(2), COV, black_box=True):
        step = KernelHMC(surrogate=KernelExpFamilyFinite(), adapt_in_draws=adapt_in_draws)
        idata = pm.sample(draws=400, tune=700, chains=1, step=step, random_seed=5, **SAMPLE)
    stats = idata.sample_stats
    adaptations = stats.adaptations.values[0]
    for name in ("adaptations", "adapted", "kernel_sigma", "kernel_lam", "training_size",
                 "lp", "accept", "uses_surrogate"):
        assert name in stats
    assert np.all(np.isfinite(stats.kernel_sigma.values)) and np.all(stats.kernel_lam.values > 0)
    if adapt_in_draws:
        # a_t = t^-0.5 from t ~ 400 on: about 2 (sqrt(1100) - sqrt(700)) = 13 updates
        assert adaptations[-1] > adaptations[0]
        adapted = stats.adapted.values[0]
        assert adapted.sum() == adaptations[-1] - adaptations[0] + int(adapted[0])
        assert stats.training_size.values[0, -1] > stats.training_size.values[0, 0]
    else:
        assert adaptations[-1] == adaptations[0] and not bool(stats.adapted.values.any())
        assert np.unique(stats.training_size.values).size == 1


def test_short_tune_falls_back_to_the_random_walk_without_crashing():
    with gaussian_model(np.zeros(2), COV, black_box=True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(draws=50, tune=30, chains=1, step=KernelHMC(), random_seed=6,
                              **SAMPLE)
    stats = idata.sample_stats
    assert not bool(stats.uses_surrogate.values.any())
    assert bool(stats.fallback.values.all())


@pytest.mark.parametrize(
    "settings, name",
    [
        ({"adaptation_decay": 0.0}, "adaptation_decay"),
        ({"adaptation_decay": 1.5}, "adaptation_decay"),
        ({"kernel": {"n_inner": 0}}, "n_inner"),
        ({"temperature": 0.5}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"kernel": {"correction": "none"}}, "correction"),
        ({"pseudo_marginal": "yes"}, "pseudo_marginal"),
        ({"adapt_in_draws": None}, "adapt_in_draws"),
        ({"pseudo_marginal": True, "use_gradient": True}, "use_gradient"),
        ({"target_accept": 1.5}, "target_accept"),
    ],
)
def test_bad_settings_raise_naming_the_setting(settings, name):
    with gaussian_model(np.zeros(2), COV, black_box=True):
        with pytest.raises(ValueError, match=name):
            KernelHMC(**settings)


def test_the_form_is_the_surrogate_given():
    with gaussian_model(np.zeros(2), COV, black_box=True):
        with pytest.raises(TypeError, match=r"surrogate=KernelExpFamilyFinite\(\)"):
            KernelHMC(form="finite")
        finite = KernelHMC(surrogate=KernelExpFamilyFinite(n_features=40))
        assert finite.form == "finite" and finite.adaptation_decay == 0.5
        assert KernelHMC().surrogate.max_points == 1000


def test_a_stuck_chain_skips_the_fit_with_one_warning_saying_so(caplog):
    """Every state equal (a logp finite at the initial point only): no fit, one warning
    naming the distinct states, not the evaluations; the draws fall back, exactly."""
    with pm.Model():
        x = pm.Flat("x", shape=2, initval=np.zeros(2))
        pm.Potential("p", pt.switch(pt.all(pt.eq(x, 0.0)), 0.0, -np.inf))
        with caplog.at_level(logging.WARNING, logger="pymc"):
            idata = pm.sample(draws=200, tune=400, chains=1, step=KernelHMC(use_gradient=False),
                              random_seed=1, **SAMPLE)
    fit_warnings = [r.getMessage() for r in caplog.records
                    if "too early to fit a surrogate" in r.getMessage()]
    assert len(fit_warnings) == 1, fit_warnings
    assert "1 distinct states" in fit_warnings[0] and "barely moved" in fit_warnings[0]
    stats = idata.sample_stats
    assert not bool(stats.uses_surrogate.values.any())
    assert bool(stats.fallback.values.all())
    assert int(stats.surrogate_fits.values.max()) == 0
