"""Power and false-alarm rate of the reliability suite's statistical checks.

Each check is run many times on draws from a correct sampler (false alarms) and from
deliberately broken ones (``broken.py``: one chain shifted by 0.5 sd, draws shrunk to 85% of
the sd, no Metropolis correction, tail jumps off). Cheap parts use synthetic chains with
known law and ESS (AR(1) in numpy, exact posterior draws for SBC); a few real sampler runs
check that the synthetic picture holds. Prints one markdown row per (check, sampler):

    python -m tests.reliability.power_table synthetic      # numpy only, about 15 minutes
    python -m tests.reliability.power_table real           # SurrogateHMC runs, about 1 hour
    python -m tests.reliability.power_table no_correction  # no Metropolis correction, 5 min
    python -m tests.reliability.power_table heavy_tails    # 8-run pooled t(3) checks, slow
    python -m tests.reliability.power_table sbc_bounded    # SBC on the bounded model: exact
                                                           # draws, and SurrogateHMC with and
                                                           # without correction, about 1 hour
    python -m tests.reliability.power_table sbc_hierarchical  # SBC on the hierarchical model:
                                                           # exact draws, short and thorough
                                                           # forms, about 15 minutes

The table in docs/reliability.md ("Power of the checks") comes from these commands.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from scipy import stats
from scipy.signal import lfilter

from tests.reliability.broken import shift_one_chain, shrink
from tests.reliability.helpers import FAMILY_ALPHA, check_gaussian, check_moments
from tests.reliability.sbc import (ALPHA, BOUNDED, N_TESTS, PARAMS, exact_sbc_ranks, rank_tests,
                                   run_sbc, sbc_flags)


def ar1(rng: np.random.Generator, chains: int, draws: int, k: int, phi: float) -> np.ndarray:
    """Stationary AR(1) chains with N(0, 1) marginals: ESS / draws = (1 - phi) / (1 + phi)."""
    e = rng.normal(size=(chains, draws + 300, k)) * np.sqrt(1 - phi**2)
    return lfilter([1.0], [1.0, -phi], e, axis=1)[:, 300:]


def row(check: str, sampler: str, flagged: int, n: int, setting: str, seconds: float) -> None:
    print(f"| {check} | {sampler} | {flagged / n:.3f} ({flagged}/{n}) | {setting} | "
          f"{seconds:.0f} s |", flush=True)


def _rate(make, check, n, seed):
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    flagged = sum(not check(make(rng)) for _ in range(n))
    return flagged, time.perf_counter() - start


def synthetic() -> None:
    # Moment / convergence check: the suite's two shapes (2 x 1000 draws, 16 x 2000 pooled).
    shapes = [(2, 1000, 2, 0.5, 2000), (2, 1000, 2, -0.3, 2000), (2, 1000, 2, 0.8, 2000),
              (16, 2000, 3, 0.9, 500)]
    for chains, draws, k, phi, n in shapes:
        setting = f"AR(1) phi={phi}, {chains} x {draws}, d={k}"
        ok = lambda x: check_moments(x, 0.0, 1.0).passed  # noqa: E731
        for name, broken, reps in [
            ("correct", lambda x: x, n),
            ("one chain +0.5 sd", lambda x: shift_one_chain(x, 1.0, 0.5), 300),
            ("sd 15% too small", lambda x: shrink(x, 0.85), 300),
        ]:
            f, s = _rate(lambda r: broken(ar1(r, chains, draws, k, phi)), ok, reps, 1)
            row("moments (`check_moments`)", name, f, reps, setting, s)
    # Gaussian check: d = 5, condition 10, AR(1) draws along the eigenvectors.
    from tests.conftest import correlated_gaussian

    mean, cov = correlated_gaussian(5, seed=5, condition=10.0)
    root = np.linalg.cholesky(cov)

    def gauss(r):
        return mean + ar1(r, 2, 1000, 5, 0.5) @ root.T

    ok = lambda x: all(c.passed for c in check_gaussian(x, mean, cov))  # noqa: E731
    for name, broken, reps in [
        ("correct", lambda x: x, 1000),
        ("one chain +0.5 sd", lambda x: shift_one_chain(x, np.sqrt(np.diag(cov)), 0.5), 300),
        ("sd 15% too small", lambda x: shrink(x, 0.85), 300),
    ]:
        f, s = _rate(lambda r: broken(gauss(r)), ok, reps, 2)
        row("Gaussian (`check_gaussian`)", name, f, reps, "d=5, AR(1) phi=0.5, 2 x 1000", s)
    # Heavy-tail check on synthetic t(3) chains: a Gaussian copula of AR(1) chains.
    from tests.reliability.test_exactness import HEAVY_TAIL_NU, check_tail_frequencies

    def student(r, phi=0.8):
        return stats.t.ppf(stats.norm.cdf(ar1(r, 16, 2000, 3, phi)), HEAVY_TAIL_NU)

    ok = lambda x: all(c.passed for c in check_tail_frequencies(x))  # noqa: E731
    for name, broken, reps in [
        ("correct", lambda x: x, 300),
        ("one chain +0.5 sd", lambda x: shift_one_chain(x, np.sqrt(3.0), 0.5), 100),
        ("sd 15% too small", lambda x: shrink(x, 0.85), 100),
    ]:
        f, s = _rate(lambda r: broken(student(r)), ok, reps, 3)
        row("tail frequencies (heavy tails)", name, f, reps,
            "t(3) copula of AR(1) phi=0.8, 16 x 2000, d=3", s)
    # SBC rank tests with exact posterior draws, scaled about the posterior mean.
    for reps, n_ranks, n_bins, label, n in [(40, 19, 5, "short", 3000), (1000, 99, 20, "thorough", 300)]:
        for scale, name in [(1.0, "correct"), (0.9, "sd 10% too small"),
                            (0.85, "sd 15% too small"), (0.5, "sd halved")]:
            m = n if scale == 1.0 else (200 if label == "thorough" else 1000)

            def passes(r):
                ranks = exact_sbc_ranks(reps, n_ranks, r, scale)
                p = min(min(rank_tests(ranks[k], n_ranks, n_bins)[2].values()) for k in PARAMS)
                return p > ALPHA / (N_TESTS * len(PARAMS))

            f, s = _rate(lambda r: r, passes, m, 4)
            row(f"SBC {label}", name, f, m, f"{reps} reps, L={n_ranks}, {n_bins} bins, exact draws", s)


def real(seeds=range(1, 6)) -> None:
    """SurrogateHMC runs: banana without correction; d = 2 Gaussian shifted / shrunk."""
    import logging
    import warnings

    import pymc as pm

    from pymc_surrogate import SurrogateHMC
    from benchmarks.models import make_banana
    from tests.conftest import correlated_gaussian, gaussian_model
    from tests.reliability.broken import no_metropolis_correction

    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    kw = dict(draws=1000, tune=500, chains=2, cores=1, progressbar=False,
              compute_convergence_checks=False)
    model, info = make_banana()
    for broken in (False, True):
        flagged, start = 0, time.perf_counter()
        for seed in seeds:
            with model:
                if broken:
                    with no_metropolis_correction():
                        idata = pm.sample(step=SurrogateHMC(), random_seed=seed, **kw)
                else:
                    idata = pm.sample(step=SurrogateHMC(), random_seed=seed, **kw)
            flagged += not check_moments(idata.posterior["beta"].values, info.ref_mean["beta"],
                                         info.ref_sd["beta"]).passed
        row("moments, banana", "no correction" if broken else "correct", flagged, len(seeds),
            "SurrogateHMC, 2 x 1000, tune 500", time.perf_counter() - start)
    mean, cov = correlated_gaussian(2, seed=2, condition=10.0)
    sd = np.sqrt(np.diag(cov))
    counts = {"correct": 0, "one chain +0.5 sd": 0, "sd 15% too small": 0}
    start = time.perf_counter()
    for seed in seeds:
        with gaussian_model(mean, cov):
            x = pm.sample(step=SurrogateHMC(), random_seed=seed, **kw).posterior["x"].values
        for name, y in [("correct", x), ("one chain +0.5 sd", shift_one_chain(x, sd)),
                        ("sd 15% too small", shrink(x))]:
            counts[name] += not all(c.passed for c in check_gaussian(y, mean, cov))
    for name, f in counts.items():
        row("Gaussian, d=2", name, f, len(seeds), "SurrogateHMC, 2 x 1000, tune 500",
            time.perf_counter() - start)


def no_correction(seeds=range(1, 6)) -> None:
    """SurrogateHMC without Metropolis correction on the bad-region model (x0 < 1 by -inf)."""
    import logging
    import warnings

    import pymc as pm

    from pymc_surrogate import SurrogateHMC
    from tests.reliability.broken import no_metropolis_correction
    from tests.reliability.test_faults import BAD_REGIONS, first_coordinate_moments

    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    term, _, log_density = BAD_REGIONS["-inf"]
    mean0, sd0 = first_coordinate_moments(log_density)
    for broken in (False, True):
        flagged, start = 0, time.perf_counter()
        for seed in seeds:
            with pm.Model():
                x = pm.Normal("x", 0.0, 1.0, shape=2, initval=np.array([-0.5, 0.0]))
                pm.Potential("bad", term(x))
                kw = dict(tune=300, draws=300, chains=2, cores=1, progressbar=False,
                          random_seed=seed, compute_convergence_checks=False)
                if broken:
                    with no_metropolis_correction():
                        idata = pm.sample(step=SurrogateHMC(), **kw)
                else:
                    idata = pm.sample(step=SurrogateHMC(), **kw)
            flagged += not check_moments(idata.posterior["x"].values, [mean0, 0.0],
                                         [sd0, 1.0]).passed
        row("moments, Gaussian cut by -inf", "no correction" if broken else "correct", flagged,
            len(seeds), "SurrogateHMC, 2 x 300, tune 300", time.perf_counter() - start)


def heavy_tails(seeds=(20240, 1)) -> None:
    """The pooled t(3) check (8 runs x 2 chains x 2000) with and without tail jumps."""
    import logging
    import warnings

    import arviz as az
    import pymc as pm

    from pymc_surrogate import HMCKernel, SurrogateHMC
    from tests.reliability.test_exactness import HEAVY_TAIL_NU, HEAVY_TAIL_RUNS, check_tail_frequencies

    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    for name, settings in [("tail jumps off", {"kernel": HMCKernel(tail_jumps=0)}), ("correct", {})]:
        flagged, start = 0, time.perf_counter()
        for seed in seeds:
            runs = []
            for offset in range(HEAVY_TAIL_RUNS):
                with pm.Model():
                    pm.StudentT("t", nu=HEAVY_TAIL_NU, mu=0.0, sigma=1.0, shape=3)
                    runs.append(pm.sample(step=SurrogateHMC(**settings), tune=1000, draws=2000,
                                          chains=2, cores=1, progressbar=False,
                                          random_seed=seed + offset,
                                          compute_convergence_checks=False))
            x = az.concat(runs, dim="chain").posterior["t"].values
            checks = check_tail_frequencies(x)
            print("  seed", seed, name, [c.failures for c in checks],
                  [np.round(c.z_mean, 2).tolist() for c in checks], flush=True)
            flagged += not all(c.passed for c in checks)
        row("tail frequencies, t(3) pooled", name, flagged, len(seeds),
            "SurrogateHMC, 8 runs x 2 x 2000", time.perf_counter() - start)


def sbc_bounded(seeds=range(1, 6), replications=(20, 40), exact_n=3000) -> None:
    """SBC on the bounded model (normal truncated at 0 by a -inf Potential): the short form's
    rank tests with exact posterior draws (false alarms), then SurrogateHMC (default settings,
    gradient) at ``seeds`` with and without the Metropolis correction, at each replication
    count (L = 19, 5 bins, tune 300: the short form's settings)."""
    import logging
    import warnings

    from pymc_surrogate import SurrogateHMC
    from tests.reliability.broken import no_metropolis_correction

    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    for reps in replications:
        f, s = _rate(lambda r: exact_sbc_ranks(reps, 19, r, model=BOUNDED),
                     lambda ranks: not sbc_flags(ranks, 19, 5), exact_n, 11)
        row("SBC short, bounded", "correct", f, exact_n,
            f"{reps} reps, L=19, 5 bins, exact draws", s)
    for broken in (True, False):
        for reps in replications:
            flagged, start, ps = 0, time.perf_counter(), []
            for seed in seeds:
                if broken:
                    with no_metropolis_correction():
                        result = run_sbc(SurrogateHMC, reps, model=BOUNDED, seed=seed)
                else:
                    result = run_sbc(SurrogateHMC, reps, model=BOUNDED, seed=seed)
                flagged += not result.passed
                ps.append(f"{result.min_p_value:.2g}")
            row("SBC short, bounded", "SurrogateHMC without correction" if broken
                else "SurrogateHMC", flagged, len(seeds),
                f"{reps} reps, L=19, 5 bins, seeds {seeds.start}-{seeds.stop - 1} "
                f"(min p {', '.join(ps)})", time.perf_counter() - start)


def sbc_hierarchical(n_short=500, n_thorough=100) -> None:
    """SBC on the hierarchical model (``sbc_hierarchical.py``) with exact posterior draws,
    shrunk about the posterior mean by 1 (correct), 0.9, 0.85 and 0.5: the false-alarm
    rate and power of the short form (40 replications, L = 19, 5 bins) and the thorough
    form (1000 replications, L = 99, 20 bins)."""
    from tests.reliability.sbc_hierarchical import HIERARCHICAL

    forms = [("SBC short, hierarchical", 40, 19, 5, n_short),
             ("SBC thorough, hierarchical", 1000, 99, 20, n_thorough)]
    for check, reps, n_ranks, n_bins, n in forms:
        for scale, name in [(1.0, "correct"), (0.9, "sd 10% too small"),
                            (0.85, "sd 15% too small"), (0.5, "sd halved")]:
            f, s = _rate(lambda r: exact_sbc_ranks(reps, n_ranks, r, scale=scale,
                                                   model=HIERARCHICAL),
                         lambda ranks: not sbc_flags(ranks, n_ranks, n_bins), n, 13)
            row(check, name, f, n, f"{reps} reps, L={n_ranks}, {n_bins} bins, exact draws", s)


if __name__ == "__main__":
    print(f"family false-alarm rate of each check: {FAMILY_ALPHA} (SBC: {ALPHA})")
    print("| check | sampler | flagged | setting | time |\n|---|---|---|---|---|")
    {"synthetic": synthetic, "real": real, "no_correction": no_correction,
     "heavy_tails": heavy_tails, "sbc_bounded": sbc_bounded,
     "sbc_hierarchical": sbc_hierarchical}[sys.argv[1]]()
