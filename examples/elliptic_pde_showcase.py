"""Black-box PDE showcase: surrogate HMC next to what PyMC users reach for without gradients.

The model is the elliptic PDE inverse problem of rns-hmc §5.2 (Dashti & Stuart 2011): recover
a log-diffusivity field, expanded in ``d`` Karhunen-Loève modes, from 121 noisy observations
of the solution of ``div(c grad u) = 0`` on a finite-element mesh. Every logp is one sparse
PDE solve, done in a black-box PyTensor Op without a gradient.

Samplers, one after the other in one process (``cores=1``, so the problem's counters see
every solve), with the same ``tune``/``draws``/``chains`` and seed:

* every class in ``pymc_surrogate.STEP_METHODS`` (SurrogateHMC, ...), with its defaults, on
  the black-box model;
* ``pm.DEMetropolisZ`` and ``pm.Slice`` on the black-box model (PyMC's gradient-free
  samplers); Slice pays about ``6 d`` solves an iteration, so by default it runs a tenth of
  the iterations (see ``--iterations``);
* NUTS (PyMC's default ``pm.sample()``) on the same posterior with adjoint gradients.

Printed: an ArviZ summary of SurrogateHMC, then a comparison table (wall seconds, forward and
adjoint solves, min bulk ESS, solves per effective sample, min ESS per second, max r_hat,
posterior-mean error against NUTS, and a verdict: ``WRONG`` when a chain never moved, max
r_hat is above 1.01, or a posterior mean is more than 4 Monte Carlo standard errors from
NUTS's), then what the comparison says in plain sentences; a wrong row gets no cost
comparison, since its solves bought no usable posterior sample. Saved under
``--out``: ``trace.png``, ``field.png`` (true log-diffusivity, posterior mean and sd fields),
``comparison.md`` and ``comparison.csv``.

Run::

    python examples/elliptic_pde_showcase.py                 # d = 20, 30x30 mesh, a few minutes
    python examples/elliptic_pde_showcase.py --quick         # tiny, seconds
    python examples/elliptic_pde_showcase.py --samplers SurrogateHMC,NUTS --draws 4000
    python examples/elliptic_pde_showcase.py \\
        --sampler-kwargs '{"SurrogateHMC": {"target_accept": 0.9, "kernel": {"n_inner": 3}}}'
"""

from __future__ import annotations

import os

# One BLAS thread before numpy loads: numpy's and scipy's OpenBLAS pools fight on small
# shared machines and small solves become 100x slower (threadpoolctl enforces it below too).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import matplotlib  # noqa: E402

matplotlib.use("Agg")  # files only, no display needed

import arviz as az  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pymc as pm  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(_REPO))

from benchmarks.harness import _PhaseRecorder, load_step_registry, needs_gradient  # noqa: E402
from pymc_surrogate.compat import posterior_dataset  # noqa: E402
from benchmarks.models.elliptic_pde import PDEModelInfo, make_pde_model  # noqa: E402

__all__ = ["parse_args", "main", "run_sampler", "comparison_table", "SamplerResult"]

PYMC_GRADIENT_FREE = ("DEMetropolisZ", "Slice")

#: Default iterations of a sampler, as fractions of ``--tune``/``--draws``: a Slice iteration
#: updates the d coordinates one at a time, ~6 d solves, so full length would dominate the run.
ITERATION_FRACTION = {"Slice": 0.1}

#: Table columns: (key, header, format).
TABLE_COLUMNS: list[tuple[str, str, str]] = [
    ("sampler", "sampler", "{}"),
    ("model", "model", "{}"),
    ("tune", "tune", "{:d}"),
    ("draws", "draws", "{:d}"),
    ("wall_s", "wall s", "{:.1f}"),
    ("n_forward", "forward solves", "{:d}"),
    ("n_adjoint", "adjoint solves", "{:d}"),
    ("min_ess", "min ESS", "{:.0f}"),
    ("solves_per_ess", "solves/ESS", "{:.2f}"),
    ("ess_per_s", "min ESS/s", "{:.2f}"),
    ("ess_per_s_draws", "ESS/s draws", "{:.2f}"),
    ("max_rhat", "max r_hat", "{:.3f}"),
    ("moved", "moved", "{:.2f}"),
    ("mean_err", "max |mean-NUTS|/sd", "{:.3f}"),
    ("mean_z", "max |z| vs NUTS", "{:.1f}"),
    ("verdict", "verdict", "{}"),
]

