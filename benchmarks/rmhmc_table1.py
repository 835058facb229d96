"""rns-hmc Table 1, side by side: NUTS, exact RMHMC, RNS-HMC and RNS-RMHMC (issue 35).

The simulated logistic regression (rns-hmc §5.1, d = 50, N = 1e5 at ``--size paper``) and
the elliptic PDE inverse problem (§5.2, d = 20, 30 x 30 mesh), four rows each, one run::

    PYTHONPATH=. python benchmarks/rmhmc_table1.py --tag paper
    python benchmarks/rmhmc_table1.py --problems pde --rmhmc-draws 200 --tag x
    python benchmarks/rmhmc_table1.py --size smoke --draws 30 --tune 30 --tag smoke

Rows: ``NUTS`` (PyMC's default ``pm.sample()``), ``RMHMC`` (exact Riemannian HMC on the
model itself: :func:`pymc_surrogate.core.riemannian.riemannian_move` on the exact field of
:class:`LogisticField` or :class:`PDEFisherField`, SoftAbs of the Hessian / Fisher metric,
the paper's L; its step size from the paper or tuned by PyMC's ``DualAverageAdaptation``,
``--rmhmc-step``), ``RNS-HMC`` (``SurrogateHMC()``) and ``RNS-RMHMC``
(``SurrogateHMC(metric="riemannian")``). Every row: ``chains`` chains run one after the
other (``cores=1``) from the same seed. Exact RMHMC costs seconds per iteration at the
paper's size, so it may run fewer iterations (``--rmhmc-tune``, ``--rmhmc-draws``): ESS per
second stays comparable, and the table shows each row's own draws and tune.

Columns: ``accept`` (NUTS: mean ``acceptance_rate``; RMHMC: mean Metropolis probability;
surrogate steps: mean ``accepted`` of the true-logp correction), bulk ESS min / median / max
over the parameters (ArviZ, all chains), ``s_per_iter`` (seconds per draw iteration,
summed over chains), ``ess_s`` = min ESS / draw seconds and ``ess_s_total`` = min ESS /
(tune + draw seconds), ``speedup`` = ess_s / NUTS's ess_s, ``vs_rmhmc`` = ess_s / RMHMC's
ess_s (and ``vs_rmhmc_total`` on the totals), ``n_evals`` = logp + gradient evaluations
over tune and draws (NUTS and the surrogate steps: the models' counters; RMHMC: one logp
and one gradient per field evaluation, each of which also builds the metric and its
derivatives -- logistic: O(N d^2) work, PDE: d (d + 3) / 2 extra triangular solve pairs on
one factorisation), ``evals_per_ess``, ``max_rhat``, ``mean_vs_nuts`` = max over the
parameters of |mean - NUTS mean| / NUTS sd, ``divergences`` and, for RMHMC,
``implicit_failures`` / ``irreversible`` (generalised-leapfrog steps whose Newton iteration
did not converge / trajectories that did not retrace themselves). Output:
``benchmarks/results/rmhmc_table1_<tag>.{csv,md}``, rewritten after every row.

Not as in the paper: NUTS instead of HMC with fixed (eps, L); 1000 + 1000 iterations
instead of 5000 + 5000; the paper's RNS-RMHMC on the PDE used the diagonal of the
surrogate's Hessian as metric, ``SurrogateHMC(metric="riemannian")`` uses SoftAbs of the
whole surrogate Hessian; and ``riemannian_move`` runs every trajectory back to check its
reversibility (both RMHMC rows pay it, about twice the field evaluations per iteration).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import xarray as xr  # noqa: E402
from pymc.step_methods.step_sizes import DualAverageAdaptation  # noqa: E402
from scipy.special import expit  # noqa: E402

import pymc_surrogate  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    DEFAULT_RESULTS_DIR, _describe, _mean_acceptance, environment_meta, format_cell, git_commit,
    sample_counted, split_names,
)
from benchmarks.models import build_model  # noqa: E402
from benchmarks.models.elliptic_pde import _K_REF, EllipticPDEProblem  # noqa: E402
from benchmarks.models.logistic import simulate_logistic_data  # noqa: E402
from pymc_surrogate.compat import posterior_dataset  # noqa: E402
from pymc_surrogate.core.riemannian import riemannian_move  # noqa: E402
from pymc_surrogate.core.softabs import geometry  # noqa: E402
from pymc_surrogate.surrogates.third_derivatives import RankOneCubes  # noqa: E402

RUNS = ("NUTS", "RMHMC", "RNS-HMC", "RNS-RMHMC")
#: Runs that ``--runs`` may add: RNS-RMHMC with SoftAbs of the surrogate Hessian's diagonal
#: (the paper's metric on the PDE, §5.2).
EXTRA_RUNS = ("RNS-RMHMC-diag",)
PROBLEMS = ("logistic", "pde")
#: The paper's RMHMC settings (§5.1, §5.2): step size and leapfrog steps.
PAPER_RMHMC = {"logistic": (0.54, 2), "pde": (0.8, 3)}
#: Model sizes: the paper's, and a tiny one for the smoke test.
SIZES = {"paper": {"logistic": {"n_obs": 100_000, "n_features": 50},
                   "pde": {"n_modes": 20, "mesh_size": 30}},
         "smoke": {"logistic": {"n_obs": 500, "n_features": 5},
                   "pde": {"n_modes": 4, "mesh_size": 10}}}
TARGET_RATIO = 10.0


# ------------------------------------------------------------------ exact fields
class LogisticField:
    """Exact field of the logistic regression's potential, for Riemannian HMC.

    ``U(b) = -sum_n [y_n eta_n - log(1 + e^eta_n)] + |b|^2 / (2 prior_sd^2)``, ``eta = X b``;
    gradient ``-X^T (y - p) + b / prior_sd^2``; Hessian ``X^T diag(p (1 - p)) X + I /
    prior_sd^2`` (also the Fisher metric); its derivative ``dH/db_i = sum_n p_n (1 - p_n)
    (1 - 2 p_n) x_ni x_n x_n^T``, one rank-one cube per data row.

    Parameters
    ----------
    X : ndarray, shape (N, d)
    y : ndarray, shape (N,)
    prior_sd : float
        The coefficients' prior sd (rns-hmc: 10).

    Attributes
    ----------
    calls : int
        Field evaluations so far (each one logp, one gradient, the Hessian and its derivative).
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, prior_sd: float = 10.0) -> None:
        self.X, self.y, self.precision = np.asarray(X), np.asarray(y), 1.0 / prior_sd**2
        self.calls = 0

    def __call__(self, beta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, list]:
        self.calls += 1
        eta = self.X @ beta
        p = expit(eta)
        w = p * (1.0 - p)
        potential = (-float(self.y @ eta - np.logaddexp(0.0, eta).sum())
                     + 0.5 * self.precision * float(beta @ beta))
        grad = -self.X.T @ (self.y - p) + self.precision * beta
        hessian = (self.X.T * w) @ self.X + self.precision * np.eye(beta.size)
        # d w / d eta = p (1 - p) (1 - 2 p): the curvature falls where p passes 1/2.
        return potential, grad, hessian, [RankOneCubes(w * (1.0 - 2.0 * p), self.X)]


