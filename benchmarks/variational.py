"""The experiments of vhmc §4 (Variational HMC), side by side with PyMC's NUTS (and ADVI).

Four benchmarks, one results file pair ``variational_<name>.md`` / ``.csv`` each:

``betabinom``
    Beta-binomial overdispersion (§4.1; :mod:`benchmarks.models.betabinomial`): 2 parameters
    ``(logit m, log K)``, LearnBayes ``cancermortality``, exact reference by quadrature on a
    dense grid.  Table 1: every sampler's z of the means (``(mean - ref) / MCSE``) and sd
    ratios.  Table 2 (the paper's Figs. 1-2): the fitted surrogate of ``VariationalHMC`` after
    tuning, for a growing number of hidden units ``s``, against the exact posterior on a grid:
    ``KL(p || q)`` with ``q ∝ exp(-V)`` normalised on the same grid, and the score-matching
    distance ``E_p |grad log p - grad log q|^2`` (plus the Laplace approximation as a
    yardstick).
``probit``
    Probit regression N = 10^4, d = 5 (§4.2; :mod:`benchmarks.models.probit`): RMSE of the
    posterior mean against the true coefficients and relative Frobenius error of the
    covariance against a long NUTS run, for VariationalHMC, NUTS and PyMC's full-rank ADVI run
    for the wall time NUTS took (``pm.fit`` stopped by a wall-clock callback).
``logistic``
    Logistic regression N = 10^5, d = 50 (§4.3 / rns-hmc §5.1): the harness's
    ``logistic`` model at ``size="paper"`` through :func:`benchmarks.harness.run_benchmark`
    (equivalent to ``python benchmarks/run.py --models logistic --size paper --samplers
    VariationalHMC,NUTS``), plus a second call for ``exact=False``.
``ica``
    ICA, 5 sources, 25 parameters (§4.4; :mod:`benchmarks.models.ica`): Amari distance of
    each chain's running posterior-mean unmixing matrix to the true one (and to a long NUTS
    run's) against the chain's wall time.

Samplers: ``VariationalHMC`` (exact, the default), ``VariationalHMC:free`` (``exact=False``,
the paper's free-form variational mode), ``NUTS`` (PyMC's default ``pm.sample()``) and
``ADVI`` (full-rank, probit only).  All sampling is ``cores=1`` through
:func:`benchmarks.harness.sample_counted`, so evaluations are counted by the models' in-process
counter; BLAS is limited to one thread.

Examples
--------
::

    python benchmarks/variational.py --quick --samplers NUTS,ADVI --out /tmp/vq
    python benchmarks/variational.py --which betabinom,probit,ica --seed 0
    python benchmarks/variational.py --which logistic --draws 1000 --tune 1000 --chains 2
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shlex
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(_REPO))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks.harness import (  # noqa: E402
    DEFAULT_CACHE_DIR,
    DEFAULT_RESULTS_DIR,
    SMOKE,
    _add_speedups,
    _describe,
    _mean_acceptance,
    cost_columns,
    environment_meta,
    load_step_registry,
    log_to_stderr,
    sample_counted,
    split_names,
    write_results,
)
from pymc_surrogate.compat import posterior_dataset  # noqa: E402

_log = logging.getLogger("pymc_surrogate.benchmarks.variational")

BENCHMARKS = ("betabinom", "probit", "logistic", "ica")
VHMC = "VariationalHMC"
VHMC_FREE = "VariationalHMC:free"
#: Sampler name -> (registry class name or None, extra step kwargs).
SAMPLER_SPECS: dict[str, tuple[str | None, dict[str, Any]]] = {
    VHMC: (VHMC, {}),
    VHMC_FREE: (VHMC, {"exact": False}),
    "NUTS": (None, {}),
    "ADVI": (None, {}),
}
DEFAULT_SAMPLERS = f"{VHMC},{VHMC_FREE},NUTS,ADVI"
MACHINE_NOTE = (
    "2 shared cores: another long benchmark ran on the same machine, so seconds are noisy; "
    "compare ratios within a run and evaluation counts across runs"
)


# --------------------------------------------------------------------------- shared pieces


def _versions() -> str:
    import arviz
    import scipy

    try:
        commit = subprocess.run(
            ["git", "-C", str(_REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(_REPO), "status", "--porcelain", "--untracked-files=no", "--",
             "pymc_surrogate", "benchmarks"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        if dirty:  # other agents edit the package concurrently: say the code was not HEAD's
            commit += " + uncommitted changes in pymc_surrogate/ or benchmarks/"
    except (OSError, subprocess.CalledProcessError):
        # a `git archive` snapshot (run away from concurrent edits) carries a COMMIT file
        stamp = _REPO / "COMMIT"
        commit = stamp.read_text().strip() + " (snapshot)" if stamp.exists() else "unknown"
    return (
        f"numpy {np.__version__}, scipy {scipy.__version__}, arviz {arviz.__version__}, "
        f"pymc-surrogate commit {commit}"
    )


def _meta(args: argparse.Namespace, name: str, extra: Mapping[str, Any]) -> dict[str, str]:
    command = "python benchmarks/variational.py " + " ".join(
        shlex.quote(a) for a in args.argv
    )
    meta = {
        "command": f"`{command}` (benchmark {name!r} of this command)",
        "settings": f"draws={args.draws} tune={args.tune} chains={args.chains} cores=1 "
        f"seed={args.seed}{' (--quick)' if args.quick else ''}",
        **environment_meta(),
        "other versions": _versions(),
        "machine note": MACHINE_NOTE,
    }
    if args.vhmc_kwargs:
        meta["VariationalHMC kwargs"] = json.dumps(args.vhmc_kwargs)
    meta.update({k: str(v) for k, v in extra.items()})
    return meta


def _fmt(value: Any) -> str:
    if isinstance(value, str):
        return value.replace("|", "\\|").replace("\n", " ")
    if value is None:
        return ""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if np.isnan(v):
        return "–"
    if np.isinf(v):
        return "inf"
    if float(v).is_integer() and abs(v) < 1e9:
        return f"{int(v)}"
    return f"{v:.3g}"


def write_tables(
    out_dir: Path,
    tag: str,
    title: str,
    meta: Mapping[str, str],
    tables: Sequence[tuple[str, pd.DataFrame, Sequence[str]]],
) -> tuple[Path, Path]:
    """Write several tables as one markdown file and one CSV (a ``table`` column tells them apart).

    Parameters
    ----------
    out_dir : Path
    tag : str
        File stem.
    title : str
    meta : mapping
        Lines printed above the tables.
    tables : sequence of (heading, frame, notes)
        Notes are printed under their table.

    Returns
    -------
    csv_path, md_path : Path
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", ""]
    lines += [f"- **{k}**: {v}" for k, v in meta.items()]
    frames = []
    for heading, frame, notes in tables:
        lines += ["", f"## {heading}", ""]
        if frame.empty:
            lines.append("(no rows)")
        else:
            cols = list(frame.columns)
            lines.append("| " + " | ".join(cols) + " |")
            lines.append("|" + "|".join("---" for _ in cols) + "|")
            for _, row in frame.iterrows():
                lines.append("| " + " | ".join(_fmt(row[c]) for c in cols) + " |")
        if notes:
            lines.append("")
            lines += [f"- {n}" for n in notes]
        frames.append(frame.assign(table=heading))
    csv_path = out_dir / f"{tag}.csv"
    md_path = out_dir / f"{tag}.md"
    pd.concat(frames, ignore_index=True).to_csv(csv_path, index=False)
    md_path.write_text("\n".join(lines) + "\n")
    return csv_path, md_path


