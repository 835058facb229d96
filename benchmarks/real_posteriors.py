"""Real posteriors (posteriordb): every registered posterior x every requested sampler.

Runs each posterior of :mod:`benchmarks.posteriordb` with each sampler (``pm.sample``,
``cores=1``, the same draws, tune, chains and seed for all), compares the draws with the
posterior's vendored posteriordb reference summary, and writes one markdown table and one CSV
with a row per (posterior, sampler), plus ``<tag>_parameters.csv`` with every scalar
parameter's figures (mean, reference mean, MCSE, z, sd ratio, 1/2.5/5/95/97.5/99 % tail
shares, ESS, R-hat)::

    python benchmarks/real_posteriors.py                       # everything, 4 chains x 1000
    python benchmarks/real_posteriors.py --short               # three cheap posteriors, tiny
    python benchmarks/real_posteriors.py --posteriors arma-arma11,kilpisjarvi_mod-kilpisjarvi \\
        --samplers NUTS,SurrogateHMC --draws 2000 --tune 1000 --chains 4 --seed 1
    python benchmarks/real_posteriors.py --list                # posteriors and samplers

Samplers: ``NUTS`` (PyMC's default path, ``init="jitter+adapt_diag"``), ``DEMetropolisZ``,
``Slice`` and every class of ``pymc_surrogate.STEP_METHODS``; the default is
SurrogateHMC, AdaptiveSurrogateHMC and NUTS.  On a posterior without a gradient (black-box
ODE), samplers that need one (NUTS) are skipped and ``DEMetropolisZ`` is added.

Columns and formulas (``x`` are this run's pooled draws of one scalar parameter, ``ref`` the
reference summary computed from posteriordb's 10 000 reference draws):

* ``max_abs_z``: max over parameters of ``|mean(x) - ref mean| / MCSE``, MCSE the Monte Carlo
  standard error of this run's mean (``az.mcse(method="mean")``).  The reference's own MCSE
  (about ``ref sd / 100``) is left out; it inflates ``|z|`` by ``sqrt(1 + ESS / 10 000)``
  at most (1.2 at ESS 4 000).  ``z_at`` names the parameter.
* ``sd_ratio_min`` / ``sd_ratio_max``: min / max over parameters of ``sd(x) / ref sd``.
* Tail shares: per parameter the pooled shares ``mean(x < ref q025)`` and
  ``mean(x > ref q975)``, each 2.5 % under the reference (``TAIL_P``).  ``tail_worst`` is
  the share furthest from 2.5 % (``tail_at``: where), ``tails_ok`` whether every one of
  these ``2 * dim`` shares lies in the two-sided binomial band
  ``[F^-1(0.0005) / n, F^-1(0.9995) / n]``, ``F`` the Binomial(n, 0.025) CDF and
  ``n = floor(min_ess_tail)`` (the minimum tail ESS over parameters, a conservative number
  of independent draws); ``tail_band`` prints the band.  ``TAIL_LEVEL`` = 99.9 % is the
  level of the band for one share (at least 99.9 %: the binomial is discrete), not of the
  family: the band is not corrected for the number of shares, so the family level over a
  row's ``2 * dim`` shares is only at least ``1 - 2 * dim * 0.001`` (Bonferroni; 98 % at
  ``dim = 10``).  A reference without the 2.5 / 97.5 % quantiles (posteriordb has summary
  statistics but no draws) gives ``tails_ok = n/a``, which does not make a row wrong.  The
  reference quantiles' own error (sd of the share about 0.0016 with 10 000 reference
  draws) is left out.  The 1/5/95/99 % shares (``below_q01``, ``below_q05``,
  ``above_q95``, ``above_q99``) are reported in ``<tag>_parameters.csv`` only; they do not
  enter ``tails_ok``.
* ``min_ess_bulk`` / ``min_ess_tail`` / ``max_rhat``: ArviZ's bulk and tail ESS and rank
  R-hat over all parameters.
* ``n_logp`` / ``n_grad``: likelihood evaluations counted by the model's counting Op
  (:mod:`benchmarks.models.counting`), everything included (initialisation, tune, draws);
  ``evals_per_ess = (n_logp + n_grad) / min_ess_bulk``.
* ``wall_s``: seconds for the whole ``pm.sample`` call, step construction included.
* ``divergences``: sum of the ``diverging`` stat over the draws (blank if none is recorded).
* ``far_proposals``: the chains' model evaluations, tuning included, more than 20 sds from
  every state evaluated before (the ``far_proposals`` stat; blank for PyMC's samplers).
* ``n_warnings`` / ``first_warning``: log records of the ``pymc`` logger at WARNING or above
  during the run (where PyMC logs the steps' ``warning`` stats); PyMC's own convergence
  checks are off, so these are the samplers' warnings.
* ``status``: ``error`` if the run raised; ``wrong`` unless ``max_abs_z <= 4``,
  ``max_rhat <= 1.01`` (not checked with one chain) and ``tails_ok``; ``warned`` if right
  but with warnings or divergences; else ``ok``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import math
import os
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

# One BLAS thread before numpy loads (the runs also hold a threadpoolctl limit).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(_REPO))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks.harness import (  # noqa: E402
    DEFAULT_RESULTS_DIR,
    _blas_limit,
    _describe,
    _fmt,
    available_samplers,
    cost_columns,
    environment_meta,
    log_to_stderr,
    model_has_gradient,
    needs_gradient,
    sample_counted,
    split_names,
)
from pymc_surrogate.compat import posterior_dataset  # noqa: E402

__all__ = [
    "COLUMNS",
    "DEFAULT_SAMPLERS",
    "PARAMETER_COLUMNS",
    "RHAT_LIMIT",
    "SHORT",
    "SHORT_POSTERIORS",
    "TAIL_CHECKS",
    "TAIL_LEVEL",
    "TAIL_P",
    "Z_LIMIT",
    "classify",
    "compare_with_reference",
    "main",
    "parameter_table",
    "run_one_posterior",
    "run_real_posteriors",
    "tail_band",
    "write_tables",
]

#: Samplers run when none are named.
DEFAULT_SAMPLERS: tuple[str, ...] = ("SurrogateHMC", "AdaptiveSurrogateHMC", "NUTS")
#: The short form (``--short``): three cheap posteriors (two with a gradient, one black-box
#: ODE, so DEMetropolisZ is exercised) and small runs.
SHORT_POSTERIORS: tuple[str, ...] = (
    "arma-arma11",
    "kilpisjarvi_mod-kilpisjarvi",
    "one_comp_mm_elim_abs-one_comp_mm_elim_abs",
)
SHORT: dict[str, int] = {"draws": 200, "tune": 400, "chains": 2}
#: Default run settings.
DEFAULTS: dict[str, int] = {"draws": 1000, "tune": 1000, "chains": 4}

Z_LIMIT = 4.0
RHAT_LIMIT = 1.01
#: Expected share in each tail the status checks: below the reference's 2.5 % quantile and
#: above its 97.5 % quantile.
TAIL_P = 0.025
#: Level of the binomial band of one tail share (per share, not corrected for the
#: ``2 * dim`` shares of a row).
TAIL_LEVEL = 0.999
#: The shares ``tails_ok`` checks: (parameter-table column, reference key, label in tail_at).
TAIL_CHECKS: tuple[tuple[str, str, str], ...] = (
    ("below_q025", "q025", "<q025"),
    ("above_q975", "q975", ">q975"),
)

#: Output columns, in order.
COLUMNS: list[str] = [
    "posterior",
    "sampler",
    "status",
    "dim",
    "max_abs_z",
    "z_at",
    "sd_ratio_min",
    "sd_ratio_max",
    "tail_worst",
    "tail_at",
    "tail_band",
    "tails_ok",
    "min_ess_bulk",
    "min_ess_tail",
    "max_rhat",
    "n_logp",
    "n_grad",
    "evals_per_ess",
    "wall_s",
    "divergences",
    "far_proposals",
    "n_warnings",
    "first_warning",
    "chains",
    "tune",
    "draws",
    "note",
]

_log = logging.getLogger("pymc_surrogate.benchmarks.real_posteriors")


# ---------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------


def tail_band(n_eff: float, p: float = TAIL_P, level: float = TAIL_LEVEL) -> tuple[float, float]:
    """Central binomial band for a tail share: ``[F^-1(a/2) / n, F^-1(1 - a/2) / n]``.

    Parameters
    ----------
    n_eff : float
        Effective number of independent draws (floored; at least 1).
    p : float
        Expected share (default :data:`TAIL_P`, 2.5 %).
    level : float
        Coverage of the band for one share (``1 - a``; default :data:`TAIL_LEVEL`, 99.9 %).

    Returns
    -------
    lo, hi : float
        Shares; a share outside ``[lo, hi]`` has probability below ``1 - level`` under
        ``Binomial(n, p) / n``.
    """
    from scipy.stats import binom

    n = max(1, int(math.floor(n_eff))) if np.isfinite(n_eff) else 1
    alpha = 1.0 - level
    return float(binom.ppf(alpha / 2, n, p) / n), float(binom.ppf(1 - alpha / 2, n, p) / n)


def classify(row: Mapping[str, Any]) -> str:
    """Status of a measured row: ``"wrong"``, ``"warned"`` or ``"ok"`` (see module doc)."""
    one_chain = row.get("chains", 2) == 1  # no R-hat from one chain
    right = (
        np.isfinite(row["max_abs_z"])
        and row["max_abs_z"] <= Z_LIMIT
        and (one_chain or (np.isfinite(row["max_rhat"]) and row["max_rhat"] <= RHAT_LIMIT))
        and row["tails_ok"] in (True, "n/a")  # n/a: the reference has no q025/q975
    )
    if not right:
        return "wrong"
    divergences = row.get("divergences")
    diverged = divergences is not None and np.isfinite(divergences) and divergences > 0
    return "warned" if row.get("n_warnings", 0) or diverged else "ok"


def _entry_name(var: str, index: tuple[int, ...]) -> str:
    return var if not index else f"{var}[{','.join(str(i + 1) for i in index)}]"


#: Columns of the per-parameter table (``<tag>_parameters.csv``).
PARAMETER_COLUMNS: list[str] = [
    "posterior", "sampler", "parameter", "mean", "ref_mean", "mcse", "z", "sd", "ref_sd",
    "sd_ratio", "below_q01", "below_q025", "below_q05", "above_q95", "above_q975",
    "above_q99", "ess_bulk", "ess_tail", "rhat",
]


def parameter_table(
    posterior: Any, names: Sequence[str], ref: Mapping[str, Mapping[str, np.ndarray]],
    chains: int,
) -> list[dict[str, Any]]:
    """Per scalar parameter: this run's figures next to the reference's.

    Parameters
    ----------
    posterior : xarray.Dataset
        The run's posterior group.
    names : sequence of str
        Trace variables to compare.
    ref : mapping
        Statistic -> variable -> array, from
        :func:`benchmarks.posteriordb.reference.reference_arrays`.
    chains : int
        Number of chains (R-hat needs two).

    Returns
    -------
    list of dict
        One record per scalar entry, keys of :data:`PARAMETER_COLUMNS` but the first two
        (``z`` is signed; a tail share is NaN where the reference has no such quantile).
    """
    import arviz as az

    post = posterior[list(names)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short chains make ArviZ complain
        ess_bulk = az.ess(post, method="bulk")
        ess_tail = az.ess(post, method="tail")
        rhat = az.rhat(post) if chains > 1 else None
        mcse = az.mcse(post, method="mean")
    records: list[dict[str, Any]] = []
    for var in names:
        x = np.asarray(post[var].values, dtype=float)  # (chain, draw, *shape)
        flat = x.reshape(x.shape[0] * x.shape[1], -1)
        shape = x.shape[2:]
        mean, sd = flat.mean(axis=0), flat.std(axis=0, ddof=1)

        def per_entry(dataset: Any) -> np.ndarray:
            return np.asarray(dataset[var].values, dtype=float).reshape(-1)

        def share(stat: str, below: bool) -> np.ndarray:
            if stat not in ref:
                return np.full(flat.shape[1], np.nan)
            q = ref[stat][var].reshape(-1)
            return (flat < q).mean(axis=0) if below else (flat > q).mean(axis=0)

        se = per_entry(mcse)
        ref_mean, ref_sd = ref["mean"][var].reshape(-1), ref["sd"][var].reshape(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = (mean - ref_mean) / se
        z = np.where(np.isnan(z), np.inf, z)  # a stuck chain: MCSE 0, no estimate of error
        columns = {
            "mean": mean, "ref_mean": ref_mean, "mcse": se, "z": z, "sd": sd, "ref_sd": ref_sd,
            "sd_ratio": sd / ref_sd,
            "below_q01": share("q01", True), "below_q025": share("q025", True),
            "below_q05": share("q05", True), "above_q95": share("q95", False),
            "above_q975": share("q975", False), "above_q99": share("q99", False),
            "ess_bulk": per_entry(ess_bulk), "ess_tail": per_entry(ess_tail),
            "rhat": per_entry(rhat) if rhat is not None else np.full(flat.shape[1], np.nan),
        }
        for j in range(flat.shape[1]):
            entry = _entry_name(var, tuple(np.unravel_index(j, shape)) if shape else ())
            records.append({"parameter": entry, **{k: float(v[j]) for k, v in columns.items()}})
    return records


def compare_with_reference(
    posterior: Any, names: Sequence[str], ref: Mapping[str, Mapping[str, np.ndarray]],
    chains: int,
) -> dict[str, Any]:
    """The accuracy and convergence columns of one run.

    Parameters
    ----------
    posterior, names, ref, chains
        As in :func:`parameter_table`.

    Returns
    -------
    dict
        ``max_abs_z``, ``z_at``, ``sd_ratio_min/max``, ``tail_*`` (the 2.5 / 97.5 % shares
        of :data:`TAIL_CHECKS` against :func:`tail_band`), ``min_ess_*``, ``max_rhat``,
        ``dim``, and ``parameters``: the :func:`parameter_table` records.
    """
    records = parameter_table(posterior, names, ref, chains)
    ess_tail = min(r["ess_tail"] for r in records)
    lo, hi = tail_band(ess_tail)
    # A reference summarised without the 2.5 / 97.5 % quantiles (no draws in posteriordb, or
    # a file from before they were kept) cannot check tails.
    has_quantiles = all(ref_key in ref for _, ref_key, _ in TAIL_CHECKS)
    worst_z = max(records, key=lambda r: abs(r["z"]))
    tail_best, tail_dev, tail_at, tails_ok = float("nan"), -1.0, "", True
    for r in records if has_quantiles else []:
        for key, _, side in TAIL_CHECKS:
            if abs(r[key] - TAIL_P) > tail_dev:
                tail_best, tail_dev = r[key], abs(r[key] - TAIL_P)
                tail_at = f"{r['parameter']} {side}"
            tails_ok &= bool(lo <= r[key] <= hi)
    rhats = [r["rhat"] for r in records]
    return {
        "dim": len(records),
        "max_abs_z": abs(worst_z["z"]),
        "z_at": worst_z["parameter"],
        "sd_ratio_min": min(r["sd_ratio"] for r in records),
        "sd_ratio_max": max(r["sd_ratio"] for r in records),
        "tail_worst": tail_best,
        "tail_at": tail_at,
        "tail_band": f"[{lo:.4f}, {hi:.4f}]" if has_quantiles else "no reference q025/q975",
        "tails_ok": tails_ok if has_quantiles else "n/a",
        "min_ess_bulk": min(r["ess_bulk"] for r in records),
        "min_ess_tail": ess_tail,
        "max_rhat": float(np.nanmax(rhats)) if chains > 1 else float("nan"),
        "parameters": records,
    }


# ---------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------


def run_one_posterior(
    model: Any,
    info: Any,
    ref: Mapping[str, Mapping[str, np.ndarray]],
    sampler: str,
    step_cls: type | None,
    *,
    draws: int,
    tune: int,
    chains: int,
    seed: int,
    sampler_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Sample one posterior with one sampler and measure it (exceptions propagate).

    Parameters
    ----------
    model, info
        The posterior's model and :class:`~benchmarks.models.counting.ModelInfo`.
    ref : mapping
        Reference arrays (statistic -> variable -> array).
    sampler : str
        Name shown in the table; ``"NUTS"`` runs PyMC's default NUTS path.
    step_cls : type or None
        Step class, instantiated in the model context with ``sampler_kwargs`` (ignored for
        NUTS, whose keywords go to ``pm.sample(nuts=...)``).
    draws, tune, chains, seed : int
        ``pm.sample`` settings; always ``cores=1``.
    sampler_kwargs : mapping, optional

    Returns
    -------
    dict
        The measured columns of :data:`COLUMNS` (not ``status``).
    """
    # The sampling and the cost columns are the harness's (the same call as its run_one);
    # unlike it, this suite keeps the samplers' warnings for its table.
    run = sample_counted(
        model, info, sampler, step_cls, draws=draws, tune=tune, chains=chains, seed=seed,
        sampler_kwargs=sampler_kwargs, keep_warnings=True,
    )
    row = compare_with_reference(posterior_dataset(run.idata), list(info.param_names), ref, chains)
    stats = posterior_dataset(run.idata, "sample_stats")
    row.update(cost_columns(run.timing, stats, row["min_ess_bulk"]))
    row.update(
        wall_s=run.timing["total_s"],
        n_warnings=len(run.warnings),
        first_warning=run.warnings[0][:200] if run.warnings else "",
    )
    return row


