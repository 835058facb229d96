"""Simulation-based calibration (Talts, Betancourt, Simpson, Vehtari & Gelman 2018).

Draw parameters from the prior, data from the model given them, sample the posterior, and
record the rank of the true value among ``L`` (nearly) independent posterior draws. For an
exact sampler the rank is uniform on {0, ..., L} whatever the model; a sampler that is too
narrow, too wide or biased piles ranks at the ends or on one side. Uniformity is tested by
three tests per parameter, at a fixed seed (:func:`rank_tests`): a chi-square test over
equal-width bins (any shape), and the mean and the mean square of the ranks' normal scores
(a shifted and a too narrow or too wide posterior: the chi-square over bins is weak against
a scale error, it needs about 2000 replications to see an sd 10% too small).

Every replication is ranked, none is re-run: a fixed number of draws per replication,
thinned by that run's ESS up to a fixed factor. A run that mixes badly is ranked among
correlated draws, which is the signal SBC exists to see (re-running it with a new seed, as an
earlier version did, selected against stuck chains).

A model is an :class:`SBCModel` (build the PyMC model with its data as ``pm.Data("y")``,
simulate parameters and data, exact posterior draws); two are defined, both with exact
posterior draws so that the rank tests' false-alarm rate and power can be measured without a
sampler (:func:`exact_sbc_ranks`):

* :data:`NIG`, conjugate and cheap (so the sampler's own tuning dominates the cost) but not
  Gaussian: a normal sample of unknown mean and variance under a normal-inverse-gamma prior,

      sigma2 ~ InvGamma(3, 3),   mu | sigma2 ~ N(0, sigma2),   y_1..5 | mu, sigma2 ~ N(mu, sigma2),

  sampled by PyMC in (mu, log sigma2): skewed, with a scale that depends on the data. The
  surrogate is close to this posterior, so a sampler without the true-logp correction
  passes SBC here (docs/reliability.md, "Power of the checks").
* :data:`BOUNDED`, a hard support boundary imposed through ``pm.Potential`` (logp = -inf
  outside, no transform), with the prior centred outside the support so that posterior
  mass sits at the boundary:

      mu ~ N(-2, 1) restricted to mu > 0 by a Potential,   y_1, y_2 | mu ~ N(mu, 1),

  posterior a normal truncated at 0. Inside the support the logp is quadratic, so a smooth
  surrogate is the untruncated normal; only the correction with the true logp (-inf at
  mu <= 0) keeps the chain in the support. A sampler without it puts many of its draws
  below 0, so the true value ranks too high: the location test sees it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy import stats

from tests.reliability.helpers import black_box_step

__all__ = ["SBCModel", "SBCResult", "run_sbc", "nig_model", "simulate_nig",
           "nig_posterior_draws", "bounded_model", "simulate_bounded",
           "bounded_posterior_draws", "NIG", "BOUNDED", "SBC_MODELS", "rank_tests",
           "exact_sbc_ranks", "sbc_flags", "ALPHA"]

A0, B0, KAPPA0, N_OBS = 3.0, 3.0, 1.0, 5
PARAMS = ("mu", "sigma2")

#: Family-wise false-alarm rate of one SBC verdict (all tests, all parameters).
ALPHA = 1e-3
#: Tests per parameter in :func:`rank_tests` (bins, normal-score mean, normal-score square).
N_TESTS = 3


def nig_model() -> pm.Model:
    with pm.Model() as model:
        y = pm.Data("y", np.zeros(N_OBS))
        sigma2 = pm.InverseGamma("sigma2", alpha=A0, beta=B0)
        mu = pm.Normal("mu", 0.0, pm.math.sqrt(sigma2 / KAPPA0))
        pm.Normal("obs", mu, pm.math.sqrt(sigma2), observed=y)
    return model


def simulate_nig(rng: np.random.Generator) -> tuple[dict[str, float], np.ndarray]:
    """Parameters from the prior and data from the model (numpy, independent of PyMC)."""
    sigma2 = 1.0 / rng.gamma(A0, 1.0 / B0)
    mu = rng.normal(0.0, np.sqrt(sigma2 / KAPPA0))
    y = rng.normal(mu, np.sqrt(sigma2), N_OBS)
    return {"mu": float(mu), "sigma2": float(sigma2)}, y


@dataclass
class SBCResult:
    step: str
    replications: int
    n_ranks: int  # L: posterior draws each true value is ranked among
    n_bins: int
    tune: int
    seed: int
    ranks: dict[str, list[int]]
    counts: dict[str, list[int]]
    chi2: dict[str, float]
    p_value: dict[str, dict[str, float]]  # parameter -> test -> p
    min_p_value: float
    median_thinning: float
    few_effective_draws: int  # replications with ESS < n_ranks (ranked all the same)
    seconds: float
    settings: dict = field(default_factory=dict)
    model: str = "nig"

    @property
    def passed(self) -> bool:
        """Every test of every parameter above ``ALPHA`` / (number of tests)."""
        return self.min_p_value > ALPHA / (N_TESTS * len(self.p_value))

    def summary(self) -> str:
        parts = [f"{name}: chi2={self.chi2[name]:.2f} "
                 + " ".join(f"p({t})={p:.3g}" for t, p in self.p_value[name].items())
                 + f" counts={self.counts[name]}" for name in self.chi2]
        return (f"SBC {self.step} on {self.model}: {self.replications} replications, L={self.n_ranks}, "
                f"{self.n_bins} bins, tune={self.tune}, seed={self.seed}, median thinning "
                f"{self.median_thinning:.1f}, {self.few_effective_draws} replications with "
                f"ESS < L, {self.seconds:.0f} s\n  " + "\n  ".join(parts))

    def save(self, directory: Path, tag: str) -> Path:
        path = Path(directory) / f"sbc_{self.model}_{self.step}_{tag}.json"
        path.write_text(json.dumps(asdict(self), indent=1))
        return path


def rank_tests(ranks, n_ranks: int, n_bins: int) -> tuple[list[int], float, dict[str, float]]:
    """Uniformity tests of ranks on {0, ..., n_ranks}: bin counts, chi2 and three p-values.

    * ``bins``: chi-square over ``n_bins`` equal bins (any departure, little power each);
    * ``location``: mean of the normal scores ``z = Phi^-1((r + 1/2) / (L + 1))`` (a biased
      posterior: ranks piled on one side);
    * ``scale``: mean of ``z^2`` (too narrow: ranks piled at both ends, mean z^2 too large;
      too wide: too small). Tested against the exact mean and variance of the scores of a
      discrete uniform rank: the mean as normal, the sum of squares as a scaled chi-square.
    """
    ranks = np.asarray(ranks)
    n = len(ranks)
    counts = np.bincount(ranks * n_bins // (n_ranks + 1), minlength=n_bins)
    chi2 = stats.chisquare(counts)
    scores = stats.norm.ppf((np.arange(n_ranks + 1) + 0.5) / (n_ranks + 1))
    m2, m4 = np.mean(scores**2), np.mean(scores**4)
    z = scores[ranks]
    z_location = z.mean() / np.sqrt(m2 / n)
    # sum z^2 as c chi2(nu), c and nu matching its exact mean and variance (for continuous
    # scores c = 1, nu = n): the normal approximation's right tail is too light at n = 40.
    c = (m4 - m2**2) / (2 * m2)
    law = stats.chi2(n * m2 / c, scale=c)
    sum_sq = float(np.sum(z**2))
    p = {"bins": float(chi2.pvalue),
         "location": float(2 * stats.norm.sf(abs(z_location))),
         "scale": float(min(1.0, 2 * min(law.cdf(sum_sq), law.sf(sum_sq))))}
    return counts.tolist(), float(chi2.statistic), p


def nig_posterior(y: np.ndarray) -> tuple[float, float, float, float]:
    """Exact posterior of the NIG model: ``(m, kappa, a, b)`` with ``sigma2 ~ InvGamma(a, b)``,
    ``mu | sigma2 ~ N(m, sigma2 / kappa)``."""
    n = len(y)
    kappa = KAPPA0 + n
    ybar = float(np.mean(y))
    m = n * ybar / kappa
    b = B0 + 0.5 * (float(np.sum((y - ybar) ** 2)) + KAPPA0 * n * ybar**2 / kappa)
    return m, kappa, A0 + n / 2, b


def nig_posterior_draws(y: np.ndarray, n: int, rng: np.random.Generator,
                        scale: float = 1.0) -> dict[str, np.ndarray]:
    """Independent exact posterior draws; ``scale != 1`` shrinks (or widens) them about the
    posterior mean in the sampler's coordinates (``mu``, ``log sigma2``): an sd ``1 - scale``
    too small."""
    from scipy.special import digamma

    m, kappa, a, b = nig_posterior(y)
    sigma2 = 1.0 / rng.gamma(a, 1.0 / b, n)
    mu = rng.normal(m, np.sqrt(sigma2 / kappa))
    mean_log = np.log(b) - digamma(a)
    return {"mu": m + scale * (mu - m),
            "sigma2": np.exp(mean_log + scale * (np.log(sigma2) - mean_log))}


# ------------------------------------------------------------------ bounded (truncated) model
BOUNDED_PRIOR_MEAN, BOUNDED_N_OBS = -2.0, 2


def bounded_model() -> pm.Model:
    with pm.Model() as model:
        y = pm.Data("y", np.zeros(BOUNDED_N_OBS))
        # Start inside the support (the prior mean is outside it: logp -inf there).
        mu = pm.Normal("mu", BOUNDED_PRIOR_MEAN, 1.0, initval=0.5)
        pm.Potential("support", pt.switch(mu > 0.0, 0.0, -np.inf))
        pm.Normal("obs", mu, 1.0, observed=y)
    return model


def simulate_bounded(rng: np.random.Generator) -> tuple[dict[str, float], np.ndarray]:
    """``mu`` from N(-2, 1) truncated to mu > 0, and ``y`` given it."""
    mu = float(_normal_above_zero(BOUNDED_PRIOR_MEAN, 1.0, 1, rng)[0])
    return {"mu": mu}, rng.normal(mu, 1.0, BOUNDED_N_OBS)


def _normal_above_zero(m: float, s: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws of N(m, s^2) truncated to (0, inf), by inversion in the lower tail (exact
    for any ``m``; scipy's ``truncnorm.rvs`` is about 100 times slower per call)."""
    from scipy.special import ndtr, ndtri

    return m - s * ndtri(rng.uniform(size=n) * ndtr(m / s))