#: A row is judged wrong when its largest split R-hat is above this (Vehtari et al. 2021) ...
MAX_RHAT = 1.01
#: ... or a posterior mean lies more than this many Monte Carlo standard errors (its own
#: and NUTS's, combined) from NUTS's: about a 1e-3 chance for a right sampler over 20 modes.
MAX_MEAN_Z = 4.0

_QUICK = {"modes": 4, "mesh": 10, "tune": 400, "draws": 200, "chains": 2}
_DEFAULT = {"modes": 20, "mesh": 30, "tune": 1000, "draws": 1000, "chains": 2}


# ----------------------------------------------------------------------------- arguments
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line; unset sizes are filled from the default or ``--quick`` preset.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name; ``None`` reads ``sys.argv``.

    Returns
    -------
    argparse.Namespace
    """
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--modes", type=int, help="KL modes d (default 20)")
    p.add_argument("--mesh", type=int, help="elements per side of the FE mesh (default 30)")
    p.add_argument("--tune", type=int, help="tuning iterations per chain (default 1000)")
    p.add_argument("--draws", type=int, help="draws per chain (default 1000)")
    p.add_argument("--chains", type=int, help="chains, run one after the other (default 2)")
    p.add_argument(
        "--samplers",
        default="all",
        help="comma-separated: names in pymc_surrogate.STEP_METHODS, DEMetropolisZ, Slice, "
        "NUTS; or 'all' (default)",
    )
    p.add_argument("--seed", type=int, default=2024, help="random_seed of every pm.sample")
    p.add_argument(
        "--iterations",
        type=json.loads,
        default={},
        help='JSON per-sampler {"tune": n, "draws": n} overrides, e.g. '
        '\'{"DEMetropolisZ": {"tune": 20000, "draws": 20000}}\' (Slice defaults to a tenth)',
    )
    p.add_argument(
        "--sampler-kwargs",
        type=json.loads,
        default={},
        help='JSON per-sampler step arguments, e.g. \'{"SurrogateHMC": {"kernel": {"n_inner": 3}}}\'',
    )
    p.add_argument("--quick", action="store_true", help="tiny problem and chains (smoke test)")
    p.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "output",
        help="directory for plots and tables (default examples/output)",
    )
    args = p.parse_args(argv)
    preset = _QUICK if args.quick else _DEFAULT
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


# ------------------------------------------------------------------------------ sampling
@dataclass
class SamplerResult:
    """One sampler's run: its trace and the measured row of the comparison table."""

    name: str
    idata: Any
    row: dict[str, Any]
    warnings: Counter = field(default_factory=Counter)


def _solves(info: PDEModelInfo) -> tuple[int, int]:
    return int(info.problem.n_forward), int(info.problem.n_adjoint)


def _iterations(name: str, args: argparse.Namespace) -> tuple[int, int]:
    fraction = ITERATION_FRACTION.get(name, 1.0)
    tune = max(min(args.tune, 50), int(round(args.tune * fraction)))
    draws = max(min(args.draws, 50), int(round(args.draws * fraction)))
    override = args.iterations.get(name, {})
    return int(override.get("tune", tune)), int(override.get("draws", draws))


def _stuck_chains(posterior: Any, names: list[str]) -> int:
    """Chains in which some parameter never changed over the draws.

    ArviZ reports the full number of draws as the ESS of a constant chain, so a sampler
    that is stuck would otherwise look perfect.
    """
    n_chains, n_draws = posterior.sizes["chain"], posterior.sizes["draw"]
    stuck = np.zeros(n_chains, dtype=bool)
    for name in names:
        values = posterior[name].values.reshape(n_chains, n_draws, -1)
        stuck |= np.any(np.ptp(values, axis=1) == 0, axis=1)
    return int(stuck.sum())


