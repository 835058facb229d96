import logging
import re
import pickle
import warnings

import numpy as np
import pymc as pm
import pytest

from pymc_surrogate import AdaptiveSurrogateHMC, HMCKernel, ModelEvaluationError, SurrogateHMC
from pymc_surrogate.step_methods.adaptation.coverage import tempered
from pymc_surrogate.surrogates.random_network import RandomNetworkSurrogate
from tests.conftest import correlated_gaussian, gaussian_model, with_tuning
from tests.reliability.helpers import assert_moments

SAMPLE = dict(draws=1000, tune=600, chains=2, cores=1, progressbar=False, random_seed=11)


@pytest.mark.parametrize("correction", ["surrogate_transition", "hamiltonian"])
@pytest.mark.shared_between_generations
def test_correlated_gaussian_with_gradient(correction):
    mean, cov = correlated_gaussian(6)
    with gaussian_model(mean, cov):
        idata = pm.sample(step=SurrogateHMC(kernel=HMCKernel(correction=correction)), **SAMPLE)
    assert_moments(idata, "x", mean, np.sqrt(np.diag(cov)))
    stats = idata.sample_stats
    # After tuning, one model evaluation per draw at most, and no gradient.
    assert stats.model_evals.max() <= 1 and stats.gradient_evals.max() == 0
    assert bool(stats.uses_surrogate.all())


def _evaluations_between_tuning_and_draws(idata):
    last_tune = idata.warmup_sample_stats.total_model_evals.values[:, -1]
    draws = idata.sample_stats
    return draws.total_model_evals.values[:, 0] - draws.model_evals.values[:, 0] - last_tune


def test_hamiltonian_tries_the_full_length_on_the_final_fit_outside_the_draws():
    """With ``correction="hamiltonian"`` the full trajectory length is tried on the final
    fit when tuning ends, on transitions that are no draw: their model evaluations show
    in ``total_model_evals`` and in no draw's ``model_evals``."""
    mean, cov = correlated_gaussian(4, seed=6)
    with gaussian_model(mean, cov):
        # tail_jumps=0: no heavy-tail check, whose trials would count here too
        idata = pm.sample(step=SurrogateHMC(kernel=HMCKernel(correction="hamiltonian", tail_jumps=0)),
                          discard_tuned_samples=False, **{**SAMPLE, "draws": 100, "tune": 400})
    # one evaluation a trial, none for a trajectory that diverges on the surrogate
    trials = _evaluations_between_tuning_and_draws(idata)
    assert np.all((trials > 0) & (trials <= SurrogateHMC.tuning.full_length_trials)), trials
    assert idata.sample_stats.model_evals.max() <= 1


def test_adaptive_does_not_learn_from_the_full_length_trials():
    """The full-length trials are no draws and their proposals are no training data: an
    adaptive surrogate that learned from them would learn from 50 trajectories at a length
    the draws may not use (issue 17). The first draw adds at most its own evaluation."""
    mean, cov = correlated_gaussian(4, seed=6)
    with gaussian_model(mean, cov):
        step = AdaptiveSurrogateHMC(kernel=HMCKernel(correction="hamiltonian", tail_jumps=0))
        idata = pm.sample(step=step, discard_tuned_samples=False,
                          **{**SAMPLE, "draws": 20, "tune": 400})
    assert np.all(_evaluations_between_tuning_and_draws(idata) > 0)  # the trials ran
    last_tune = idata.warmup_sample_stats.training_size.values[:, -1]
    first_draw = idata.sample_stats.training_size.values[:, 0]
    assert np.all(first_draw - last_tune <= idata.sample_stats.model_evals.values[:, 0])


@pytest.mark.parametrize("target, full_length", [(0.65, True), (0.999, False)])
def test_hamiltonian_draws_get_the_full_length_only_if_it_holds_the_target(target, full_length):
    """The full path is kept when the trials' mean true acceptance reaches the target (an
    exact Gaussian's final fit: about 0.9), the tuned length otherwise."""
    mean, cov = correlated_gaussian(3, seed=7)
    with gaussian_model(mean, cov):
        step = with_tuning(SurrogateHMC, path_target=target)(
            kernel=HMCKernel(correction="hamiltonian"))
        pm.sample(step=step, **{**SAMPLE, "chains": 1, "draws": 10, "tune": 400})
    tuned = step.kernel.trajectory_length(False) < step.kernel.path_length
    assert (step.kernel.path_adapt is None) is full_length
    assert tuned is not full_length


