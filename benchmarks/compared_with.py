"""Compared with: the package's step methods next to the samplers a PyMC user would try.

Three problems, each with a reference posterior that none of the compared runs produced:

* ``pde``: the elliptic PDE inverse problem of ``examples/elliptic_pde_showcase.py``
  (d = 20 Karhunen-Loeve modes, 30 x 30 mesh, one logp = one sparse PDE solve).  The
  gradient-free samplers see the black-box model; NUTS and nutpie see the same posterior with
  adjoint gradients.  Reference: a long PyMC NUTS run on the adjoint model
  (:data:`PDE_REFERENCE`, another seed than the compared runs), cached in
  ``benchmarks/cache/``.
* ``arma-arma11`` and ``kilpisjarvi_mod-kilpisjarvi``: posteriordb posteriors
  (``benchmarks/posteriordb/``), against the summaries of posteriordb's 10 000 reference
  draws, exactly as ``benchmarks/real_posteriors.py`` compares them.

Samplers:

* ours: every class of ``pymc_surrogate.STEP_METHODS`` (defaults), through
  :func:`benchmarks.harness.sample_counted`;
* ``NUTS``: PyMC's default ``pm.sample()`` (the gradient model);
* ``nutpie``: ``nutpie.compile_pymc_model`` + ``nutpie.sample`` (numba backend, defaults);
* ``DEMetropolisZ``: ``pm.DEMetropolisZ()``, given :data:`LONG_DEMZ` iterations (at the
  others' length it does not converge on these problems);
* ``SMC``: ``pm.sample_smc`` (defaults: 2000 particles, independent Metropolis-Hastings
  mutation); approximate for a finite number of particles;
* ``PyVBMC``: variational Bayesian Monte Carlo (a Gaussian-process surrogate of the log
  density, a variational mixture fitted to it; defaults), started at the mode with a
  plausible box of +-3 sds from a BFGS inverse Hessian (those evaluations are counted);
  approximate.  Its figures are those of ``chains * draws`` independent draws of the fitted
  approximation.

All in one process, one after the other, ``cores=1``, BLAS on one thread, so the models'
evaluation counters (:mod:`benchmarks.models.counting`; the PDE's solve counters) see every
evaluation, tuning and initialisation included.

Columns (the accuracy columns are those of :func:`benchmarks.real_posteriors.compare_with_reference`):

* ``max_abs_z``: max over parameters of ``|mean - reference mean| / MCSE`` (MCSE of this run);
  ``sd_ratio_min/max``: ``sd / reference sd``; ``tails_ok``: every 2.5 % / 97.5 % tail share
  inside its 99.9 % binomial band; ``max_rhat``; ``min_ess`` (bulk).
* ``max_sd_z``: max over parameters of ``|sd - reference sd| / se``,
  ``se = sqrt(MCSE(sd)^2 + reference sd^2 / (2 n_ref))``: this run's Monte Carlo error of the
  sd (``az.mcse(method="sd")``) and the reference's (as for ``n_ref`` independent Gaussian
  draws; ``n_ref`` = 10 000 for posteriordb, the reference run's min bulk ESS for the PDE).
* ``status``: ``wrong`` unless ``max_abs_z <= 4``, ``max_sd_z <= 4``, ``max_rhat <= 1.01``
  (several chains) and ``tails_ok`` (the first, third and fourth are
  :func:`benchmarks.real_posteriors.classify`'s rule), else ``ok`` (``warned`` if the sampler
  logged warnings or NUTS diverged).
* ``calls``: counted calls of the model (forward passes), everything included; ``grads``:
  how many of them also computed the gradient.  ``calls_per_ess = calls / min_ess``: a
  NUTS/nutpie leapfrog step (logp and gradient together) counts as one call;
  ``work_per_ess = (calls + grads) / min_ess`` counts a gradient as one more evaluation (on
  the PDE: forward + adjoint solves, about equal in cost).  For PyVBMC, whose draws from the
  fitted approximation cost no evaluation, the per-ESS columns are left blank: read ``calls``.
* ``wall_s``: seconds of the whole call (compilation included; nutpie's numba compilation
  alone is 10-30 s).

Run (cwd = repository root; the peers are not package dependencies)::

    python3.11 -m venv /work/venvpeers
    /work/venvpeers/bin/pip install -e ".[test]" nutpie pyvbmc
    PYTHONPATH=. nice -n 10 /work/venvpeers/bin/python benchmarks/compared_with.py \\
        --problems pde,arma-arma11,kilpisjarvi_mod-kilpisjarvi --seed 1 --tag compared_with
    PYTHONPATH=. /work/venvpeers/bin/python benchmarks/compared_with.py --quick   # plumbing, ~3 min
    python benchmarks/compared_with.py --render benchmarks/results/compared_with_*.csv  # docs tables

Writes ``<out>/<tag>.md`` and ``<tag>.csv`` (rewritten after every row) and
``<tag>_parameters.csv`` (every parameter's figures).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks.harness import (  # noqa: E402
    DEFAULT_CACHE_DIR,
    DEFAULT_RESULTS_DIR,
    _blas_limit,
    _describe,
    available_samplers,
    environment_meta,
    git_commit,
    log_to_stderr,
    needs_gradient,
    sample_counted,
    split_names,
)
from benchmarks.models.counting import evaluation_counts  # noqa: E402
from benchmarks.real_posteriors import (  # noqa: E402
    PARAMETER_COLUMNS,
    classify,
    compare_with_reference,
)
from pymc_surrogate.compat import posterior_dataset  # noqa: E402

__all__ = ["Problem", "make_problem", "run_compared", "main", "PEERS", "COLUMNS"]

_log = logging.getLogger("pymc_surrogate.benchmarks.compared_with")

#: Peers, in table order after ours.
PEERS: tuple[str, ...] = ("NUTS", "nutpie", "DEMetropolisZ", "SMC", "PyVBMC")
#: Which are approximate (not asymptotically exact for the run's length).
APPROXIMATE: dict[str, str] = {
    "SMC": "approximate: finite particles",
    "PyVBMC": "approximate: variational fit to a GP surrogate",
}
#: DEMetropolisZ's iterations per chain (tune, draws).
LONG_DEMZ: dict[str, int] = {"tune": 5000, "draws": 10000}
#: The PDE's reference run (PyMC NUTS on the adjoint model).
PDE_REFERENCE: dict[str, Any] = {
    "chains": 4, "tune": 1000, "draws": 2500, "seed": 20240601, "target_accept": 0.9,
}
PDE_SIZE: dict[str, int] = {"n_modes": 20, "mesh_size": 30}
QUICK_PDE_SIZE: dict[str, int] = {"n_modes": 4, "mesh_size": 10}

COLUMNS: list[str] = [
    "problem", "sampler", "kind", "status", "iterations", "max_abs_z", "z_at",
    "sd_ratio_min", "sd_ratio_max", "max_sd_z", "tails_ok", "min_ess", "max_rhat", "calls", "grads",
    "calls_per_ess", "work_per_ess", "wall_s", "note",
]


@dataclass
class Problem:
    """One posterior: the black-box or plain model, its gradient twin, the reference."""

    name: str
    model: Any
    info: Any
    grad_model: Any
    grad_info: Any
    names: list[str]
    ref: dict[str, dict[str, np.ndarray]]
    ref_source: str
    chains: int
    ref_n: float = 10000.0


# ---------------------------------------------------------------------------------------
# Problems and references
# ---------------------------------------------------------------------------------------


def _pde_reference(model: Any, size: Mapping[str, int], cache_dir: Path,
                   settings: Mapping[str, Any]
                 ) -> tuple[dict[str, dict[str, np.ndarray]], str, float]:
    """Mean, sd and 2.5 / 97.5 % quantiles of theta from a long NUTS run (cached JSON), its
    description and its min bulk ESS."""
    import arviz as az
    import pymc as pm

    key = f"compared_with_pde_d{size['n_modes']}_m{size['mesh_size']}_reference.json"
    path = cache_dir / key
    fingerprint = float(model.compile_logp()(model.initial_point()))
    if path.exists():
        cached = json.loads(path.read_text())
        if abs(cached["fingerprint"] - fingerprint) <= 1e-6 * max(1.0, abs(fingerprint)) and \
                cached["settings"] == dict(settings):
            ref = {s: {"theta": np.asarray(v)} for s, v in cached["stats"].items()}
            return ref, cached["source"], float(cached["min_ess"])
    _log.info("PDE reference: NUTS %s (one-off, cached in %s)", dict(settings), path)
    t0 = time.perf_counter()
    with model:
        idata = pm.sample(
            draws=settings["draws"], tune=settings["tune"], chains=settings["chains"], cores=1,
            random_seed=settings["seed"], target_accept=settings["target_accept"],
            progressbar=False, compute_convergence_checks=False, quiet=True,
        )
    theta = posterior_dataset(idata)["theta"]
    flat = theta.values.reshape(-1, theta.shape[-1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ess = float(az.ess(posterior_dataset(idata)[["theta"]]).to_array().min())
        rhat = float(az.rhat(posterior_dataset(idata)[["theta"]]).to_array().max())
    stats = {
        "mean": flat.mean(0), "sd": flat.std(0, ddof=1),
        "q025": np.quantile(flat, 0.025, axis=0), "q975": np.quantile(flat, 0.975, axis=0),
    }
    source = (f"PyMC NUTS on the adjoint model, {settings['chains']} chains x "
              f"{settings['draws']} draws (+{settings['tune']} tune), target_accept "
              f"{settings['target_accept']}, seed {settings['seed']}: min bulk ESS {ess:.0f}, "
              f"max R-hat {rhat:.3f}, {time.perf_counter() - t0:.0f} s")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "fingerprint": fingerprint, "settings": dict(settings), "source": source,
        "min_ess": ess,
        "created": _dt.datetime.now().isoformat(timespec="seconds"),
        "stats": {k: v.tolist() for k, v in stats.items()},
    }, indent=1))
    return {s: {"theta": v} for s, v in stats.items()}, source, ess


def make_problem(name: str, *, quick: bool = False, cache_dir: Path = DEFAULT_CACHE_DIR,
                 chains: int = 4) -> Problem:
    """Build a problem: ``"pde"`` or a posteriordb name of :mod:`benchmarks.posteriordb`."""
    if name == "pde":
        from benchmarks.models.elliptic_pde import make_pde_model

        size = QUICK_PDE_SIZE if quick else PDE_SIZE
        blackbox, info = make_pde_model(**size, gradient=False)
        adjoint, adjoint_info = make_pde_model(**size, gradient=True)
        point = blackbox.initial_point()
        if not np.isclose(blackbox.compile_logp()(point), adjoint.compile_logp()(point)):
            raise RuntimeError("black-box and adjoint PDE models differ")
        settings = dict(PDE_REFERENCE)
        if quick:
            settings.update(chains=2, tune=300, draws=500)
        ref, source, ref_ess = _pde_reference(adjoint, size, Path(cache_dir), settings)
        return Problem(f"pde (d={size['n_modes']}, {size['mesh_size']}x{size['mesh_size']} mesh)",
                       blackbox, info, adjoint, adjoint_info, ["theta"], ref, source, chains,
                       ref_ess)
    from benchmarks import posteriordb as pdb
    from benchmarks.posteriordb.reference import load_reference, reference_arrays, variable_shapes

    model, info = pdb.make_model(name)
    reference = load_reference(name)
    ref = reference_arrays(reference, variable_shapes(model, info.param_names),
                           pdb.param_rename(name))
    source = f"{reference.get('source', '?')} ({reference.get('n_draws', '?')} draws)"
    # the model has a gradient: the same object serves the gradient-free samplers
    return Problem(name, model, info, model, info, list(info.param_names), ref, source, chains)


# ---------------------------------------------------------------------------------------
# Peers that pm.sample does not run
# ---------------------------------------------------------------------------------------


def _run_nutpie(problem: Problem, *, tune: int, draws: int, chains: int, seed: int
                ) -> tuple[Any, dict[str, Any]]:
    import nutpie

    model, info = problem.grad_model, problem.grad_info
    c0 = evaluation_counts(info)
    t0 = time.perf_counter()
    compiled = nutpie.compile_pymc_model(model)
    idata = nutpie.sample(compiled, draws=draws, tune=tune, chains=chains, seed=seed, cores=1,
                          progress_bar=False, save_warmup=True)
    wall = time.perf_counter() - t0
    c1 = evaluation_counts(info)
    steps = int(idata.warmup_sample_stats["n_steps"].sum() + idata.sample_stats["n_steps"].sum())
    note = f"leapfrog steps (n_steps, warm-up + draws) {steps}"
    return idata, {"calls": c1[0] - c0[0], "grads": c1[1] - c0[1], "wall_s": wall,
                   "note": note}


def _run_smc(problem: Problem, *, chains: int, seed: int, particles: int
             ) -> tuple[Any, dict[str, Any]]:
    import pymc as pm

    model, info = problem.model, problem.info
    c0 = evaluation_counts(info)
    t0 = time.perf_counter()
    with model:
        idata = pm.sample_smc(draws=particles, chains=chains, cores=1, random_seed=seed,
                              progressbar=False, compute_convergence_checks=False)
    wall = time.perf_counter() - t0
    c1 = evaluation_counts(info)
    stats = idata.sample_stats
    stages = [int(v) for v in np.atleast_1d(stats["stage"].values)] if "stage" in stats else []
    note = f"{particles} particles per chain; stages per chain {stages}" if stages else \
        f"{particles} particles per chain"
    return idata, {"calls": c1[0] - c0[0], "grads": c1[1] - c0[1], "wall_s": wall,
                   "note": note}


def _run_pyvbmc(problem: Problem, *, n_draws: int, seed: int) -> tuple[Any, dict[str, Any]]:
    """PyVBMC on the unconstrained space of the (black-box) model, defaults, display off.

    Start and plausible box: the mode by BFGS (finite-difference gradients) and +-3 sds
    from its inverse-Hessian estimate; every evaluation counted.
    """
    import arviz as az
    import pytensor
    from pymc.blocking import DictToArrayBijection, RaveledVars
    from pyvbmc import VBMC
    from scipy.optimize import minimize

    model, info = problem.model, problem.info
    c0 = evaluation_counts(info)
    t0 = time.perf_counter()
    logp = model.compile_logp(jacobian=True)
    start = model.initial_point()
    raveled = DictToArrayBijection.map(start)
    point_map = raveled.point_map_info

    def log_density(x: np.ndarray) -> float:
        value = float(logp(DictToArrayBijection.rmap(RaveledVars(np.asarray(x, float).ravel(),
                                                                 point_map))))
        return value if np.isfinite(value) else -1e300

    x_start = raveled.data.astype(float)
    fit = minimize(lambda x: -log_density(x), x_start, method="BFGS")
    c_mode = evaluation_counts(info)[0] - c0[0]
    sd = np.sqrt(np.clip(np.diag(np.atleast_2d(fit.hess_inv)), 1e-12, None))
    x0 = fit.x.reshape(1, -1)
    plb, pub = x0 - 3 * sd, x0 + 3 * sd
    lb, ub = np.full_like(x0, -np.inf), np.full_like(x0, np.inf)
    np.random.seed(seed)  # PyVBMC draws from numpy's global generator
    vbmc = VBMC(log_density, x0, lb, ub, plb, pub, options={"display": "off"})
    vp, results = vbmc.optimize()
    wall_fit = time.perf_counter() - t0
    c1 = evaluation_counts(info)
    samples, _ = vp.sample(n_draws)
    # back to the model's variables (transforms undone)
    outs = model.replace_rvs_by_values(model.free_RVs)
    to_constrained = pytensor.function(model.value_vars, outs, on_unused_input="ignore")
    draws: dict[str, list[np.ndarray]] = {rv.name: [] for rv in model.free_RVs}
    for x in samples:
        point = DictToArrayBijection.rmap(RaveledVars(x, point_map))
        values = to_constrained(*[point[v.name] for v in model.value_vars])
        for rv, value in zip(model.free_RVs, values):
            draws[rv.name].append(np.asarray(value))
    idata = az.from_dict(posterior={k: np.stack(v)[None] for k, v in draws.items()})
    note = (f"mode and box: {c_mode} calls; VBMC: {results.get('func_count', '?')} calls, "
            f"converged {results.get('success_flag', '?')}, "
            f"{n_draws} draws of the fitted mixture")
    return idata, {"calls": c1[0] - c0[0], "grads": c1[1] - c0[1], "wall_s": wall_fit,
                   "note": note}


# ---------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------


def _mcse_sd(x: np.ndarray) -> np.ndarray:
    """Monte Carlo standard error of the sd of every entry of ``x`` (chain, draw, *shape):
    the delta method on the variance, ``MCSE(var) / (2 sd)``, with the ESS of the squared
    deviations (what ``az.mcse(method="sd")`` does; called directly it fails on this
    ArviZ/numpy pair)."""
    import arviz as az

    flat = x.reshape(x.shape[0], x.shape[1], -1)
    out = np.empty(flat.shape[2])
    for j in range(flat.shape[2]):
        dev2 = (flat[:, :, j] - flat[:, :, j].mean()) ** 2
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ess = float(az.ess(dev2, method="mean"))
        sd = np.sqrt(dev2.mean())
        out[j] = dev2.std() / np.sqrt(max(ess, 1.0)) / (2 * sd) if sd > 0 else np.inf
    return out


def _measure(problem: Problem, sampler: str, idata: Any, cost: Mapping[str, Any], chains: int,
             iterations: str, per_ess: bool = True) -> tuple[dict[str, Any], list[dict]]:
    row: dict[str, Any] = {c: float("nan") for c in COLUMNS}
    post = posterior_dataset(idata)
    cmp = compare_with_reference(post, problem.names, problem.ref, chains)
    ess = cmp["min_ess_bulk"]
    se_sd = np.concatenate([_mcse_sd(np.asarray(post[v].values, float)) for v in problem.names])
    sd = np.array([r["sd"] for r in cmp["parameters"]])
    ref_sd = np.array([r["ref_sd"] for r in cmp["parameters"]])
    sd_z = np.abs(sd - ref_sd) / np.sqrt(se_sd**2 + ref_sd**2 / (2 * problem.ref_n))
    for record, z in zip(cmp["parameters"], sd_z):
        record["sd_z"] = float(z)
    row.update(
        problem=problem.name, sampler=sampler, kind=APPROXIMATE.get(sampler, "exact (MCMC)"),
        iterations=iterations, max_abs_z=cmp["max_abs_z"], z_at=cmp["z_at"],
        sd_ratio_min=cmp["sd_ratio_min"], sd_ratio_max=cmp["sd_ratio_max"],
        max_sd_z=float(np.max(sd_z)),
        tails_ok=cmp["tails_ok"], min_ess=ess, max_rhat=cmp["max_rhat"],
        calls=cost["calls"], grads=cost["grads"], wall_s=cost["wall_s"],
        note=cost.get("note", ""),
    )
    if per_ess and ess > 0:
        row["calls_per_ess"] = cost["calls"] / ess
        row["work_per_ess"] = (cost["calls"] + cost["grads"]) / ess
    status_row = {"max_abs_z": cmp["max_abs_z"], "max_rhat": cmp["max_rhat"],
                  "tails_ok": cmp["tails_ok"], "chains": chains,
                  "n_warnings": cost.get("n_warnings", 0),
                  "divergences": cost.get("divergences")}
    row["status"] = classify(status_row)
    if not np.max(sd_z) <= 4.0:
        row["status"] = "wrong"
    params = [{"problem": problem.name, "sampler": sampler, **r} for r in cmp["parameters"]]
    return row, params


def _cell(value: Any, column: str) -> str:
    if isinstance(value, str):
        return value.replace("|", "\\|")
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "–"
    if column in ("calls", "grads"):
        return f"{int(value)}"
    if column == "min_ess":
        return f"{value:.0f}"
    if column == "max_rhat":
        return f"{value:.3f}"
    if column == "wall_s":
        return f"{value:.0f}"
    if column in ("sd_ratio_min", "sd_ratio_max"):
        return f"{value:.3f}"
    if column in ("max_abs_z", "max_sd_z"):
        return f"{value:.2f}"
    return f"{value:.3g}"


def write_tables(rows: Sequence[Mapping[str, Any]], params: Sequence[Mapping[str, Any]],
                 out_dir: Path, tag: str, meta: Mapping[str, str],
                 references: Mapping[str, str]) -> Path:
    """``<tag>.md``, ``<tag>.csv`` and ``<tag>_parameters.csv`` under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(list(rows), columns=COLUMNS).to_csv(out_dir / f"{tag}.csv", index=False)
    pd.DataFrame(list(params), columns=["problem", "sampler", *PARAMETER_COLUMNS[2:], "sd_z"]).to_csv(
        out_dir / f"{tag}_parameters.csv", index=False)
    shown = [c for c in COLUMNS if c != "note"]
    lines = [f"# Compared with: {tag}", ""]
    lines += [f"- **{k}**: {v}" for k, v in meta.items()]
    lines += ["", "| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(_cell(r.get(c), c) for c in shown) + " |" for r in rows]
    notes = [r for r in rows if r.get("note")]
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- **{r['problem']} / {r['sampler']}**: {_cell(r['note'], 'note')}"
                  for r in notes]
    lines += ["", "## References", ""]
    lines += [f"- **{p}**: {s}" for p, s in references.items()]
    doc = (__doc__ or "").split("Columns (", 1)[-1].split("Run (", 1)[0]
    lines += ["", "## Columns", "", "Columns (" + doc.rstrip(), ""]
    md = out_dir / f"{tag}.md"
    md.write_text("\n".join(lines))
    return md