def _moved_fraction(posterior: Any, names: list[str]) -> float:
    """Fraction of draws that differ from the previous draw (1 for NUTS, <1 for MH kernels)."""
    flat = [posterior[n].values.reshape(posterior.sizes["chain"], posterior.sizes["draw"], -1)
            for n in names]
    values = np.concatenate(flat, axis=-1)
    if values.shape[1] < 2:
        return float("nan")
    return float(np.mean(np.any(np.diff(values, axis=1) != 0, axis=-1)))


def run_sampler(
    name: str,
    model: pm.Model,
    info: PDEModelInfo,
    step_cls: type | None,
    *,
    tune: int,
    draws: int,
    chains: int,
    seed: int,
    step_kwargs: dict[str, Any] | None = None,
) -> SamplerResult:
    """Sample ``model`` with one sampler and measure cost and efficiency.

    Parameters
    ----------
    name : str
        Label; ``"NUTS"`` runs PyMC's default ``pm.sample()`` path.
    model, info
        Model and its info record; the solve counters of ``info.problem`` are reset first.
    step_cls : type or None
        Step class, instantiated in the model context with ``step_kwargs`` (None for NUTS).
    tune, draws, chains, seed : int
        ``pm.sample`` settings; always ``cores=1`` so the in-process counters see every solve.
    step_kwargs : dict, optional
        Step arguments (for NUTS: passed as ``nuts=``).

    Returns
    -------
    SamplerResult
    """
    step_kwargs = dict(step_kwargs or {})
    info.problem.reset_counters()
    recorder = _PhaseRecorder(info)  # per-iteration times and counts, tune vs draws
    extra: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recorder.start()
        with model:
            step = None
            if step_cls is None:
                if step_kwargs:
                    extra["nuts"] = step_kwargs
            else:
                step = step_cls(**step_kwargs)
            idata = pm.sample(
                draws=draws,
                tune=tune,
                chains=chains,
                cores=1,
                step=step,
                random_seed=seed,
                progressbar=False,
                compute_convergence_checks=False,
                callback=recorder,
                **extra,
            )
        phases = recorder.summary(time.perf_counter())
    seen = Counter(
        f"{w.category.__name__}: {str(w.message).splitlines()[0][:160]}"
        for w in caught
        if not issubclass(w.category, (DeprecationWarning, FutureWarning))
    )

    n_forward, n_adjoint = _solves(info)
    posterior = posterior_dataset(idata)
    names = [rv.name for rv in model.free_RVs]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short chains make ArviZ complain
        ess = float(az.ess(posterior[names], method="bulk").to_array().min())
        rhat = float(az.rhat(posterior[names]).to_array().max()) if chains > 1 else float("nan")
    stuck = _stuck_chains(posterior, names)
    if stuck:
        ess = 0.0  # see _stuck_chains
    wall = phases["total_s"]
    solves = n_forward + n_adjoint
    row = {
        "sampler": name,
        "model": "adjoint" if n_adjoint else "black-box",  # NUTS and gradient learners
        "tune": tune,
        "draws": draws,
        "wall_s": wall,
        "tune_s": phases["tune_s"],
        "draws_s": phases["draws_s"],
        "n_forward": n_forward,
        "n_adjoint": n_adjoint,
        "n_forward_draws": phases["n_logp_draws"],
        "min_ess": ess,
        "solves_per_ess": solves / ess if ess > 0 else float("inf"),
        "ess_per_s": ess / wall,
        "ess_per_s_draws": ess / phases["draws_s"] if phases["draws_s"] > 0 else float("nan"),
        "max_rhat": rhat,
        "moved": _moved_fraction(posterior, names),
        "stuck_chains": stuck,
        "mean_err": float("nan"),
        "mean_z": float("nan"),
        "verdict": "",
    }
    return SamplerResult(name, idata, row, seen)


