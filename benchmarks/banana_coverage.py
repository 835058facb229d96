"""Banana coverage: is every step method right on curved posteriors at >= 9 of 10 seeds?

Measured on :func:`benchmarks.models.banana.make_banana` (``--model banana``, the default:
``y_i ~ N(b1 + b2^2, 2^2)``, ``b ~ N(0, I)``, n = 100, data seed 0) or on Haario's
twisted Gaussian in 2 or 8 dimensions (``--model haario2`` / ``haario8``,
:func:`benchmarks.models.haario_banana.make_haario_banana`, a Gaussian pushed through a
quadratic map; exact moments, x_2's quantiles by quadrature) or on Neal's 2-d funnel
(``--model funnel2``, :func:`benchmarks.models.hard_geometry.make_funnel`: ``v ~ N(0, 3^2)``,
``x | v ~ N(0, e^v)``; exact moments and draws, x's quantiles by quadrature): SurrogateHMC,
AdaptiveSurrogateHMC, KernelHMC and SparseGridHMC on the black box (the likelihood as a
PyTensor Op without gradient, :class:`tests.reliability.helpers.BlackBoxLogp`);
VariationalHMC on the model with its gradient.  Each run is ``pm.sample(step=Cls(), tune,
draws, chains, cores=1, random_seed=seed)`` with the step's default settings (or those of
``--sampler-kwargs``)::

    PYTHONPATH=. nice -n 5 python benchmarks/banana_coverage.py --tag baseline
    python benchmarks/banana_coverage.py --samplers SurrogateHMC,KernelHMC --seeds 0-4 --tag x
    python benchmarks/banana_coverage.py --samplers SurrogateHMC \
        --sampler-kwargs '{"SurrogateHMC": {"kernel": {"metric": "riemannian"}}}' --tag y

Per run (pooled draws; reference exact or by quadrature): ``max_abs_z`` = max over coordinates of
``|mean - ref mean| / az.mcse(mean)``; ``sd_ratio_i`` = sd / ref sd, ``sd_ok_i`` =
``|sd - ref sd| <= 3 az.mcse(sd)``, or, where the reference can be drawn exactly (the
funnel), the ratio inside the central 99 % band of the sd ratios of n exact draws (n as for
the tail shares; :func:`sd_ratio_band`): ``az.mcse(sd)`` estimates the fourth moment from
the draws, far too small for the funnel's x (kurtosis about 2.4e4), so that exact draws
failed ``3 az.mcse(sd)`` at 76 of 300 sets of 2 x 1000; ``max_rhat`` (rank R-hat);
``min_ess_bulk/tail``; tail shares ``below_i`` / ``above_i`` of draws below the reference
marginal's 2.5 % / above its 97.5 % quantile, ``tails_ok`` if all lie in the central 99 % Binomial(n, 0.025) band,
n = floor(min tail ESS) (:func:`benchmarks.real_posteriors.tail_band`); ``n_evals`` = stat
``total_model_evals`` at the last draw summed over chains (tune included), ``n_counted`` =
likelihood evaluations seen by the model's counting Op (everything, step setup included),
``evals_per_ess`` / ``counted_per_ess`` = those / min bulk ESS; ``wall_s`` (whole
``pm.sample`` call); ``n_warnings`` / ``first_warning`` of the ``pymc`` logger.  ``right`` =
max|z| <= 4, R-hat <= 1.01, every ``sd_ok``, ``tails_ok``.  Output:
``benchmarks/results/banana_coverage_<tag>.{csv,md}`` (the table shows the first two
coordinates' sd ratios and tail shares; the csv has them all), rewritten after every run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, NamedTuple

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pymc as pm  # noqa: E402
from scipy.integrate import cumulative_trapezoid  # noqa: E402
from scipy.optimize import brentq  # noqa: E402
from scipy.stats import norm  # noqa: E402

import pymc_surrogate  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    DEFAULT_RESULTS_DIR, _blas_limit, _describe, environment_meta, format_cell, git_commit,
    parse_seeds, sample_counted, split_names,
)
from benchmarks.models.banana import banana_beta2_marginal, banana_log_density, make_banana  # noqa: E402
from benchmarks.models.counting import EvaluationCounter, count_evaluations  # noqa: E402
from benchmarks.models.haario_banana import haario_banana_moments, make_haario_banana  # noqa: E402
from benchmarks.models.hard_geometry import FUNNEL_SCALE, make_funnel  # noqa: E402
from benchmarks.real_posteriors import tail_band  # noqa: E402
from pymc_surrogate.compat import posterior_dataset  # noqa: E402
from tests.reliability.helpers import BlackBoxLogp  # noqa: E402

if hasattr(az, "Numba"):  # ArviZ 0.23 + numba: mcse(method="sd") fails on vector variables
    az.Numba.disable_numba()

SAMPLERS = ("SurrogateHMC", "AdaptiveSurrogateHMC", "VariationalHMC", "KernelHMC",
            "SparseGridHMC")
Z_LIMIT, RHAT_LIMIT, SD_MCSE, TAIL_P, TAIL_LEVEL = 4.0, 1.01, 3.0, 0.025, 0.99
#: Haario's twisted Gaussian as kmc App. D.2 has it: x_1's sd 10, and x_2's conditional
#: mean -b (x_1^2 - V) falls 9 below its centre at x_1's 2 sd (x_2's marginal sd 4.4).
HAARIO_B, HAARIO_V = 0.03, 100.0
MODELS = ("banana", "haario2", "haario8", "funnel2")
#: Sets of exact draws behind an sd ratio band (its 0.5 % quantile to about +-0.3 %).
SD_BAND_REPS = 4000


class Reference(NamedTuple):
    """A posterior's exact moments and 2.5 / 97.5 % quantiles (shape ``(dim, 2)``), and,
    where it can be sampled exactly, ``draw(rng, n)`` -> ``(n, dim)`` independent draws."""

    mean: np.ndarray
    sd: np.ndarray
    quantiles: np.ndarray
    draw: Callable[[np.random.Generator, int], np.ndarray] | None = None


def sd_ratio_band(ref: Reference, n: int, level: float = TAIL_LEVEL,
                  reps: int = SD_BAND_REPS, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Central ``level`` band of each coordinate's sd / ref sd over ``reps`` sets of ``n``
    exact draws: the Monte Carlo error of an sd, fourth moment and skew included."""
    rng = np.random.default_rng(seed)
    n = max(2, int(n))
    ratios = np.array([ref.draw(rng, n).std(axis=0, ddof=1) for _ in range(reps)]) / ref.sd
    alpha = 1.0 - level
    return np.quantile(ratios, alpha / 2, axis=0), np.quantile(ratios, 1 - alpha / 2, axis=0)