def run_compared(problems: Sequence[str], samplers: Sequence[str], *, seed: int, tune: int,
                 draws: int, pde_chains: int, chains: int, quick: bool, out_dir: Path,
                 tag: str, command: str) -> pd.DataFrame:
    """Every problem x sampler; see the module docstring."""
    log_to_stderr(_log, "compared")
    registry, registry_error = available_samplers()
    meta = {
        "command": command,
        "settings": f"tune={tune} draws={draws} per chain, chains={chains} (PDE: {pde_chains}), "
        f"cores=1, seed={seed}; DEMetropolisZ tune={LONG_DEMZ['tune'] if not quick else tune} "
        f"draws={LONG_DEMZ['draws'] if not quick else draws}; SMC {500 if quick else 2000} "
        "particles per chain; "
        f"PyVBMC one run, chains x draws draws of its fit",
        "commit": git_commit(),
        **environment_meta(),
    }
    try:
        import nutpie
        import pyvbmc  # noqa: F401
        from importlib.metadata import version

        meta["peers"] = (f"nutpie {nutpie.__version__}, pyvbmc {version('pyvbmc')}, "
                         f"arviz {version('arviz')}")
    except Exception as exc:  # a peer not installed: its rows become errors
        meta["peers"] = f"not all importable: {exc}"
    if registry_error:
        meta["step registry"] = registry_error
    rows: list[dict[str, Any]] = []
    params: list[dict[str, Any]] = []
    references: dict[str, str] = {}
    with _blas_limit(1):
        for name in problems:
            n_chains = pde_chains if name == "pde" else chains
            try:
                problem = make_problem(name, quick=quick, chains=n_chains)
            except Exception as exc:
                rows.append({"problem": name, "sampler": "-", "status": "error",
                             "note": _describe(exc)})
                write_tables(rows, params, out_dir, tag, meta, references)
                continue
            references[problem.name] = problem.ref_source
            for sampler in samplers:
                _log.info("%s / %s ...", problem.name, sampler)
                it_tune, it_draws = tune, draws
                if sampler == "DEMetropolisZ" and not quick:
                    it_tune, it_draws = LONG_DEMZ["tune"], LONG_DEMZ["draws"]
                iterations = f"{n_chains} x ({it_tune} + {it_draws})"
                particles = 500 if quick else 2000
                if sampler == "SMC":
                    iterations = f"{n_chains} x {particles} particles"
                elif sampler == "PyVBMC":
                    iterations = "one fit"
                try:
                    per_ess = True
                    if sampler == "nutpie":
                        idata, cost = _run_nutpie(problem, tune=tune, draws=draws,
                                                  chains=n_chains, seed=seed)
                        rchains = n_chains
                    elif sampler == "SMC":
                        idata, cost = _run_smc(problem, chains=n_chains, seed=seed,
                                               particles=particles)
                        rchains = n_chains
                    elif sampler == "PyVBMC":
                        idata, cost = _run_pyvbmc(problem, n_draws=n_chains * draws, seed=seed)
                        rchains, per_ess = 1, False
                    else:
                        step_cls = registry.get(sampler)
                        if step_cls is None:
                            raise KeyError(f"unknown sampler {sampler!r}")
                        gradient = sampler == "NUTS" or needs_gradient(step_cls, problem.model)
                        model, info = ((problem.grad_model, problem.grad_info) if gradient
                                       else (problem.model, problem.info))
                        run = sample_counted(model, info, sampler, step_cls, draws=it_draws,
                                             tune=it_tune, chains=n_chains, seed=seed,
                                             keep_warnings=True)
                        idata = run.idata
                        stats = posterior_dataset(idata, "sample_stats")
                        div = (int(stats["diverging"].values.sum())
                               if "diverging" in stats else None)
                        cost = {"calls": run.timing["n_logp"], "grads": run.timing["n_grad"],
                                "wall_s": run.timing["total_s"],
                                "n_warnings": len(run.warnings), "divergences": div}
                        notes = []
                        if gradient and name == "pde":
                            notes.append("adjoint-gradient model")
                        if div:
                            notes.append(f"{div} divergences")
                        if run.warnings:
                            notes.append(f"{len(run.warnings)} warnings, first: "
                                         f"{run.warnings[0][:160]}")
                        cost["note"] = "; ".join(notes)
                        rchains = n_chains
                    row, p = _measure(problem, sampler, idata, cost, rchains, iterations,
                                      per_ess)
                except KeyboardInterrupt:
                    raise
                except Exception as exc:
                    row = {c: float("nan") for c in COLUMNS}
                    row.update(problem=problem.name, sampler=sampler, status="error",
                               kind=APPROXIMATE.get(sampler, "exact (MCMC)"),
                               iterations=iterations, note=_describe(exc), z_at="")
                    p = []
                _log.info("%s / %s: %s, max|z| %.2f, sd %.3f-%.3f, ESS %.0f, calls %s, %.0f s",
                          problem.name, sampler, row["status"], row["max_abs_z"],
                          row["sd_ratio_min"], row["sd_ratio_max"], row["min_ess"],
                          row["calls"], row["wall_s"])
                rows.append(row)
                params.extend(p)
                write_tables(rows, params, out_dir, tag, meta, references)
    return pd.DataFrame(rows, columns=COLUMNS)