@pytest.mark.shared_between_generations
def test_black_box_gaussian_without_gradient():
    mean, cov = correlated_gaussian(4, seed=2)
    with gaussian_model(mean, cov, black_box=True):
        step = SurrogateHMC()
        assert not step.has_gradient
        idata = pm.sample(step=step, **SAMPLE)
    assert_moments(idata, "x", mean, np.sqrt(np.diag(cov)))
    assert int(idata.sample_stats.total_gradient_evals.max()) == 0


def test_two_cores_and_chains_do_not_share_surrogates():
    mean, cov = correlated_gaussian(3, seed=3)
    with gaussian_model(mean, cov):
        idata = pm.sample(step=SurrogateHMC(), **{**SAMPLE, "cores": 2, "draws": 500})
    assert_moments(idata, "x", mean, np.sqrt(np.diag(cov)))
    post = idata.posterior["x"].values
    assert not np.allclose(post[0], post[1])


def test_sequential_chains_start_from_scratch():
    # With cores=1 PyMC reuses one step object; chain 2 must not inherit chain 1's data
    # when the chains learn alone (the default store shares them: tests/step_methods/
    # test_sharing.py).
    mean, cov = correlated_gaussian(3, seed=4)
    with gaussian_model(mean, cov):
        idata = pm.sample(step=SurrogateHMC(store=False), **{**SAMPLE, "draws": 200, "tune": 300})
    first_tune_size = idata.sample_stats.training_size.values[:, 0]
    assert np.all(first_tune_size < 400)
    sizes = idata.sample_stats.training_size.values[:, -1]
    assert abs(int(sizes[0]) - int(sizes[1])) < 0.5 * sizes.max()


def test_reproducible_under_random_seed():
    mean, cov = correlated_gaussian(3, seed=5)
    runs = []
    for _ in range(2):
        with gaussian_model(mean, cov):
            runs.append(pm.sample(step=SurrogateHMC(), **{**SAMPLE, "draws": 100, "tune": 300}))
    np.testing.assert_array_equal(runs[0].posterior["x"].values, runs[1].posterior["x"].values)


def test_compound_step_with_metropolis_on_a_discrete_variable():
    # Marginally k ~ Bernoulli(0.7) and x_i ~ 0.3 N(0, 2^2) + 0.7 N(1, 2^2): mean 0.7.
    import arviz as az

    with pm.Model():
        k = pm.Bernoulli("k", p=0.7)
        x = pm.Normal("x", k * 1.0, 2.0, shape=2)
        step = [SurrogateHMC([x]), pm.BinaryGibbsMetropolis([k])]
        idata = pm.sample(step=step, **{**SAMPLE, "draws": 2000, "tune": 800})
    for var in ("k", "x"):
        est = idata.posterior[var].mean(("chain", "draw")).values
        mcse = az.mcse(idata, var_names=[var])[var].values
        assert np.all(np.abs(est - 0.7) < 4.5 * mcse), (var, est, mcse)


def test_stats_are_declared_and_named_for_arviz():
    mean, cov = correlated_gaussian(2)
    with gaussian_model(mean, cov):
        idata = pm.sample(step=SurrogateHMC(), **{**SAMPLE, "draws": 100, "tune": 300})
    stats = idata.sample_stats
    for name in ("accept", "accepted", "diverging", "energy", "energy_error",
                 "surrogate_energy_error", "step_size", "n_steps", "lp",
                 "model_evals", "gradient_evals", "training_size"):
        assert name in stats
    assert stats.accepted.dtype == np.float64
    import arviz as az

    from pymc_surrogate.compat import bfmi

    # What a user reads from NUTS's result, read from ours (InferenceData or DataTree).
    assert np.isfinite(bfmi(idata)).all()
    assert np.isfinite(az.ess(idata)["x"].values).all()
    assert np.isfinite(az.rhat(idata)["x"].values).all()
    assert {"mean", "sd"} <= set(az.summary(idata).columns)


