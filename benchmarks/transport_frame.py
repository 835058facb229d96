"""SurrogateHMC in the affine frame and in a triangular transport frame, side by side.

Black box, 2 chains x (1000 tune + 1000 draws), ``cores=1``, default settings except
``frame``, on (a) the banana of sparse-grid-hmc §4.2 (:func:`benchmarks.banana_coverage.
black_box_banana`) and (b) Neal's 2-d funnel, ``v ~ N(0, 3)``, ``x | v ~ N(0, exp(v / 2))``
(:func:`benchmarks.models.hard_geometry.make_funnel`, black box); optionally (c) plain
Gaussians in 2 and 10 dimensions (black box), where the triangular frame should choose the
affine one::

    PYTHONPATH=. python benchmarks/transport_frame.py --models banana,funnel --seeds 0-4
    python benchmarks/transport_frame.py --models gauss2,gauss10 --seeds 0-1 --tag gauss

Per run, from the pooled draws against an exact reference (banana: quadrature; funnel:
``v ~ N(0, 9)`` and ``P(x < t) = E Phi(t exp(-v / 2))`` by quadrature; Gaussians: their
mean and covariance), by :func:`benchmarks.banana_coverage.measure`: ``max_abs_z`` = max
over coordinates of ``|mean - ref| / MCSE``; ``sd_ratio_i`` = sd / ref sd and ``sd_ok_i`` =
within 3 MCSE(sd), or for the funnel inside the 99 % band of exact draws; the shares below / above
each marginal's 2.5% / 97.5% quantiles within the central 99% Binomial(n, 0.025) band
(n = min tail ESS); ``max_rhat`` (rank); ``evals_per_ess`` = stat ``total_model_evals``
summed over chains (tuning included) / min bulk ESS. ``right`` = max|z| <= 4, R-hat <= 1.01,
every ``sd_ok`` and tail share in its band (the checks of ``banana_coverage.py``). Also the
final frame of each chain (``frame``: the degrees the map chose per coordinate, in its
order; "affine" where every degree was 0). Output: ``benchmarks/results/transport_frame_<tag>
.{csv,md}``, rewritten after every run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import time
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
import pymc as pm  # noqa: E402
from scipy.stats import norm  # noqa: E402

from benchmarks.banana_coverage import (  # noqa: E402
    banana_reference_quantiles, black_box_banana, funnel_reference,
)
from benchmarks.banana_coverage import measure as coverage_measure  # noqa: E402
from benchmarks.harness import DEFAULT_RESULTS_DIR, format_cell, git_commit, parse_seeds  # noqa: E402
from benchmarks.models.hard_geometry import make_funnel  # noqa: E402
from pymc_surrogate import SurrogateHMC  # noqa: E402
from pymc_surrogate.compat import posterior_dataset  # noqa: E402
from tests.reliability.helpers import BlackBoxLogp  # noqa: E402

if hasattr(az, "Numba"):
    az.Numba.disable_numba()

TAIL_P = 0.025
FRAMES = ("affine", "triangular")


def gaussian(d: int, seed: int = 0):
    """A black-box correlated Gaussian (sds 0.5-2, correlations up to ~0.6)."""
    rng = np.random.default_rng(100 + d + seed)
    a = rng.normal(size=(d, d))
    s = a @ a.T + d * np.eye(d)
    corr = s / np.sqrt(np.outer(np.diag(s), np.diag(s)))
    sd = np.geomspace(0.5, 2.0, d)
    cov = corr * np.outer(sd, sd)
    mean = rng.normal(size=d)
    prec = np.linalg.inv(cov)
    with pm.Model() as model:
        x = pm.Flat("x", shape=d)
        lik = BlackBoxLogp(lambda v: -0.5 * (v - mean) @ prec @ (v - mean), f"gauss{d}")
        pm.Potential("lik", lik(x))
    q = np.array([norm.ppf([TAIL_P, 1 - TAIL_P], m, s) for m, s in zip(mean, sd)])
    return model, "x", (mean, sd, q)


def models(names):
    out = {}
    for name in names:
        if name == "banana":
            model, info = black_box_banana()
            ref = (info.ref_mean["beta"], info.ref_sd["beta"],
                   banana_reference_quantiles(info.extra["y"], [TAIL_P, 1 - TAIL_P]))
            out[name] = (model, ["beta"], ref)
        elif name == "funnel":
            model, _ = make_funnel(2, gradient=False)
            out[name] = (model, ["v", "x"], funnel_reference())
        elif name.startswith("gauss"):
            model, var, ref = gaussian(int(name[5:]))
            out[name] = (model, [var], ref)
        else:
            raise ValueError(name)
    return out


def measure(idata, names, ref):
    """:func:`benchmarks.banana_coverage.measure`, with the sd ratios as one column."""
    row = coverage_measure(idata, ref, names)
    dim = sum(key.startswith("sd_ratio_") for key in row)
    row["sd_ratios"] = " ".join(f"{row[f'sd_ratio_{i}']:.3f}" for i in range(1, dim + 1))
    return row


def describe_frame(step) -> str:
    frame = step.frame.map
    if frame is None:
        return "affine"
    return "order " + "".join(map(str, frame.order_)) + " deg " + "".join(map(str, frame.degrees_))


class _Recording(SurrogateHMC):
    """SurrogateHMC that keeps each chain's final frame (for the table)."""

    frames: list = []

    def stop_tuning(self):
        super().stop_tuning()
        type(self).frames.append(describe_frame(self))


