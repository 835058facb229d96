"""Sampling defaults, MCSE-based moment checks and health checks on the step stats."""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from scipy import stats as sps


#: The suite's seed. CI runs at the default; ``PYMC_SURROGATE_TEST_SEED=N`` reruns every
#: seeded check at another seed, to see how often a tolerance fails (each moment check is
#: set to fail a correct sampler with probability ``FAMILY_ALPHA``).
SEED = int(os.environ.get("PYMC_SURROGATE_TEST_SEED", "20240"))

#: Small, fast runs: the statistical power comes from MCSE-scaled tolerances, not size.
SAMPLE = dict(
    draws=1000,
    tune=500,
    chains=2,
    cores=1,
    progressbar=False,
    random_seed=SEED,
    compute_convergence_checks=False,
)

#: Stats every step method documents (README "Step statistics").
CORE_STATS = ("accept", "accepted", "diverging", "uses_surrogate", "total_model_evals",
              "model_evals", "training_size")

#: Probability that one moment check of a correct sampler fails, over all the
#: comparisons the check makes (Bonferroni). At a fixed seed a test is deterministic; this
#: is the chance that a correct sampler fails it for an unlucky seed.
FAMILY_ALPHA = 1e-3


def n_sigma(n_comparisons: int, family_alpha: float = FAMILY_ALPHA) -> float:
    """Two-sided normal quantile that keeps ``n_comparisons`` z-tests at ``family_alpha``."""
    return float(sps.norm.isf(family_alpha / (2.0 * max(n_comparisons, 1))))


def sample(step, **kwargs):
    """``pm.sample`` with the suite's defaults (call inside the model context)."""
    return pm.sample(step=step, **{**SAMPLE, **kwargs})


#: Fewest effective draws for which MCSE and R-hat are themselves reliable
#: (Vehtari, Gelman, Simpson, Carpenter & Burkner 2021, "Rank-normalization, folding, and
#: localization"); a sampler that cannot reach it on these small problems is stuck.
MIN_ESS = 100

def rhat_limit(
    ess: float, n_chains: int, n_draws: int, family_alpha: float = FAMILY_ALPHA
) -> float:
    """R-hat that correct chains stay below with probability about ``1 - family_alpha``,
    given the effective sample size ``ess`` of ``n_draws`` draws in all.

    ArviZ's R-hat is the larger of the split R-hats of the rank-normalised and the folded
    draws, over ``m = 2 n_chains`` half chains of ``n = n_draws / m`` draws. For one of
    them ``R-hat^2 = 1 - 1 / n + B / (n W)``, and the half-chain means vary as
    ``W / (ESS / m)``: ``B / (n W)`` is about ``(m / ESS) chi2(m - 1) / (m - 1)``, so
    ``R-hat - 1`` is about ``(m / 2) (chi2(m - 1) / (m - 1) / ESS - 1 / n_draws)``; the
    limit is that at the ``family_alpha / 2`` upper quantile. (An earlier version took
    ``1 / n_draws`` to be ``1 / ESS``: right for independent draws, far too strict for
    autocorrelated ones in many chains. Simulated AR(1) chains, phi = 0.8, 16 chains x 2000
    draws, ESS / draws 0.11-0.37, exceeded that limit at nominal 2% 40-79% of the time;
    this one 0.5-1.7%. At 2 chains x 1000: 1-1.8% and 0.3-0.5%.)
    """
    m = 2 * n_chains
    ratio = sps.chi2(m - 1).isf(family_alpha / 2.0) / (m - 1)
    return 1.0 + 0.5 * m * (ratio / float(ess) - 1.0 / float(n_draws))


def assert_moments(idata, var: str, mean, sd, family_alpha: float = FAMILY_ALPHA) -> None:
    """Posterior means and sds of ``var`` within MCSE-scaled tolerances; chains agree.

    ``|error| < n_sigma * ArviZ mcse`` for means and sds, with ``n_sigma`` from a Bonferroni
    bound over the ``2 * size`` comparisons, and R-hat below :func:`rhat_limit` at the
    smallest effective sample size (a fixed 1.02 is exceeded one time in twenty by a correct
    sampler with ESS ~ 200, and misses real disagreement at ESS 2000). Every statistical
    test of the package uses this check.
    """
    import arviz as az

    mean, sd = np.asarray(mean, dtype=float), np.asarray(sd, dtype=float)
    post = idata.posterior[var]
    n_total = post.sizes["chain"] * post.sizes["draw"]
    size = int(np.size(post.isel(chain=0, draw=0)))
    k = n_sigma(2 * size, family_alpha)
    ess = np.atleast_1d(az.ess(idata, var_names=[var])[var].values)
    # R-hat is the larger of the bulk and the folded (|x - median|) diagnostics; the folded
    # one is as noisy as the ESS of |x - median|, which for antithetic HMC draws (bulk-ESS
    # above the number of draws) can be far below the bulk ESS.
    ess_folded = np.atleast_1d(az.ess(idata, var_names=[var], method="folded")[var].values)
    rhat = np.atleast_1d(az.rhat(idata, var_names=[var])[var].values)
    est_mean = np.atleast_1d(post.mean(("chain", "draw")).values)
    est_sd = np.atleast_1d(post.std(("chain", "draw")).values)
    mcse_mean = np.atleast_1d(az.mcse(idata, var_names=[var], method="mean")[var].values)
    mcse_sd = np.atleast_1d(az.mcse(idata, var_names=[var], method="sd")[var].values)
    with np.errstate(divide="ignore", invalid="ignore"):
        z_mean = (est_mean - mean.ravel()) / mcse_mean
        z_sd = (est_sd - sd.ravel()) / mcse_sd
    report = (
        f"{var}: n_sigma={k:.2f}\n  z(mean)={np.round(z_mean, 2)}\n  z(sd)={np.round(z_sd, 2)}\n"
        f"  ess={np.round(ess)} (folded {np.round(ess_folded)})\n  rhat={np.round(rhat, 4)}\n"
        f"  mean={est_mean} (true {mean.ravel()})\n  sd={est_sd} (true {sd.ravel()})"
    )
    assert np.all(np.isfinite(ess)) and ess.min() >= MIN_ESS, "too few effective draws\n" + report
    limit = rhat_limit(min(float(ess.min()), float(ess_folded.min()), n_total),
                       post.sizes["chain"], n_total, family_alpha)
    assert np.all(rhat < limit), f"R-hat above {limit:.4f}\n" + report
    assert np.all(np.abs(z_mean) < k), "posterior mean off\n" + report
    assert np.all(np.abs(z_sd) < k), "posterior sd off\n" + report