def test_pickles_like_pymc_does_for_worker_processes():
    import cloudpickle  # what PyMC uses to ship step methods to its workers

    mean, cov = correlated_gaussian(2)
    with gaussian_model(mean, cov):
        step = SurrogateHMC()
        pm.sample(step=step, **{**SAMPLE, "chains": 1, "draws": 10, "tune": 300})
    clone = pickle.loads(cloudpickle.dumps(step))
    assert clone.dim == 2 and clone.kernel.correction == step.kernel.correction
    assert clone.learned.surrogate is not None
    q = np.asarray(mean, dtype=float)
    assert clone.learned.surrogate.value_and_grad(q)[0] == step.learned.surrogate.value_and_grad(q)[0]


# ------------------------------------------------------------------ bad input
def test_discrete_variable_is_refused_with_advice():
    with pm.Model():
        k = pm.Poisson("k", 3.0)
        pm.Normal("x")
        with pytest.raises(ValueError, match="k is discrete.*Metropolis"):
            SurrogateHMC([k])


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(target_accept=1.0), "target_accept"),
        (dict(kernel=dict(path_length=0)), "path_length"),
        (dict(kernel=dict(n_inner=0)), "n_inner"),
        (dict(kernel=dict(n_inner="often")), "n_inner"),
        (dict(kernel=dict(n_inner=True)), "n_inner"),
        (dict(warmup=dict(steps=-3)), "steps"),
        (dict(kernel=dict(correction="none")), "correction"),
        (dict(kernel=dict(max_energy_error=-1)), "max_energy_error"),
        (dict(kernel=dict(tail_jumps=1.0)), "tail_jumps"),
        (dict(kernel=dict(tail_jumps="often")), "tail_jumps"),
    ],
)
def test_invalid_settings_are_named(kwargs, match):
    with pm.Model():
        pm.Normal("x")
        with pytest.raises(ValueError, match=match):
            SurrogateHMC(**kwargs)


@pytest.mark.parametrize(
    "n_inner,recent,expected",
    [
        ("auto", [0.95] * 100, 3),  # a good surrogate: more movement per evaluation
        ("auto", [0.85] * 100, 1),  # many rejections would throw longer runs away
        ("auto", [1.0] * 60, 1),  # too few surrogate steps in tuning to judge
        (1, [1.0] * 100, 1),  # a number is kept as given
        (2, [0.1] * 100, 2),
    ],
)
def test_inner_transitions_in_the_draws(n_inner, recent, expected):
    """``n_inner="auto"``: one transition in tuning; in the draws
    ``Tuning.inner_transitions`` when the last ``Tuning.inner_window`` surrogate steps of
    tuning were corrected with mean acceptance at least ``Tuning.good_acceptance``."""
    with pm.Model():
        pm.Normal("x", shape=2)
        step = SurrogateHMC(kernel=HMCKernel(n_inner=n_inner))
    assert step.kernel.inner() == (1 if n_inner == "auto" else n_inner)
    for acceptance in recent:
        step.schedule.note(acceptance)
    step.kernel.choose_inner(step.schedule.recent_corrections, lowered=False)
    assert step.kernel.inner() == expected


def test_a_good_surrogate_gets_three_inner_transitions_in_the_draws():
    """On a Gaussian the surrogate is near exact (correction acceptance about 1): the draws
    run three surrogate transitions per model evaluation, tuning one."""
    mean, cov = correlated_gaussian(4, seed=6)
    with gaussian_model(mean, cov):
        step = SurrogateHMC()
        idata = pm.sample(step=step, discard_tuned_samples=False,
                          **{**SAMPLE, "chains": 1, "draws": 200, "tune": 400})
    assert step.kernel.inner_transitions == 3
    # leapfrog steps a transition: three trajectories a draw against one in tuning
    tune_steps = idata.warmup_sample_stats.n_steps.values[0, -100:].mean()
    assert idata.sample_stats.n_steps.values.mean() > 2 * tune_steps
    assert idata.sample_stats.model_evals.max() <= 1


def test_non_finite_initial_logp_is_an_error():
    with pm.Model():
        pm.Normal("x", initval=0.0)
        pm.Potential("bad", pm.math.log(0.0) * 1.0)
        with pytest.raises(Exception, match="logp is -inf at the starting point"):
            pm.sample(step=SurrogateHMC(), **{**SAMPLE, "chains": 1, "draws": 5, "tune": 5})