# ---------------------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------------------


def _empty_row(posterior: str, sampler: str, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {c: float("nan") for c in COLUMNS}
    row.update(posterior=posterior, sampler=sampler, status="", note="", z_at="", tail_at="",
               tail_band="", tails_ok="", first_warning="")
    row.update(kw)
    return row


def _fmt_cell(value: Any, column: str) -> str:
    if column in ("n_warnings",) and isinstance(value, (int, float)) and np.isfinite(value):
        return f"{int(value)}"
    if column in ("max_abs_z", "sd_ratio_min", "sd_ratio_max", "max_rhat", "evals_per_ess"):
        try:
            v = float(value)
        except (TypeError, ValueError):
            return _fmt(value, column)
        if np.isfinite(v):
            return f"{v:.3f}" if column == "max_rhat" else f"{v:.3g}"
    if column == "tails_ok" and isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if column == "tail_worst" and isinstance(value, float) and np.isfinite(value):
        return f"{value:.4f}"
    if column == "wall_s" and isinstance(value, float) and np.isfinite(value):
        return f"{value:.1f}"
    return _fmt(value, column)


def write_tables(
    rows: Sequence[Mapping[str, Any]],
    out_dir: Path | str,
    tag: str,
    meta: Mapping[str, Any] | None = None,
    references: Mapping[str, str] | None = None,
) -> tuple[Path, Path]:
    """Write the rows as ``<tag>.csv`` and ``<tag>.md`` under ``out_dir``.

    Parameters
    ----------
    rows : sequence of dict
        Rows with the keys of :data:`COLUMNS`.
    out_dir : path
        Output directory (created if missing).
    tag : str
        File stem.
    meta : mapping, optional
        Run settings, listed above the table.
    references : mapping, optional
        Posterior -> reference source line, listed below the table.

    Returns
    -------
    csv_path, md_path : Path
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out_dir / f"{tag}.csv", out_dir / f"{tag}.md"
    pd.DataFrame(list(rows), columns=COLUMNS).to_csv(csv_path, index=False)
    shown = [c for c in COLUMNS if c not in ("chains", "tune", "draws", "note", "first_warning")]
    lines = [f"# Real posteriors (posteriordb): {tag}", ""]
    lines += [f"- **{k}**: {v}" for k, v in (meta or {}).items()]
    lines += [
        "",
        "| " + " | ".join(shown) + " |",
        "|" + "|".join("---" for _ in shown) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(_fmt_cell(row.get(c), c) for c in shown) + " |")
    notes = [
        (r["posterior"], r["sampler"], r.get("note") or "", r.get("first_warning") or "")
        for r in rows
        if r.get("note") or r.get("first_warning")
    ]
    if notes:
        lines += ["", "## Notes and first warnings", ""]
        for posterior, sampler, note, warning in notes:
            text = "; ".join(t for t in (note, f"first warning: {warning}" if warning else "") if t)
            lines.append(f"- **{posterior} / {sampler}**: {_fmt(text, 'note')}")
    if references:
        lines += ["", "## References", ""]
        lines += [f"- **{p}**: {src}" for p, src in references.items()]
    doc = (__doc__ or "").split("Columns and formulas", 1)[-1]
    lines += ["", "## Columns and formulas", "", "Columns and formulas" + doc.rstrip(), ""]
    md_path.write_text("\n".join(lines))
    return csv_path, md_path


def run_real_posteriors(
    posteriors: Iterable[str] | None = None,
    samplers: Iterable[str] = DEFAULT_SAMPLERS,
    *,
    draws: int = DEFAULTS["draws"],
    tune: int = DEFAULTS["tune"],
    chains: int = DEFAULTS["chains"],
    seed: int = 0,
    out_dir: Path | str | None = DEFAULT_RESULTS_DIR,
    tag: str | None = None,
    sampler_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    blas_threads: int | None = 1,
    verbose: bool = True,
) -> pd.DataFrame:
    """Run every posterior x sampler pair and tabulate the comparison with the reference.

    Parameters
    ----------
    posteriors : iterable of str, optional
        posteriordb names from :func:`benchmarks.posteriordb.posterior_names`; all if None.
    samplers : iterable of str
        Sampler names (see :func:`benchmarks.harness.available_samplers`).  On a posterior
        without a gradient, those needing one are skipped and ``DEMetropolisZ`` is added.
    draws, tune, chains, seed : int
        ``pm.sample`` settings (``cores=1``), the same for every pair.
    out_dir : path or None
        Where ``<tag>.csv`` and ``<tag>.md`` are (re)written after every row; None: nowhere.
    tag : str, optional
        File stem; default ``real_posteriors_<timestamp>``.
    sampler_kwargs : mapping, optional
        Per-sampler keyword arguments, e.g. ``{"SurrogateHMC": {"n_hidden": 200}}``.
    blas_threads : int or None
        BLAS thread limit while sampling (None leaves it alone).
    verbose : bool
        Log progress to stderr.

    Returns
    -------
    pandas.DataFrame
        One row per pair, columns :data:`COLUMNS`; ``attrs["parameters"]`` holds the
        per-parameter figures (:data:`PARAMETER_COLUMNS`), also written as
        ``<tag>_parameters.csv``.
    """
    from benchmarks import posteriordb as pdb
    from benchmarks.posteriordb.reference import load_reference, reference_arrays, variable_shapes

    if verbose:
        log_to_stderr(_log, "real")
    posteriors = list(posteriors) if posteriors is not None else pdb.posterior_names()
    requested = list(samplers)
    all_samplers, registry_error = available_samplers()
    sampler_kwargs = {k: dict(v) for k, v in (sampler_kwargs or {}).items()}
    tag = tag or f"real_posteriors_{_dt.datetime.now():%Y%m%d-%H%M%S}"
    meta = {
        "command": " ".join(sys.argv) if Path(sys.argv[0]).name == Path(__file__).name else
        f"run_real_posteriors(posteriors={posteriors}, samplers={requested})",
        "settings": f"draws={draws} tune={tune} chains={chains} cores=1 seed={seed}",
        **environment_meta(),
    }
    if sampler_kwargs:
        meta["sampler kwargs"] = json.dumps(sampler_kwargs)
    if registry_error:
        meta["step registry"] = registry_error
    if pdb.discovery_errors():
        meta["modules that failed to import"] = json.dumps(pdb.discovery_errors())
    rows: list[dict[str, Any]] = []
    parameter_rows: list[dict[str, Any]] = []
    references: dict[str, str] = {}
    base = {"chains": chains, "tune": tune, "draws": draws}

    def emit(row: dict[str, Any]) -> None:
        for record in row.pop("parameters", None) or []:
            parameter_rows.append({"posterior": row["posterior"], "sampler": row["sampler"],
                                   **record})
        rows.append(row)
        if out_dir is not None:
            write_tables(rows, out_dir, tag, meta, references)
            pd.DataFrame(parameter_rows, columns=PARAMETER_COLUMNS).to_csv(
                Path(out_dir) / f"{tag}_parameters.csv", index=False
            )

    with _blas_limit(blas_threads):
        for posterior in posteriors:
            try:
                model, info = pdb.make_model(posterior)
                reference = load_reference(posterior)
                references[posterior] = (
                    f"{reference.get('source', '?')} ({reference.get('n_draws', '?')} draws)"
                )
                ref = reference_arrays(
                    reference, variable_shapes(model, info.param_names), pdb.param_rename(posterior)
                )
                has_grad = model_has_gradient(model)
            except Exception as exc:
                emit(_empty_row(posterior, "-", status="error", note=_describe(exc), **base))
                continue
            names = list(requested)
            if not has_grad and "DEMetropolisZ" not in names:
                names.append("DEMetropolisZ")
            for sampler in names:
                step_cls = all_samplers.get(sampler)
                row = _empty_row(posterior, sampler, **base)
                if step_cls is None:
                    row.update(status="error", note=f"unknown sampler {sampler!r}")
                    emit(row)
                    continue
                if not has_grad and (sampler == "NUTS" or needs_gradient(step_cls, model)):
                    _log.info("%s / %s: skipped (needs a gradient)", posterior, sampler)
                    continue
                _log.info("%s / %s ...", posterior, sampler)
                try:
                    row.update(run_one_posterior(
                        model, info, ref, sampler, step_cls, draws=draws, tune=tune,
                        chains=chains, seed=seed, sampler_kwargs=sampler_kwargs.get(sampler),
                    ))
                    row["status"] = classify(row)
                except KeyboardInterrupt:
                    raise
                except Exception as exc:
                    row.update(status="error", note=_describe(exc))
                _log.info(
                    "%s / %s: %s, max|z| %.2f, sd ratio %.3f-%.3f, min ESS %.0f, %.1f s",
                    posterior, sampler, row["status"], row["max_abs_z"], row["sd_ratio_min"],
                    row["sd_ratio_max"], row["min_ess_bulk"], row["wall_s"],
                )
                emit(row)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame.attrs["tag"] = tag
    frame.attrs["parameters"] = pd.DataFrame(parameter_rows, columns=PARAMETER_COLUMNS)
    if out_dir is not None:
        frame.attrs["csv"] = str(Path(out_dir) / f"{tag}.csv")
        frame.attrs["md"] = str(Path(out_dir) / f"{tag}.md")
        frame.attrs["parameters_csv"] = str(Path(out_dir) / f"{tag}_parameters.csv")
    return frame


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="See the module docstring for the columns and formulas.",
    )
    parser.add_argument("--posteriors", help="comma-separated posteriordb names (default all)")
    parser.add_argument(
        "--samplers", default=",".join(DEFAULT_SAMPLERS), help="comma-separated sampler names"
    )
    parser.add_argument("--draws", type=int)
    parser.add_argument("--tune", type=int)
    parser.add_argument("--chains", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--short", action="store_true",
        help=f"short form for CI: {', '.join(SHORT_POSTERIORS)}; "
        f"draws={SHORT['draws']} tune={SHORT['tune']} chains={SHORT['chains']}",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_RESULTS_DIR, help="results directory")
    parser.add_argument("--tag", help="output file stem (default real_posteriors_<timestamp>)")
    parser.add_argument("--sampler-kwargs", help='JSON, e.g. {"SurrogateHMC": {"kernel": {"n_inner": 3}}}')
    parser.add_argument("--list", action="store_true", help="list posteriors and samplers")
    args = parser.parse_args(argv)

    from benchmarks import posteriordb as pdb

    if args.list:
        print("posteriors:", ", ".join(pdb.posterior_names()))
        for module, error in pdb.discovery_errors().items():
            print(f"  (failed to import {module}: {error})")
        print("samplers:", ", ".join(available_samplers()[0]))
        return 0
    preset = SHORT if args.short else DEFAULTS
    posteriors = split_names(args.posteriors) or None  # None: every posterior
    if posteriors is None and args.short:
        posteriors = [p for p in SHORT_POSTERIORS if p in pdb.discover()]
    frame = run_real_posteriors(
        posteriors,
        split_names(args.samplers) or list(DEFAULT_SAMPLERS),
        draws=args.draws or preset["draws"],
        tune=args.tune if args.tune is not None else preset["tune"],
        chains=args.chains or preset["chains"],
        seed=args.seed,
        out_dir=args.out,
        tag=args.tag or (
            f"real_posteriors_{'short_' if args.short else ''}{_dt.datetime.now():%Y%m%d-%H%M%S}"
        ),
        sampler_kwargs=json.loads(args.sampler_kwargs) if args.sampler_kwargs else None,
    )
    print(f"wrote {frame.attrs.get('md')} and {frame.attrs.get('csv')}")
    return 0 if not (frame["status"] == "error").any() else 1


if __name__ == "__main__":
    sys.exit(main())