class PDEFisherField:
    """Exact potential of the elliptic PDE problem with its Fisher metric, for RMHMC.

    ``U(t) = |y - u(t)|^2 / (2 s_y^2) + |t|^2 / (2 s_t^2)`` with gradient ``-J^T (y - u) /
    s_y^2 + t / s_t^2``; the "Hessian" handed to the metric is the Fisher information
    ``G = J^T J / s_y^2 + I / s_t^2`` and the third derivatives ``dG/dt_k = (H_k^T J + J^T
    H_k) / s_y^2``, ``H_k = dJ/dt_k`` the second-order sensitivities
    (:meth:`sensitivities`).

    Parameters
    ----------
    problem : EllipticPDEProblem
    y : ndarray, shape (n_obs,)
    noise_sd, prior_sd : float

    Attributes
    ----------
    calls : int
        Field evaluations so far (each: one factorisation and 1 + d + d (d + 1) / 2
        solves).
    """

    def __init__(self, problem: EllipticPDEProblem, y: np.ndarray, noise_sd: float,
                 prior_sd: float) -> None:
        self.problem, self.y = problem, np.asarray(y, dtype=np.float64)
        self.noise_var, self.prior_var = noise_sd**2, prior_sd**2
        self.calls = 0
        conn = problem._conn
        to_free = -np.ones(len(problem.nodes), dtype=np.int64)
        to_free[problem.free_nodes] = np.arange(problem.n_free)
        rows = to_free[conn.ravel()]
        keep = rows >= 0
        # Scatters element-local residual entries (n_elem * 4, k) to the free nodes:
        # dr/dc_e = (K_e u)_free, bilinear in (c, u).
        self._scatter = sp.csr_matrix(
            (np.ones(int(keep.sum())), (rows[keep], np.flatnonzero(keep))),
            shape=(problem.n_free, conn.size))
        k, l = np.triu_indices(problem.n_modes)
        self._pairs = (k, l)

    def sensitivities(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``u_obs``, ``J = du_obs/dt`` and ``H[j, k, l] = d^2 u_obs,j / dt_k dt_l``.

        From ``A(c) u = b(c)``, ``c = exp(Phi t)``, with residual ``r = D(u) c``
        (``D(u)``'s column ``e``: ``K_e u`` on the free nodes): ``A du_k = -D(u) (c o
        Phi_k)`` and ``A d2u_kl = -[D(du_k) (c o Phi_l) + D(du_l) (c o Phi_k) + D(u) (c o
        Phi_k o Phi_l)]``: one factorisation, d + d (d + 1) / 2 solves.
        """
        pb = self.problem
        lu, u_free, c = pb._solve(pb._theta(theta))
        u = pb._u_dirichlet_full.copy()
        u[pb.free_nodes] = u_free
        n_elem, d = pb.Phi.shape
        ku = u[pb._conn] @ _K_REF.T  # (n_elem, 4)
        c_phi = c[:, None] * pb.Phi  # dc/dt
        du_free = -lu.solve(np.asarray(self._scatter @ (ku[:, :, None] * c_phi[:, None, :])
                                       .reshape(n_elem * 4, d)))
        du = np.zeros((len(pb.nodes), d))
        du[pb.free_nodes] = du_free
        kdu = np.einsum("ab,ebk->eak", _K_REF, du[pb._conn])  # (n_elem, 4, d)
        k, l = self._pairs
        rhs = (kdu[:, :, k] * c_phi[:, None, l] + kdu[:, :, l] * c_phi[:, None, k]
               + ku[:, :, None] * (c_phi[:, k] * pb.Phi[:, l])[:, None, :])
        d2u_free = -lu.solve(np.asarray(self._scatter @ rhs.reshape(n_elem * 4, k.size)))
        pairs = pb._O_free @ d2u_free
        hess = np.empty((pb.n_obs, d, d))
        hess[:, k, l] = pairs
        hess[:, l, k] = pairs
        return pb._O_free @ u_free + pb._obs_offset, np.asarray(pb._O_free @ du_free), hess

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        self.calls += 1
        u_obs, jac, hess = self.sensitivities(theta)
        resid = self.y - u_obs
        potential = (0.5 * float(resid @ resid) / self.noise_var
                     + 0.5 * float(theta @ theta) / self.prior_var)
        grad = -jac.T @ resid / self.noise_var + theta / self.prior_var
        fisher = jac.T @ jac / self.noise_var + np.eye(theta.size) / self.prior_var
        half = np.einsum("jka,jb->kab", hess, jac) / self.noise_var  # (H_k^T J)_ab
        return potential, grad, fisher, half + half.transpose(0, 2, 1)


@dataclass
class Problem:
    """One Table 1 problem: its PyMC model and evaluation counter, its exact field."""

    name: str
    model: Any
    info: Any
    field: Callable
    var: str
    rmhmc: tuple[float, int]  # the paper's step size and leapfrog steps
    description: str


def make_problem(name: str, size: str = "paper") -> Problem:
    """The PyMC model (with gradient) and exact RMHMC field of one problem."""
    kwargs = SIZES[size][name]
    if name == "logistic":
        model, info = build_model("logistic", "paper", **kwargs)
        X, y, _ = simulate_logistic_data(kwargs["n_obs"], kwargs["n_features"], info.extra["seed"])
        return Problem(name, model, info, LogisticField(X, y, 10.0), "beta", PAPER_RMHMC[name],
                       info.description)
    model, info = build_model("pde_adjoint", "paper", **kwargs)
    field = PDEFisherField(info.problem, info.data, info.noise_sd, info.prior_sd)
    return Problem(name, model, info, field, "theta", PAPER_RMHMC[name],
                   f"elliptic PDE, d={kwargs['n_modes']}, mesh {kwargs['mesh_size']}^2, "
                   f"121 observations, noise sd {info.noise_sd}, prior sd {info.prior_sd}")


# ------------------------------------------------------------------ exact RMHMC
def sample_rmhmc(field: Callable, start: np.ndarray, *, step_size: float, n_steps: int,
                 tune: int, draws: int, rng: np.random.Generator, adapt: bool,
                 alpha: float = 1.0, target_accept: float = 0.8) -> dict[str, Any]:
    """Exact Riemannian HMC chains on ``field`` (one after the other).

    Parameters
    ----------
    field : callable
        ``q -> (U, dU/dq, H, dH/dq)``, with ``calls`` counting its evaluations.
    start : ndarray, shape (chains, d)
        Each chain's initial point.
    step_size, n_steps : float, int
        The leapfrog step (initial, if adapted) and number of steps.
    tune, draws : int
        Iterations per chain; tune draws are discarded.
    rng : numpy.random.Generator
    adapt : bool
        Tune the step size with PyMC's ``DualAverageAdaptation`` (NUTS's settings: gamma
        0.05, k 0.75, t0 10) towards ``target_accept``; else keep ``step_size``.
    alpha : float
        SoftAbs sharpness.

    Returns
    -------
    dict
        ``draws`` (chains, draws, d), ``accept`` (chains, draws), ``diverged``,
        ``implicit_failures``, ``irreversible`` (totals over draws), ``step_size`` (final,
        per chain), ``tune_s``, ``draws_s``, ``tune_calls``, ``draw_calls``.
    """
    chains, dim = start.shape
    out = {"draws": np.empty((chains, draws, dim)), "accept": np.empty((chains, draws)),
           "diverged": 0, "implicit_failures": 0, "irreversible": 0, "step_size": [],
           "tune_s": 0.0, "draws_s": 0.0, "tune_calls": 0, "draw_calls": 0}
    for chain in range(chains):
        dual = DualAverageAdaptation(step_size, target_accept, 0.05, 0.75, 10)
        geom = geometry(start[chain], field, alpha)
        for it in range(tune + draws):
            tuning = it < tune
            eps = dual.current(tuning) if adapt else step_size
            t0, c0 = time.perf_counter(), field.calls
            move = riemannian_move(geom, field, alpha, eps, n_steps, rng)
            phase = "tune" if tuning else "draw"
            out["tune_s" if tuning else "draws_s"] += time.perf_counter() - t0
            out[f"{phase}_calls"] += field.calls - c0
            if adapt:
                dual.update(move.accept_prob, tuning)
            geom = move.geom
            if not tuning:
                k = it - tune
                out["draws"][chain, k], out["accept"][chain, k] = geom.q, move.accept_prob
                out["diverged"] += int(move.diverged)
                out["implicit_failures"] += move.implicit_failures
                out["irreversible"] += int(move.irreversible)
        out["step_size"].append(dual.current(False) if adapt else step_size)
    return out


# ------------------------------------------------------------------ one row
def ess_columns(post, var: str, chains: int) -> dict[str, Any]:
    """Bulk ESS min / median / max and max R-hat of ``var``, and its means and sds."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ess = np.asarray(az.ess(post, method="bulk")[var]).ravel()
        rhat = float(np.max(np.asarray(az.rhat(post)[var]))) if chains > 1 else np.nan
    values = np.asarray(post[var])
    values = values.reshape(-1, values.shape[-1]) if values.ndim > 2 else values.reshape(-1, 1)
    return {"ess_min": float(ess.min()), "ess_median": float(np.median(ess)),
            "ess_max": float(ess.max()), "max_rhat": rhat,
            "_mean": values.mean(axis=0), "_sd": values.std(axis=0, ddof=1)}