def test_nan_region_is_rejected_not_a_crash():
    # logp is NaN for x > 1.5: proposals there must be rejected, the posterior truncated.
    with pm.Model():
        x = pm.Normal("x", 0.0, 1.0)
        pm.Potential("hole", pm.math.switch(x > 1.5, np.nan, 0.0))
        idata = pm.sample(step=SurrogateHMC(), **{**SAMPLE, "draws": 1500, "tune": 800})
    draws = idata.posterior["x"].values
    assert draws.max() <= 1.5
    # Mean of N(0,1) truncated above at 1.5.
    from scipy import stats

    expected = stats.truncnorm(-np.inf, 1.5).mean()
    assert abs(draws.mean() - expected) < 0.1


def test_exception_in_the_model_is_a_rejection_and_names_the_iteration_and_cause(caplog):
    import pytensor.tensor as pt
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op

    class Fragile(Op):
        __props__ = ()

        def make_node(self, x):
            return Apply(self, [pt.as_tensor_variable(x)], [pt.dscalar()])

        def perform(self, node, inputs, outputs):
            if inputs[0] > 2.0:
                raise RuntimeError("solver did not converge")
            outputs[0][0] = np.asarray(-0.5 * inputs[0] ** 2)

    # At a proposal the raise is a rejection (Stan's rule): the run completes in the
    # truncation x <= 2, and the first failure is logged with the iteration and the cause.
    with pm.Model():
        x = pm.Flat("x", initval=0.0)
        pm.Potential("lik", Fragile()(x))
        with caplog.at_level(logging.WARNING, logger="pymc"):
            idata = pm.sample(step=SurrogateHMC(), **{**SAMPLE, "chains": 1, "draws": 2000, "tune": 500})
    assert idata.posterior["x"].values.max() <= 2.0
    assert idata.sample_stats["eval_failures"].values[0, -1] > 0
    assert _pymc_warnings(caplog, "solver did not converge")
    assert re.search(r"iteration \d+ .*solver did not converge",
                     _pymc_warnings(caplog, "solver did not converge")[0])
    # At the chain's starting point it still stops the run, naming the iteration and cause.
    with pm.Model():
        x = pm.Flat("x", initval=3.0)
        pm.Potential("lik", Fragile()(x))
        with pytest.raises(ModelEvaluationError, match="iteration 0 .*solver did not converge"):
            pm.sample(step=SurrogateHMC(), **{**SAMPLE, "chains": 1, "draws": 200, "tune": 200})


def _pymc_warnings(caplog, contains: str) -> list[str]:
    """Messages PyMC logged at WARNING or above (its `warning` stats) containing ``contains``."""
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("pymc") and r.levelno >= logging.WARNING and contains in r.getMessage()]


def test_too_short_tune_warns_and_stays_exact(caplog):
    mean, cov = correlated_gaussian(2, seed=7)
    with gaussian_model(mean, cov), caplog.at_level(logging.WARNING, logger="pymc"):
        idata = pm.sample(step=SurrogateHMC(), **{**SAMPLE, "tune": 20, "draws": 1500})
    # one warning per chain, through the draws' `warning` stat
    assert len(_pymc_warnings(caplog, "too early to fit a surrogate")) == 2
    assert not bool(idata.sample_stats.uses_surrogate.any())
    assert bool(idata.sample_stats.fallback.all())
    assert_moments(idata, "x", mean, np.sqrt(np.diag(cov)))


def _fits_changed(fit, change):
    """``fit`` (a step's ``SurrogateFit``) with every fit passed through
    ``change(surrogate, chain, settings)``."""
    plain = fit.fit
    fit.fit = lambda chain, keep, rng, **settings: change(
        plain(chain, keep, rng, **settings), chain, settings)
    return fit


class _MisplacedSurrogateHMC(SurrogateHMC):
    """A surrogate fitted to the right potential shifted by 6 sd: its proposals land where
    the posterior is not, so the true correction rejects nearly all of them."""

    def _surrogate_fit(self):
        return _fits_changed(super()._surrogate_fit(), self._changed)

    def _changed(self, surrogate, chain, settings):
        shift = 6.0 * np.sqrt(np.diag(self.learned.whitening.covariance))
        field = surrogate.value_and_grad

        class Shifted:
            def value_and_grad(self, q):
                return field(q - shift)

        shifted = Shifted()
        shifted.__dict__.update({k: v for k, v in surrogate.__dict__.items()})
        return shifted


