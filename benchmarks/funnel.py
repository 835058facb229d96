"""Neal's funnel, side by side: NUTS and the step methods, Euclidean and Riemannian (issue 35).

Issue 35's funnel line: at d = 10 (``v ~ N(0, 3^2)``, ``x_i | v ~ N(0, e^v)``,
:func:`benchmarks.models.hard_geometry.make_funnel`), with its gradient and as a black box,
``v`` right -- mean and sd within Monte Carlo error, its 2.5% / 97.5% tail shares within
binomial limits, R-hat <= 1.01, min ESS >= 400 from 2 x (1000 + 1000) -- with NUTS's result
on the same model in the same table::

    PYTHONPATH=. python benchmarks/funnel.py --dim 10 --tag d10
    python benchmarks/funnel.py --dim 2 --runs NUTS,SurrogateHMC:riemannian --seeds 0-2 --tag x

A run is ``SAMPLER[:METRIC]`` (``metric="riemannian"`` for the network steps), on the model
with its gradient and as a black box (NUTS: the gradient model only). Per run: ``z_mean`` =
v's mean over its MCSE, ``sd_ratio`` and ``sd_ok`` (``|sd - 3| <= 3 MCSE(sd)``), the shares
``below`` / ``above`` v's 2.5% / 97.5% quantiles and ``tails_ok`` (inside the central 99%
Binomial(n, 0.025) band, n = v's tail ESS), ``rhat`` and ``ess_bulk`` of v, the worst R-hat
and least bulk ESS over every coordinate, ``n_evals`` (the steps' ``total_model_evals``
over the chains, tune included; NUTS: its gradient evaluations) and ``evals_per_ess``,
divergences, ``implicit_failures`` (Riemannian inner moves ended by an implicit step that
did not converge), ``wall_s``. ``right`` = |z| <= 4, sd_ok, tails_ok, R-hat <= 1.01 over
every coordinate, min ESS >= 400. Output: ``benchmarks/results/funnel_<tag>.{csv,md}``,
rewritten after every run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import warnings
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy.stats import norm  # noqa: E402

import pymc_surrogate  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    DEFAULT_RESULTS_DIR, _describe, environment_meta, format_cell, git_commit, parse_seeds,
    sample_counted, split_names,
)
from benchmarks.models.hard_geometry import FUNNEL_SCALE, make_funnel  # noqa: E402
from benchmarks.real_posteriors import tail_band  # noqa: E402
from pymc_surrogate.compat import posterior_dataset  # noqa: E402

if hasattr(az, "Numba"):  # ArviZ 0.23 + numba: mcse(method="sd") fails (banana_coverage.py)
    az.Numba.disable_numba()

RUNS = ("NUTS", "SurrogateHMC", "SurrogateHMC:riemannian")
Z_LIMIT, RHAT_LIMIT, SD_MCSE, MIN_ESS, TAIL_P = 4.0, 1.01, 3.0, 400.0, 0.025


def measure(idata) -> dict:
    """The accuracy and convergence columns of one run (module docstring)."""
    post = posterior_dataset(idata)
    v = post[["v"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summary = az.summary(post, kind="diagnostics")
        se = float(np.asarray(az.mcse(v, method="mean")["v"]))
        se_sd = float(np.asarray(az.mcse(v, method="sd")["v"]))
    draws = np.asarray(v["v"]).ravel()
    lower, upper = norm.ppf([TAIL_P, 1 - TAIL_P], scale=FUNNEL_SCALE)
    ess_tail = float(summary.loc["v", "ess_tail"])
    lo, hi = tail_band(ess_tail, p=TAIL_P, level=0.99)
    row = {"z_mean": draws.mean() / se if se > 0 else np.inf,
           "sd_ratio": draws.std(ddof=1) / FUNNEL_SCALE,
           "sd_ok": bool(abs(draws.std(ddof=1) - FUNNEL_SCALE) <= SD_MCSE * se_sd),
           "below": float(np.mean(draws < lower)), "above": float(np.mean(draws > upper)),
           "rhat": float(summary.loc["v", "r_hat"]), "ess_bulk": float(summary.loc["v", "ess_bulk"]),
           "ess_tail": ess_tail, "max_rhat": float(summary["r_hat"].max()),
           "min_ess": float(summary["ess_bulk"].min())}
    row["tails_ok"] = bool(lo <= row["below"] <= hi and lo <= row["above"] <= hi)
    reasons = [f"z {row['z_mean']:.2f}"] if not abs(row["z_mean"]) <= Z_LIMIT else []
    reasons += [f"sd x{row['sd_ratio']:.3f}"] if not row["sd_ok"] else []
    reasons += ["tails"] if not row["tails_ok"] else []
    reasons += [f"rhat {row['max_rhat']:.3f}"] if not row["max_rhat"] <= RHAT_LIMIT else []
    reasons += [f"ess {row['min_ess']:.0f}"] if not row["min_ess"] >= MIN_ESS else []
    row.update(status="wrong" if reasons else "right", reasons="; ".join(reasons))
    return row


def run(name: str, gradient: bool, dim: int, seed: int, tune: int, draws: int,
        chains: int) -> dict:
    """One run (an exception becomes an ``error`` row)."""
    sampler, _, metric = name.partition(":")
    row = {"run": name, "model": "gradient" if gradient else "black box", "seed": seed,
           "status": "error", "reasons": ""}
    model, info = make_funnel(dim, gradient=gradient)
    kwargs = {"kernel": {"metric": metric}} if metric else {}
    try:
        res = sample_counted(model, info, sampler, pymc_surrogate.STEP_METHODS.get(sampler),
                             draws=draws, tune=tune, chains=chains, seed=seed,
                             sampler_kwargs=kwargs, keep_warnings=True)
        row.update(measure(res.idata))
        stats = posterior_dataset(res.idata, "sample_stats")
        if sampler == "NUTS":
            n_evals = int(res.timing["n_logp"])  # each leapfrog step: one logp and gradient
        else:
            n_evals = int(stats["total_model_evals"].values[:, -1].sum())
        failures = (int(stats["implicit_failures"].values.sum())
                    if "implicit_failures" in stats else 0)
        row.update(n_evals=n_evals, evals_per_ess=n_evals / max(row["min_ess"], 1e-9),
                   divergences=int(stats["diverging"].sum()), implicit_failures=failures,
                   far_proposals=(int(stats["far_proposals"].values[:, -1].sum())
                                  if "far_proposals" in stats else np.nan),
                   wall_s=res.timing["total_s"], n_warnings=len(res.warnings),
                   first_warning=res.warnings[0][:300] if res.warnings else "")
    except Exception as exc:  # noqa: BLE001 - a failing run is a row
        row["reasons"] = row["error"] = _describe(exc)
    return row


def write(rows: list[dict], out: Path, tag: str, meta: dict) -> None:
    """(Re)write ``funnel_<tag>.csv`` and ``.md`` under ``out``."""
    pd.DataFrame(rows).to_csv(out / f"funnel_{tag}.csv", index=False)
    cols = [("run", ""), ("model", ""), ("seed", ".0f"), ("status", ""), ("z_mean", ".2f"),
            ("sd_ratio", ".3f"), ("below", ".4f"), ("above", ".4f"), ("rhat", ".3f"),
            ("ess_bulk", ".0f"), ("max_rhat", ".3f"), ("min_ess", ".0f"), ("n_evals", ".0f"),
            ("evals_per_ess", ".3g"), ("divergences", ".0f"), ("implicit_failures", ".0f"),
            ("far_proposals", ".0f"), ("wall_s", ".0f"), ("n_warnings", ".0f"), ("reasons", "")]
    lines = [f"# Neal's funnel: {tag}", ""] + [f"- **{k}**: {v}" for k, v in meta.items()]
    lines += ["", "| " + " | ".join(c for c, _ in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(format_cell(r.get(c), s) if s else format_cell(r.get(c)) for c, s in cols) + " |"
              for r in rows]
    lines += ["", "## Errors and first warnings", ""]
    lines += [f"- {r['run']} ({r['model']}) seed {r['seed']}: "
              f"{format_cell(r.get('error') or r.get('first_warning'))}"
              for r in rows if r.get("error") or r.get("first_warning")] or ["none"]
    lines += ["", "## What is measured", "", __doc__[__doc__.index("A run is"):].strip(), ""]
    (out / f"funnel_{tag}.md").write_text("\n".join(lines))


def main(argv=None) -> None:
    """Command line; see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dim", type=int, default=10)
    p.add_argument("--runs", default=",".join(RUNS), help="comma-separated SAMPLER[:METRIC]")
    p.add_argument("--models", default="gradient,black_box")
    p.add_argument("--seeds", default="0")
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--tag", default=f"{_dt.datetime.now():%Y%m%d-%H%M%S}")
    p.add_argument("--out", type=Path, default=DEFAULT_RESULTS_DIR)
    a = p.parse_args(argv)
    seeds = parse_seeds(a.seeds)
    env = environment_meta()
    meta = {"command": f"{sys.executable} " + " ".join(sys.argv), "git commit": git_commit(),
            "settings": f"d={a.dim} tune={a.tune} draws={a.draws} chains={a.chains} cores=1, "
            f"seeds {seeds}", "versions": env["versions"],
            "date": f"{_dt.datetime.now():%Y-%m-%d %H:%M}",
            "machine": f"{env['machine'].rsplit(',', 1)[0]}, shared, load average at start "
            f"{os.getloadavg()[0]:.2f}"}
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in seeds:
        for name in split_names(a.runs):
            for model in split_names(a.models):
                if name == "NUTS" and model != "gradient":
                    continue
                rows.append(run(name, model == "gradient", a.dim, seed, a.tune, a.draws,
                                a.chains))
                r = rows[-1]
                print(f"[{_dt.datetime.now():%H:%M:%S}] {name} {model} seed {seed}: "
                      f"{r['status']} {r['reasons']}", flush=True)
                write(rows, a.out, a.tag, meta)
    print(f"wrote {a.out}/funnel_{a.tag}.{{csv,md}}")


if __name__ == "__main__":
    main()