def tails(dim):
    """The tail-share columns of a ``dim``-dimensional model: (column, coordinate, side)."""
    return [(f"{side}_{i}", i, side) for i in range(1, dim + 1) for side in ("below", "above")]


def sd_columns(frame):
    return sorted((c for c in frame.columns if c.startswith("sd_ratio_")),
                  key=lambda c: int(c.rsplit("_", 1)[1]))


def banana_reference_quantiles(y, probs, sigma_y=2.0, sigma_beta=1.0, n_grid=200_001):
    """Quantiles of the marginals of b1 and b2 by quadrature, shape ``(2, len(probs))``.

    From :func:`benchmarks.models.banana.banana_beta2_marginal`: b2's CDF is the cumulative
    trapezoid of its density; b1's is ``∫ p(b2) Phi((x - mu1(b2)) / sqrt v) db2``.
    """
    b2, w, mu1, v = banana_beta2_marginal(y, sigma_y, sigma_beta, n_grid)
    cdf2 = cumulative_trapezoid(w, b2, initial=0.0)
    cdf2 = cdf2 / cdf2[-1]
    dx = b2[1] - b2[0]

    def cdf1(x):
        f = w * norm.cdf((x - mu1) / np.sqrt(v))
        return dx * (f.sum() - 0.5 * (f[0] + f[-1]))

    lo, hi = mu1.min() - 40 * np.sqrt(v), mu1.max() + 40 * np.sqrt(v)
    q1 = [brentq(lambda x, p=p: cdf1(x) - p, lo, hi, xtol=1e-12) for p in probs]
    return np.array([q1, np.interp(probs, cdf2, b2)])