def _means_and_mcse(posterior: Any, names: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every coordinate's posterior mean, sd and Monte Carlo standard error of the mean."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short chains make ArviZ complain
        ess = az.ess(posterior[names], method="mean")
    means, sds, mcses = [], [], []
    for n in names:
        values = posterior[n].values
        mean = values.mean(axis=(0, 1)).ravel()
        sd = values.std(axis=(0, 1)).ravel()
        n_eff = np.maximum(np.asarray(ess[n].values, dtype=float).ravel(), 1.0)
        means.append(mean)
        sds.append(sd)
        mcses.append(sd / np.sqrt(n_eff))
    return np.concatenate(means), np.concatenate(sds), np.concatenate(mcses)


def _add_mean_errors(results: list[SamplerResult], reference: SamplerResult | None) -> None:
    """Against NUTS's posterior (NaN without a NUTS run): ``mean_err``, max_k |mean_k - NUTS
    mean_k| in NUTS sds, and ``mean_z``, the same difference in units of the two runs'
    Monte Carlo standard errors combined (what the verdict judges)."""
    if reference is None:
        return
    ref = posterior_dataset(reference.idata)
    names = [str(v) for v in ref.data_vars]
    ref_mean, ref_sd, ref_mcse = _means_and_mcse(ref, names)
    for result in results:
        if result is reference:
            continue
        mean, _, mcse = _means_and_mcse(posterior_dataset(result.idata), names)
        result.row["mean_err"] = float(np.max(np.abs(mean - ref_mean) / ref_sd))
        result.row["mean_z"] = float(np.max(np.abs(mean - ref_mean)
                                            / np.sqrt(mcse**2 + ref_mcse**2)))
    reference.row["mean_err"] = 0.0


def _wrong_because(row: dict[str, Any] | pd.Series) -> list[str]:
    """Why a row's draws are not a usable posterior sample (empty: nothing found)."""
    reasons = []
    if row["stuck_chains"]:
        reasons.append(f"{int(row['stuck_chains'])} chain(s) never moved in the draws")
    if np.isfinite(row["max_rhat"]) and row["max_rhat"] > MAX_RHAT:
        reasons.append(f"max r_hat {row['max_rhat']:.3f} > {MAX_RHAT}: the chains disagree")
    if np.isfinite(row["mean_z"]) and row["mean_z"] > MAX_MEAN_Z:
        reasons.append(f"a posterior mean {row['mean_z']:.1f} Monte Carlo standard errors "
                       f"from NUTS's (more than {MAX_MEAN_Z:g})")
    return reasons


def _add_verdicts(results: list[SamplerResult]) -> None:
    for result in results:
        result.row["verdict"] = "WRONG" if _wrong_because(result.row) else "ok"


# ------------------------------------------------------------------------------- output
def comparison_table(results: list[SamplerResult]) -> pd.DataFrame:
    """The measured rows as a DataFrame (all columns, including the ones not printed)."""
    return pd.DataFrame([r.row for r in results])


def _format_table(frame: pd.DataFrame, markdown: bool = False) -> str:
    cells = []
    for _, row in frame.iterrows():
        line = []
        for key, _, fmt in TABLE_COLUMNS:
            value = row[key]
            if isinstance(value, float) and not np.isfinite(value):
                text = "inf" if np.isinf(value) else "-"
            else:
                text = fmt.format(int(value) if fmt == "{:d}" else value)
            if key == "min_ess" and row["stuck_chains"]:
                text += f" (stuck chains: {int(row['stuck_chains'])})"
            line.append(text)
        cells.append(line)
    headers = [h for _, h, _ in TABLE_COLUMNS]
    if markdown:
        out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        out += ["| " + " | ".join(line) + " |" for line in cells]
        return "\n".join(out)
    widths = [max(len(h), *(len(line[i]) for line in cells)) for i, h in enumerate(headers)]
    out = ["  ".join(h.rjust(w) for h, w in zip(headers, widths))]
    out += ["  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in cells]
    return "\n".join(out)


def _summary_lines(frame: pd.DataFrame, registry: list[str]) -> list[str]:
    """What the table says, in sentences: which rows are wrong and why, and for every package
    step method whose draws are usable, its cost against DEMetropolisZ's and NUTS's."""
    rows = {r["sampler"]: r for _, r in frame.iterrows()}
    wrong = {name: _wrong_because(r) for name, r in rows.items()}
    lines = [f"{name}: WRONG ({'; '.join(reasons)}): no usable posterior sample, so its "
             "solves buy no effective sample and it is not compared."
             for name, reasons in wrong.items() if reasons]
    if "NUTS" in rows and wrong["NUTS"]:
        lines.append("NUTS is the reference of the mean check and its run is wrong itself: "
                     "run longer (--draws) before reading the other rows against it.")
    for name in registry:
        if name not in rows or wrong[name]:
            continue
        r = rows[name]
        without = " without a gradient" if r["model"] == "black-box" else ""
        if "DEMetropolisZ" in rows:
            de = rows["DEMetropolisZ"]
            if wrong["DEMetropolisZ"]:
                lines.append(
                    f"{name}: {r['solves_per_ess']:.2f} solves per effective sample{without}; "
                    f"DEMetropolisZ spent {int(de['n_forward'])} solves and did not converge."
                )
            else:
                ratio = de["solves_per_ess"] / r["solves_per_ess"]
                lines.append(
                    f"{name}: {ratio:.3g}x fewer solves per effective sample than "
                    f"DEMetropolisZ ({r['solves_per_ess']:.2f} against "
                    f"{de['solves_per_ess']:.1f})."
                )
        if "NUTS" in rows and not wrong["NUTS"]:
            nuts = rows["NUTS"]
            ratio = r["ess_per_s"] / nuts["ess_per_s"]
            lines.append(
                f"{name}: {ratio:.3g}x NUTS's min ESS per second, all wall time counted "
                f"({r['ess_per_s']:.2f} against {nuts['ess_per_s']:.2f}; NUTS uses the "
                f"adjoint gradient), {r['solves_per_ess']:.2f} solves per effective sample "
                f"against NUTS's {nuts['solves_per_ess']:.2f}."
            )
    return lines


def _field_source(results: dict[str, SamplerResult], registry: list[str]) -> SamplerResult:
    for name in ["SurrogateHMC", *registry, "NUTS", *results]:
        if name in results:
            return results[name]
    raise ValueError("no sampler ran")


def _stuck_note(result: SamplerResult) -> str:
    stuck = result.row["stuck_chains"]
    return f" - {stuck} chain(s) STUCK, not a posterior" if stuck else ""


def plot_trace(result: SamplerResult, path: Path, n_modes: int = 4) -> None:
    """Trace and marginal posteriors of the first KL modes."""
    theta = posterior_dataset(result.idata)["theta"].values  # (chain, draw, mode)
    k = min(n_modes, theta.shape[-1])
    # Plain matplotlib: ArviZ 0.x and 1.x share no plot_trace signature.
    fig, axes = plt.subplots(k, 2, figsize=(10, 1.8 * k), squeeze=False)
    for mode, (left, right) in enumerate(axes):
        for chain in theta:
            left.hist(chain[:, mode], bins=40, density=True, histtype="step")
            right.plot(chain[:, mode], lw=0.5)
        left.set_ylabel(f"theta[{mode}]")
    axes[-1, 1].set_xlabel("draw")
    fig.suptitle(f"{result.name}: first {k} KL modes (chains in colour){_stuck_note(result)}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_field(result: SamplerResult, info: PDEModelInfo, path: Path) -> None:
    """True log-diffusivity next to the posterior mean and sd fields of one sampler."""
    theta = posterior_dataset(result.idata)["theta"].values.reshape(-1, info.problem.n_modes)
    gx, gy = np.meshgrid(info.grid, info.grid, indexing="xy")
    design = info.problem.basis.design_matrix(np.column_stack([gx.ravel(), gy.ravel()]))
    shape = gx.shape
    # The field is linear in theta: its mean and sd follow from theta's mean and covariance.
    mean = (design @ theta.mean(axis=0)).reshape(shape)
    cov = np.atleast_2d(np.cov(theta, rowvar=False))
    sd = np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", design, cov, design), 0.0)).reshape(shape)

    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    lo = min(info.log_c_true.min(), mean.min())
    hi = max(info.log_c_true.max(), mean.max())
    panels = [
        (info.log_c_true, "true log c(x)", "viridis", (lo, hi)),
        (mean, f"posterior mean ({result.name}){_stuck_note(result)}", "viridis", (lo, hi)),
        (sd, "posterior sd", "magma", (0.0, sd.max())),
    ]
    for ax, (image, title, cmap, (vmin, vmax)) in zip(axes, panels):
        im = ax.imshow(image, origin="lower", extent=(0, 1, 0, 1), cmap=cmap, vmin=vmin, vmax=vmax)
        ax.plot(*info.obs_points.T, ".", color="white", markersize=2, alpha=0.7)
        ax.set_title(title)
        ax.set_xlabel("$x_1$")
        fig.colorbar(im, ax=ax, shrink=0.85)
    axes[0].set_ylabel("$x_2$")
    fig.suptitle(f"Elliptic PDE inverse problem, d = {info.problem.n_modes} KL modes, "
                 f"{info.problem.mesh_size}x{info.problem.mesh_size} mesh (dots: observations)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------- main
def _select(requested: str, registry: list[str]) -> list[str]:
    everything = [*registry, *PYMC_GRADIENT_FREE, "NUTS"]
    if requested.strip() == "all":
        return everything
    names = [s.strip() for s in requested.split(",") if s.strip()]
    unknown = [n for n in names if n not in everything]
    if unknown:
        raise SystemExit(f"unknown sampler(s) {unknown}; available: {', '.join(everything)}")
    return names


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the showcase; returns the table, the traces and the paths written.

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments (see ``--help``); ``None`` reads ``sys.argv``.

    Returns
    -------
    dict
        ``table`` (pandas.DataFrame), ``results`` (sampler name to SamplerResult),
        ``failures`` (sampler name to error message), ``summary`` (the printed sentences,
        list of str) and ``files`` (name to Path).
    """
    args = parse_args(argv)
    logging.getLogger("pymc").setLevel(logging.ERROR)  # our table says what matters
    registry_classes, registry_error = load_step_registry()
    registry = list(registry_classes)
    samplers = _select(args.samplers, registry)
    args.out.mkdir(parents=True, exist_ok=True)

    with threadpool_limits(1):
        size = {"n_modes": args.modes, "mesh_size": args.mesh}
        blackbox, info = make_pde_model(**size, gradient=False)
        adjoint, adjoint_info = make_pde_model(**size, gradient=True)
        # The same data, so the same posterior: NUTS's moments are the reference.
        point = blackbox.initial_point()
        lp_bb = float(blackbox.compile_logp()(point))
        lp_adj = float(adjoint.compile_logp()(point))
        if not np.isclose(lp_bb, lp_adj):
            raise RuntimeError(f"black-box and adjoint models differ: logp {lp_bb} vs {lp_adj}")

        print(
            f"Elliptic PDE inverse problem: d = {args.modes} KL modes, {args.mesh}x{args.mesh} "
            f"Q1 mesh, {info.problem.n_obs} observations; one logp = one sparse PDE solve.\n"
            f"{args.chains} chains per sampler, run one after the other (cores=1, so the "
            "problem's solve counters see every evaluation, tuning included); "
            f"random_seed={args.seed}; BLAS limited to one thread."
        )
        if registry_error:
            print(f"note: {registry_error}")

        results: dict[str, SamplerResult] = {}
        failures: dict[str, str] = {}
        for name in samplers:
            tune, draws = _iterations(name, args)
            cls = None if name == "NUTS" else registry_classes.get(name) or getattr(pm, name)
            if cls is None or needs_gradient(cls, blackbox):
                # NUTS, and step methods that learn from gradients (VariationalHMC), get the
                # adjoint gradient: the same posterior
                model, model_info = adjoint, adjoint_info
            else:
                model, model_info = blackbox, info
            print(f"  {name:<22} tune={tune} draws={draws} ...", end="", flush=True)
            start = time.perf_counter()
            try:
                result = run_sampler(
                    name, model, model_info, cls, tune=tune, draws=draws, chains=args.chains,
                    seed=args.seed, step_kwargs=args.sampler_kwargs.get(name),
                )
            except Exception as exc:  # one failing sampler must not lose the others' numbers
                message = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
                print(f" FAILED after {time.perf_counter() - start:.1f} s\n      {message}")
                failures[name] = message
                continue
            results[name] = result
            print(f" {result.row['wall_s']:.1f} s")
            for message, count in result.warnings.most_common(3):
                print(f"      {count} x {message}")
            if len(result.warnings) > 3:
                print(f"      ... and {len(result.warnings) - 3} other warning messages")
        if not results:
            raise SystemExit("every sampler failed; nothing to compare or plot.")
        ordered = list(results.values())
        _add_mean_errors(ordered, results.get("NUTS"))
        _add_verdicts(ordered)
        table = comparison_table(ordered)

        source = _field_source(results, registry)
        print(f"\nArviZ summary, {source.name}:")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            summary = az.summary(source.idata, var_names=["theta"], round_to=3)
        with pd.option_context("display.width", 140, "display.max_rows", 200):
            print(summary.to_string())

        print("\nComparison (solves = forward + adjoint PDE solves, tune + draws; min ESS = "
              "ArviZ bulk ESS, minimum over the d modes; min ESS/s over the whole wall time "
              "(compilation, tune, draws), ESS/s draws over the draw iterations only; moved = "
              "fraction of draws that differ from the previous one; z = difference of "
              "means in Monte Carlo standard errors; verdict WRONG: a chain never moved, "
              f"max r_hat > {MAX_RHAT} or max |z| > {MAX_MEAN_Z:g}):")
        print(_format_table(table))
        if "DEMetropolisZ" in results:
            print("PyMC's DEMetropolisZ evaluates the logp at the current and the proposed "
                  "point every iteration (2 solves an iteration).")
        for name, message in failures.items():
            print(f"{name}: FAILED ({message})")
        summary_lines = _summary_lines(table, registry)
        summary_lines += [f"{name}: failed ({message}); no draws to compare."
                          for name, message in failures.items() if name in registry]
        if summary_lines:
            print("\nWhat the comparison says:")
            for line in summary_lines:
                print("  " + line)

        files = {
            "trace": args.out / "trace.png",
            "field": args.out / "field.png",
            "csv": args.out / "comparison.csv",
            "md": args.out / "comparison.md",
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a stuck chain makes the KDE complain
            plot_trace(source, files["trace"])
            plot_field(source, info, files["field"])
        table.to_csv(files["csv"], index=False)
        command = "python examples/elliptic_pde_showcase.py " + " ".join(
            sys.argv[1:] if argv is None else argv
        )
        files["md"].write_text(
            f"# Elliptic PDE showcase\n\n`{command.strip()}`\n\n"
            f"d = {args.modes}, mesh {args.mesh}x{args.mesh}, chains = {args.chains}, cores=1, "
            f"seed = {args.seed}\n\n" + _format_table(table, markdown=True) + "\n\n"
            + "".join(f"\n{n}: FAILED ({m})\n" for n, m in failures.items())
            + "\n" + "\n".join(f"- {t}" for t in summary_lines) + "\n"
        )
        print("\nwritten: " + ", ".join(str(p) for p in files.values()))
    return {
        "table": table, "results": results, "failures": failures, "summary": summary_lines,
        "files": files,
    }


if __name__ == "__main__":
    main()