def add_variable(idata, name: str, values: np.ndarray) -> None:
    """Add a derived posterior quantity of shape (chain, draw, k) to ``idata``."""
    values = np.asarray(values)
    dims = ("chain", "draw", f"{name}_dim_0")
    idata.posterior[name] = xr.DataArray(
        values, dims=dims,
        coords={"chain": idata.posterior.chain, "draw": idata.posterior.draw},
    )


def assert_gaussian(idata, var: str, mean, cov, family_alpha: float = FAMILY_ALPHA) -> None:
    """Marginals of ``var`` and its coordinates along the covariance's eigenvectors.

    The marginals test each variance; the eigen-coordinates ``(x - mean) V / sqrt(lambda)``
    (independent N(0, 1)) test the correlations, including the narrowest and widest
    directions of an ill-conditioned posterior.
    """
    mean, cov = np.asarray(mean), np.asarray(cov)
    assert_moments(idata, var, mean, np.sqrt(np.diag(cov)), family_alpha / 2)
    vals, vecs = np.linalg.eigh(cov)
    x = idata.posterior[var].values
    add_variable(idata, f"{var}_eig", ((x - mean) @ vecs) / np.sqrt(vals))
    assert_moments(idata, f"{var}_eig", np.zeros(len(mean)), np.ones(len(mean)), family_alpha / 2)


def assert_healthy(idata) -> None:
    """No NaN in draws or stats that a user would read; a non-finite energy is flagged.

    * draws and ``lp`` finite;
    * ``accept`` in [0, 1]; ``accepted`` 0 or 1;
    * the documented core stats exist; counters non-negative and non-decreasing;
    * ``energy_error`` finite unless the draw is flagged ``diverging`` or rejected;
    * ``surrogate_energy_error`` (where present) finite whenever the surrogate drove a
      non-divergent draw: a NaN there is a NaN gradient in a trajectory.
    """
    post = idata.posterior
    for name, values in post.data_vars.items():
        assert np.all(np.isfinite(values.values)), f"non-finite draws of {name}"
    st = idata.sample_stats
    for name in CORE_STATS:
        assert name in st, f"stat {name!r} missing"
    assert np.all(np.isfinite(st["lp"].values)), "non-finite lp"
    accept = st["accept"].values
    assert np.all(np.isfinite(accept)) and np.all((accept >= 0) & (accept <= 1)), accept
    assert set(np.unique(st["accepted"].values)) <= {0.0, 1.0}
    total = st["total_model_evals"].values
    assert np.all(total >= 0) and np.all(np.diff(total, axis=1) >= 0)
    assert np.all(st["training_size"].values >= 0)
    diverging = st["diverging"].values.astype(bool)
    if "energy_error" in st:
        ee = st["energy_error"].values
        assert not np.any(np.isnan(ee) & ~diverging), "NaN energy error not flagged diverging"
    if "surrogate_energy_error" in st:
        see = st["surrogate_energy_error"].values
        used = st["uses_surrogate"].values.astype(bool) & ~diverging
        assert np.all(np.isfinite(see[used])), "non-finite surrogate energy error in a draw"


@contextmanager
def recorded_warnings():
    """Record every warning (PyMC's and ours) without failing on them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def warning_messages(caught, contains: str = "") -> list[str]:
    return [str(w.message) for w in caught if contains in str(w.message)]


class BlackBoxLogp(Op):
    """A Python function of one float64 vector as a PyTensor Op with no gradient."""

    __props__ = ("name",)

    def __init__(self, fn, name: str = "black_box"):
        self.fn = fn
        self.name = name

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [pt.dscalar()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.asarray(self.fn(inputs[0]), dtype=np.float64)

    def grad(self, inputs, output_grads):
        raise NotImplementedError("black box: no gradient")


def make_step_or_skip(entry, vars=None, **kwargs):
    """Construct a step; skip the test if the class refuses a black-box model by name.

    Some methods need the model's gradient (VariationalHMC's score matching, by default):
    refusing a black box with an error that says so is correct behaviour, tested in
    ``test_bad_input``; it is not a reason to fail a test that needs the black box.
    """
    import pytest

    try:
        return entry(vars, **kwargs)
    except (ValueError, TypeError) as err:
        if "gradient" in str(err).lower():
            pytest.skip(f"{entry.id} refuses black-box models: {err}")
        raise