def bounded_posterior(y: np.ndarray) -> tuple[float, float]:
    """Exact posterior: N(m, s^2) truncated to mu > 0; returns ``(m, s)``."""
    precision = 1.0 + len(y)
    return (BOUNDED_PRIOR_MEAN + float(np.sum(y))) / precision, precision**-0.5


def bounded_posterior_draws(y: np.ndarray, n: int, rng: np.random.Generator,
                            scale: float = 1.0) -> dict[str, np.ndarray]:
    """Independent exact posterior draws; ``scale != 1`` shrinks (widens) them about the
    posterior mean (``scale < 1`` stays in the support)."""
    m, s = bounded_posterior(y)
    mu = _normal_above_zero(m, s, n, rng)
    mean = stats.truncnorm.mean(-m / s, np.inf, loc=m, scale=s) if scale != 1.0 else 0.0
    return {"mu": mean + scale * (mu - mean)}


# ----------------------------------------------------------------------------- models
@dataclass(frozen=True)
class SBCModel:
    """What SBC needs of a model: build it (data as ``pm.Data("y")``), simulate parameters
    and data from the prior, exact posterior draws ``(y, n, rng, scale)``."""

    name: str
    params: tuple[str, ...]
    build: Callable[[], pm.Model]
    simulate: Callable[[np.random.Generator], tuple[dict[str, float], np.ndarray]]
    posterior_draws: Callable[..., dict[str, np.ndarray]]

    def __repr__(self) -> str:
        return self.name


