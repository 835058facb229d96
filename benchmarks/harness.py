"""Side-by-side benchmark of step methods on the package's models.

One call of :func:`run_benchmark` runs every requested model x sampler pair in the same
process, one after the other, and returns (and writes) one row per pair.  What is measured
follows GUIDE.md §5:

* **cost** -- model evaluations counted where they happen (the models' counting Op), logp
  and gradient separately, tune included, divided by the minimum bulk ESS;
* **speed** -- minimum ESS per second, draws only and tune+draws, and its ratio to a baseline
  sampler measured in the same run (NUTS, or the best gradient-free PyMC sampler on
  black-box models);
* **correctness** -- errors of the posterior mean and sd against a reference: exact where the
  model knows it, else a long NUTS run cached on disk.

Chains run sequentially (``cores=1``) so the counter, which lives in this process, sees every
evaluation.  BLAS is limited to one thread while sampling: on small shared machines numpy's and
scipy's OpenBLAS pools otherwise fight each other (a 20x20 triangular solve measured 5 ms
instead of 5 us) and timings become meaningless.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os
import platform
import subprocess
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from pymc_surrogate.compat import posterior_dataset

__all__ = [
    "COLUMNS",
    "CountedRun",
    "DEFAULTS",
    "SMOKE",
    "PYMC_SAMPLERS",
    "REFERENCE_SOURCE",
    "available_samplers",
    "load_step_registry",
    "model_has_gradient",
    "needs_gradient",
    "reference_moments",
    "cost_columns",
    "environment_meta",
    "log_to_stderr",
    "run_benchmark",
    "run_one",
    "sample_counted",
    "split_names",
    "write_results",
]

_HERE = Path(__file__).resolve().parent
DEFAULT_RESULTS_DIR = _HERE / "results"
DEFAULT_CACHE_DIR = _HERE / "cache"

#: Output columns, in order (CSV and markdown).
COLUMNS: list[str] = [
    "model",
    "size",
    "sampler",
    "status",
    "dim",
    "min_ess_bulk",
    "min_ess_tail",
    "tune_s",
    "draws_s",
    "setup_s",
    "total_s",
    "ess_per_s_draws",
    "ess_per_s_total",
    "baseline",
    "speedup_draws",
    "speedup_total",
    "n_logp",
    "n_grad",
    "n_logp_draws",
    "n_grad_draws",
    "evals_per_ess",
    "logp_evals_per_ess",
    "mean_accept",
    "divergences",
    "max_rhat",
    "mean_err",
    "sd_err",
    "mean_err_mcse",
    "ref_source",
    "chains",
    "tune",
    "draws",
    "note",
]

#: Column meanings, printed under the markdown table.
COLUMN_DOC: dict[str, str] = {
    "min_ess_bulk / min_ess_tail": "ArviZ bulk / tail ESS, minimum over all parameter entries",
    "tune_s / draws_s": "wall seconds spent in tune / draw iterations (timed per iteration)",
    "setup_s": "step construction, compilation and initialisation (total_s - tune_s - draws_s)",
    "ess_per_s_draws / ess_per_s_total": "min bulk ESS per second of draws / of tune + draws",
    "speedup_*": "ess_per_s_* divided by the baseline sampler's, same model, same run",
    "n_logp / n_grad": "model forward / gradient evaluations, everything included (tune, init)",
    "n_*_draws": "the same, during the draw iterations only",
    "evals_per_ess": "(n_logp + n_grad) / min_ess_bulk; logp_evals_per_ess: n_logp / min_ess_bulk",
    "mean_accept": "NUTS: mean acceptance_rate; MH-type: fraction accepted; Slice: n/a",
    "mean_err": "max over entries |mean - ref mean| / ref sd",
    "sd_err": "max over entries |sd / ref sd - 1|",
    "mean_err_mcse": "max over entries |mean - ref mean| / sqrt(mcse^2 + ref mcse^2) (~N(0,1) each)",
}

#: Default run settings (those of :func:`run_benchmark`).
DEFAULTS: dict[str, Any] = {
    "size": "default",
    "draws": 1000,
    "tune": 1000,
    "chains": 2,
    "ref_draws": 2500,
    "ref_tune": 1000,
    "ref_chains": 4,
}

#: Small settings for ``--smoke`` and the smoke test: finishes in well under a minute.
SMOKE: dict[str, Any] = {
    "size": "smoke",
    "draws": 100,
    "tune": 100,
    "chains": 2,
    "ref_draws": 500,
    "ref_tune": 300,
    "ref_chains": 2,
}

#: Black-box models whose posterior equals that of a model with a gradient (same data), so the
#: cached NUTS reference of the latter serves both.  Checked at run time by comparing the
#: two models' logp at the initial point.
REFERENCE_SOURCE: dict[str, str] = {"pde_blackbox": "pde_adjoint"}

_log = logging.getLogger("pymc_surrogate.benchmarks")


def _pymc_samplers() -> dict[str, type]:
    import pymc as pm

    return {"NUTS": pm.NUTS, "DEMetropolisZ": pm.DEMetropolisZ, "Slice": pm.Slice}


#: Names of the PyMC samplers always offered (NUTS, DEMetropolisZ, Slice).
PYMC_SAMPLERS: tuple[str, ...] = ("NUTS", "DEMetropolisZ", "Slice")


def load_step_registry() -> tuple[dict[str, type], str | None]:
    """Import ``pymc_surrogate.STEP_METHODS``, tolerating a package under construction.

    Returns
    -------
    registry : dict of str to type
        Step classes by name; empty if the import failed or the registry is missing.
    error : str or None
        Why the registry could not be loaded, if it could not.
    """
    try:
        import pymc_surrogate

        registry = getattr(pymc_surrogate, "STEP_METHODS", None)
    except Exception as exc:  # the package is written concurrently: any error is possible
        return {}, f"import pymc_surrogate failed: {type(exc).__name__}: {exc}"
    if not registry:
        return {}, "pymc_surrogate.STEP_METHODS is missing or empty"
    return dict(registry), None


def available_samplers() -> tuple[dict[str, type], str | None]:
    """PyMC's NUTS, DEMetropolisZ and Slice plus every class in the package registry.

    Returns
    -------
    samplers : dict of str to type
    registry_error : str or None
    """
    samplers = _pymc_samplers()
    registry, error = load_step_registry()
    for name, cls in registry.items():
        samplers[name if name not in samplers else f"pymc_surrogate.{name}"] = cls
    return samplers, error


def model_has_gradient(model: Any) -> bool:
    """Whether PyTensor can differentiate the model's logp (False for black-box Ops).

    Parameters
    ----------
    model : pm.Model

    Returns
    -------
    bool
    """
    import pytensor
    from pytensor.gradient import NullTypeGradError

    try:
        pytensor.grad(model.logp(), model.value_vars)
    except (NotImplementedError, NullTypeGradError):
        return False
    return True


def needs_gradient(step_cls: type, model: Any) -> bool:
    """Whether a step class declares it needs the model gradient.

    Read from PyMC's ``competence``: a class that is compatible with some variable when a
    gradient exists and incompatible without one needs it.  Classes that keep PyMC's default
    (incompatible either way) are assumed not to need it and are simply tried.

    Parameters
    ----------
    step_cls : type
        PyMC step class.
    model : pm.Model

    Returns
    -------
    bool
    """
    from pymc.step_methods.compound import Competence

    competence = getattr(step_cls, "competence", None)
    if competence is None:
        return False
    for rv in model.free_RVs:
        try:
            with_grad = competence(rv, True)
            without_grad = competence(rv, False)
        except TypeError:
            return False
        if with_grad != Competence.INCOMPATIBLE and without_grad == Competence.INCOMPATIBLE:
            return True
    return False


def _param_names(model: Any, info: Any) -> list[str]:
    names = getattr(info, "param_names", None)
    return list(names) if names else [rv.name for rv in model.free_RVs]


def _counts(info: Any) -> tuple[int, int]:
    from benchmarks.models.counting import evaluation_counts

    return evaluation_counts(info)


def _fingerprint(model: Any) -> float:
    """Model logp at its initial point: changes whenever data or definition change."""
    return float(model.compile_logp()(model.initial_point()))


def _same_fingerprint(a: float, b: float) -> bool:
    return bool(np.isfinite(a) and np.isfinite(b) and abs(a - b) <= 1e-6 * max(1.0, abs(a)))


def _min_over(dataset: Any) -> float:
    values = [float(np.nanmin(dataset[v].values)) for v in dataset.data_vars]
    return min(values) if values else float("nan")


def _max_over(dataset: Any) -> float:
    values = [float(np.nanmax(dataset[v].values)) for v in dataset.data_vars]
    return max(values) if values else float("nan")


@dataclass
class Reference:
    """Reference posterior moments for one model.

    Attributes
    ----------
    mean, sd : dict of str to ndarray
    mcse : dict of str to ndarray
        Monte Carlo standard error of ``mean`` (zeros when exact).
    source : str
        ``"analytic"``, ``"nuts-cache:<file>"`` or ``"none: <reason>"``.
    """

    mean: dict[str, np.ndarray] | None
    sd: dict[str, np.ndarray] | None
    mcse: dict[str, np.ndarray] = field(default_factory=dict)
    source: str = "none"


def _nuts_reference(
    model: Any,
    info: Any,
    cache_file: Path,
    draws: int,
    tune: int,
    chains: int,
    seed: int,
) -> Reference:
    """Long NUTS run, cached as JSON and invalidated when the model's fingerprint changes."""
    import arviz as az
    import pymc as pm

    fingerprint = _fingerprint(model)
    names = _param_names(model, info)
    if cache_file.exists():
        try:
            cached = json.loads(cache_file.read_text())
            if _same_fingerprint(cached["fingerprint"], fingerprint) and set(names) <= set(
                cached["mean"]
            ):
                return Reference(
                    mean={k: np.asarray(cached["mean"][k]) for k in names},
                    sd={k: np.asarray(cached["sd"][k]) for k in names},
                    mcse={k: np.asarray(cached["mcse"][k]) for k in names},
                    source=f"nuts-cache:{cache_file.name}",
                )
            _log.info("reference cache %s is stale; recomputing", cache_file)
        except (OSError, ValueError, KeyError) as exc:
            _log.info("unreadable reference cache %s (%s); recomputing", cache_file, exc)
    _log.info(
        "computing NUTS reference for %s (%d chains x %d draws)", cache_file.stem, chains, draws
    )
    with model:
        idata = pm.sample(
            draws=draws,
            tune=tune,
            chains=chains,
            cores=1,
            random_seed=seed,
            target_accept=0.9,
            progressbar=False,
            quiet=True,
            compute_convergence_checks=False,
        )
    post = posterior_dataset(idata)[names]
    mean = {k: post[k].mean(("chain", "draw")).values for k in names}
    sd = {k: post[k].std(("chain", "draw")).values for k in names}
    mcse_ds = az.mcse(post, method="mean")
    mcse = {k: mcse_ds[k].values for k in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ess = _min_over(az.ess(post, method="bulk"))
        rhat = _max_over(az.rhat(post)) if chains > 1 else float("nan")
    payload = {
        "model": cache_file.stem,
        "fingerprint": fingerprint,
        "settings": {"draws": draws, "tune": tune, "chains": chains, "seed": seed},
        "min_ess_bulk": ess,
        "max_rhat": rhat,
        "created": _dt.datetime.now().isoformat(timespec="seconds"),
        "mean": {k: np.asarray(v).tolist() for k, v in mean.items()},
        "sd": {k: np.asarray(v).tolist() for k, v in sd.items()},
        "mcse": {k: np.asarray(v).tolist() for k, v in mcse.items()},
    }
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    cache_file.write_text(json.dumps(payload, indent=1))
    source = f"nuts-cache:{cache_file.name}"
    if rhat > 1.01 or ess < 400:
        source += f" (WEAK: min ESS {ess:.0f}, max r_hat {rhat:.3f})"
    return Reference(mean, sd, mcse, source)


def reference_moments(
    name: str,
    size: str,
    model: Any,
    info: Any,
    *,
    has_gradient: bool,
    cache_dir: Path | str = DEFAULT_CACHE_DIR,
    draws: int = 2500,
    tune: int = 1000,
    chains: int = 4,
    seed: int = 20240601,
    builder: Callable[..., tuple[Any, Any]] | None = None,
) -> Reference:
    """Reference posterior moments: exact if the model knows them, else cached long NUTS.

    Parameters
    ----------
    name, size : str
        Registry name and size; together they key the cache file ``<name>_<size>.json``.
    model, info
        The model and its info record.
    has_gradient : bool
        Whether NUTS can run on ``model``.
    cache_dir : path
        Where cached references live.
    draws, tune, chains, seed : int
        Settings of the reference NUTS run (``target_accept=0.9``, ``cores=1``).
    builder : callable, optional
        ``builder(name, size) -> (model, info)``, used to build the gradient twin of a
        black-box model (see :data:`REFERENCE_SOURCE`).

    Returns
    -------
    Reference
    """
    ref_mean = getattr(info, "ref_mean", None)
    ref_sd = getattr(info, "ref_sd", None)
    if ref_mean is not None and ref_sd is not None:
        zeros = {k: np.zeros_like(np.asarray(v, dtype=float)) for k, v in ref_mean.items()}
        return Reference(dict(ref_mean), dict(ref_sd), zeros, "analytic")
    cache_dir = Path(cache_dir)
    if has_gradient:
        return _nuts_reference(
            model, info, cache_dir / f"{name}_{size}.json", draws, tune, chains, seed
        )
    twin = REFERENCE_SOURCE.get(name)
    if twin is None or builder is None:
        return Reference(None, None, source="none: black-box model without a gradient twin")
    twin_model, twin_info = builder(twin, size)
    if not _same_fingerprint(_fingerprint(model), _fingerprint(twin_model)):
        return Reference(None, None, source=f"none: {twin} is not the same posterior")
    ref = _nuts_reference(
        twin_model, twin_info, cache_dir / f"{twin}_{size}.json", draws, tune, chains, seed
    )
    names = _param_names(model, info)
    if ref.mean is None or not set(names) <= set(ref.mean):
        return Reference(None, None, source=f"none: {twin} has different parameters")
    return ref


class _PhaseRecorder:
    """``pm.sample`` callback timing each iteration and snapshotting the evaluation counts.

    The interval between two callbacks is one iteration and is booked to that iteration's
    phase (tune or draws).  The first iteration has no preceding callback (its interval
    would contain compilation and initialisation): its evaluations are booked to its phase,
    its time is extrapolated from the phase's other iterations.
    """

    def __init__(self, info: Any) -> None:
        self.info = info
        self.events: list[tuple[float, bool, int, int]] = []
        self.t0 = 0.0
        self.c0 = (0, 0)

    def start(self) -> None:
        self.t0 = time.perf_counter()
        self.c0 = _counts(self.info)

    def __call__(self, trace: Any = None, draw: Any = None) -> None:
        logp, grad = _counts(self.info)
        self.events.append((time.perf_counter(), bool(draw.tuning), logp, grad))

    def summary(self, t_end: float) -> dict[str, float]:
        c_end = _counts(self.info)
        phase_t = {True: 0.0, False: 0.0}
        phase_n = {True: 0, False: 0}
        phase_timed = {True: 0, False: 0}
        draw_counts = [0, 0]
        t_prev, c_prev = self.t0, self.c0
        for k, (t, tuning, logp, grad) in enumerate(self.events):
            phase_n[tuning] += 1
            if k > 0:
                phase_t[tuning] += t - t_prev
                phase_timed[tuning] += 1
            if not tuning:
                draw_counts[0] += logp - c_prev[0]
                draw_counts[1] += grad - c_prev[1]
            t_prev, c_prev = t, (logp, grad)

        def phase_seconds(tuning: bool) -> float:
            if phase_timed[tuning] == 0:
                return float("nan") if phase_n[tuning] else 0.0
            return phase_t[tuning] * phase_n[tuning] / phase_timed[tuning]

        tune_s, draws_s = phase_seconds(True), phase_seconds(False)
        total_s = t_end - self.t0
        return {
            "tune_s": tune_s,
            "draws_s": draws_s,
            "total_s": total_s,
            "setup_s": total_s - np.nansum([tune_s, draws_s]),
            "n_logp": c_end[0] - self.c0[0],
            "n_grad": c_end[1] - self.c0[1],
            "n_logp_draws": draw_counts[0],
            "n_grad_draws": draw_counts[1],
        }


def _mean_acceptance(sample_stats: Any) -> float:
    for key in ("acceptance_rate", "accepted"):
        if key in sample_stats:
            return float(np.mean(sample_stats[key].values.astype(float)))
    if "accept" in sample_stats:  # Metropolis-type ratio, may exceed 1
        return float(np.mean(np.minimum(1.0, sample_stats["accept"].values.astype(float))))
    return float("nan")


def _posterior_errors(posterior: Any, names: Sequence[str], ref: Reference) -> dict[str, float]:
    import arviz as az

    if ref.mean is None or ref.sd is None:
        return {"mean_err": float("nan"), "sd_err": float("nan"), "mean_err_mcse": float("nan")}
    mcse = az.mcse(posterior[list(names)], method="mean")
    mean_err, sd_err, z_err = [], [], []
    for k in names:
        m = posterior[k].mean(("chain", "draw")).values
        s = posterior[k].std(("chain", "draw")).values
        rm = np.asarray(ref.mean[k], dtype=float).reshape(m.shape)
        rs = np.asarray(ref.sd[k], dtype=float).reshape(m.shape)
        rmc = np.asarray(ref.mcse.get(k, 0.0), dtype=float)
        rmc = np.broadcast_to(rmc, m.shape) if rmc.size <= 1 else rmc.reshape(m.shape)
        mean_err.append(np.max(np.abs(m - rm) / rs))
        sd_err.append(np.max(np.abs(s / rs - 1.0)))
        z_err.append(np.max(np.abs(m - rm) / np.sqrt(mcse[k].values ** 2 + rmc**2)))
    return {
        "mean_err": float(max(mean_err)),
        "sd_err": float(max(sd_err)),
        "mean_err_mcse": float(max(z_err)),
    }


def _empty_row(model: str, size: str, sampler: str, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {c: float("nan") for c in COLUMNS}
    row.update(model=model, size=size, sampler=sampler, status="ok", baseline="", note="")
    row["ref_source"] = ""
    row.update(kw)
    return row


class CountedRun(NamedTuple):
    """:func:`sample_counted`'s result: the trace, :meth:`_PhaseRecorder.summary` (phase
    seconds, ``total_s``, ``n_logp``, ``n_grad``, ...) and the kept ``pymc`` warnings."""

    idata: Any
    timing: dict[str, float]
    warnings: list[str]


class _KeepRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def sample_counted(
    model: Any,
    info: Any,
    sampler: str,
    step_cls: type | None,
    *,
    draws: int,
    tune: int,
    chains: int,
    seed: int,
    sampler_kwargs: Mapping[str, Any] | None = None,
    keep_warnings: bool = False,
) -> CountedRun:
    """``pm.sample`` once, timing the phases and counting evaluations (errors propagate).

    The sampling shared by :func:`run_one` and
    :func:`benchmarks.real_posteriors.run_one_posterior`.

    Parameters
    ----------
    model, info, sampler, step_cls, draws, tune, chains, seed, sampler_kwargs
        As in :func:`run_one` (``cores=1`` always, so the in-process counter sees all).
    keep_warnings : bool
        Keep the ``pymc`` logger's warnings (the steps' ``warning`` stats) instead of
        sampling with ``quiet=True``, which would silence them.

    Returns
    -------
    CountedRun
    """
    import pymc as pm

    sampler_kwargs = dict(sampler_kwargs or {})
    recorder = _PhaseRecorder(info)
    sample_kwargs: dict[str, Any] = {}
    keep = _KeepRecords()
    logger = logging.getLogger("pymc")
    old_level = logger.level
    if keep_warnings:
        logger.addHandler(keep)
        logger.setLevel(logging.WARNING)  # WARNING, not quieter: the records we keep
    else:
        sample_kwargs["quiet"] = True
    try:
        recorder.start()
        with model:
            if sampler == "NUTS":
                step = None
                if sampler_kwargs:
                    sample_kwargs["nuts"] = sampler_kwargs
            else:
                assert step_cls is not None
                step = step_cls(**sampler_kwargs)
            idata = pm.sample(
                draws=draws,
                tune=tune,
                chains=chains,
                cores=1,
                step=step,
                random_seed=seed,
                progressbar=False,
                compute_convergence_checks=False,
                discard_tuned_samples=True,
                callback=recorder,
                **sample_kwargs,
            )
        t_end = time.perf_counter()
    finally:
        if keep_warnings:
            logger.removeHandler(keep)
            logger.setLevel(old_level)
    return CountedRun(idata, recorder.summary(t_end), [r.getMessage() for r in keep.records])


def cost_columns(
    timing: Mapping[str, float], sample_stats: Any, ess_bulk: float
) -> dict[str, Any]:
    """Evaluation-count and divergence columns, the same in both results tables.

    Parameters
    ----------
    timing : mapping
        :attr:`CountedRun.timing`.
    sample_stats : xarray.Dataset
        The run's ``sample_stats`` group.
    ess_bulk : float
        Minimum bulk ESS.

    Returns
    -------
    dict
        ``n_logp``, ``n_grad``, ``evals_per_ess`` (inf at ESS 0), ``divergences`` (NaN
        without a ``diverging`` stat), ``far_proposals`` (the chains' evaluations far from
        every state evaluated before, tuning included; NaN for PyMC's samplers), and
        ``note`` if the counter saw no evaluation.
    """
    n_evals = timing["n_logp"] + timing["n_grad"]
    diverging = sample_stats["diverging"] if "diverging" in sample_stats else None
    columns: dict[str, Any] = {
        "n_logp": timing["n_logp"],
        "n_grad": timing["n_grad"],
        "evals_per_ess": n_evals / ess_bulk if ess_bulk > 0 else float("inf"),
        "divergences": int(diverging.values.sum()) if diverging is not None else float("nan"),
        # cumulative per chain: its last draw's value counts tuning too
        "far_proposals": (int(sample_stats["far_proposals"].values[:, -1].sum())
                          if "far_proposals" in sample_stats else float("nan")),
    }
    if n_evals == 0:
        columns["note"] = "counter saw no evaluations (sampled in another process?)"
    return columns


def run_one(
    model: Any,
    info: Any,
    sampler: str,
    step_cls: type | None,
    *,
    draws: int,
    tune: int,
    chains: int,
    seed: int,
    reference: Reference,
    sampler_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Sample one model with one sampler and measure it (errors propagate).

    Parameters
    ----------
    model, info
        Model and its info record (with an evaluation counter).
    sampler : str
        Name shown in the table; ``"NUTS"`` runs PyMC's default NUTS path
        (``init="jitter+adapt_diag"``), exactly what a PyMC user gets.
    step_cls : type or None
        Step class to instantiate in the model context (ignored for NUTS).
    draws, tune, chains, seed : int
        ``pm.sample`` settings; always ``cores=1``.
    reference : Reference
        Reference moments for the error columns.
    sampler_kwargs : mapping, optional
        Keyword arguments for the step class (for NUTS: passed as ``nuts=``).

    Returns
    -------
    dict
        The measured columns of :data:`COLUMNS` (model/size/status are filled by the caller).
    """
    import arviz as az

    names = _param_names(model, info)
    run = sample_counted(
        model, info, sampler, step_cls, draws=draws, tune=tune, chains=chains, seed=seed,
        sampler_kwargs=sampler_kwargs,
    )
    idata = run.idata
    row: dict[str, Any] = dict(run.timing)
    post = posterior_dataset(idata)[names]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short smoke chains make ArviZ complain
        ess_bulk = _min_over(az.ess(post, method="bulk"))
        ess_tail = _min_over(az.ess(post, method="tail"))
        rhat = _max_over(az.rhat(post)) if chains > 1 else float("nan")
        errors = _posterior_errors(post, names, reference)
    stats = posterior_dataset(idata, "sample_stats")
    row.update(cost_columns(run.timing, stats, ess_bulk))
    row.update(
        dim=int(sum(int(np.prod(post[k].shape[2:])) for k in names)),
        min_ess_bulk=ess_bulk,
        min_ess_tail=ess_tail,
        ess_per_s_draws=ess_bulk / row["draws_s"] if row["draws_s"] > 0 else float("nan"),
        ess_per_s_total=(
            ess_bulk / (row["tune_s"] + row["draws_s"])
            if row["tune_s"] + row["draws_s"] > 0
            else float("nan")
        ),
        logp_evals_per_ess=row["n_logp"] / ess_bulk if ess_bulk > 0 else float("inf"),
        mean_accept=_mean_acceptance(stats),
        max_rhat=rhat,
        ref_source=reference.source,
        **errors,
    )
    return row


def _add_speedups(rows: list[dict[str, Any]]) -> None:
    """Fill ``baseline`` and ``speedup_*``.

    The baseline is NUTS, or on black-box models the best gradient-free PyMC sampler.
    """
    by_model: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_model.setdefault(row["model"], []).append(row)
    for model_rows in by_model.values():
        ok = [r for r in model_rows if r["status"] == "ok" and np.isfinite(r["ess_per_s_draws"])]
        base = next((r for r in ok if r["sampler"] == "NUTS"), None)
        if base is None:
            free = [r for r in ok if r["sampler"] in ("DEMetropolisZ", "Slice")]
            base = max(free, key=lambda r: r["ess_per_s_draws"], default=None)
        for r in model_rows:
            if base is None or r["status"] != "ok":
                continue
            r["baseline"] = base["sampler"]
            r["speedup_draws"] = r["ess_per_s_draws"] / base["ess_per_s_draws"]
            if np.isfinite(r["ess_per_s_total"]) and base["ess_per_s_total"] > 0:
                r["speedup_total"] = r["ess_per_s_total"] / base["ess_per_s_total"]


def _fmt(value: Any, column: str) -> str:
    if isinstance(value, str):
        return value.replace("|", "\\|").replace("\n", " ")
    if value is None:
        return ""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v):
        return "–"
    if math.isinf(v):
        return "inf"
    if column.startswith("n_") or column in ("dim", "chains", "tune", "draws", "divergences"):
        return f"{int(v)}"
    if column.startswith("min_ess"):
        return f"{v:.0f}"
    if column.endswith("_s"):
        return f"{v:.2f}"
    return f"{v:.3g}"


def write_results(
    rows: Sequence[Mapping[str, Any]],
    out_dir: Path | str,
    tag: str,
    meta: Mapping[str, Any] | None = None,
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
        Run settings, printed above the markdown table.

    Returns
    -------
    csv_path, md_path : Path
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(list(rows), columns=COLUMNS)
    csv_path = out_dir / f"{tag}.csv"
    md_path = out_dir / f"{tag}.md"
    frame.to_csv(csv_path, index=False)

    table_cols = [c for c in COLUMNS if c not in ("note", "size", "chains", "tune", "draws")]
    lines = [f"# Benchmark {tag}", ""]
    for key, value in (meta or {}).items():
        lines.append(f"- **{key}**: {value}")
    lines += [
        "",
        "Chains run sequentially (`cores=1`) so the in-process evaluation counter sees every "
        "model evaluation; BLAS limited to one thread. Seconds on a shared machine are noisy: "
        "compare ratios within one run, and evaluation counts across runs.",
        "",
        "| " + " | ".join(table_cols) + " |",
        "|" + "|".join("---" for _ in table_cols) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c), c) for c in table_cols) + " |")
    notes = [(r["model"], r["sampler"], r["note"]) for r in rows if r.get("note")]
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- **{m} / {s}**: {_fmt(n, 'note')}" for m, s, n in notes]
    lines += ["", "## Columns", ""]
    lines += [f"- `{k}`: {v}" for k, v in COLUMN_DOC.items()]
    md_path.write_text("\n".join(lines) + "\n")
    return csv_path, md_path


def split_names(text: str | None) -> list[str]:
    """Names of a comma-separated command-line list (``[]`` for None or blank)."""
    return [t.strip() for t in text.split(",") if t.strip()] if text else []


def parse_seeds(text: str) -> list[int]:
    """Seeds of a command-line list such as ``0,3,5`` or ``0-9`` (ranges inclusive)."""
    seeds: list[int] = []
    for part in split_names(text):
        first, _, last = part.partition("-")
        seeds.extend(range(int(first), int(last or first) + 1))
    return seeds


def git_commit() -> str:
    """Short HEAD of this checkout, plus ``dirty (files)`` if tracked files differ from it
    (``unknown`` outside a git checkout)."""
    git = ["git", "-C", str(Path(__file__).resolve().parents[1])]
    try:
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        status = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    changed = [line[3:] for line in status if line.strip()]
    return head + (f" dirty ({', '.join(changed)})" if changed else "")


def format_cell(value: Any, spec: str = ".3g") -> str:
    """A markdown table cell: ``yes``/``no``, a number in ``spec`` (``–`` for NaN), text."""
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, float | int | np.floating | np.integer):
        return "–" if np.isnan(value) else format(float(value), spec)
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def log_to_stderr(logger: logging.Logger, label: str) -> None:
    """Send a runner's INFO progress lines to stderr as ``[<label> HH:MM:SS] message``.

    Does nothing if the logger already has a handler (a second run in the same process).
    """
    if logger.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(f"[{label} %(asctime)s] %(message)s", "%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def environment_meta() -> dict[str, str]:
    """The ``versions`` and ``machine`` lines of a results table's header."""
    import pymc as pm
    import pytensor

    return {
        "versions": f"pymc {pm.__version__}, pytensor {pytensor.__version__}, "
        f"python {platform.python_version()}",
        "machine": f"{platform.node()} ({os.cpu_count()} CPUs), "
        f"{_dt.datetime.now():%Y-%m-%d %H:%M}",
    }


def _blas_limit(n_threads: int | None) -> Any:
    if n_threads is None:
        from contextlib import nullcontext

        return nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(n_threads)


def run_benchmark(
    models: Iterable[str],
    samplers: Iterable[str] | None = None,
    *,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 2,
    size: str = "default",
    seed: int = 0,
    out_dir: Path | str | None = DEFAULT_RESULTS_DIR,
    tag: str | None = None,
    cache_dir: Path | str = DEFAULT_CACHE_DIR,
    ref_draws: int = 2500,
    ref_tune: int = 1000,
    ref_chains: int = 4,
    sampler_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    model_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    blas_threads: int | None = 1,
    verbose: bool = True,
) -> pd.DataFrame:
    """Run every model x sampler pair side by side and tabulate the results.

    Parameters
    ----------
    models : iterable of str
        Names from :data:`benchmarks.models.MODELS`.
    samplers : iterable of str, optional
        Sampler names: ``"NUTS"``, ``"DEMetropolisZ"``, ``"Slice"`` and any key of
        ``pymc_surrogate.STEP_METHODS``; ``None`` or ``["all"]`` means all of them.
    draws, tune, chains, seed : int
        ``pm.sample`` settings (``cores=1`` always), the same for every sampler.
    size : {"smoke", "default", "paper"}
        Model size preset.
    out_dir : path or None
        Where to write ``<tag>.csv`` and ``<tag>.md`` (rewritten after every row, so an
        interrupted run keeps what it measured); None writes nothing.
    tag : str, optional
        File stem; default ``bench_<size>_<timestamp>``.
    cache_dir : path
        Cache of NUTS reference runs.
    ref_draws, ref_tune, ref_chains : int
        Settings of reference NUTS runs (only when no cache matches).
    sampler_kwargs : mapping, optional
        Per-sampler keyword arguments for the step class, e.g.
        ``{"SurrogateHMC": {"target_accept": 0.9}}``.
    model_kwargs : mapping, optional
        Per-model keyword overrides for the builder.
    blas_threads : int or None
        BLAS thread limit while benchmarking (None leaves it alone).
    verbose : bool
        Log progress to stderr.

    Returns
    -------
    pandas.DataFrame
        One row per model x sampler with the columns :data:`COLUMNS`; failures are rows with
        ``status="error"`` and the exception in ``note``, inapplicable pairs have
        ``status="skipped"``.
    """
    from benchmarks.models import MODELS, build_model

    if verbose:
        log_to_stderr(_log, "bench")
    models = list(models)
    all_samplers, registry_error = available_samplers()
    sampler_names = list(samplers) if samplers is not None else ["all"]
    if "all" in sampler_names:
        sampler_names = list(all_samplers)
    sampler_kwargs = dict(sampler_kwargs or {})
    model_kwargs = dict(model_kwargs or {})
    tag = tag or f"bench_{size}_{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    meta = {
        "command": f"models={models} samplers={sampler_names} size={size}",
        "settings": f"draws={draws} tune={tune} chains={chains} cores=1 seed={seed}",
        "reference runs": f"NUTS target_accept=0.9, {ref_chains} chains x {ref_draws} draws "
        f"(+{ref_tune} tune), cached in {Path(cache_dir).name}/",
        **environment_meta(),
    }
    if sampler_kwargs:
        meta["sampler kwargs"] = json.dumps(sampler_kwargs)
    if model_kwargs:
        meta["model kwargs"] = json.dumps(model_kwargs)
    if registry_error:
        meta["step registry"] = registry_error

    def builder(name: str, sz: str) -> tuple[Any, Any]:
        return build_model(name, sz, **model_kwargs.get(name, {}))

    rows: list[dict[str, Any]] = []

    def emit(row: dict[str, Any]) -> None:
        rows.append(row)
        _add_speedups(rows)
        if out_dir is not None:
            write_results(rows, out_dir, tag, meta)

    with _blas_limit(blas_threads):
        for model_name in models:
            base = {"chains": chains, "tune": tune, "draws": draws}
            try:
                if model_name not in MODELS:
                    raise KeyError(f"unknown model {model_name!r}; known: {sorted(MODELS)}")
                _log.info("building %s (%s)", model_name, size)
                model, info = builder(model_name, size)
                has_grad = model_has_gradient(model)
                reference = reference_moments(
                    model_name,
                    size,
                    model,
                    info,
                    has_gradient=has_grad,
                    cache_dir=cache_dir,
                    draws=ref_draws,
                    tune=ref_tune,
                    chains=ref_chains,
                    builder=builder,
                )
            except Exception as exc:
                emit(_empty_row(model_name, size, "-", status="error", note=_describe(exc), **base))
                continue
            for sampler in sampler_names:
                row = _empty_row(model_name, size, sampler, ref_source=reference.source, **base)
                step_cls = all_samplers.get(sampler)
                if step_cls is None:
                    row.update(status="error", note=f"unknown sampler {sampler!r}")
                    if registry_error:
                        row["note"] += f" ({registry_error})"
                    emit(row)
                    continue
                if not has_grad and needs_gradient(step_cls, model):
                    row.update(
                        status="skipped", note="needs the model gradient; model is black-box"
                    )
                    emit(row)
                    continue
                _log.info("%s / %s ...", model_name, sampler)
                try:
                    row.update(
                        run_one(
                            model,
                            info,
                            sampler,
                            step_cls,
                            draws=draws,
                            tune=tune,
                            chains=chains,
                            seed=seed,
                            reference=reference,
                            sampler_kwargs=sampler_kwargs.get(sampler),
                        )
                    )
                except KeyboardInterrupt:
                    raise
                except Exception as exc:
                    row.update(status="error", note=_describe(exc))
                    _log.info("%s / %s failed: %s", model_name, sampler, row["note"])
                else:
                    _log.info(
                        "%s / %s: min ESS %.0f, %.1f ESS/s (draws), %d+%d evals",
                        model_name,
                        sampler,
                        row["min_ess_bulk"],
                        row["ess_per_s_draws"],
                        row["n_logp"],
                        row["n_grad"],
                    )
                emit(row)
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame.attrs["tag"] = tag
    frame.attrs["meta"] = meta
    if out_dir is not None:
        frame.attrs["csv"] = str(Path(out_dir) / f"{tag}.csv")
        frame.attrs["md"] = str(Path(out_dir) / f"{tag}.md")
    return frame


def _describe(exc: BaseException) -> str:
    """Exception type, message and the innermost frame, on one line."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {message[:300]}{where}"