def black_box_banana():
    """make_banana's posterior with the likelihood as a no-gradient Op (its own counter)."""
    _, info = make_banana()
    y, sigma_y = info.extra["y"], info.extra["sigma_y"]
    counter = EvaluationCounter()
    with pm.Model() as model:
        beta = pm.Normal("beta", mu=0.0, sigma=info.extra["sigma_beta"], shape=2)
        # sigma_beta = inf drops banana_log_density's prior term: the likelihood alone.
        lik = BlackBoxLogp(lambda b: banana_log_density(b[0], b[1], y, sigma_y, np.inf), "banana")
        pm.Potential("lik", lik(count_evaluations(beta, counter)))
    info.counter, info.has_gradient = counter, False
    return model, info


def haario_reference(dim, bananicity, v):
    """Haario's twisted Gaussian (``benchmarks.models.haario_banana``): exact moments and
    the 2.5 / 97.5 % quantiles of each marginal (x_2's by quadrature over x_1), as
    ``(mean, sd, quantiles of shape (dim, 2))``."""
    mean, sd = haario_banana_moments(dim, bananicity, v)
    probs = [TAIL_P, 1 - TAIL_P]
    q = np.tile(norm.ppf(probs), (dim, 1))
    q[0] *= np.sqrt(v)
    x1 = np.sqrt(v) * np.linspace(-12, 12, 40_001)
    w = norm.pdf(x1 / np.sqrt(v))
    w /= w.sum()

    def cdf2(t):  # x_2 = -b (x_1^2 - V) + N(0, 1)
        return float(w @ norm.cdf(t + bananicity * (x1**2 - v)))

    q[1] = [brentq(lambda t, p=p: cdf2(t) - p, -bananicity * 200 * v, 50.0, xtol=1e-10)
            for p in probs]
    return mean, sd, q


def funnel_reference() -> Reference:
    """Neal's 2-d funnel (``make_funnel(2)``): exact moments and draws; x's quantiles from
    ``P(x < t) = E Phi(t e^(-v / 2))`` by quadrature over v."""
    v = FUNNEL_SCALE * np.linspace(-12, 12, 40_001)
    w = norm.pdf(v / FUNNEL_SCALE)
    w /= w.sum()
    probs = [TAIL_P, 1 - TAIL_P]
    qx = [brentq(lambda t, p=p: float(w @ norm.cdf(t * np.exp(-v / 2))) - p, -1e4, 1e4,
                 xtol=1e-10) for p in probs]

    def draw(rng, n):
        v = rng.normal(0.0, FUNNEL_SCALE, n)
        return np.column_stack([v, rng.normal(size=n) * np.exp(v / 2)])

    return Reference(np.zeros(2), np.array([FUNNEL_SCALE, np.exp(FUNNEL_SCALE**2 / 4)]),
                     np.array([FUNNEL_SCALE * norm.ppf(probs), qx]), draw)


def curved_models(name):
    """``{"gradient": (model, info), "black_box": (model, info)}`` and the
    :class:`Reference` of one model of ``MODELS``."""
    if name == "funnel2":
        return ({kind: make_funnel(2, gradient=kind == "gradient")
                 for kind in ("gradient", "black_box")}, funnel_reference())
    if name == "banana":
        models = {"gradient": make_banana(), "black_box": black_box_banana()}
        info = models["gradient"][1]
        return models, Reference(info.ref_mean["beta"], info.ref_sd["beta"],
                                 banana_reference_quantiles(info.extra["y"], [TAIL_P, 1 - TAIL_P]))
    dim = int(name.removeprefix("haario"))
    models = {kind: make_haario_banana(dim, HAARIO_B, HAARIO_V, gradient=kind == "gradient")
              for kind in ("gradient", "black_box")}
    return models, Reference(*haario_reference(dim, HAARIO_B, HAARIO_V))