def run_row(run: str, problem: Problem, *, draws: int, tune: int, chains: int, seed: int,
            rmhmc_draws: int, rmhmc_tune: int, rmhmc_step: str) -> dict[str, Any]:
    """One row of the table (an exception becomes an ``error`` row)."""
    row: dict[str, Any] = {"problem": problem.name, "run": run, "status": "error",
                           "chains": chains}
    try:
        if run == "RMHMC":
            row.update(_rmhmc_row(problem, chains, seed, rmhmc_draws, rmhmc_tune, rmhmc_step))
        else:
            row.update(_pymc_row(run, problem, draws, tune, chains, seed))
        row["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - a failing run is a row
        row["error"] = _describe(exc)
    return row


def _pymc_row(run: str, problem: Problem, draws: int, tune: int, chains: int,
              seed: int) -> dict[str, Any]:
    sampler = "NUTS" if run == "NUTS" else "SurrogateHMC"
    kwargs = {"RNS-RMHMC": {"kernel": {"metric": "riemannian"}},
              "RNS-RMHMC-diag": {"kernel": {"metric": "riemannian-diagonal"}}}.get(run, {})
    res = sample_counted(problem.model, problem.info, sampler,
                         pymc_surrogate.STEP_METHODS.get(sampler), draws=draws, tune=tune,
                         chains=chains, seed=seed, sampler_kwargs=kwargs, keep_warnings=True)
    post = posterior_dataset(res.idata)[[problem.var]]
    stats = posterior_dataset(res.idata, "sample_stats")
    t = res.timing
    row = {"draws": draws, "tune": tune, "accept": _mean_acceptance(stats),
           "draws_s": t["draws_s"], "tune_s": t["tune_s"], "wall_s": t["total_s"],
           "n_evals": t["n_logp"] + t["n_grad"], "n_logp": t["n_logp"], "n_grad": t["n_grad"],
           "divergences": int(stats["diverging"].sum()) if "diverging" in stats else np.nan,
           "implicit_failures": (int(stats["implicit_failures"].values.sum())
                                 if "implicit_failures" in stats else np.nan),
           "n_warnings": len(res.warnings),
           "first_warning": res.warnings[0][:300] if res.warnings else ""}
    row.update(ess_columns(post, problem.var, chains))
    return row


def _rmhmc_row(problem: Problem, chains: int, seed: int, draws: int, tune: int,
               step: str) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    q0 = problem.model.initial_point()[problem.var]
    # PyMC's "jitter+adapt_diag" start: the initial point plus U(-1, 1) jitter per chain.
    start = q0 + rng.uniform(-1.0, 1.0, size=(chains, q0.size))
    eps, n_steps = problem.rmhmc
    calls0 = problem.field.calls
    t0 = time.perf_counter()
    res = sample_rmhmc(problem.field, start, step_size=eps, n_steps=n_steps, tune=tune,
                       draws=draws, rng=rng, adapt=step == "adapt")
    wall = time.perf_counter() - t0
    calls = problem.field.calls - calls0
    # A plain Dataset: ArviZ 0.x and 1.x (PyMC 5 and 6) both take it.
    post = xr.Dataset({problem.var: (("chain", "draw", f"{problem.var}_dim_0"), res["draws"])})
    row = {"draws": draws, "tune": tune, "accept": float(res["accept"].mean()),
           "draws_s": res["draws_s"], "tune_s": res["tune_s"], "wall_s": wall,
           "n_evals": 2 * calls, "n_logp": calls, "n_grad": calls,
           "divergences": res["diverged"], "implicit_failures": res["implicit_failures"],
           "irreversible": res["irreversible"],
           "step_size": float(np.mean(res["step_size"])), "n_steps": n_steps,
           "n_warnings": 0, "first_warning": ""}
    row.update(ess_columns(post, problem.var, chains))
    return row


def finish(rows: list[dict[str, Any]]) -> None:
    """Per-ESS, per-second and relative columns, once a problem's rows are in."""
    for r in rows:
        if r["status"] != "ok":
            continue
        r["s_per_iter"] = r["draws_s"] / (r["draws"] * r["chains"])
        r["ess_s"] = r["ess_min"] / r["draws_s"] if r["draws_s"] > 0 else np.nan
        total = r["draws_s"] + r["tune_s"]
        r["ess_s_total"] = r["ess_min"] / total if total > 0 else np.nan
        r["evals_per_ess"] = r["n_evals"] / r["ess_min"] if r["ess_min"] > 0 else np.inf
    by = {(r["problem"], r["run"]): r for r in rows if r["status"] == "ok"}
    for r in rows:
        if r["status"] != "ok":
            continue
        nuts, rm = by.get((r["problem"], "NUTS")), by.get((r["problem"], "RMHMC"))
        if nuts is not None:
            r["speedup"] = r["ess_s"] / nuts["ess_s"]
            r["speedup_total"] = r["ess_s_total"] / nuts["ess_s_total"]
            r["mean_vs_nuts"] = float(np.max(np.abs(r["_mean"] - nuts["_mean"]) / nuts["_sd"]))
        if rm is not None:
            r["vs_rmhmc"] = r["ess_s"] / rm["ess_s"]
            r["vs_rmhmc_total"] = r["ess_s_total"] / rm["ess_s_total"]


COLUMNS = [("problem", ""), ("run", ""), ("status", ""), ("tune", ".0f"), ("draws", ".0f"),
           ("accept", ".2f"), ("ess_min", ".0f"), ("ess_median", ".0f"), ("ess_max", ".0f"),
           ("s_per_iter", ".3g"), ("ess_s", ".3g"), ("ess_s_total", ".3g"), ("speedup", ".3g"),
           ("vs_rmhmc", ".3g"), ("vs_rmhmc_total", ".3g"), ("n_evals", ".0f"),
           ("evals_per_ess", ".3g"), ("max_rhat", ".3f"), ("mean_vs_nuts", ".3f"),
           ("divergences", ".0f"), ("implicit_failures", ".0f"), ("irreversible", ".0f"),
           ("step_size", ".3g"), ("wall_s", ".0f")]


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """Issue 35's target per problem: RNS-RMHMC >= 10x RMHMC in min ESS/s."""
    lines = []
    for name in dict.fromkeys(r["problem"] for r in rows):
        for run in ("RNS-RMHMC", *EXTRA_RUNS):
            r = next((r for r in rows if r["problem"] == name and r["run"] == run), None)
            if r is None and run != "RNS-RMHMC":
                continue
            if r is None or not np.isfinite(r.get("vs_rmhmc", np.nan)):
                lines.append(f"- {name}: {run} / RMHMC not measured")
                continue
            met = r["vs_rmhmc"] >= TARGET_RATIO
            lines.append(f"- {name}: {run} / RMHMC min ESS/s = {r['vs_rmhmc']:.3g}x on draws "
                         f"({r['vs_rmhmc_total']:.3g}x with tuning); target >= "
                         f"{TARGET_RATIO:g}x: {'MET' if met else 'not met'}")
    return lines


def write(rows: list[dict[str, Any]], out: Path, tag: str, meta: dict[str, str],
          notes: list[str]) -> None:
    """(Re)write ``rmhmc_table1_<tag>.csv`` and ``.md`` under ``out``."""
    frame = pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])
    frame.to_csv(out / f"rmhmc_table1_{tag}.csv", index=False)
    lines = [f"# rns-hmc Table 1: {tag}", ""] + [f"- **{k}**: {v}" for k, v in meta.items()]
    lines += notes + ["", "| " + " | ".join(c for c, _ in COLUMNS) + " |",
                      "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(format_cell(r.get(c), s) if s else format_cell(r.get(c))
                                for c, s in COLUMNS) + " |" for r in rows]
    lines += ["", "## Target (issue 35)", ""] + verdicts(rows)
    lines += ["", "## Errors and first warnings", ""]
    lines += [f"- {r['problem']} {r['run']}: {format_cell(r.get('error') or r.get('first_warning'))}"
              for r in rows if r.get("error") or r.get("first_warning")] or ["none"]
    lines += ["", "## What is measured", "", __doc__[__doc__.index("Rows:"):].strip(), ""]
    (out / f"rmhmc_table1_{tag}.md").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Command line; see the module docstring. Returns the rows."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", default=",".join(PROBLEMS))
    p.add_argument("--runs", default=",".join(RUNS))
    p.add_argument("--size", choices=sorted(SIZES), default="paper")
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--rmhmc-tune", type=int, default=None, help="default: --tune")
    p.add_argument("--rmhmc-draws", type=int, default=None, help="default: --draws")
    p.add_argument("--rmhmc-step", choices=("paper", "adapt"), default="paper",
                   help="the paper's step size, or DualAverageAdaptation from it in tune")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tag", default=f"{_dt.datetime.now():%Y%m%d-%H%M%S}")
    p.add_argument("--out", type=Path, default=DEFAULT_RESULTS_DIR)
    a = p.parse_args(argv)
    r_tune = a.tune if a.rmhmc_tune is None else a.rmhmc_tune
    r_draws = a.draws if a.rmhmc_draws is None else a.rmhmc_draws
    env = environment_meta()
    meta = {"command": f"{sys.executable} " + " ".join(sys.argv if argv is None else
                                                         ["rmhmc_table1.py", *argv]),
            "git commit": git_commit(),
            "settings": f"size={a.size} tune={a.tune} draws={a.draws} chains={a.chains} "
            f"cores=1 seed={a.seed}; RMHMC tune={r_tune} draws={r_draws}, step size "
            f"{'paper' if a.rmhmc_step == 'paper' else 'dual averaging from the paper'}'s, "
            f"paper's L, SoftAbs alpha 1",
            "versions": env["versions"], "date": f"{_dt.datetime.now():%Y-%m-%d %H:%M}",
            "machine": f"{env['machine'].rsplit(',', 1)[0]}, shared, load average at start "
            f"{os.getloadavg()[0]:.2f}"}
    a.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for name in split_names(a.problems):
        problem = make_problem(name, a.size)
        notes.append(f"- **{name}**: {problem.description}; RMHMC (paper) eps="
                     f"{problem.rmhmc[0]}, L={problem.rmhmc[1]}")
        for run in split_names(a.runs):
            rows.append(run_row(run, problem, draws=a.draws, tune=a.tune, chains=a.chains,
                                seed=a.seed, rmhmc_draws=r_draws, rmhmc_tune=r_tune,
                                rmhmc_step=a.rmhmc_step))
            finish(rows)
            r = rows[-1]
            print(f"[{_dt.datetime.now():%H:%M:%S}] {name} {run}: {r['status']} "
                  f"{format_cell(r.get('error', ''))} accept {format_cell(r.get('accept'), '.2f')} "
                  f"min ESS {format_cell(r.get('ess_min'), '.0f')} ESS/s "
                  f"{format_cell(r.get('ess_s'), '.3g')} wall {format_cell(r.get('wall_s'), '.0f')}",
                  flush=True)
            write(rows, a.out, a.tag, meta, notes)
    for line in verdicts(rows):
        print(line)
    print(f"wrote {a.out}/rmhmc_table1_{a.tag}.{{csv,md}}")
    return rows


if __name__ == "__main__":
    main()
