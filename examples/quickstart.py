"""SurrogateHMC next to NUTS on a big-data logistic regression (rns-hmc §5.1).

Prints, for each sampler: wall time, the model evaluations it made (tuning included,
counted inside the model graph), the minimum bulk ESS, and evaluations per effective
sample. Run: ``python examples/quickstart.py [--n-obs 30000] [--draws 1000]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import arviz as az
import pymc as pm
from threadpoolctl import threadpool_limits

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(_REPO))

from benchmarks.models import make_logistic_regression  # noqa: E402
from pymc_surrogate import SurrogateHMC  # noqa: E402
from pymc_surrogate.compat import posterior_dataset  # noqa: E402


def run(label, model, info, step_factory, draws, tune, seed):
    info.counter.reset()
    with model:
        start = time.perf_counter()
        idata = pm.sample(draws=draws, tune=tune, chains=2, cores=1, random_seed=seed,
                          step=step_factory(), progressbar=False,
                          compute_convergence_checks=False)
        seconds = time.perf_counter() - start
    posterior = posterior_dataset(idata)  # InferenceData (ArviZ 0.x) or DataTree (ArviZ 1)
    ess = float(az.ess(posterior).to_array().min())
    evals = info.counter.logp
    return dict(sampler=label, seconds=seconds, logp_evals=evals, grad_evals=info.counter.grad,
                min_ess=ess, evals_per_ess=evals / ess, ess_per_s=ess / seconds,
                max_rhat=float(az.rhat(posterior).to_array().max()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n-obs", type=int, default=30_000)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    model, info = make_logistic_regression(n_obs=args.n_obs, n_features=args.features)
    print(f"Logistic regression: N = {args.n_obs:,} observations, d = {args.features}; "
          "2 chains each, one after the other.\n")
    rows = [
        run("SurrogateHMC", model, info, SurrogateHMC, args.draws, args.tune, args.seed),
        run("NUTS", model, info, lambda: None, args.draws, args.tune, args.seed),
    ]
    header = f"{'sampler':<14}{'seconds':>9}{'logp evals':>12}{'grad evals':>12}{'min ESS':>9}" \
             f"{'evals/ESS':>11}{'ESS/s':>8}{'max r_hat':>11}"
    print(header)
    for r in rows:
        print(f"{r['sampler']:<14}{r['seconds']:>9.1f}{r['logp_evals']:>12,}{r['grad_evals']:>12,}"
              f"{r['min_ess']:>9.0f}{r['evals_per_ess']:>11.2f}{r['ess_per_s']:>8.1f}"
              f"{r['max_rhat']:>11.3f}")
    ratio = rows[0]["ess_per_s"] / rows[1]["ess_per_s"]
    print(f"\nSurrogateHMC: {ratio:.1f}x NUTS's min ESS per second (tuning included), "
          f"{rows[1]['logp_evals'] / rows[0]['logp_evals']:.1f}x fewer model evaluations.")


if __name__ == "__main__":
    with threadpool_limits(1):  # two OpenBLAS pools fighting over 2 cores cost more than they give
        main()