NIG = SBCModel("nig", PARAMS, nig_model, simulate_nig, nig_posterior_draws)
BOUNDED = SBCModel("bounded", ("mu",), bounded_model, simulate_bounded,
                   bounded_posterior_draws)
SBC_MODELS = {m.name: m for m in (NIG, BOUNDED)}


def exact_sbc_ranks(replications: int, n_ranks: int, rng: np.random.Generator,
                    scale: float = 1.0, model: SBCModel = NIG) -> dict[str, np.ndarray]:
    """SBC ranks with independent exact posterior draws (scaled by ``scale``): no sampler,
    for the false-alarm rate and power of :func:`rank_tests`."""
    ranks = {name: np.empty(replications, dtype=int) for name in model.params}
    for rep in range(replications):
        truth, y = model.simulate(rng)
        draws = model.posterior_draws(y, n_ranks, rng, scale)
        for name in model.params:
            ranks[name][rep] = int(np.sum(draws[name] < truth[name]))
    return ranks


def sbc_flags(ranks: dict, n_ranks: int, n_bins: int) -> bool:
    """Whether :func:`rank_tests` on ``ranks`` fails the verdict of ``SBCResult.passed``."""
    p = min(min(rank_tests(r, n_ranks, n_bins)[2].values()) for r in ranks.values())
    return p <= ALPHA / (N_TESTS * len(ranks))