def test_a_surrogate_that_stops_moving_the_chain_is_set_aside(caplog):
    mean, cov = correlated_gaussian(2, seed=4)
    with gaussian_model(mean, cov), caplog.at_level(logging.WARNING, logger="pymc"):
        idata = pm.sample(step=_MisplacedSurrogateHMC(),
                          **{**SAMPLE, "draws": 2000},
                          discard_tuned_samples=False)
    assert len(_pymc_warnings(caplog, "exact exploration kernel")) == 2
    tune_uses = idata.warmup_sample_stats.uses_surrogate.values
    # exploration resumes in tune after the surrogate stalls, and is flagged a fallback
    assert np.all(tune_uses[:, -100:].mean(axis=1) < 0.9)
    assert np.all(idata.warmup_sample_stats.fallback.values[:, -100:].mean(axis=1) > 0.1)
    uses = idata.sample_stats.uses_surrogate.values
    # a fixed share of exploration steps in the draws, and the draws are still right
    assert np.all(np.abs(1.0 - uses.mean(axis=1) - 0.25) < 0.05)
    np.testing.assert_array_equal(idata.sample_stats.fallback.values,
                                  ~uses & ~idata.sample_stats.tail_jump.values)
    assert_moments(idata, "x", mean, np.sqrt(np.diag(cov)))


class _Welled(RandomNetworkSurrogate):
    """A fitted surrogate with a deep Gaussian well added (``well_centre``, ``well_scale``);
    ``with_coefficients`` copies keep it."""

    def value_and_grad(self, q):
        value, grad = super().value_and_grad(q)
        z = (q - self.well_centre) / self.well_scale
        depth = 40.0 * np.exp(-0.5 * z @ z)
        return value - depth, grad + depth * z / self.well_scale

    def predict(self, positions):
        return np.array([self.value_and_grad(q)[0] for q in np.atleast_2d(positions)])


class _WelledSurrogateHMC(SurrogateHMC):
    """Records the settings of every fit, and plants a deep well 3 sd from the mode, where
    the posterior has no mass, in the fits ``wells`` names: ``"default"`` (those with the
    default settings), ``"all"`` or ``"none"``."""

    def __init__(self, *args, wells="default", **kwargs):
        super().__init__(*args, **kwargs)
        self.wells = wells
        self.fit_settings = []

    def _surrogate_fit(self):
        return _fits_changed(super()._surrogate_fit(), self._changed)

    def _changed(self, surrogate, chain, settings):
        self.fit_settings.append(settings)
        if self.wells == "none" or (settings and self.wells == "default"):
            return surrogate
        sd = np.sqrt(np.diag(self.learned.whitening.covariance))
        welled = object.__new__(_Welled)
        welled.__dict__.update(surrogate.__dict__)
        welled.well_centre, welled.well_scale = self.learned.whitening.mean + 3.0 * sd, 1.5 * sd
        welled.settings = settings
        return welled


def test_a_surrogate_with_a_spurious_well_is_refitted_tamer():
    mean, cov = correlated_gaussian(2, seed=5)
    with gaussian_model(mean, cov):
        step = _WelledSurrogateHMC()
        idata = pm.sample(step=step, **SAMPLE)
    assert {"min_alpha": 1e-6} in step.fit_settings
    assert not isinstance(step.learned.surrogate, _Welled), "the well drove the draws"
    assert_moments(idata, "x", mean, np.sqrt(np.diag(cov)))


class _WelledAdaptiveSurrogateHMC(_WelledSurrogateHMC, AdaptiveSurrogateHMC):
    pass


@pytest.mark.parametrize(
    "cls,settings",
    [(_WelledSurrogateHMC, {}), (_WelledAdaptiveSurrogateHMC, {"adapt_in_draws": False})],
    ids=["SurrogateHMC", "AdaptiveSurrogateHMC"],
)
@pytest.mark.shared_between_generations
def test_when_every_refit_has_a_well_the_first_fit_is_kept(cls, settings):
    """Which fit is kept, and which learner continues it. (The draws of a chain left with a
    planted well are exact but mix slowly; that is the other tests' subject.)"""
    mean, cov = correlated_gaussian(2, seed=5)
    with gaussian_model(mean, cov):
        step = cls(wells="all", **settings)
        pm.sample(step=step, **{**SAMPLE, "draws": 200})
    assert {"min_alpha": 1e-3} in step.fit_settings
    # the default fit follows the data best; a tamer one with the same well is no better
    kept = step.learned.surrogate
    assert kept.settings == {}
    if step.fit.learner is not None:
        # the online learner (the surrogate's partial_fit) continues the kept fit, not
        # another fit: the trajectories' surrogate is a copy of it
        assert step.fit.learner.settings == {}
        assert step.fit.learner.normal_equations_ is kept.normal_equations_