def measure(idata, ref, names=("beta",)):
    """The accuracy and convergence columns of one run (see the module docstring); ``ref``
    a :class:`Reference` or ``(mean, sd, quantiles)``, ``names`` the variables it covers,
    in order."""
    ref = Reference(*ref)
    post = posterior_dataset(idata)[list(names)]
    x = np.concatenate([post[n].values.reshape(post[n].shape[0] * post[n].shape[1], -1)
                        for n in names], axis=1)
    dim = x.shape[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        se, se_sd, rhat, ess_b, ess_t = (
            np.concatenate([np.atleast_1d(f(post, **kw)[n].values) for n in names])
            for f, kw in ((az.mcse, {"method": "mean"}), (az.mcse, {"method": "sd"}),
                          (az.rhat, {}), (az.ess, {"method": "bulk"}),
                          (az.ess, {"method": "tail"})))
    mean, sd = x.mean(axis=0), x.std(axis=0, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.nan_to_num((mean - ref.mean) / se, nan=np.inf)  # a stuck chain: MCSE 0
    row = {"max_abs_z": float(np.max(np.abs(z))), "max_rhat": float(np.max(rhat)),
           "min_ess_bulk": float(ess_b.min()), "min_ess_tail": float(ess_t.min())}
    lo, hi = tail_band(row["min_ess_tail"], p=TAIL_P, level=TAIL_LEVEL)
    row.update(tail_lo=lo, tail_hi=hi)
    ratio = sd / ref.sd
    if ref.draw is None:
        sd_ok = np.abs(sd - ref.sd) <= SD_MCSE * se_sd
    elif np.isfinite(row["min_ess_tail"]) and row["min_ess_tail"] >= 2:
        band_lo, band_hi = sd_ratio_band(ref, int(row["min_ess_tail"]))
        sd_ok = (band_lo <= ratio) & (ratio <= band_hi)
    else:  # no effective draw: no sd can be checked
        sd_ok = np.zeros(dim, dtype=bool)
    for i in range(dim):
        row.update({f"mean_{i + 1}": mean[i], f"z_{i + 1}": z[i], f"sd_ratio_{i + 1}": ratio[i],
                    f"sd_ok_{i + 1}": bool(sd_ok[i]),
                    f"below_{i + 1}": float(np.mean(x[:, i] < ref.quantiles[i, 0])),
                    f"above_{i + 1}": float(np.mean(x[:, i] > ref.quantiles[i, 1]))})
    row["tails_ok"] = all(lo <= row[k] <= hi for k, _, _ in tails(dim))
    reasons = [f"z {row['max_abs_z']:.2f}"] if not row["max_abs_z"] <= Z_LIMIT else []
    reasons += [f"rhat {row['max_rhat']:.3f}"] if not row["max_rhat"] <= RHAT_LIMIT else []
    reasons += [f"sd {i} x{row[f'sd_ratio_{i}']:.3f}" for i in range(1, dim + 1)
                if not row[f"sd_ok_{i}"]]
    reasons += [f"tail {i} {side} {row[k]:.4f}" for k, i, side in tails(dim)
                if not lo <= row[k] <= hi]
    row.update(status="wrong" if reasons else "right", reasons="; ".join(reasons))
    return row


def run(sampler, seed, tune, draws, chains, models, ref, sampler_kwargs=None, threads=0,
        gradient=False):
    """One sampler at one seed: a row (an exception becomes an ``error`` row). The model
    has its gradient for VariationalHMC, and for every sampler with ``gradient``."""
    model, info = models["gradient" if gradient or sampler == "VariationalHMC" else "black_box"]
    row = {"sampler": sampler, "seed": seed, "status": "error", "reasons": ""}
    if threads and sampler not in ("VariationalHMC", "SparseGridHMC"):
        sampler_kwargs = {**(sampler_kwargs or {}), "executor": ThreadPoolExecutor(threads)}
    try:
        res = sample_counted(model, info, sampler, pymc_surrogate.STEP_METHODS[sampler],
                             draws=draws, tune=tune, chains=chains, seed=seed,
                             sampler_kwargs=sampler_kwargs, keep_warnings=True)
        row.update(measure(res.idata, ref, info.param_names))
        stats = posterior_dataset(res.idata, "sample_stats")
        ess = row["min_ess_bulk"] if row["min_ess_bulk"] > 0 else np.nan
        row.update(n_evals=int(stats["total_model_evals"].values[:, -1].sum()),
                   n_grad_evals=int(stats["total_gradient_evals"].values[:, -1].sum()),
                   n_counted=res.timing["n_logp"], divergences=int(stats["diverging"].sum()),
                   far_proposals=int(stats["far_proposals"].values[:, -1].sum()))
        row.update(evals_per_ess=row["n_evals"] / ess, counted_per_ess=row["n_counted"] / ess,
                   wall_s=res.timing["total_s"], n_warnings=len(res.warnings),
                   first_warning=res.warnings[0][:300] if res.warnings else "")
    except Exception as exc:  # noqa: BLE001 - a failing run is a row
        row["reasons"] = row["error"] = _describe(exc)
    return row


def summary(frame):
    """Per-sampler lines of the markdown summary table."""
    lines = ["| sampler | right | errors | median evals/ESS | median counted/ESS "
             "| worst max\\|z\\| | worst R-hat | sd ratio range | sd fails | tail fails "
             "| runs warned | reasons |",
             "|" + "---|" * 12]
    for sampler, g in frame.groupby("sampler", sort=False):
        ok = g[g["status"] != "error"]
        kinds = pd.Series([r.split(" ")[0] if r.split(" ")[0] in ("z", "rhat", "sd", "tail")
                           else "error" for rs in g["reasons"].fillna("") for r in rs.split("; ")
                           if r])
        sd = ok[sd_columns(ok)].values if len(ok) else np.full(2, np.nan)
        lines.append("| " + " | ".join([
            sampler, f"{(g['status'] == 'right').sum()} of {len(g)}",
            str((g["status"] == "error").sum()),
            *[format_cell(ok[c].median() if len(ok) else np.nan)
              for c in ("evals_per_ess", "counted_per_ess")],
            format_cell(ok["max_abs_z"].max() if len(ok) else np.nan, ".2f"),
            format_cell(ok["max_rhat"].max() if len(ok) else np.nan, ".3f"),
            f"{format_cell(np.nanmin(sd), '.3f')}-{format_cell(np.nanmax(sd), '.3f')}",
            str(int((~ok[[c.replace("ratio", "ok") for c in sd_columns(ok)]].astype(bool))
                    .any(axis=1).sum())),
            str(int((~ok["tails_ok"].astype(bool)).sum())),
            str(int((ok["n_warnings"] > 0).sum())),
            ", ".join(f"{k} x{n}" for k, n in kinds.value_counts().items()) or "-"]) + " |")
    return lines


def write(rows, out, tag, meta):
    """(Re)write ``banana_coverage_<tag>.csv`` and ``.md`` under ``out``."""
    frame = pd.DataFrame(rows)
    frame.to_csv(out / f"banana_coverage_{tag}.csv", index=False)
    cols = [("sampler", ""), ("seed", ".0f"), ("status", ""), ("max_abs_z", ".2f"),
            ("max_rhat", ".3f"), ("sd_ratio_1", ".3f"), ("sd_ratio_2", ".3f"),
            ("min_ess_bulk", ".0f"), ("min_ess_tail", ".0f"), *[(k, ".4f") for k, _, _ in tails(2)],
            ("n_evals", ".0f"), ("n_counted", ".0f"), ("evals_per_ess", ".3g"),
            ("far_proposals", ".0f"), ("wall_s", ".0f"),
            ("n_warnings", ".0f"), ("reasons", "")]
    lines = [f"# Banana coverage: {tag}", ""] + [f"- **{k}**: {v}" for k, v in meta.items()]
    lines += ["", "## Runs", "", "| " + " | ".join(c for c, _ in cols) + " |",
              "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(format_cell(r.get(c), s) if s else format_cell(r.get(c)) for c, s in cols) + " |"
              for r in rows]
    lines += ["", "## Errors and first warnings", ""]
    lines += [f"- {r['sampler']} seed {r['seed']}: {format_cell(r.get('error') or r['first_warning'])}"
              for r in rows if r.get("error") or r.get("first_warning")] or ["none"]
    lines += ["", "## Per sampler", "", *summary(frame), "", "## What is measured", "",
              __doc__[__doc__.index("Per run"):].strip(), ""]
    (out / f"banana_coverage_{tag}.md").write_text("\n".join(lines))


def main(argv=None):
    """Command line; see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="banana", choices=MODELS)
    p.add_argument("--samplers", default=",".join(SAMPLERS), help="comma-separated")
    p.add_argument("--seeds", default="0-9", help="e.g. 0,1,2 or 0-9")
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--draws", type=int, default=2000)
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--tag", default=f"{_dt.datetime.now():%Y%m%d-%H%M%S}")
    p.add_argument("--out", type=Path, default=DEFAULT_RESULTS_DIR)
    p.add_argument("--sampler-kwargs", help='JSON, e.g. {"SurrogateHMC": {"kernel": {"metric": "riemannian"}}}')
    p.add_argument("--executor-threads", type=int, default=0,
                   help="black-box samplers explore in batches on a ThreadPoolExecutor of "
                        "this many threads (0: serially)")
    p.add_argument("--gradient", action="store_true",
                   help="every sampler gets the model with its gradient (default: only "
                        "VariationalHMC; the others a black box)")
    a = p.parse_args(argv)
    seeds = parse_seeds(a.seeds)
    kwargs = json.loads(a.sampler_kwargs) if a.sampler_kwargs else {}
    models, ref = curved_models(a.model)
    env = environment_meta()
    path = f"PYTHONPATH={os.environ['PYTHONPATH']} " if os.environ.get("PYTHONPATH") else ""
    meta = {
        "command": f"cd {os.getcwd()} && {path}nice -n {os.nice(0)} {sys.executable} "
        + " ".join(sys.argv),
        "git commit": git_commit(),
        "settings": f"tune={a.tune} draws={a.draws} chains={a.chains} cores=1, default step "
        f"settings, seeds {seeds}",
        **({"sampler kwargs": json.dumps(kwargs)} if kwargs else {}),
        **({"executor": f"ThreadPoolExecutor({a.executor_threads}) for the black-box samplers"}
           if a.executor_threads else {}),
        "gradient": ("every sampler" if a.gradient
                     else "VariationalHMC only (the others: black box)"),
        "versions": f"{env['versions']}, arviz {az.__version__}, numpy {np.__version__}, "
        f"pymc_surrogate from {Path(pymc_surrogate.__file__).parent}",
        "date": f"{_dt.datetime.now():%Y-%m-%d %H:%M}",
        "machine": f"{env['machine'].rsplit(',', 1)[0]}, shared, load average at start "
        f"{os.getloadavg()[0]:.2f}; one sampling process, BLAS 1 thread",
        "model": models["black_box"][1].description if a.model != "banana" else
        "the banana of sparse-grid-hmc §4.2",
        "reference": f"mean {np.round(ref[0][:2], 4)}, sd {np.round(ref[1][:2], 4)}; 2.5 / "
        f"97.5 % quantiles of the first two {np.round(ref[2][0], 4)}, {np.round(ref[2][1], 4)}"
        + ("; the others N(0, 1)" if a.model == "haario8" else ""),
    }
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with _blas_limit(1):
        for seed in seeds:
            for sampler in split_names(a.samplers):
                rows.append(r := run(sampler, seed, a.tune, a.draws, a.chains, models, ref,
                                     kwargs.get(sampler), a.executor_threads, a.gradient))
                print(f"[{_dt.datetime.now():%H:%M:%S}] {sampler} seed {seed}: {r['status']} "
                      f"z {r.get('max_abs_z', np.nan):.2f} rhat {r.get('max_rhat', np.nan):.3f} "
                      f"{r.get('wall_s', np.nan):.0f} s {r['reasons']}", flush=True)
                write(rows, a.out, a.tag, meta)
    print(f"wrote {a.out / f'banana_coverage_{a.tag}'}.{{csv,md}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