def user_table(csv_paths: Sequence[Path | str]) -> str:
    """The docs page's tables (``docs/compared.md``) from result CSVs: one per problem."""
    frame = pd.concat([pd.read_csv(p) for p in csv_paths], ignore_index=True)
    out: list[str] = []
    for problem, rows in frame.groupby("problem", sort=False):
        out += [f"**{problem}**", "",
                "| sampler | verdict | max \\|z\\| of means | sd ratios | max \\|z\\| of sds "
                "| min ESS | model calls (with gradient) | calls / ESS | calls + gradients / ESS "
                "| seconds |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for _, r in rows.iterrows():
            if r["status"] == "error":
                out.append(f"| {r['sampler']} | did not run | | | | | | | | |")
                continue
            verdict = {"ok": "right", "warned": "right (warned)"}.get(r["status"], "**wrong**")
            calls = f"{int(r['calls'])} ({int(r['grads'])})"
            per = ("–" if not np.isfinite(r["calls_per_ess"]) else f"{r['calls_per_ess']:.3g}")
            work = ("–" if not np.isfinite(r["work_per_ess"]) else f"{r['work_per_ess']:.3g}")
            out.append(
                f"| {r['sampler']} | {verdict} | {r['max_abs_z']:.2f} "
                f"| {r['sd_ratio_min']:.3f}-{r['sd_ratio_max']:.3f} | {r['max_sd_z']:.2f} "
                f"| {r['min_ess']:.0f} | {calls} | {per} | {work} | {r['wall_s']:.0f} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--problems", default="pde,arma-arma11,kilpisjarvi_mod-kilpisjarvi")
    p.add_argument("--samplers", help="comma-separated (default: ours, then the peers)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--chains", type=int, default=4, help="chains on the posteriordb problems")
    p.add_argument("--pde-chains", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="small PDE, short runs (plumbing)")
    p.add_argument("--out", type=Path, default=DEFAULT_RESULTS_DIR)
    p.add_argument("--tag", default=None)
    p.add_argument("--render", nargs="+", type=Path, metavar="CSV",
                   help="print the docs page's tables from result CSVs and exit")
    args = p.parse_args(argv)
    if args.render:
        print(user_table(args.render))
        return 0
    registry, _ = available_samplers()
    ours = [n for n in registry if n not in ("NUTS", "DEMetropolisZ", "Slice")]
    samplers = split_names(args.samplers) or [*ours, *PEERS]
    if args.quick:
        args.tune, args.draws = min(args.tune, 200), min(args.draws, 200)
    tag = args.tag or f"compared_with_{'quick_' if args.quick else ''}{_dt.datetime.now():%Y%m%d-%H%M%S}"
    command = "python benchmarks/compared_with.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    frame = run_compared(split_names(args.problems), samplers, seed=args.seed, tune=args.tune,
                         draws=args.draws, pde_chains=args.pde_chains, chains=args.chains,
                         quick=args.quick, out_dir=args.out, tag=tag, command=command.strip())
    print(f"wrote {args.out / (tag + '.md')}")
    return 0 if not (frame["status"] == "error").any() else 1


if __name__ == "__main__":
    sys.exit(main())
