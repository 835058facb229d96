"""Simulation-based calibration (Talts, Betancourt, Simpson, Vehtari & Gelman 2018).

Draw parameters from the prior, data from the model given them, sample the posterior, and
record the rank of the true value among ``L`` (nearly) independent posterior draws. For an
exact sampler the rank is uniform on {0, ..., L} whatever the model; a sampler that is too
narrow, too wide or biased piles ranks at the ends or on one side. Uniformity is tested by
a chi-square test over equal-width bins, per parameter, at a fixed seed.

The model is conjugate and cheap (so the sampler's own tuning dominates the cost) but not
Gaussian: a normal sample of unknown mean and variance under a normal-inverse-gamma prior,

    sigma2 ~ InvGamma(3, 3),   mu | sigma2 ~ N(0, sigma2),   y_1..5 | mu, sigma2 ~ N(mu, sigma2),

sampled by PyMC in (mu, log sigma2): skewed, with a scale that depends on the data, so the
surrogate is only approximate and the exact correction does real work.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
from scipy import stats

__all__ = ["SBCResult", "run_sbc", "nig_model", "simulate_nig"]

A0, B0, KAPPA0, N_OBS = 3.0, 3.0, 1.0, 5
PARAMS = ("mu", "sigma2")


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
    p_value: dict[str, float]
    min_p_value: float
    median_thinning: float
    reruns_for_ess: int
    seconds: float
    settings: dict = field(default_factory=dict)

    def summary(self) -> str:
        parts = [f"{name}: chi2={self.chi2[name]:.2f} p={self.p_value[name]:.3g} "
                 f"counts={self.counts[name]}" for name in self.chi2]
        return (f"SBC {self.step}: {self.replications} replications, L={self.n_ranks}, "
                f"{self.n_bins} bins, tune={self.tune}, seed={self.seed}, "
                f"median thinning {self.median_thinning:.1f}, {self.seconds:.0f} s\n  "
                + "\n  ".join(parts))

    def save(self, directory: Path, tag: str) -> Path:
        path = Path(directory) / f"sbc_{self.step}_{tag}.json"
        path.write_text(json.dumps(asdict(self), indent=1))
        return path


def _posterior_draws(step, model, n_draws, tune, seed):
    with model:
        trace = pm.sample(
            step=step, draws=n_draws, tune=tune, chains=1, cores=1, progressbar=False,
            random_seed=int(np.random.SeedSequence(seed).generate_state(1)[0]),
            compute_convergence_checks=False, return_inferencedata=False,
        )
    return {name: np.asarray(trace.get_values(name)) for name in PARAMS}


def _min_ess(draws: dict[str, np.ndarray]) -> float:
    values = []
    for x in draws.values():
        for method in ("bulk", "tail"):
            values.append(float(az.ess(x[None, :], method=method)))
    return float(np.nanmin(values))


def run_sbc(entry, replications: int, n_ranks: int = 19, n_bins: int = 5, tune: int = 300,
            seed: int = 2018, black_box: bool = False) -> SBCResult:
    """Run SBC for one registry entry; ``(n_ranks + 1)`` must be a multiple of ``n_bins``.

    One step object serves every replication: ``pm.sample`` (``cores=1``) resets it with
    ``reset_tuning`` and ``set_rng`` at the start of each run, the path PyMC also takes
    between the chains of one run, so nothing is carried over (the test of that is
    ``test_sampling_modes.test_sequential_chains_start_from_scratch``); compiling a new
    step per replication would cost more than the sampling.

    Each replication samples one chain, thins it by ``ceil(draws / ESS)`` (ESS: the
    smaller of ArviZ's bulk and tail ESS over the parameters) and keeps the last
    ``n_ranks`` thinned draws; if there are too few, it samples again with twice as many
    draws (counted in ``reruns_for_ess``). ``black_box=True`` samples with
    ``use_gradient=False``: the path of likelihoods without a gradient.
    """
    if (n_ranks + 1) % n_bins:
        raise ValueError("n_ranks + 1 must be a multiple of n_bins")
    start = time.perf_counter()
    model = nig_model()
    with model:
        step = entry(use_gradient=False) if black_box else entry()
    ranks = {name: [] for name in PARAMS}
    thinning, reruns = [], 0
    for rep in range(replications):
        rng = np.random.default_rng([seed, rep])
        truth, y = simulate_nig(rng)
        with model:
            pm.set_data({"y": y})
        n_draws = 4 * n_ranks
        for attempt in range(4):
            draws = _posterior_draws(step, model, n_draws, tune, [seed, rep, attempt])
            thin = int(np.ceil(n_draws / max(_min_ess(draws), 1.0)))
            if n_draws // thin >= n_ranks:
                break
            reruns += 1
            n_draws *= 2
        thinning.append(thin)
        for name in PARAMS:
            kept = draws[name][::thin][-n_ranks:]
            ranks[name].append(int(np.sum(kept < truth[name])))
    counts, chi2, p_value = {}, {}, {}
    for name in PARAMS:
        c = np.bincount(np.asarray(ranks[name]) * n_bins // (n_ranks + 1), minlength=n_bins)
        counts[name] = c.tolist()
        test = stats.chisquare(c)
        chi2[name], p_value[name] = float(test.statistic), float(test.pvalue)
    return SBCResult(
        step=entry.id + ("-black_box" if black_box else ""), replications=replications, n_ranks=n_ranks, n_bins=n_bins, tune=tune,
        seed=seed, ranks=ranks, counts=counts, chi2=chi2, p_value=p_value,
        min_p_value=min(p_value.values()), median_thinning=float(np.median(thinning)),
        reruns_for_ess=reruns, seconds=time.perf_counter() - start,
        settings={k: repr(v) for k, v in entry.kwargs.items()},
    )