def test_a_faithful_surrogate_is_not_refitted():
    mean, cov = correlated_gaussian(6)
    with gaussian_model(mean, cov):
        step = _WelledSurrogateHMC(wells="none")
        pm.sample(step=step, **{**SAMPLE, "chains": 1, "draws": 10})
    assert step.fit_settings and all(s == {} for s in step.fit_settings)


@pytest.mark.parametrize("cls", [SurrogateHMC, AdaptiveSurrogateHMC])
def test_light_tails_get_no_tail_jumps_after_a_check_outside_the_draws(cls):
    """The heavy-tail check's evaluations come between tuning and the first draw (at most
    ``tuning.tail_jump_trials``) and are no training data (AdaptiveSurrogateHMC learns in the
    draws); a Gaussian's draws then contain no tail jump."""
    mean, cov = correlated_gaussian(2, seed=3)
    with gaussian_model(mean, cov):
        step = cls()
        idata = pm.sample(step=step, discard_tuned_samples=False, **{**SAMPLE, "draws": 300})
    trials = _evaluations_between_tuning_and_draws(idata)
    assert np.all((trials > 0) & (trials <= cls.tuning.tail_jump_trials)), trials
    learned = (idata.sample_stats.training_size.values[:, 0]
               - idata.warmup_sample_stats.training_size.values[:, -1])
    assert np.all(learned <= 1), learned  # at most the first draw's own proposal
    assert not idata.sample_stats.tail_jump.values.any()
    assert not step.tails.check.worthwhile


@pytest.mark.shared_between_generations
def test_student_t_tails_get_tail_jumps_in_the_draws_only():
    with pm.Model():
        pm.StudentT("t", nu=3.0, mu=0.0, sigma=1.0, shape=3)
        step = SurrogateHMC()
        idata = pm.sample(step=step, discard_tuned_samples=False, **{**SAMPLE, "draws": 500})
    jumps = idata.sample_stats.tail_jump.values
    share = SurrogateHMC.tuning.tail_jump_probability
    n = jumps.size
    assert abs(jumps.mean() - share) < 4 * np.sqrt(share * (1 - share) / n), jumps.mean()
    assert not idata.warmup_sample_stats.tail_jump.values.any()
    stats = idata.sample_stats
    assert not stats.uses_surrogate.values[jumps].any()
    assert np.all(stats.model_evals.values[jumps] == 1)  # one proposal, no gradient
    assert np.all(stats.gradient_evals.values[jumps] == 0)


def test_a_fixed_tail_jump_share_skips_the_check():
    mean, cov = correlated_gaussian(2, seed=3)
    with gaussian_model(mean, cov):
        step = SurrogateHMC(kernel=HMCKernel(tail_jumps=0.3))
        idata = pm.sample(step=step, discard_tuned_samples=False, **{**SAMPLE, "draws": 500})
    assert np.all(_evaluations_between_tuning_and_draws(idata) == 0)
    assert step.tails.check is None
    share = idata.sample_stats.tail_jump.values.mean()
    assert abs(share - 0.3) < 4 * np.sqrt(0.3 * 0.7 / idata.sample_stats.tail_jump.size)


