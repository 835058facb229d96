"""rns-hmc Figure 8: relative error of the posterior mean against model evaluations and time.

REM(t) = |mean of the chain up to iteration t - E[q]| / |E[q]| (rns-hmc §5.3), with the
chain's running mean taken from its first iteration, tuning included, as in the paper:
it shows how soon each sampler's draws become useful. ``E[q]`` is the harness's
reference (cached long NUTS run). One chain per sampler, the same seed.

Run from the repository root::

    python benchmarks/figure8.py --size paper --tune 1000 --draws 1000 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pymc as pm
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import model_has_gradient, reference_moments  # noqa: E402
from pymc_surrogate import AdaptiveSurrogateHMC, SurrogateHMC  # noqa: E402
from pymc_surrogate.compat import posterior_dataset  # noqa: E402
from benchmarks.models import MODELS  # noqa: E402

SAMPLERS = {"AdaptiveSurrogateHMC": AdaptiveSurrogateHMC, "SurrogateHMC": SurrogateHMC, "NUTS": None}


def evaluations_per_iteration(stats) -> np.ndarray:
    """Model (logp or logp+grad) evaluations each iteration made, from sampler stats."""
    if "model_evals" in stats:
        return stats["model_evals"].values[0].astype(float)
    return stats["n_steps"].values[0].astype(float)  # NUTS: one logp+grad per leapfrog step


def trace_curve(name, step_cls, model, ref_mean, tune, draws, seed):
    with model:
        idata = pm.sample(draws=draws, tune=tune, chains=1, cores=1, random_seed=seed,
                          step=step_cls() if step_cls else None, progressbar=False,
                          discard_tuned_samples=False, compute_convergence_checks=False)
    parts = [posterior_dataset(idata, g) for g in ("warmup_posterior", "posterior")]
    samples = np.concatenate(
        [np.concatenate([p[v].values[0].reshape(p[v].shape[1], -1) for v in p.data_vars], 1) for p in parts]
    )
    stats = [posterior_dataset(idata, g) for g in ("warmup_sample_stats", "sample_stats")]
    evals = np.cumsum(np.concatenate([evaluations_per_iteration(s) for s in stats]))
    seconds = np.cumsum(np.concatenate([s["perf_counter_diff"].values[0] for s in stats]))
    running = np.cumsum(samples, 0) / np.arange(1, len(samples) + 1)[:, None]
    rem = np.linalg.norm(running - ref_mean, axis=1) / np.linalg.norm(ref_mean)
    return dict(sampler=name, evals=evals.tolist(), seconds=seconds.tolist(), rem=rem.tolist())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="logistic")
    parser.add_argument("--size", default="paper")
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--samplers", default=",".join(SAMPLERS))
    args = parser.parse_args()

    model, info = MODELS[args.model](args.size)
    ref = reference_moments(args.model, args.size, model, info, has_gradient=model_has_gradient(model))
    ref_mean = np.concatenate([np.ravel(ref.mean[n]) for n in ref.mean])
    curves = [trace_curve(n, SAMPLERS[n], model, ref_mean, args.tune, args.draws, args.seed)
              for n in args.samplers.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"figure8_{args.model}_{args.size}.json").write_text(json.dumps(curves))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for c in curves:
        axes[0].loglog(c["evals"], c["rem"], label=c["sampler"])
        axes[1].loglog(c["seconds"], c["rem"], label=c["sampler"])
    axes[0].set_xlabel("model evaluations (tuning included)")
    axes[1].set_xlabel("wall seconds in the sampler")
    for ax in axes:
        ax.set_ylabel("relative error of the posterior mean")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"rns-hmc Figure 8: {args.model} ({args.size})")
    fig.tight_layout()
    fig.savefig(out / f"figure8_{args.model}_{args.size}.png", dpi=120)

    print(f"{'REM target':>10} " + " ".join(f"{c['sampler']:>22}" for c in curves))
    for target in (0.5, 0.2, 0.1, 0.05, 0.02):
        cells = []
        for c in curves:
            rem = np.asarray(c["rem"])
            # First iteration after which the error stays below the target.
            above = np.flatnonzero(rem >= target)
            idx = above[-1] + 1 if above.size else 0
            cells.append("never" if idx >= len(rem) else f"{c['evals'][idx]:.0f} ev {c['seconds'][idx]:.0f}s")
        print(f"{target:>10} " + " ".join(f"{x:>22}" for x in cells))


if __name__ == "__main__":
    with threadpool_limits(1):
        main()
