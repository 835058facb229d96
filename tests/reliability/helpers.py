"""Sampling defaults, MCSE-based moment checks and health checks on the step stats."""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from scipy import stats as sps

from pymc_surrogate.step_methods.evaluation.model_functions import symbolic_gradient



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

#: Stats every step method documents (docs/usage.md, "Step statistics").
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


#: Fewest effective draws (summed over chains) for which MCSE is itself reliable
#: (Vehtari, Gelman, Simpson, Carpenter & Burkner 2021, "Rank-normalization, folding, and
#: localization"); a sampler that cannot reach it on these small problems is stuck.
MIN_ESS = 100


@dataclass(frozen=True)
class MomentCheck:
    """What :func:`check_moments` measured; ``failures`` is empty when the check passes.

    Arrays are per coordinate; ``chain_*`` arrays have a leading chain axis.
    """

    chain_mean: np.ndarray
    chain_sd: np.ndarray
    chain_mcse_mean: np.ndarray
    chain_mcse_sd: np.ndarray
    chain_ess: np.ndarray
    z_mean: np.ndarray
    z_sd: np.ndarray
    q_mean: np.ndarray  # chi-square statistic of the chain means' agreement (C - 1 df)
    q_sd: np.ndarray  # the same for the chain sds
    n_sigma: float
    q_limit: float
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failures

    def report(self, name: str = "") -> str:
        r = lambda a: np.round(a, 2)  # noqa: E731
        return (
            f"{name}: {', '.join(self.failures) or 'pass'}; n_sigma={self.n_sigma:.2f}, "
            f"chi2 limit={self.q_limit:.2f}\n  z(mean)={r(self.z_mean)}\n  z(sd)={r(self.z_sd)}\n"
            f"  chi2(chain means)={r(self.q_mean)}\n  chi2(chain sds)={r(self.q_sd)}\n"
            f"  per-chain ESS={np.round(self.chain_ess)}\n  chain means={r(self.chain_mean)}\n"
            f"  chain sds={r(self.chain_sd)}"
        )