class _Capture:
    """Step factory for :func:`sample_counted` that keeps the step instance it builds."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.step: Any = None

    def __call__(self, **kwargs: Any) -> Any:
        self.step = self.cls(**kwargs)
        return self.step


def _resolve(sampler: str, registry: Mapping[str, type], vhmc_kwargs: Mapping[str, Any]):
    """(step factory or None, kwargs, error) for a sampler name of :data:`SAMPLER_SPECS`."""
    if sampler not in SAMPLER_SPECS:
        return None, {}, f"unknown sampler {sampler!r}; known: {sorted(SAMPLER_SPECS)}"
    cls_name, kwargs = SAMPLER_SPECS[sampler]
    if cls_name is None:
        return None, {}, None
    cls = registry.get(cls_name)
    if cls is None:
        return None, {}, f"{cls_name} is not in pymc_surrogate.STEP_METHODS yet"
    return _Capture(cls), {**vhmc_kwargs, **kwargs}, None


def run_sampler(
    model: Any,
    info: Any,
    sampler: str,
    registry: Mapping[str, type],
    args: argparse.Namespace,
    *,
    chains: int | None = None,
    extra_kwargs: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], Any, Any]:
    """Sample with one MCMC sampler through :func:`sample_counted`.

    Returns
    -------
    row : dict
        ``sampler``, ``status``, seconds, counts, ESS, acceptance, divergences, R-hat, note.
    idata : InferenceData or None
    step : the step instance (None for NUTS or on failure)
    """
    import arviz as az

    chains = args.chains if chains is None else chains
    row: dict[str, Any] = {"sampler": sampler, "status": "ok"}
    factory, kwargs, error = _resolve(sampler, registry, args.vhmc_kwargs)
    if error:
        row.update(status="unavailable" if "STEP_METHODS" in error else "error", note=error)
        return row, None, None
    kwargs.update(extra_kwargs or {})
    _log.info("%s / %s ...", info.name, sampler)
    try:
        run = sample_counted(
            model, info, "NUTS" if factory is None else sampler, factory,
            draws=args.draws, tune=args.tune, chains=chains, seed=args.seed,
            sampler_kwargs=kwargs, keep_warnings=factory is not None,
        )
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        row.update(status="error", note=_describe(exc))
        _log.info("%s / %s failed: %s", info.name, sampler, row["note"])
        return row, None, None
    post = posterior_dataset(run.idata)[list(info.param_names)]
    stats = posterior_dataset(run.idata, "sample_stats")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ess = min(float(np.nanmin(az.ess(post, method="bulk")[v].values)) for v in post.data_vars)
        rhat = (
            max(float(np.nanmax(az.rhat(post)[v].values)) for v in post.data_vars)
            if chains > 1 else float("nan")
        )
    t = run.timing
    row.update(
        setup_s=t["setup_s"], tune_s=t["tune_s"], draws_s=t["draws_s"], total_s=t["total_s"],
        min_ess_bulk=ess,
        ess_per_s_draws=ess / t["draws_s"] if t["draws_s"] > 0 else float("nan"),
        ess_per_s_total=ess / t["total_s"] if t["total_s"] > 0 else float("nan"),
        n_logp_draws=t["n_logp_draws"], n_grad_draws=t["n_grad_draws"],
        mean_accept=_mean_acceptance(stats), max_rhat=rhat,
    )
    row.update(cost_columns(t, stats, ess))
    if run.warnings:
        unique = list(dict.fromkeys(run.warnings))
        row["note"] = (row.get("note", "") + " warnings: " + " / ".join(unique)[:600]).strip()
    _log.info(
        "%s / %s: %.1f s, min ESS %.0f, %d+%d evals", info.name, sampler, t["total_s"], ess,
        t["n_logp"], t["n_grad"],
    )
    return row, run.idata, (factory.step if factory is not None else None)


def _draws(idata: Any, name: str) -> np.ndarray:
    """Draws of one variable as (chain, draw, *shape)."""
    return np.asarray(posterior_dataset(idata)[name].values, dtype=float)


def _blas_one_thread():
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1)


# --------------------------------------------------------------------------- 1. beta-binomial


def grid_divergences(
    surrogate: Any, ref_points: np.ndarray, ref_logp: np.ndarray, ref_grad: np.ndarray
) -> dict[str, float]:
    """KL(p || q) and the score-matching distance of a surrogate on a grid.

    Parameters
    ----------
    surrogate : object with ``value_and_grad(q) -> (V, dV/dq)`` (a potential, ``-log q``)
        or a callable returning the same.
    ref_points : ndarray, shape (n, 2)
    ref_logp : ndarray, shape (n,)
        Exact log density at the points (any constant).
    ref_grad : ndarray, shape (n, 2)
        Exact ``grad log p`` at the points.

    Returns
    -------
    dict
        ``kl``: ``sum p_i (log p_i - log q_i)`` with ``p`` and ``q`` both normalised over the
        grid cells; ``score_sq``: ``sum p_i |grad log p_i - grad log q_i|^2``;
        ``q_mass_where_p_tiny``: mass ``q`` puts on cells where ``p < 1e-12 max p``;
        ``nonfinite``: points where the surrogate was not finite.
    """
    from scipy.special import logsumexp

    fn = surrogate.value_and_grad if hasattr(surrogate, "value_and_grad") else surrogate
    values = np.empty(len(ref_points))
    grads = np.empty_like(ref_points)
    for i, q in enumerate(ref_points):
        v, g = fn(np.ascontiguousarray(q))
        values[i] = v
        grads[i] = np.asarray(g, dtype=float)[: ref_points.shape[1]]
    logq = -values
    finite = np.isfinite(logq) & np.all(np.isfinite(grads), axis=1)
    logp = ref_logp - logsumexp(ref_logp)
    p = np.exp(logp)
    if not finite.all():
        logq = np.where(finite, logq, -np.inf)
    logq = logq - logsumexp(logq)
    with np.errstate(invalid="ignore", divide="ignore"):
        kl = float(np.sum(np.where(p > 0, p * (logp - logq), 0.0)))
    diff = ref_grad - (-grads)
    score = float(np.sum(np.where(finite, p * np.sum(diff**2, axis=1), 0.0)))
    if not finite.all():
        score = float("inf") if np.any(p[~finite] > 1e-12) else score
    tiny = logp < logp.max() + np.log(1e-12)
    return {
        "kl": kl,
        "score_sq": score,
        "q_mass_where_p_tiny": float(np.exp(logq[tiny]).sum()) if tiny.any() else 0.0,
        "nonfinite": int((~finite).sum()),
    }


def _laplace_surrogate(mode: np.ndarray) -> tuple[Callable, np.ndarray]:
    """Gaussian at the exact mode with the finite-difference Hessian of the exact gradient."""
    from scipy.optimize import minimize

    from benchmarks.models.betabinomial import log_posterior

    def neg(x):
        lp, g = log_posterior(x[0], x[1])
        return -float(lp), -np.asarray(g, dtype=float)

    mode = minimize(neg, mode, jac=True, method="BFGS", options={"gtol": 1e-10}).x
    eps = 1e-5
    H = np.empty((2, 2))
    for j in range(2):
        e = np.zeros(2)
        e[j] = eps
        H[:, j] = (neg(mode + e)[1] - neg(mode - e)[1]) / (2 * eps)
    H = 0.5 * (H + H.T)

    def value_and_grad(q):
        d = np.asarray(q) - mode
        return 0.5 * d @ H @ d, H @ d

    return value_and_grad, mode


def _n_hidden(surrogate: Any) -> float:
    """Number of random nodes a fitted surrogate has (NaN if it does not say)."""
    hidden = getattr(surrogate, "hidden_", None)
    for attr in ("n_features", "n_hidden", "size"):
        value = getattr(hidden, attr, None)
        if isinstance(value, int | np.integer):
            return float(value)
    weights = getattr(hidden, "weights", None)
    return float(np.shape(weights)[0]) if weights is not None else float("nan")  # (s, d)


def bench_betabinom(args: argparse.Namespace, registry: Mapping[str, type]) -> Path:
    """Beta-binomial: posterior accuracy table and the surrogate-vs-hidden-units table."""
    import arviz as az

    from benchmarks.models.betabinomial import (
        GRID_BOX,
        PLOT_BOX,
        log_posterior,
        make_betabinomial,
    )

    model, info = make_betabinomial()
    ref = info.extra["grid_reference"]
    rows = []
    for sampler in args.samplers:
        if sampler == "ADVI":
            continue
        row, idata, _ = run_sampler(model, info, sampler, registry, args)
        if idata is not None:
            post = posterior_dataset(idata)[["x1", "x2"]]
            mcse = az.mcse(post, method="mean")
            for k, name in enumerate(("x1", "x2")):
                mean = float(post[name].mean())
                sd = float(post[name].std())
                row[f"mean_{name}"] = mean
                row[f"z_{name}"] = (mean - ref.mean[k]) / float(mcse[name])
                row[f"sd_ratio_{name}"] = sd / ref.sd[k]
        rows.append(row)
    main_cols = [
        "sampler", "status", "mean_x1", "z_x1", "sd_ratio_x1", "mean_x2", "z_x2", "sd_ratio_x2",
        "min_ess_bulk", "max_rhat", "mean_accept", "divergences", "n_logp", "n_grad",
        "n_logp_draws", "n_grad_draws", "evals_per_ess", "tune_s", "draws_s", "total_s",
        "ess_per_s_draws", "note",
    ]
    main = pd.DataFrame(rows).reindex(columns=main_cols)
    main = pd.concat(
        [pd.DataFrame([{
            "sampler": "reference (quadrature)", "status": "exact",
            "mean_x1": ref.mean[0], "sd_ratio_x1": 1.0, "mean_x2": ref.mean[1],
            "sd_ratio_x2": 1.0,
            "note": f"sd x1 {ref.sd[0]:.4f}, sd x2 {ref.sd[1]:.4f}, corr "
            f"{ref.cov[0, 1] / (ref.sd[0] * ref.sd[1]):.3f}; 1001 x 1001 grid on {GRID_BOX}, "
            f"edge mass {ref.edge_mass:.1e}",
        }]).reindex(columns=main_cols), main],
        ignore_index=True,
    )

    # --- the surrogate against the exact posterior, growing s (paper Figs. 1-2)
    n_grid = 61 if args.quick else 201
    grids = {}
    for label, box in (("plot box", PLOT_BOX), ("full box", GRID_BOX)):
        g1, g2 = np.meshgrid(
            np.linspace(box[0], box[1], n_grid), np.linspace(box[2], box[3], n_grid),
            indexing="ij",
        )
        pts = np.column_stack([g1.ravel(), g2.ravel()])
        lp, gr = log_posterior(pts[:, 0], pts[:, 1])
        grids[label] = (pts, lp, gr)
    sweep_rows = []
    laplace_vg, laplace_mode = _laplace_surrogate(ref.mode)
    for label, (pts, lp, gr) in grids.items():
        d = grid_divergences(laplace_vg, pts, lp, gr)
        sweep_rows.append({"surrogate": "Laplace (exact mode and Hessian)", "grid": label, **d})
    sweep_sampler = args.surrogate_sampler
    configs = [
        (s, quad) for quad in args.sweep_quadratic for s in args.hidden
    ]
    for s, quad in configs:
        extra = {"n_hidden": s}
        if quad != "default":
            extra["quadratic"] = quad
        base = {"surrogate": f"{sweep_sampler} n_hidden={s}"
                + (f" quadratic={quad}" if quad != "default" else "")}
        row, idata, step = run_sampler(
            model, info, sweep_sampler, registry, args, chains=1, extra_kwargs=extra,
        )
        if row["status"] != "ok":
            sweep_rows.append({**base, "status": row["status"], "note": row.get("note", "")})
            continue
        surrogate = getattr(getattr(step, "chain", None), "surrogate", None)
        if surrogate is None:
            sweep_rows.append({**base, "status": "error", "note": "step.chain.surrogate is None"})
            continue
        x = np.column_stack([_draws(idata, "x1").ravel(), _draws(idata, "x2").ravel()])
        for label, (pts, lp, gr) in grids.items():
            t0 = time.perf_counter()
            d = grid_divergences(surrogate, pts, lp, gr)
            sweep_rows.append({
                **base, "grid": label, "status": "ok", **d,
                "chain_mean_x1": x[:, 0].mean(), "chain_mean_x2": x[:, 1].mean(),
                "mean_accept": row["mean_accept"], "n_logp": row["n_logp"],
                "n_grad": row["n_grad"], "total_s": row["total_s"],
                "grid_eval_s": time.perf_counter() - t0,
                "laplace_weight": 1.0 - float(getattr(surrogate, "mu_", np.nan)),
                "n_hidden_fitted": _n_hidden(surrogate),
                "surrogate_type": type(surrogate).__name__, "note": row.get("note", ""),
            })
    sweep_cols = [
        "surrogate", "grid", "status", "kl", "score_sq", "q_mass_where_p_tiny", "nonfinite",
        "laplace_weight", "n_hidden_fitted", "chain_mean_x1", "chain_mean_x2", "mean_accept",
        "n_logp", "n_grad", "total_s", "grid_eval_s", "surrogate_type", "note",
    ]
    sweep = pd.DataFrame(sweep_rows).reindex(columns=sweep_cols)
    meta = _meta(args, "betabinom", {
        "model": info.description,
        "data": "LearnBayes cancermortality, verbatim (y = 0 0 2 0 1 1 0 2 1 3 0 1 1 1 54 0 0 1 3 "
        "0; n = 1083 855 3461 657 1208 1025 527 1668 583 582 917 857 680 917 53637 874 395 "
        "581 588 383), found in public ports of LearnBayes' examples",
        "parameterisation": "x2 = log K, as LearnBayes' betabinexch; the paper's 'x2 = logit(K)' "
        "is read as a typo (K > 0 is not a probability)",
        "reference": f"quadrature on a 1001 x 1001 grid over {GRID_BOX}: mean "
        f"({ref.mean[0]:.4f}, {ref.mean[1]:.4f}), sd ({ref.sd[0]:.4f}, {ref.sd[1]:.4f})",
        "initial point": "(x1, x2) = (-7, 6), LearnBayes' laplace() start; NUTS adds its jitter",
    })
    notes_main = [
        "z_*: (chain mean - quadrature mean) / MCSE (ArviZ, pooled chains): ~N(0, 1) for a "
        "correct sampler; sd_ratio_*: posterior sd / quadrature sd.",
        "n_logp / n_grad: model forward / gradient evaluations counted in-process, tune and "
        "initialisation included; *_draws: draws only; evals_per_ess = (n_logp + n_grad) / "
        "min bulk ESS. Seconds: tune_s / draws_s per phase, total_s incl. setup.",
        "VariationalHMC:free is exact=False: Metropolis on the surrogate's own energy after "
        "tuning, so its draws target the surrogate, not the posterior (z and sd ratios then "
        "measure the surrogate's bias).",
    ]
    notes_sweep = [
        f"Each {sweep_sampler} row: one chain (chains=1, cores=1, tune={args.tune}, "
        f"draws={args.draws}, seed={args.seed}); the surrogate is `step.chain.surrogate` after "
        "sampling, evaluated with value_and_grad(q) at q = (x1, x2).",
        f"Grids: {n_grid} x {n_grid} points; 'plot box' = {PLOT_BOX} (LearnBayes' contour box, "
        f"where the mass is), 'full box' = {GRID_BOX} (mass outside < 1e-10). p and q = "
        "exp(-V) are both normalised over the grid's cells.",
        "kl = sum_i p_i (log p_i - log q_i); score_sq = sum_i p_i |grad log p(x_i) - grad log "
        "q(x_i)|^2 (the paper's score-matching squared distance, Fig. 2); q_mass_where_p_tiny: "
        "mass q gives to cells where p < 1e-12 max p (surrogate mass in the wrong place); "
        "laplace_weight: 1 - mu_t of the fitted surrogate (weight of the Laplace term left); "
        "n_hidden_fitted: random nodes the fitted surrogate has.",
        "The Laplace rows (Gaussian at the exact mode, finite-difference Hessian of the exact "
        "gradient) are the vhmc regulariser alone: a surrogate should beat them.",
        "'quadratic=none' rows: the step's surrogate without its quadratic base in whitened "
        "coordinates, i.e. the paper's network of s softplus nodes (plus the Laplace blend "
        "mu_t, as the paper); rows without it use the step's default base (full quadratic in "
        "d = 2).",
    ]
    _, md = write_tables(
        args.out, f"variational_betabinom{args.tag_suffix}",
        "vhmc §4.1 beta-binomial overdispersion (cancermortality)", meta,
        [("Samplers against the quadrature reference", main, notes_main),
         ("Surrogate against the exact posterior, growing hidden units (paper Figs. 1-2)",
          sweep, notes_sweep)],
    )
    return md


# --------------------------------------------------------------------------- 2. probit


def _fingerprint(model: Any) -> float:
    return float(model.compile_logp()(model.initial_point()))


def _ess_rhat(x: np.ndarray) -> tuple[float, float]:
    """Minimum bulk ESS and maximum R-hat over the entries of draws ``(chain, draw, ...)``."""
    import arviz as az

    ds = az.convert_to_dataset({"v": x})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ess = float(np.nanmin(az.ess(ds, method="bulk")["v"].values))
        rhat = float(np.nanmax(az.rhat(ds)["v"].values)) if x.shape[0] > 1 else float("nan")
    return ess, rhat


_CACHE_VERSION = 2


def long_nuts_reference(
    model: Any, name: str, var: str, *, draws: int, tune: int, chains: int, seed: int,
    cache_dir: Path, align: Callable[[np.ndarray], np.ndarray] | None = None,
) -> dict[str, Any]:
    """Mean, covariance and per-chain means of a long NUTS run (``target_accept=0.9``),
    cached as JSON and invalidated when the model's logp at its initial point changes.

    ``align`` maps the draws ``(chain, draw, ...)`` to draws whose chains share one mode
    (ICA's signed row permutations) before any statistic is taken.
    """
    import pymc as pm

    fingerprint = _fingerprint(model)
    path = cache_dir / f"variational_{name}_{chains}x{draws}.json"
    if path.exists():
        try:
            cached = json.loads(path.read_text())
            if cached.get("version") == _CACHE_VERSION and abs(
                cached["fingerprint"] - fingerprint
            ) <= 1e-6 * max(1.0, abs(fingerprint)):
                cached["source"] = f"cache {path.name}"
                return cached
        except (OSError, ValueError, KeyError):
            pass
    _log.info("long NUTS reference for %s (%d x %d)", name, chains, draws)
    t0 = time.perf_counter()
    with model:
        idata = pm.sample(
            draws=draws, tune=tune, chains=chains, cores=1, random_seed=seed,
            target_accept=0.9, progressbar=False, quiet=True, compute_convergence_checks=False,
        )
    seconds = time.perf_counter() - t0
    x = _draws(idata, var)
    if align is not None:
        x = align(x)
    flat = x.reshape(x.shape[0] * x.shape[1], -1)
    ess, rhat = _ess_rhat(x)
    payload = {
        "version": _CACHE_VERSION,
        "fingerprint": fingerprint,
        "settings": {"draws": draws, "tune": tune, "chains": chains, "seed": seed,
                     "target_accept": 0.9, "aligned": align is not None},
        "seconds": seconds,
        "min_ess_bulk": ess,
        "max_rhat": rhat,
        "mean": flat.mean(axis=0).tolist(),
        "cov": np.cov(flat, rowvar=False).tolist(),
        "chain_means": x.mean(axis=1).reshape(x.shape[0], -1).tolist(),
        "shape": list(x.shape[2:]),
    }
    cache_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1))
    payload["source"] = f"computed now, cached in {path.name}"
    return payload


class WallBudget:
    """``pm.fit`` callback: stop after ``seconds`` of iterations.

    The clock starts at the first iteration's callback, so compilation is not in the budget
    (as NUTS's budget, tune + draw seconds, leaves out its setup); ``start`` is when that was.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = float(seconds)
        self.start: float | None = None
        self.iterations = 0

    def __call__(self, approx: Any, losses: Any, i: int) -> None:
        self.iterations = i
        now = time.perf_counter()
        if self.start is None:
            self.start = now
        elif now - self.start > self.seconds:
            raise StopIteration(f"wall budget of {self.seconds:.1f} s reached at iteration {i}")


def run_advi(
    model: Any, info: Any, args: argparse.Namespace, budget_s: float, max_iter: int
) -> tuple[dict[str, Any], np.ndarray | None]:
    """Full-rank ADVI for ``budget_s`` wall seconds (compilation included), then draws."""
    import pymc as pm

    row: dict[str, Any] = {"sampler": "ADVI", "status": "ok"}
    c0 = info.counter.snapshot()
    t0 = time.perf_counter()
    try:
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            budget = WallBudget(budget_s)
            approx = pm.fit(
                n=max_iter, method="fullrank_advi", random_seed=args.seed, progressbar=False,
                callbacks=[budget],
            )
            t_fit = time.perf_counter()
            idata = approx.sample(args.draws * args.chains, random_seed=args.seed)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        row.update(status="error", note=_describe(exc))
        return row, None
    t_end = time.perf_counter()
    c1 = info.counter.snapshot()
    hist = np.asarray(approx.hist, dtype=float)
    tail = hist[-min(len(hist), 500):]
    start = budget.start if budget.start is not None else t_fit
    row.update(
        setup_s=start - t0, fit_s=t_fit - start, draws_s=t_end - t_fit, total_s=t_end - t0,
        n_logp=c1[0] - c0[0], n_grad=c1[1] - c0[1],
        note=f"full-rank ADVI (pm.fit defaults: adagrad_window, 1 MC sample per step), "
        f"{budget.iterations} iterations in fit_s (budget {budget_s:.1f} s, cap {max_iter}); "
        f"mean -ELBO over the last {len(tail)} steps {np.nanmean(tail):.1f}; then "
        f"{args.draws * args.chains} draws from the approximation (draws_s)",
    )
    return row, _draws(idata, "theta")


def bench_probit(args: argparse.Namespace, registry: Mapping[str, type]) -> Path:
    """Probit: RMSE to the truth and covariance error against a long NUTS run."""
    from benchmarks.models.probit import make_probit_regression

    model, info = make_probit_regression()
    theta_true = info.extra["theta_true"]
    ref_draws, ref_chains = (1000, 2) if args.quick else (5000, 4)
    ref = long_nuts_reference(
        model, "probit", "theta", draws=ref_draws, tune=1000, chains=ref_chains, seed=20240601,
        cache_dir=args.cache,
    )
    ref_mean, ref_cov = np.asarray(ref["mean"]), np.asarray(ref["cov"])
    ref_sd = np.sqrt(np.diag(ref_cov))

    def metrics(x: np.ndarray) -> dict[str, float]:
        flat = x.reshape(-1, x.shape[-1])
        mean, cov = flat.mean(axis=0), np.cov(flat, rowvar=False)
        return {
            "rmse_truth": float(np.sqrt(np.mean((mean - theta_true) ** 2))),
            "max_mean_err_ref_sd": float(np.max(np.abs(mean - ref_mean) / ref_sd)),
            "cov_rel_frobenius": float(np.linalg.norm(cov - ref_cov) / np.linalg.norm(ref_cov)),
            "sd_ratio_min": float(np.min(np.sqrt(np.diag(cov)) / ref_sd)),
            "sd_ratio_max": float(np.max(np.sqrt(np.diag(cov)) / ref_sd)),
        }

    rows: list[dict[str, Any]] = [{
        "sampler": "reference (long NUTS)", "status": "ok",
        "rmse_truth": float(np.sqrt(np.mean((ref_mean - theta_true) ** 2))),
        "max_mean_err_ref_sd": 0.0, "cov_rel_frobenius": 0.0, "sd_ratio_min": 1.0,
        "sd_ratio_max": 1.0, "min_ess_bulk": ref["min_ess_bulk"], "max_rhat": ref["max_rhat"],
        "total_s": ref.get("seconds", float("nan")),
        "note": f"{ref_chains} x {ref_draws} draws (+1000 tune), target_accept 0.9, "
        f"{ref['source']}",
    }]
    nuts_total = None
    # ADVI last: its budget is NUTS's time in this run
    order = [s for s in args.samplers if s != "ADVI"]
    order += ["ADVI"] if "ADVI" in args.samplers else []
    for sampler in order:
        if sampler == "ADVI":
            if args.advi_seconds is not None:
                budget, why = args.advi_seconds, "--advi-seconds"
            elif nuts_total is not None:
                budget, why = nuts_total, "NUTS's tune + draw seconds in this run"
            else:
                budget, why = 30.0, "default (NUTS did not run)"
            row, x = run_advi(model, info, args, budget, max_iter=args.advi_max_iter)
            row["note"] = f"budget = {why}; " + row.get("note", "")
            if x is not None:
                row.update(metrics(x))
            rows.append(row)
            if args.advi_long_iter:
                # the same ADVI run much longer: what the approximation itself is worth
                row, x = run_advi(model, info, args, float("inf"), max_iter=args.advi_long_iter)
                row["sampler"] = f"ADVI ({args.advi_long_iter} iterations)"
                row["note"] = "not wall-matched: fixed iterations; " + row.get("note", "")
            else:
                continue
        else:
            row, idata, _ = run_sampler(model, info, sampler, registry, args)
            x = _draws(idata, "theta") if idata is not None else None
            if sampler == "NUTS" and row["status"] == "ok":
                nuts_total = row["tune_s"] + row["draws_s"]
        if x is not None:
            row.update(metrics(x))
        rows.append(row)
    cols = [
        "sampler", "status", "rmse_truth", "max_mean_err_ref_sd", "cov_rel_frobenius",
        "sd_ratio_min", "sd_ratio_max", "setup_s", "tune_s", "fit_s", "draws_s", "total_s",
        "min_ess_bulk",
        "max_rhat", "mean_accept", "divergences", "n_logp", "n_grad", "n_logp_draws",
        "n_grad_draws", "evals_per_ess", "note",
    ]
    frame = pd.DataFrame(rows).reindex(columns=cols)
    meta = _meta(args, "probit", {
        "model": info.description,
        "true theta": np.array2string(theta_true, precision=4),
        "matched wall time": "the MCMC samplers all run the same draws/tune; ADVI (full-rank, "
        "pm.fit defaults) iterates until its iteration seconds (fit_s, from the first "
        "iteration: compilation excluded, in setup_s) reach NUTS's tune + draw seconds in this "
        "run (compilation excluded there too), stopped by a wall-clock callback, then takes "
        "draws x chains draws from the approximation (draws_s)",
    })
    notes = [
        "rmse_truth: sqrt(mean_i (posterior mean_i - theta_true_i)^2) (the paper's Fig. 3 "
        "measure; the reference row is its floor: the posterior mean is not the truth).",
        "max_mean_err_ref_sd: max_i |mean_i - ref mean_i| / ref sd_i; cov_rel_frobenius: "
        "||C - C_ref||_F / ||C_ref||_F with C the pooled draws' covariance; sd_ratio_*: "
        "min / max of sd_i / ref sd_i.",
        "Counts are in-process (cores=1); ADVI's are its compiled objective's evaluations "
        "(logp and gradient, one Monte Carlo sample a step).",
    ]
    _, md = write_tables(
        args.out, f"variational_probit{args.tag_suffix}",
        "vhmc §4.2 probit regression (N = 10^4, d = 5)", meta,
        [("Posterior accuracy at (roughly) matched wall time", frame, notes)],
    )
    return md


# --------------------------------------------------------------------------- 3. logistic


def bench_logistic(args: argparse.Namespace, registry: Mapping[str, type]) -> Path:
    """Logistic regression through the harness (one call per VariationalHMC mode)."""
    from benchmarks.harness import run_benchmark

    size = "smoke" if args.quick else "paper"
    ref = (
        {k: SMOKE[k] for k in ("ref_draws", "ref_tune", "ref_chains")} if args.quick else {}
    )
    tag = f"variational_logistic{args.tag_suffix}"
    runs: list[tuple[list[str], dict, str | None]] = []
    plain = [s for s in args.samplers if s in (VHMC, "NUTS")]
    # NUTS last: the harness runs samplers in the order given.
    plain.sort(key=lambda s: s == "NUTS")
    if plain:
        runs.append((plain, {VHMC: dict(args.vhmc_kwargs)} if VHMC in plain else {}, None))
    if VHMC_FREE in args.samplers:
        runs.append(([VHMC], {VHMC: {**args.vhmc_kwargs, "exact": False}}, VHMC_FREE))
    rows: list[dict[str, Any]] = []
    for samplers, kwargs, rename in runs:
        if VHMC in samplers and VHMC not in registry:
            rows.append({
                "model": "logistic", "size": size, "sampler": rename or VHMC,
                "status": "unavailable",
                "note": f"{VHMC} is not in pymc_surrogate.STEP_METHODS yet",
            })
            samplers = [s for s in samplers if s != VHMC]
            if not samplers:
                continue
        frame = run_benchmark(
            ["logistic"], samplers, draws=args.draws, tune=args.tune, chains=args.chains,
            size=size, seed=args.seed, out_dir=args.out, tag=tag, cache_dir=args.cache,
            sampler_kwargs=kwargs, **ref,
        )
        new = frame.to_dict("records")
        if rename:
            for r in new:
                if r["sampler"] == VHMC:
                    r["sampler"] = rename
        rows.extend(new)
    full = [{"ess_per_s_draws": float("nan"), **r} for r in rows]
    _add_speedups(full)
    sampler_arg = ",".join(s for s in args.samplers if s != "ADVI")
    meta = _meta(args, "logistic", {
        "equivalent harness command": "`python benchmarks/run.py --models logistic --size "
        f"{size} --samplers VariationalHMC,NUTS --draws {args.draws} --tune {args.tune} "
        f"--chains {args.chains} --seed {args.seed}` (plus, for exact=False, "
        "`--samplers VariationalHMC --sampler-kwargs '{\"VariationalHMC\": {\"exact\": false}}'`)",
        "samplers": sampler_arg,
        "reference runs": "harness NUTS reference cached in benchmarks/cache/ "
        f"(logistic_{size}.json); mean_err / sd_err / mean_err_mcse against it",
        "speedups": "ess_per_s_* / NUTS's in the same process (both harness calls)",
    })
    _, md = write_results(full, args.out, tag, meta)
    return md


# --------------------------------------------------------------------------- 4. ICA


def _checkpoints(n: int) -> list[int]:
    ks = sorted({int(round(v)) for v in np.geomspace(1, n, 12)} | {n})
    return [k for k in ks if 1 <= k <= n]


def bench_ica(args: argparse.Namespace, registry: Mapping[str, type]) -> Path:
    """ICA: Amari distance of the running posterior mean over wall time, per chain."""
    from benchmarks.models.ica import align_rows, amari_distance, make_ica

    model, info = make_ica()
    W0 = info.extra["W0"]

    def align_to(x: np.ndarray, target: np.ndarray) -> np.ndarray:
        """Each chain's draws (chain, draw, k, k) in the signed row order of ``target``."""
        out = np.empty_like(x)
        for c in range(x.shape[0]):
            order, signs = align_rows(x[c].mean(axis=0), target)
            out[c] = signs[:, None] * x[c][:, order, :]
        return out

    ref_draws, ref_chains = (500, 2) if args.quick else (2000, 2)
    ref = long_nuts_reference(
        model, "ica", "W", draws=ref_draws, tune=1000, chains=ref_chains, seed=20240601,
        cache_dir=args.cache, align=lambda x: align_to(x, x[0].mean(axis=0)),
    )
    ref_chain_means = [np.asarray(m).reshape(W0.shape) for m in ref["chain_means"]]
    W_ref = ref_chain_means[0]
    ref_spread = max(amari_distance(m, W_ref) for m in ref_chain_means)
    summary: list[dict[str, Any]] = [{
        "sampler": "reference (long NUTS)", "status": "ok",
        "amari_true_final": amari_distance(W_ref, W0), "amari_ref_final": 0.0,
        "min_ess_bulk": ref["min_ess_bulk"], "max_rhat": ref["max_rhat"],
        "total_s": ref.get("seconds", float("nan")),
        "note": f"{ref_chains} x {ref_draws} draws (+1000 tune), target_accept 0.9, "
        f"{ref['source']}; chain 0's mean is W_ref; largest Amari distance between its "
        f"chains' means {ref_spread:.2e}",
    }]
    curves: list[dict[str, Any]] = []
    for sampler in args.samplers:
        if sampler == "ADVI":
            continue
        row, idata, _ = run_sampler(model, info, sampler, registry, args)
        if idata is not None:
            W = _draws(idata, "W")  # (chain, draw, k, k)
            n_chains, n_draws = W.shape[:2]
            ess_raw = row["min_ess_bulk"]
            aligned = align_to(W, W_ref)
            ess, rhat = _ess_rhat(aligned)
            mean_err = np.abs(aligned.mean(axis=(0, 1)) - W_ref) / np.sqrt(
                np.diag(np.asarray(ref["cov"]))
            ).reshape(W0.shape)
            row.update(
                min_ess_bulk=ess, max_rhat=rhat, min_ess_bulk_unaligned=ess_raw,
                ess_per_s_draws=ess / row["draws_s"] if row["draws_s"] > 0 else float("nan"),
                evals_per_ess=(row["n_logp"] + row["n_grad"]) / ess if ess > 0 else float("inf"),
                max_mean_err_ref_sd=float(mean_err.max()),
            )
            start_s = (row["setup_s"] + row["tune_s"]) / n_chains
            per_draw_s = row["draws_s"] / (n_chains * n_draws)
            finals_true, finals_ref = [], []
            for c in range(n_chains):
                running = np.cumsum(W[c], axis=0)
                for k in _checkpoints(n_draws):
                    mean = running[k - 1] / k
                    curves.append({
                        "sampler": sampler, "chain": c, "draws": k,
                        "wall_s": start_s + k * per_draw_s,
                        "amari_true": amari_distance(mean, W0),
                        "amari_ref": amari_distance(mean, W_ref),
                    })
                finals_true.append(curves[-1]["amari_true"])
                finals_ref.append(curves[-1]["amari_ref"])
            row.update(
                amari_true_final=float(np.median(finals_true)),
                amari_ref_final=float(np.median(finals_ref)),
                amari_ref_final_max=float(np.max(finals_ref)),
                wall_per_chain_s=start_s + n_draws * per_draw_s,
            )
        summary.append(row)
    cols = [
        "sampler", "status", "amari_true_final", "amari_ref_final", "amari_ref_final_max",
        "max_mean_err_ref_sd", "wall_per_chain_s", "min_ess_bulk", "min_ess_bulk_unaligned",
        "max_rhat", "mean_accept", "divergences", "n_logp",
        "n_grad", "n_logp_draws", "n_grad_draws", "evals_per_ess", "setup_s", "tune_s",
        "draws_s", "total_s", "ess_per_s_draws", "note",
    ]
    frame = pd.DataFrame(summary).reindex(columns=cols)
    curve_frame = pd.DataFrame(curves).reindex(
        columns=["sampler", "chain", "draws", "wall_s", "amari_true", "amari_ref"]
    )
    meta = _meta(args, "ica", {
        "model": info.description,
        "true unmixing matrix": "W0 = A^-1 of the simulated mixing matrix (data seed 0)",
    })
    notes = [
        "Amari distance (Amari, Cichocki & Yang 1996), normalised to [0, 1] by 2k(k-1); "
        "invariant to row permutation and scaling, so the posterior's 2^5 5! equivalent modes "
        "do not matter; each chain's own posterior mean is used (chains may sit in different "
        "modes, so pooled means would be meaningless).",
        "amari_true: against W0 = A^-1; it cannot reach 0 (N = 5000 data: the posterior mean "
        "is not W0; the reference row gives that floor). amari_ref: against the long NUTS "
        "run's chain-0 mean (the paper's measure). *_final: median over chains after all "
        "draws; amari_ref_final_max: worst chain.",
        "wall_per_chain_s: (setup + tune) / chains + draws x seconds per draw; chains run one "
        "after the other (cores=1).",
        "min_ess_bulk, max_rhat, evals_per_ess, ess_per_s_draws and max_mean_err_ref_sd (max "
        "|mean - W_ref| / reference sd over the 25 entries) use each chain's draws mapped to "
        "W_ref's mode (the signed row permutation closest to it, benchmarks.models.ica."
        "align_rows); min_ess_bulk_unaligned is ArviZ's on the raw draws (chains in different "
        "modes make it and R-hat meaningless).",
    ]
    curve_notes = [
        "Running posterior mean of each chain after `draws` draws; wall_s = that chain's share "
        "of setup + tune, plus draws x (draw seconds / all draws): the per-draw time is taken "
        "as uniform within the draw phase (the harness times phases, not single draws).",
    ]
    _, md = write_tables(
        args.out, f"variational_ica{args.tag_suffix}",
        "vhmc §4.4 ICA (simulated, 5 sources, 25 parameters)", meta,
        [("Summary", frame, notes), ("Amari distance over wall time", curve_frame, curve_notes)],
    )
    return md


# --------------------------------------------------------------------------- command line

RUNNERS: dict[str, Callable[[argparse.Namespace, Mapping[str, type]], Path]] = {
    "betabinom": bench_betabinom,
    "probit": bench_probit,
    "logistic": bench_logistic,
    "ica": bench_ica,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line; ``--quick`` fills unset sizes with small ones."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--which", default=",".join(BENCHMARKS), help="comma-separated benchmarks")
    p.add_argument("--samplers", default=DEFAULT_SAMPLERS, help="comma-separated sampler names")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (data seeds are fixed)")
    p.add_argument("--draws", type=int)
    p.add_argument("--tune", type=int)
    p.add_argument("--chains", type=int)
    p.add_argument("--out", type=Path, default=DEFAULT_RESULTS_DIR, help="results directory")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE_DIR, help="reference cache dir")
    p.add_argument("--quick", action="store_true", help="short runs, to check the script works")
    p.add_argument("--hidden", default=None, help="hidden units of the surrogate sweep")
    p.add_argument(
        "--surrogate-sampler", default=VHMC,
        help="step class of the beta-binomial surrogate sweep (a registry name)",
    )
    p.add_argument(
        "--vhmc-kwargs", type=json.loads, default={},
        help='JSON: extra VariationalHMC kwargs, e.g. \'{"tau": 200}\'',
    )
    p.add_argument(
        "--sweep-quadratic", default="default,none",
        help="surrogate sweep: 'default' (the step's own quadratic base) and/or values of "
        "the step's `quadratic` ('none': the paper's network of s nodes alone)",
    )
    p.add_argument("--advi-seconds", type=float, help="ADVI wall budget (default: NUTS's)")
    p.add_argument("--advi-max-iter", type=int, default=200_000)
    p.add_argument(
        "--advi-long-iter", type=int,
        help="iterations of a second, unmatched ADVI row (default 50000; --quick 5000; 0: none)",
    )
    p.add_argument("--tag-suffix", default="", help="appended to the results file stems")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    quick = {"draws": 100, "tune": 200, "chains": 2}
    full = {"draws": 1000, "tune": 1000, "chains": 2}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    hidden = args.hidden or ("5,20" if args.quick else "5,10,20,50,100")
    args.hidden = [int(h) for h in split_names(hidden)]
    if args.advi_long_iter is None:
        args.advi_long_iter = 5000 if args.quick else 50_000
    args.which = split_names(args.which)
    args.sweep_quadratic = split_names(args.sweep_quadratic)
    args.samplers = split_names(args.samplers)
    unknown = [w for w in args.which if w not in RUNNERS]
    if unknown:
        p.error(f"unknown benchmark(s) {unknown}; known: {list(RUNNERS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the requested benchmarks; returns the exit code (1 if one of them failed)."""
    args = parse_args(argv)
    # this module's logger is a child of the harness's: one handler prints both
    log_to_stderr(logging.getLogger("pymc_surrogate.benchmarks"), "bench")
    registry, registry_error = load_step_registry()
    if registry_error or VHMC not in registry:
        _log.info("%s not available: %s", VHMC, registry_error or "not in STEP_METHODS")
    if args.surrogate_sampler != VHMC:
        # the sweep may use another registry class as a stand-in (testing the script)
        SAMPLER_SPECS.setdefault(args.surrogate_sampler, (args.surrogate_sampler, {}))
    status = 0
    with _blas_one_thread():
        for name in args.which:
            t0 = time.perf_counter()
            try:
                md = RUNNERS[name](args, registry)
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                _log.info("benchmark %s failed: %s", name, _describe(exc))
                status = 1
                continue
            _log.info("%s done in %.0f s: %s", name, time.perf_counter() - t0, md)
    return status


if __name__ == "__main__":
    sys.exit(main())