def run(model_name, frame, seed, spec, tune, draws, chains):
    model, names, ref = spec
    row = {"model": model_name, "frame": frame, "seed": seed, "status": "error", "reasons": ""}
    _Recording.frames = []
    start = time.perf_counter()
    try:
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(step=_Recording(frame=frame), tune=tune, draws=draws,
                              chains=chains, cores=1, random_seed=seed, progressbar=False,
                              compute_convergence_checks=False)
        row.update(measure(idata, names, ref))
        stats = posterior_dataset(idata, "sample_stats")
        n_evals = int(stats["total_model_evals"].values[:, -1].sum())
        ess = row["min_ess_bulk"] if row["min_ess_bulk"] > 0 else np.nan
        row.update(n_evals=n_evals, evals_per_ess=n_evals / ess,
                   divergences=int(stats["diverging"].sum()))
    except Exception as exc:  # noqa: BLE001 - a failing run is a row
        row["reasons"] = f"{type(exc).__name__}: {exc}"[:300]
    row.update(final_frames=" / ".join(_Recording.frames), wall_s=time.perf_counter() - start)
    return row


COLS = [("model", ""), ("seed", ".0f"), ("frame", ""), ("status", ""), ("max_abs_z", ".2f"),
        ("max_rhat", ".3f"), ("sd_ratios", ""), ("min_ess_bulk", ".0f"),
        ("min_ess_tail", ".0f"), ("n_evals", ".0f"), ("evals_per_ess", ".3g"),
        ("divergences", ".0f"), ("final_frames", ""), ("wall_s", ".0f"), ("reasons", "")]


def write(rows, out, tag, meta):
    frame = pd.DataFrame(rows)
    frame.to_csv(out / f"transport_frame_{tag}.csv", index=False)
    lines = [f"# SurrogateHMC: affine vs triangular frame ({tag})", ""]
    lines += [f"- **{k}**: {v}" for k, v in meta.items()]
    lines += ["", "## Runs", "", "| " + " | ".join(c for c, _ in COLS) + " |",
              "|" + "---|" * len(COLS)]
    lines += ["| " + " | ".join(format_cell(r.get(c), s) if s else format_cell(r.get(c))
                                for c, s in COLS) + " |" for r in rows]
    lines += ["", "## Summary", "", "| model | frame | right | median evals/ESS | sd ratio range |",
              "|---|---|---|---|---|"]
    for (m, f), g in frame.groupby(["model", "frame"], sort=False):
        ok = g[g["status"] != "error"]
        ratios = [float(v) for s in ok.get("sd_ratios", pd.Series(dtype=str)).dropna() for v in s.split()]
        rng = f"{min(ratios):.3f}-{max(ratios):.3f}" if ratios else "-"
        med = format_cell(ok["evals_per_ess"].median() if len(ok) else np.nan, ".3g")
        lines.append(f"| {m} | {f} | {(g['status'] == 'right').sum()} of {len(g)} | {med} | {rng} |")
    lines += ["", "## What is measured", "", __doc__[__doc__.index("Per run"):].strip(), ""]
    (out / f"transport_frame_{tag}.md").write_text("\n".join(lines))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="banana,funnel")
    p.add_argument("--frames", default=",".join(FRAMES))
    p.add_argument("--seeds", default="0-4")
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--tag", default="main")
    p.add_argument("--out", type=Path, default=DEFAULT_RESULTS_DIR)
    a = p.parse_args(argv)
    specs = models(a.models.split(","))
    meta = {"command": " ".join([sys.executable, *sys.argv]), "git commit": git_commit(),
            "settings": f"tune={a.tune} draws={a.draws} chains={a.chains} cores=1, black box, "
                        "default SurrogateHMC settings but frame",
            "date": f"{_dt.datetime.now():%Y-%m-%d %H:%M}",
            "load average at start": f"{os.getloadavg()[0]:.2f}"}
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in parse_seeds(a.seeds):
        for name in specs:
            for frame in a.frames.split(","):
                rows.append(r := run(name, frame, seed, specs[name], a.tune, a.draws, a.chains))
                print(name, frame, seed, r["status"], r.get("sd_ratios"), r.get("max_rhat"),
                      r.get("evals_per_ess"), r["final_frames"], r["reasons"], f"{r['wall_s']:.0f}s",
                      flush=True)
                write(rows, a.out, a.tag, meta)


if __name__ == "__main__":
    main()
