"""KernelHMC benchmark 4 (issue 19): lite versus finite as the dimension grows.

The kmc Fig. 2 picture, measured with the MCMC rather than along hypothetical trajectories:
a Gaussian target in d = 2, 5, 10, 20, 50 whose covariance is the paper's "challenging"
one (kmc §6, App. D.1): eigenvalues drawn from Gamma(1, 1), rotated by a uniformly drawn
orthogonal matrix (fixed seed per d). The density is given to the samplers as a black box
(KernelHMC told use_gradient=False); ``pm.DEMetropolisZ`` on the same model is the
gradient-free reference line. Exact moments are known, so errors are against the truth.
``--target iid`` runs the same sweep on N(0, I), the well-conditioned control that separates
"the target is hard for a 2000-iteration chain" from "KernelHMC fails".

Reported per (d, sampler): acceptance, min bulk ESS, logp evaluations (tune included),
ESS per evaluation, max R-hat, and the errors of means and sds. Every row goes through
``benchmarks/harness.py::run_one``. Results: ``benchmarks/results/kernel_hmc_sweep.{csv,md,png}``
(``_quick`` suffix for ``--quick``).

Examples
--------
::

    PYTHONPATH=. python benchmarks/kernel_hmc_sweep.py            # d = 2..50, 2 x (1000 + 1000)
    PYTHONPATH=. python benchmarks/kernel_hmc_sweep.py --target iid   # the N(0, I) control
    PYTHONPATH=. python benchmarks/kernel_hmc_sweep.py --quick    # d = 2, 5; 2 x (200 + 200)
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

import numpy as np  # noqa: E402

from benchmarks import harness  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    DEFAULT_RESULTS_DIR,
    Reference,
    environment_meta,
    git_commit,
    run_one,
    write_results,
)

COMMAND = "python benchmarks/kernel_hmc_sweep.py"
DIMS = (2, 5, 10, 20, 50)


def kmc_fig2_covariance(d: int, seed: int) -> np.ndarray:
    """kmc App. D.1: diagonal from Gamma(1, 1), rotated by a uniform random orthogonal matrix."""
    from scipy.stats import ortho_group

    rng = np.random.default_rng(seed)
    evals = rng.gamma(1.0, 1.0, size=d)
    rot = ortho_group.rvs(d, random_state=rng) if d > 1 else np.eye(1)
    cov = (rot * evals) @ rot.T
    return 0.5 * (cov + cov.T)


def surrogate_columns(idata) -> dict:
    """Share of draws that ran on the surrogate and the final training size (KernelHMC)."""
    from pymc_surrogate.compat import posterior_dataset

    stats = posterior_dataset(idata, "sample_stats")
    out = {"surrogate_share": float("nan"), "training_size": float("nan")}
    if "uses_surrogate" in stats:
        out["surrogate_share"] = float(np.mean(stats["uses_surrogate"].values))
    if "training_size" in stats:
        out["training_size"] = float(np.mean(stats["training_size"].values[:, -1]))
    return out


def run_captured(*args, **kwargs):
    """``harness.run_one``, keeping the trace of its one ``sample_counted`` call."""
    captured = {}
    original = harness.sample_counted

    def capture(*a, **k):
        run = original(*a, **k)
        captured["idata"] = run.idata
        return run

    harness.sample_counted = capture
    try:
        row = run_one(*args, **kwargs)
    finally:
        harness.sample_counted = original
    return row, captured.get("idata")


def _samplers(names):
    import pymc as pm

    from pymc_surrogate.step_methods.kernel_hmc import KernelHMC
    from pymc_surrogate.surrogates import KernelExpFamilyFinite

    table = {
        "KernelHMC lite": (KernelHMC, {"use_gradient": False}),
        "KernelHMC finite": (KernelHMC, {"surrogate": KernelExpFamilyFinite(), "use_gradient": False}),
        "DEMetropolisZ": (pm.DEMetropolisZ, {}),
    }
    return [(n, *table[n]) for n in names]


def plot(rows, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    offsets = {"KernelHMC lite": 0.97, "KernelHMC finite": 1.03, "DEMetropolisZ": 1.0}
    colors = {"KernelHMC lite": "C0", "KernelHMC finite": "C1", "DEMetropolisZ": "C2"}
    for sampler in dict.fromkeys(r["sampler"] for r in rows):
        sel = [r for r in rows if r["sampler"] == sampler and r["status"] == "ok"]
        if not sel:
            continue
        dims = sorted({r["dim"] for r in sel})
        style = "o--" if sampler == "DEMetropolisZ" else "o-"
        f = offsets.get(sampler, 1.0)
        for ax, key in zip(axes, ("mean_accept", "ess_per_eval")):
            med = [np.median([r[key] for r in sel if r["dim"] == d]) for d in dims]
            color = colors.get(sampler)
            ax.plot([d * f for d in dims], med, style, color=color, label=f"{sampler} (median)")
            ax.plot([r["dim"] * f for r in sel], [r[key] for r in sel], ".", color=color,
                    alpha=0.4)
        unused = [r for r in sel if r.get("surrogate_share", 1.0) < 0.5]
        axes[0].plot([r["dim"] * f for r in unused], [r["mean_accept"] for r in unused], "s",
                     mfc="none", mec="k", ms=9,
                     label="surrogate unused in > half the draws" if unused and
                     sampler == "KernelHMC finite" else None)
        bad = [r for r in sel if not (r["max_rhat"] <= 1.01)]
        axes[1].plot([r["dim"] * f for r in bad], [r["ess_per_eval"] for r in bad], "kx",
                     ms=7)
    for ax, ylabel in zip(axes, ("acceptance (draws)", "min bulk ESS / logp evaluation")):
        ax.set_xscale("log")
        ax.set_xticks(DIMS, [str(d) for d in DIMS])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("dimension d")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[1].set_yscale("log")
    axes[0].set_ylim(0, 1.02)
    axes[0].legend(fontsize=8)
    axes[1].set_title("dots: single seeds; x: that run's max R-hat > 1.01", fontsize=9, loc="right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="d = 2, 5 and 200 + 200 (_quick)")
    parser.add_argument("--seeds", type=str, default="0,1,2",
                        help="sampling seeds, comma-separated")
    parser.add_argument("--target-seed", type=int, default=1, help="seed of the covariances")
    parser.add_argument("--target", choices=["kmc", "iid"], default="kmc",
                        help="kmc: the Fig. 2 covariance; iid: N(0, I), the well-conditioned "
                             "control")
    parser.add_argument("--dims", type=str, default=None, help="comma-separated, e.g. 2,5,10")
    parser.add_argument("--samplers", type=str,
                        default="KernelHMC lite,KernelHMC finite,DEMetropolisZ")
    parser.add_argument("--draws", type=int, default=None)
    parser.add_argument("--tune", type=int, default=None)
    parser.add_argument("--out", type=Path, default=DEFAULT_RESULTS_DIR)
    args = parser.parse_args(argv)

    from benchmarks.models.gaussians import make_gaussian

    dims = [int(x) for x in harness.split_names(args.dims)] or (
        [2, 5] if args.quick else list(DIMS))
    draws = args.draws or (200 if args.quick else 1000)
    tune = args.tune or (200 if args.quick else 1000)
    seeds = [int(x) for x in harness.split_names(args.seeds)]
    settings = dict(draws=draws, tune=tune, chains=2)
    samplers = _samplers(harness.split_names(args.samplers))
    suffix = "_quick" if args.quick else ""

    rows = []
    for d in dims:
        cov = (kmc_fig2_covariance(d, args.target_seed + d) if args.target == "kmc"
               else np.eye(d))
        for (name, step_cls, kwargs), seed in itertools.product(samplers, seeds):
            model, info = make_gaussian(np.zeros(d), cov, name=f"gauss_{args.target}_d{d}")
            reference = Reference(mean=info.ref_mean, sd=info.ref_sd, source="exact")
            row = harness._empty_row(f"gauss_{args.target}_d{d}", f"seed {seed}", name,
                                     ref_source="exact", **settings)
            row.update(seed=seed, surrogate_share=float("nan"), training_size=float("nan"))
            print(f"d={d} / {name} / seed {seed} ...", file=sys.stderr, flush=True)
            try:
                measured, idata = run_captured(model, info, name, step_cls, reference=reference,
                                               sampler_kwargs=kwargs, seed=seed, **settings)
                row.update(measured)
                row.update(surrogate_columns(idata))
            except Exception as exc:  # noqa: BLE001 - a failing sampler is a row
                row.update(status="error", note=harness._describe(exc))
            row["ess_per_eval"] = (row["min_ess_bulk"] / row["n_logp"]
                                   if row.get("n_logp", 0) and row["n_logp"] > 0 else float("nan"))
            if row["status"] == "ok" and not (row["max_rhat"] <= 1.01):
                row["note"] = ((row.get("note") or "")
                               + f"FAILED: max R-hat {row['max_rhat']:.3g} > 1.01")
            print(f"  accept {row['mean_accept']:.3g}, min ESS {row['min_ess_bulk']:.0f}, "
                  f"ESS/eval {row['ess_per_eval']:.3g}, rhat {row['max_rhat']:.3g}, "
                  f"mean err {row['mean_err']:.3g}, {row['total_s']:.0f} s",
                  file=sys.stderr, flush=True)
            rows.append(row)

    command = (COMMAND + (" --quick" if args.quick else "") + f" --seeds {args.seeds}"
               + (f" --target {args.target}" if args.target != "kmc" else "")
               + (f" --dims {args.dims}" if args.dims else "")
               + (f" --draws {args.draws}" if args.draws else "")
               + (f" --tune {args.tune}" if args.tune else ""))
    meta = {
        "command": f"PYTHONPATH=. nice -n 10 {command} (python: /work/venv311/bin/python)",
        "commit": git_commit(),
        "model": ("Gaussian N(0, S) in d dimensions, S = R diag(g) R^T with g ~ Gamma(1, 1) "
                  "and R a uniform random orthogonal matrix (kmc §6 Fig. 2 / App. D.1; seed "
                  f"{args.target_seed} + d)" if args.target == "kmc" else
                  "Gaussian N(0, I) in d dimensions (well-conditioned control)")
                 + "; one pm.Potential, counted; KernelHMC and DEMetropolisZ use no gradient",
        "settings": ", ".join(f"{k}={v}" for k, v in settings.items()) + f", seeds {seeds}"
                    + ", cores=1; KernelHMC defaults (lite: max_points 1000; finite: 300 "
                      "features; sigma, lam by CV)",
        "reference": "exact moments (mean 0, sd sqrt(diag S))",
        "machine_note": "2 shared cores, noisy (a test run shared them), run under nice -n 10",
        **environment_meta(),
    }
    tag = "kernel_hmc_sweep" + ("" if args.target == "kmc" else f"_{args.target}") + suffix
    write_results(rows, args.out, tag, meta)
    # The sweep's own summary table: the kmc Fig. 2 quantities only.
    md = args.out / f"{tag}.md"
    lines = ["", "## Lite versus finite (the plot's numbers)", "",
             "| d | sampler | seed | acceptance | draws on surrogate | min ESS | logp evals | "
             "ESS / eval | max R-hat | mean err (sd units) | sd err | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = ("error" if r["status"] != "ok" else
                   "ok" if r["max_rhat"] <= 1.01 else "FAILED (R-hat > 1.01)")
        lines.append(f"| {r['dim'] if r['status'] == 'ok' else '?'} | {r['sampler']} | "
                     f"{r['seed']} | {r['mean_accept']:.3f} | {r['surrogate_share']:.2f} | "
                     f"{r['min_ess_bulk']:.0f} | {r['n_logp']:.0f} | "
                     f"{r['ess_per_eval']:.3g} | {r['max_rhat']:.3f} | {r['mean_err']:.3g} | "
                     f"{r['sd_err']:.3g} | {verdict} |")
    lines += ["", f"![sweep]({tag}.png)", ""]
    text = md.read_text()
    md.write_text(text.replace("\nChains run sequentially", "\n".join(lines)
                               + "\nChains run sequentially", 1))
    plot(rows, args.out / f"{tag}.png",
         f"KernelHMC lite vs finite, {'kmc Fig. 2 Gaussian' if args.target == 'kmc' else 'N(0, I)'}"
         f"; 2 chains x ({tune} + {draws}), seeds {seeds}")
    print(md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