def _posterior_draws(step, model, n_draws, tune, seed, params):
    with model:
        trace = pm.sample(
            step=step, draws=n_draws, tune=tune, chains=1, cores=1, progressbar=False,
            random_seed=int(np.random.SeedSequence(seed).generate_state(1)[0]),
            compute_convergence_checks=False, return_inferencedata=False,
        )
    return {name: np.asarray(trace.get_values(name)) for name in params}


def _min_ess(draws: dict[str, np.ndarray]) -> float:
    values = []
    for x in draws.values():
        values.append(float(az.ess(x[None, :], method="bulk")))
        # ArviZ 1.3 needs the tail's quantiles for arrays; (0.05, 0.95) is ArviZ 0.x's default
        values.append(float(az.ess(x[None, :], method="tail", prob=(0.05, 0.95))))
    return float(np.nanmin(values))


def run_sbc(entry, replications: int, n_ranks: int = 19, n_bins: int = 5, tune: int = 300,
            seed: int = 2018, black_box: bool = False, max_thinning: int = 6,
            model: SBCModel = NIG) -> SBCResult:
    """Run SBC of ``model`` for one registry entry; ``(n_ranks + 1)`` must be a multiple of
    ``n_bins``.

    One step object serves every replication: ``pm.sample`` (``cores=1``) resets it with
    ``reset_tuning`` and ``set_rng`` at the start of each run, the path PyMC also takes
    between the chains of one run, so nothing is carried over (the test of that is
    ``test_sampling_modes.test_sequential_chains_start_from_scratch``); compiling a new
    step per replication would cost more than the sampling.

    Each replication samples one chain of ``max_thinning * n_ranks`` draws, thins it by
    ``min(ceil(draws / ESS), max_thinning)`` (ESS: the smaller of ArviZ's bulk and tail ESS
    over the parameters) and ranks the truth among the last ``n_ranks`` thinned draws.
    Every replication is ranked once: one whose ESS is below ``n_ranks`` is ranked among
    correlated draws (counted in ``few_effective_draws``), which SBC then sees.
    ``black_box=True`` samples with ``use_gradient=False``: the path of likelihoods without
    a gradient. ``entry`` is a registry entry, or any callable returning a step.
    """
    if (n_ranks + 1) % n_bins:
        raise ValueError("n_ranks + 1 must be a multiple of n_bins")
    start = time.perf_counter()
    spec, model = model, model.build()
    with model:
        step = black_box_step(entry, use_gradient=False) if black_box else entry()
    ranks = {name: [] for name in spec.params}
    thinning, few = [], 0
    n_draws = max_thinning * n_ranks
    for rep in range(replications):
        rng = np.random.default_rng([seed, rep])
        truth, y = spec.simulate(rng)
        with model:
            pm.set_data({"y": y})
        draws = _posterior_draws(step, model, n_draws, tune, [seed, rep], spec.params)
        ess = _min_ess(draws)
        few += ess < n_ranks
        thin = int(min(np.ceil(n_draws / max(ess, 1.0)), max_thinning))
        thinning.append(thin)
        for name in spec.params:
            kept = draws[name][::thin][-n_ranks:]
            ranks[name].append(int(np.sum(kept < truth[name])))
    counts, chi2, p_value = {}, {}, {}
    for name in spec.params:
        counts[name], chi2[name], p_value[name] = rank_tests(ranks[name], n_ranks, n_bins)
    name = getattr(entry, "id", getattr(entry, "__name__", type(entry).__name__))
    return SBCResult(
        step=name + ("-black_box" if black_box else ""), replications=replications,
        n_ranks=n_ranks, n_bins=n_bins, tune=tune, seed=seed, ranks=ranks, counts=counts,
        chi2=chi2, p_value=p_value,
        min_p_value=min(min(p.values()) for p in p_value.values()),
        median_thinning=float(np.median(thinning)), few_effective_draws=int(few),
        seconds=time.perf_counter() - start,
        settings={k: repr(v) for k, v in getattr(entry, "kwargs", {}).items()},
        model=spec.name,
    )