class _FailsFarFromTheData(SurrogateHMC):
    """The model raises at every evaluation of the heavy-tail check (a solver that fails
    far from where the chain has been)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        choose = self.tails.choose  # the check's trials evaluate the model in it

        def fails(q):
            raise RuntimeError("solver diverged")

        def failing_choose(*args, **kwargs):
            original, self.functions.logp = self.functions.logp, fails
            try:
                return choose(*args, **kwargs)
            finally:
                self.functions.logp = original

        self.tails.choose = failing_choose


def test_a_model_that_raises_at_a_trial_gets_no_tail_jumps():
    """A model that fails at a trial would fail in the draws too: no jumps, and no error
    (the trials are optional)."""
    with pm.Model():
        pm.StudentT("t", nu=3.0, mu=0.0, sigma=1.0, shape=3)
        step = _FailsFarFromTheData()
        idata = pm.sample(step=step, **{**SAMPLE, "chains": 1, "draws": 200})
    assert not idata.sample_stats.tail_jump.values.any()
    assert step.tails.check is None and step.tails.probability == 0


class _SteepMisplacedSurrogateHMC(_MisplacedSurrogateHMC):
    """The misplaced surrogate, also 1e6 times steeper: dual averaging on its rejected
    trajectories drives their step size to about 1e-3 of the posterior's scale, as the
    first fit in centred eight schools' neck drove it to 1e-7 - 1e-9."""

    def _changed(self, surrogate, chain, settings):
        misplaced = super()._changed(surrogate, chain, settings)
        field = misplaced.value_and_grad

        class Steep:
            def value_and_grad(self, q):
                value, grad = field(q)[:2]
                return 1e6 * value, 1e6 * grad

        steep = Steep()
        steep.__dict__.update(misplaced.__dict__)
        return steep


@pytest.mark.shared_between_generations
def test_the_fallback_runs_explorations_own_kernel_not_a_collapsed_surrogates():
    """The exact fallback of a stuck surrogate moves at exploration's step size.

    It ran on the surrogate's step size and metric: centred eight schools, step size
    1e-7 - 1e-9 after a first fit in the funnel's neck, every fallback move accepted
    (energy error 1e-13) and none going anywhere; all four chains then kept one value of
    tau from tuning iteration 100 to the last draw (R-hat 3.85, min ESS 4).
    """
    mean, cov = correlated_gaussian(2, seed=4)
    with gaussian_model(mean, cov):
        idata = pm.sample(step=_SteepMisplacedSurrogateHMC(), **{**SAMPLE, "draws": 2000},
                          discard_tuned_samples=False, compute_convergence_checks=False)
    warm = idata.warmup_sample_stats
    explored = warm.step_size.values[:, :50]  # exact HMC before the first fit
    fallback = warm.fallback.values[:, -200:]
    assert np.all(fallback.mean(axis=1) > 0.1)
    for chain in range(explored.shape[0]):
        late = warm.step_size.values[chain, -200:][fallback[chain]]
        # the same order of step size as before the fit, not the surrogate's collapsed one
        assert np.median(late) > 0.1 * np.median(explored[chain])
    assert_moments(idata, "x", mean, np.sqrt(np.diag(cov)))


@pytest.mark.parametrize("use_gradient", [False, True], ids=["black_box", "gradient"])
def test_a_black_box_draws_on_its_lowered_surrogate(use_gradient):
    """Without gradients the draws run on ``U~`` lowered by ``kappa sd`` (capped;
    draw_bound.py) with three surrogate transitions a draw; with gradients on ``U~``, as
    tuning left it."""
    mean, cov = correlated_gaussian(3, seed=2)
    with gaussian_model(mean, cov):
        step = SurrogateHMC(use_gradient=use_gradient)
        pm.sample(step=step, **{**SAMPLE, "chains": 1, "draws": 20, "tune": 500})
    chain = step.chain
    assert step.learned.surrogate is not None
    q = chain.current.q + 3.0 * np.sqrt(np.diag(cov))
    unbounded = tempered(step.context.field(step.learned.surrogate), step.coverage.temperature)(q)[0]
    drawn = step._surrogate_field(chain)(q)[0]
    if use_gradient:
        assert step.draw_bound.bound is None and drawn == unbounded
        return
    lowering = step.tuning.draw_bound_kappa * step.draw_bound.bound.sd_and_grad(q)[0]
    cap = step.tuning.draw_bound_cap * np.sqrt(3 / 2)
    assert drawn == pytest.approx(unbounded + np.logaddexp(-lowering, -cap))
    assert lowering > 0 and step.kernel.inner_transitions == 3


def test_riemannian_draws_keep_the_surrogate_unlowered():
    """RNS-RMHMC's moves run on the surrogate's own derivatives, never on the bound."""
    with pm.Model():
        pm.Normal("x", shape=2)
        assert not SurrogateHMC(kernel=HMCKernel(metric="riemannian"), use_gradient=False).lowers_black_box_draws
        assert SurrogateHMC(use_gradient=False).lowers_black_box_draws