def chain_mcse(x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Mean, sd, their MCSEs and the bulk ESS of each chain, from that chain alone.

    ``x`` has shape (chain, draw, k). The ESS is ArviZ's split-chain ESS of the one chain
    (``method="mean"`` for the mean, of the squared deviations for the sd, as ``az.mcse``
    computes them); ``az.mcse(method="sd")`` itself is not called: with Numba installed it
    raises a TypeError on NumPy 2.4 (ArviZ 0.23.4).
    """
    import arviz as az

    n_chains, _, k = x.shape
    out = np.empty((5, n_chains, k))
    for c in range(n_chains):
        for j in range(k):
            y = x[c, :, j]
            # constant: max == min (a float sd of equal values need not be exactly 0)
            sd = y.std() if np.ptp(y) > 0 else 0.0
            dev2 = (y - y.mean()) ** 2
            with np.errstate(divide="ignore", invalid="ignore"):
                ess_mean = float(az.ess(y[None, :], method="mean")) if sd > 0 else np.nan
                ess_dev2 = float(az.ess(dev2[None, :], method="mean")) if sd > 0 else np.nan
                varvar = ((dev2**2).mean() - dev2.mean() ** 2) / ess_dev2
                mcse_sd = np.sqrt(varvar / dev2.mean() / 4)
            out[:, c, j] = (y.mean(), sd, np.std(y, ddof=1) / np.sqrt(ess_mean), mcse_sd,
                            float(az.ess(y[None, :])) if sd > 0 else 0.0)
    return tuple(out)


def _agreement(values: np.ndarray, mcse: np.ndarray) -> np.ndarray:
    """Chi-square statistic (C - 1 df) of C chain estimates with independent errors ``mcse``."""
    w = 1.0 / mcse**2
    centre = (w * values).sum(0) / w.sum(0)
    return (w * (values - centre) ** 2).sum(0)


def check_moments(x, mean, sd, family_alpha: float = FAMILY_ALPHA) -> MomentCheck:
    """Whether draws ``x`` (chain, draw, k) have the given means and sds, and chains agree.

    Each chain's mean, sd and their MCSEs come from that chain alone (:func:`chain_mcse`):

    * **agreement**: for the means and for the sds, ``sum_c (e_c - e_w)^2 / mcse_c^2`` (``e_w``
      the inverse-variance weighted mean) is chi-square with ``C - 1`` degrees of freedom
      for chains that sample the same law; its limit is a fixed quantile, so it does not
      loosen as chains disagree (R-hat's limit at the check's ESS did: ESS shrinks with
      disagreement);
    * **truth**: the pooled mean and sd against ``mean`` and ``sd`` in units of
      ``sqrt(sum_c mcse_c^2) / C``, the error of an average of independent chains, which
      disagreement does not inflate either.

    Bonferroni over all comparisons (4 per coordinate; 2 with one chain; half as many with
    ``sd=None``, which checks the means only: for a law whose sd has no usable MCSE, such as
    a Student-t(3)) at ``family_alpha``. Also fails if the chains' summed ESS is below :data:`MIN_ESS` or a
    chain is constant (never moved, or an indicator never changed).
    """
    x = np.asarray(x, dtype=float)
    x = x.reshape(x.shape[0], x.shape[1], -1)
    n_chains, _, size = x.shape
    mean = np.broadcast_to(np.asarray(mean, dtype=float).ravel(), (size,))
    check_sd = sd is not None
    sd = np.broadcast_to(np.asarray(sd if check_sd else np.nan, dtype=float).ravel(), (size,))
    c_mean, c_sd, c_mcse_mean, c_mcse_sd, c_ess = chain_mcse(x)
    n_comparisons = (2 if n_chains > 1 else 1) * (2 if check_sd else 1) * size
    k = n_sigma(n_comparisons, family_alpha)
    q_limit = (float(sps.chi2(n_chains - 1).isf(family_alpha / n_comparisons))
               if n_chains > 1 else np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        z_mean = (x.mean((0, 1)) - mean) / (np.sqrt((c_mcse_mean**2).sum(0)) / n_chains)
        # sd of all draws: the between-chain part is O(mcse^2 / sd), negligible next to mcse
        z_sd = (x.std(axis=(0, 1)) - sd) / (np.sqrt((c_mcse_sd**2).sum(0)) / n_chains)
        q_mean = _agreement(c_mean, c_mcse_mean) if n_chains > 1 else np.zeros(size)
        q_sd = _agreement(c_sd, c_mcse_sd) if n_chains > 1 else np.zeros(size)
    failures = []
    if not (np.all(c_sd > 0) and np.all(np.isfinite(c_mcse_mean)) and np.all(np.isfinite(c_mcse_sd))):
        failures.append("a chain is constant")
    elif c_ess.sum(0).min() < MIN_ESS:
        failures.append("too few effective draws")
    else:
        if np.any(q_mean >= q_limit):
            failures.append("chain means disagree")
        if check_sd and np.any(q_sd >= q_limit):
            failures.append("chain sds disagree")
        if np.any(np.abs(z_mean) >= k):
            failures.append("posterior mean off")
        if check_sd and np.any(np.abs(z_sd) >= k):
            failures.append("posterior sd off")
    return MomentCheck(c_mean, c_sd, c_mcse_mean, c_mcse_sd, c_ess, z_mean, z_sd, q_mean,
                       q_sd, k, q_limit, tuple(failures))


def assert_moments(idata, var: str, mean, sd, family_alpha: float = FAMILY_ALPHA) -> None:
    """Posterior means and sds of ``var`` right, and every chain agreeing (:func:`check_moments`).

    Every "did the chains agree and are they right" question of the suite goes through
    this check; its power and false-alarm rate are measured in ``test_power.py`` and
    ``tests/reliability/power_table.py``.
    """
    post = idata.posterior[var]
    x = post.values.reshape(post.sizes["chain"], post.sizes["draw"], -1)
    result = check_moments(x, mean, sd, family_alpha)
    assert result.passed, result.report(var)


def add_variable(idata, name: str, values: np.ndarray) -> None:
    """Add a derived posterior quantity of shape (chain, draw, k) to ``idata``."""
    values = np.asarray(values)
    dims = ("chain", "draw", f"{name}_dim_0")
    idata.posterior[name] = xr.DataArray(
        values, dims=dims,
        coords={"chain": idata.posterior.chain, "draw": idata.posterior.draw},
    )


def check_gaussian(x, mean, cov, family_alpha: float = FAMILY_ALPHA) -> list[MomentCheck]:
    """:func:`check_moments` of draws ``x`` (chain, draw, d) on the marginals and on the
    coordinates along the covariance's eigenvectors, each at ``family_alpha / 2``.

    The marginals test each variance; the eigen-coordinates ``(x - mean) V / sqrt(lambda)``
    (independent N(0, 1)) test the correlations, including the narrowest and widest
    directions of an ill-conditioned posterior.
    """
    mean, cov = np.asarray(mean, dtype=float), np.asarray(cov, dtype=float)
    vals, vecs = np.linalg.eigh(cov)
    eig = ((np.asarray(x) - mean) @ vecs) / np.sqrt(vals)
    return [check_moments(x, mean, np.sqrt(np.diag(cov)), family_alpha / 2),
            check_moments(eig, np.zeros(len(mean)), np.ones(len(mean)), family_alpha / 2)]


def assert_gaussian(idata, var: str, mean, cov, family_alpha: float = FAMILY_ALPHA) -> None:
    """Draws of ``var`` in ``idata`` pass :func:`check_gaussian`."""
    checks = check_gaussian(idata.posterior[var].values, mean, cov, family_alpha)
    for check, name in zip(checks, (var, f"{var} along the covariance's eigenvectors")):
        assert check.passed, check.report(name)


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
    """Record every warning without failing on them: Python warnings, and the ``pymc``
    logger's records at WARNING and above, where PyMC logs a step's ``warning`` stat in the
    main process (the step methods' warnings travel that way, so ``cores>1`` keeps them).

    Yields a list that holds the log records as they come and the Python warnings once the
    block ends; :func:`warning_messages` reads both.
    """
    import logging

    caught: list = []

    class _Keep(logging.Handler):
        def emit(self, record):
            caught.append(record)

    logger, handler = logging.getLogger("pymc"), _Keep(logging.WARNING)
    level = logger.level
    logger.setLevel(min(level, logging.WARNING) if level else logging.WARNING)
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as python_warnings:
            warnings.simplefilter("always")
            yield caught
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        caught.extend(python_warnings)


def pymc_convergence_messages(idata, model) -> list[str]:
    """What ``pm.sample``'s default convergence checks say of ``idata`` (R-hat above 1.01,
    fewer than 100 effective draws a chain, ...): the suite samples with
    ``compute_convergence_checks=False`` for speed, but a user sees these by default, so a
    run they flag is loud."""
    from pymc.stats.convergence import WarningType, run_convergence_checks

    return [w.message for w in run_convergence_checks(idata, model)
            if w.kind == WarningType.CONVERGENCE]


def warning_messages(caught, contains: str = "") -> list[str]:
    """The texts of :func:`recorded_warnings`' records that contain ``contains``."""
    texts = [w.getMessage() if hasattr(w, "getMessage") else str(w.message) for w in caught]
    return [text for text in texts if contains in text]


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


def black_box_step(entry, vars=None, **kwargs):
    """Construct a step for a model that may be a black box.

    A class that learns from gradients (VariationalHMC) refuses a black box unless told
    to difference it (``use_gradient="finite_difference"``, its documented opt-in, which
    is then what these tests check): it gets that opt-in where the model has no gradient
    PyTensor can build, or where the test asks for a black box (``use_gradient=False``);
    a model with a gradient keeps it.
    """
    if entry.cls.learns_from_gradients:
        wanted = kwargs.get("use_gradient", "auto")
        model = pm.modelcontext(None)
        if wanted is False or (wanted == "auto"
                               and symbolic_gradient(model.logp(), model.value_vars) is None):
            kwargs["use_gradient"] = "finite_difference"
    return entry(vars, **kwargs)
