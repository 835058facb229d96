"""Issue 21 ("Tuning that pays for itself"): the five targets in one table, next to NUTS.

A thin layer over :mod:`benchmarks.harness`: every run is one :func:`benchmarks.harness.run_one`
call (``cores=1``, chains one after the other, evaluations counted in the model graph, BLAS
limited to one thread), on the models of :mod:`benchmarks.models`.  For each target the
figures, the issue's limit, pass/fail and NUTS's figure measured in the same process.

Targets (issue 21), what is run:

1. ``AdaptiveSurrogateHMC`` on the black-box elliptic PDE (``pde_blackbox``, d = 20, 30x30,
   the showcase model), seed 2024: ``tune=300, draws=1000`` (solves per min ESS, tune
   included, and max r-hat) and the default ``tune=1000, draws=1000`` (solves per ESS).
   NUTS: ``pde_adjoint`` (same posterior, adjoint gradient), 1000/1000, seed 2024; a solve
   is a forward or an adjoint solve, as in the showcase.
2. ``SurrogateHMC`` on the same PDE, default settings (1000/1000), seeds 1-6: median and worst
   solves per ESS, tune included.  NUTS: the run of target 1.
3. Logistic regression N = 1e5, d = 50 (``logistic`` paper size), ``tune=500, draws=500``:
   min ESS/s ratio to NUTS in the draws and with tune included.  The quickstart
   (``examples/quickstart.py``, which the README names as the demo with gradients): N = 3e4,
   d = 50, 1000/1000, seed 1, ``SurrogateHMC()`` with defaults, ratio with tune included.
4. Correlated Gaussian d = 32, condition number 1e4 (``correlated_gaussian``), 1000/1000:
   ``SurrogateHMC`` min ESS and exactness (z of the 32 means against the exact ones).
5. Logistic regression N = 1e5, d = 100, ``tune=500, draws=500`` (the issue gives no lengths;
   those of target 3): acceptance and ESS/s ratio with tune included.

The surrogate samplers' posterior means are also compared with the same run's NUTS
(``mean_err_mcse`` in the runs table: max |mean - NUTS mean| / sqrt(mcse^2 + NUTS mcse^2));
target 4 compares with the exact moments.

Run (from the repository root)::

    python benchmarks/tuning_payoff.py                   # all five, ~40-60 min on 2 shared cores
    python benchmarks/tuning_payoff.py --quick           # small models, a minute or two
    python benchmarks/tuning_payoff.py --targets 1,2 --stop-at 13:00

Writes ``<out>/<tag>.md`` (figures table + runs table), ``<tag>.csv`` (figures) and
``<tag>_runs.csv`` (one harness row per run), rewritten after every run, so an interrupted
run keeps what it measured; a target not reached says ``not run (time)``.
"""

from __future__ import annotations

import os

# One BLAS thread before numpy loads (the harness's threadpoolctl limit is applied as well).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import datetime as _dt  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Iterator  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(_REPO))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    COLUMNS,
    DEFAULT_RESULTS_DIR,
    Reference,
    _blas_limit,
    _empty_row,
    _fmt,
    available_samplers,
    environment_meta,
    reference_moments,
    split_names,
)
from benchmarks.models import build_model  # noqa: E402

ALL_TARGETS = (1, 2, 3, 4, 5)

#: Run settings.  ``model`` is (registry name, size, overrides).
FULL: dict[str, Any] = {
    "pde": ("pde_blackbox", "default", {}),
    "pde_nuts": ("pde_adjoint", "default", {}),
    "pde_seed": 2024,  # the showcase's default seed
    "t1_runs": [(300, 1000), (1000, 1000)],  # (tune, draws); 1000 is pm.sample's default tune
    "pde_default": (1000, 1000),
    "t2_seeds": [1, 2, 3, 4, 5, 6],
    "t3": ("logistic", "paper", {}),  # N = 1e5, d = 50
    "t3_len": (500, 500),
    "quickstart": ("logistic", "default", {"n_obs": 30_000, "n_features": 50}),
    "quickstart_len": (1000, 1000),
    "quickstart_seed": 1,
    "t4": ("correlated_gaussian", "default", {"d": 32, "condition_number": 1e4}),
    "t4_len": (1000, 1000),
    "t5": ("logistic", "paper", {"n_features": 100}),
    "t5_len": (500, 500),
    "seed": 0,
    "chains": 2,
}

#: ``--quick``: the same runs on small models and short chains (checks the plumbing only).
QUICK: dict[str, Any] = {
    **FULL,
    "pde": ("pde_blackbox", "smoke", {}),
    "pde_nuts": ("pde_adjoint", "smoke", {}),
    "t1_runs": [(100, 200), (200, 200)],
    "pde_default": (200, 200),
    "t2_seeds": [1, 2],
    "t3": ("logistic", "smoke", {"n_obs": 2000, "n_features": 5}),
    "t3_len": (200, 200),
    "quickstart": ("logistic", "smoke", {"n_obs": 2000, "n_features": 5}),
    "quickstart_len": (200, 200),
    "t4": ("correlated_gaussian", "smoke", {"d": 4, "condition_number": 100.0}),
    "t4_len": (200, 200),
    "t5": ("logistic", "smoke", {"n_obs": 2000, "n_features": 10}),
    "t5_len": (200, 200),
}

#: Largest |z| of a mean against the exact one accepted as "exact" in target 4 (32 means:
#: two-sided 0.05 / 32 per coordinate is |z| 3.2, 0.01 / 32 is 3.6).
Z_EXACT = 3.5

NOT_RUN = "not run (time)"

FIGURE_COLUMNS = ["target", "figure", "value", "limit", "pass", "nuts", "detail"]


class RunTimeout(Exception):
    """A run exceeded its time budget (``--max-run-minutes`` or ``--stop-at``)."""


@contextmanager
def _alarm(seconds: float | None) -> Iterator[None]:
    """Raise :class:`RunTimeout` in this thread after ``seconds`` (None: no limit)."""
    if seconds is None:
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise RunTimeout(f"stopped after {seconds / 60:.0f} min (time budget)")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, max(1.0, seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextmanager
def _keep_traces(store: list[Any]) -> Iterator[None]:
    """Keep the trace of every :func:`harness.sample_counted` call made by ``run_one``."""
    original = harness.sample_counted

    def keeping(*args: Any, **kwargs: Any) -> Any:
        run = original(*args, **kwargs)
        store.append(run.idata)
        return run

    harness.sample_counted = keeping
    try:
        yield
    finally:
        harness.sample_counted = original


def _reference_from(idata: Any, names: list[str], label: str) -> Reference:
    """Moments of a run's posterior (a same-run NUTS reference)."""
    import arviz as az

    from pymc_surrogate.compat import posterior_dataset

    post = posterior_dataset(idata)[names]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcse = az.mcse(post, method="mean")
    return Reference(
        mean={k: post[k].mean(("chain", "draw")).values for k in names},
        sd={k: post[k].std(("chain", "draw")).values for k in names},
        mcse={k: mcse[k].values for k in names},
        source=label,
    )


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=_REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except Exception as exc:  # no git: say so in the header
        return f"(git failed: {exc})"


class Payoff:
    """Runs, figures and the results files of one invocation."""

    def __init__(self, args: argparse.Namespace, argv: list[str]) -> None:
        self.args = args
        self.cfg = QUICK if args.quick else FULL
        self.samplers, self.registry_error = available_samplers()
        self.models: dict[tuple, tuple[Any, Any]] = {}
        self.runs: list[dict[str, Any]] = []
        self.figures: dict[int, list[dict[str, Any]]] = {}
        self.t_start = time.time()
        self.started = _dt.datetime.now(_dt.timezone.utc)
        self.finished: str | None = None
        self.stop_at = self._parse_stop(args.stop_at)
        self.tag = args.tag or ("tuning_payoff_quick" if args.quick else "tuning_payoff")
        self.out = Path(args.out)
        niceness = os.nice(0)
        self.command = (
            f"cd {shlex.quote(os.getcwd())} && PYTHONPATH=. "
            + (f"nice -n {niceness} " if niceness else "")
            + " ".join(shlex.quote(a) for a in [sys.executable, "benchmarks/tuning_payoff.py", *argv])
        )
        dirty = _git("status", "--porcelain", "--", "pymc_surrogate")
        self.meta = {
            "command": f"`{self.command}`",
            "commit": f"{_git('rev-parse', '--short', 'HEAD')} ({_git('log', '-1', '--format=%s')[:80]}...)",
            "pymc_surrogate working tree": (
                "uncommitted changes by others at start: " + "; ".join(dirty.splitlines())
                if dirty
                else "clean at start"
            ),
            **environment_meta(),
            "other packages": self._versions(),
            "machine note": (
                f"{platform.node()}, {os.cpu_count()} cores, load average "
                f"{os.getloadavg()[0]:.2f} at start, niceness {niceness}"
                + (f"; {args.machine_note}" if args.machine_note else "")
                + ": seconds depend on what else ran (ESS/s ratios are indicative), "
                "solve/evaluation counts do not"
            ),
            "chains": (
                f"{self.cfg['chains']} chains, cores=1 (the harness samples chains one after the "
                "other in this process so that its counters see every evaluation; the issue's "
                "figures were measured with 2 chains, 2 cores); BLAS limited to one thread"
            ),
        }
        import pytensor

        if not pytensor.config.blas__ldflags:
            self.meta["pytensor BLAS"] = (
                "none linked (pytensor.config.blas__ldflags is empty): PyTensor's own dot "
                "products, in NUTS's and the samplers' true-model evaluations alike"
            )
        if self.registry_error:
            self.meta["step registry"] = self.registry_error
        for t in args.targets:
            self.figures[t] = []

    @staticmethod
    def _versions() -> str:
        import arviz
        import scipy

        import pymc_surrogate

        return (
            f"arviz {arviz.__version__}, numpy {np.__version__}, scipy {scipy.__version__}, "
            f"pymc_surrogate {getattr(pymc_surrogate, '__version__', '?')}"
        )

    @staticmethod
    def _parse_stop(text: str | None) -> float | None:
        if not text:
            return None
        now = _dt.datetime.now(_dt.timezone.utc)
        hh, mm = (int(x) for x in text.split(":"))
        stop = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
        if stop < now - _dt.timedelta(hours=12):
            stop += _dt.timedelta(days=1)
        return stop.timestamp()

    # ------------------------------------------------------------------ running
    def model(self, spec: tuple) -> tuple[Any, Any]:
        name, size, overrides = spec
        key = (name, size, tuple(sorted(overrides.items())))
        if key not in self.models:
            self.models[key] = build_model(name, size, **overrides)
        return self.models[key]

    def budget(self) -> float | None:
        """Seconds the next run may take (None: unlimited); <= 0: do not start it."""
        limits = []
        if self.args.max_run_minutes:
            limits.append(60.0 * self.args.max_run_minutes)
        if self.stop_at is not None:
            limits.append(self.stop_at - time.time())
        return min(limits) if limits else None

    def run(
        self,
        target: str,
        spec: tuple,
        sampler: str,
        tune: int,
        draws: int,
        seed: int,
        reference: Reference | None = None,
        keep: bool = False,
    ) -> tuple[dict[str, Any], Any]:
        """One harness run; returns its row (status ``ok``, ``error`` or ``not run``) and trace."""
        name, size, overrides = spec
        chains = self.cfg["chains"]
        row = _empty_row(name, size, sampler, chains=chains, tune=tune, draws=draws)
        row.update(target=target, seed=str(seed), model_kwargs=str(overrides or ""))
        budget = self.budget()
        if budget is not None and budget <= 0:
            row.update(status="not run", note=NOT_RUN)
            self._emit(row)
            return row, None
        traces: list[Any] = []
        t0 = time.time()
        harness._log.info("target %s: %s / %s tune=%d draws=%d seed=%d ...", target, name,
                          sampler, tune, draws, seed)
        try:
            model, info = self.model(spec)
            if reference is None:
                reference = reference_moments(
                    name, size, model, info, has_gradient=False, builder=None
                ) if getattr(info, "ref_mean", None) is not None else Reference(
                    None, None, source="none"
                )
            with _alarm(budget), _keep_traces(traces):
                row.update(
                    harness.run_one(
                        model, info, sampler, self.samplers.get(sampler),
                        draws=draws, tune=tune, chains=chains, seed=seed,
                        reference=reference,
                    )
                )
        except RunTimeout as exc:
            row.update(status="not run", note=f"{NOT_RUN}: {exc}")
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            row.update(status="error", note=harness._describe(exc))
        row["wall_s"] = time.time() - t0
        harness._log.info(
            "target %s: %s / %s: %s, min ESS %s, evals/ESS %s, %.0f s", target, name, sampler,
            row["status"], _fmt(row["min_ess_bulk"], "min_ess_bulk"),
            _fmt(row["evals_per_ess"], "evals_per_ess"), row["wall_s"],
        )
        self._emit(row)
        return row, (traces[-1] if traces and keep else None)

    def _emit(self, row: dict[str, Any]) -> None:
        self.runs.append(row)
        self.write()

    # ------------------------------------------------------------------ figures
    def figure(self, target: int, figure: str, value: float, limit: str, nuts: str,
               detail: str = "", ok: bool | None = None, text: str | None = None) -> None:
        if ok is None:
            verdict = "–"
        else:
            verdict = "PASS" if ok else "FAIL"
        if text is None:
            text = _rhat(value) if "r-hat" in figure else _num(value)
            if not np.isfinite(value):
                verdict = "–"
        self.figures[target].append(
            dict(target=target, figure=figure, value=text, limit=limit, nuts=nuts,
                 detail=detail, **{"pass": verdict})
        )
        self.write()

    def not_run(self, target: int, figure: str, limit: str, row: dict[str, Any] | None) -> bool:
        """Record a figure whose run did not give a number; True if so."""
        if row is not None and row["status"] == "ok":
            return False
        why = NOT_RUN if row is None else (row["note"] or row["status"])
        label = NOT_RUN if (row is None or row["status"] == "not run") else f"error: {why}"
        self.figures[target].append(
            dict(target=target, figure=figure, value=label, limit=limit, nuts="",
                 detail=why if row is not None and label != why else "", **{"pass": "–"})
        )
        self.write()
        return True

    # ------------------------------------------------------------------ targets
    def pde_nuts(self) -> tuple[dict[str, Any], Reference | None]:
        if not hasattr(self, "_pde_nuts"):
            tune, draws = self.cfg["pde_default"]
            row, idata = self.run("1-2", self.cfg["pde_nuts"], "NUTS", tune, draws,
                                  self.cfg["pde_seed"], keep=True)
            ref = None
            if idata is not None and row["status"] == "ok":
                ref = _reference_from(idata, ["theta"], "NUTS adjoint, same run")
            self._pde_nuts = (row, ref)
        return self._pde_nuts

    def target1(self) -> None:
        nuts, ref = self.pde_nuts()
        nuts_spe = f"{_num(nuts['evals_per_ess'])} (NUTS adjoint, {nuts['tune']}/{nuts['draws']})" \
            if nuts["status"] == "ok" else nuts["note"] or nuts["status"]
        limits = {300: ("≤ 8", 8.0), 1000: ("≤ 4", 4.0)}
        for tune, draws in self.cfg["t1_runs"]:
            row, _ = self.run("1", self.cfg["pde"], "AdaptiveSurrogateHMC", tune, draws,
                              self.cfg["pde_seed"], reference=ref)
            label, lim = limits.get(tune, ("(quick)", math.inf)) if not self.args.quick else (
                "(quick)", math.inf)
            name = f"solves / min ESS, tune included (tune={tune}, draws={draws})"
            if self.not_run(1, name, label, row):
                continue
            detail = (f"min ESS {_fmt(row['min_ess_bulk'], 'min_ess_bulk')}, "
                      f"{int(row['n_logp'])} solves, max |z| of the means vs NUTS "
                      f"{_num(row['mean_err_mcse'])}, seed {self.cfg['pde_seed']}")
            self.figure(1, name, row["evals_per_ess"], label, nuts_spe, detail,
                        ok=None if self.args.quick else row["evals_per_ess"] <= lim)
            self.figure(1, f"max r-hat (tune={tune})", row["max_rhat"],
                        "≤ 1.01" if tune == 300 else "(none)", _rhat(nuts["max_rhat"]),
                        ok=None if (self.args.quick or tune != 300)
                        else row["max_rhat"] <= 1.01)

    def target2(self) -> None:
        nuts, ref = self.pde_nuts()
        tune, draws = self.cfg["pde_default"]
        rows = []
        for seed in self.cfg["t2_seeds"]:
            row, _ = self.run("2", self.cfg["pde"], "SurrogateHMC", tune, draws, seed,
                              reference=ref)
            rows.append(row)
        done = [r for r in rows if r["status"] == "ok"]
        nuts_spe = f"{_num(nuts['evals_per_ess'])} (one NUTS adjoint run, seed " \
            f"{self.cfg['pde_seed']})" if nuts["status"] == "ok" else nuts["note"] or nuts["status"]
        if not done:
            self.not_run(2, "median solves / ESS, tune included", "≤ 3.5", rows[0])
            self.not_run(2, "worst solves / ESS, tune included", "≤ 6", rows[0])
            return
        spe = np.array([r["evals_per_ess"] for r in done])
        per_seed = ", ".join(f"s{r['seed']}: {_num(r['evals_per_ess'])} (ESS "
                             f"{_fmt(r['min_ess_bulk'], 'min_ess_bulk')}, r-hat "
                             f"{_rhat(r['max_rhat'])})" for r in done)
        missing = [str(r["seed"]) for r in rows if r["status"] != "ok"]
        detail = per_seed + (f"; seeds not measured: {', '.join(missing)}" if missing else "")
        quick = self.args.quick
        self.figure(2, f"median solves / ESS, tune included ({len(done)} seeds)",
                    float(np.median(spe)), "≤ 3.5", nuts_spe, detail,
                    ok=None if quick or missing else float(np.median(spe)) <= 3.5)
        self.figure(2, f"worst solves / ESS, tune included ({len(done)} seeds)",
                    float(np.max(spe)), "≤ 6", nuts_spe, "",
                    ok=None if quick or missing else float(np.max(spe)) <= 6.0)

    def _versus_nuts(self, target: str, spec: tuple, tune: int, draws: int, seed: int
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
        """NUTS, then the sampler, same model, lengths and seed; speedups filled."""
        name = spec[0]
        nuts, idata = self.run(target, spec, "NUTS", tune, draws, seed, keep=True)
        ref = None
        if idata is not None and nuts["status"] == "ok":
            names = ["beta"] if name == "logistic" else None
            if names is not None:
                ref = _reference_from(idata, names, "NUTS, same run")
        sampler = self.args.sampler
        row, _ = self.run(target, spec, sampler, tune, draws, seed, reference=ref)
        for r in (nuts, row):
            if r["status"] == "ok" and nuts["status"] == "ok":
                r["baseline"] = "NUTS"
                r["speedup_draws"] = r["ess_per_s_draws"] / nuts["ess_per_s_draws"]
                r["speedup_total"] = r["ess_per_s_total"] / nuts["ess_per_s_total"]
                r["speedup_wall"] = (r["min_ess_bulk"] / r["total_s"]) / (
                    nuts["min_ess_bulk"] / nuts["total_s"])
        self.write()
        return nuts, row

    def target3(self) -> None:
        tune, draws = self.cfg["t3_len"]
        nuts, row = self._versus_nuts("3", self.cfg["t3"], tune, draws, self.cfg["seed"])
        q = self.args.quick
        for key, fig, lim, limv, nuts_key in (
            ("speedup_draws", "min ESS/s ratio to NUTS, draws", "≥ 5", 5.0, "ess_per_s_draws"),
            ("speedup_total", "min ESS/s ratio to NUTS, tune included", "≥ 3", 3.0,
             "ess_per_s_total"),
        ):
            name = f"{self.args.sampler}: {fig} (N={_n(self.cfg['t3'])}, {tune}/{draws})"
            if self.not_run(3, name, lim, row if nuts["status"] == "ok" else nuts):
                continue
            self.figure(3, name, row[key], lim, f"{_num(nuts[nuts_key])} ESS/s",
                        f"{_num(row[nuts_key])} ESS/s; min ESS {_fmt(row['min_ess_bulk'], 'min_ess_bulk')}"
                        f" vs NUTS {_fmt(nuts['min_ess_bulk'], 'min_ess_bulk')}; all wall time "
                        f"(setup too) ratio {_num(row['speedup_wall'])}",
                        ok=None if q else row[key] >= limv)
        tune, draws = self.cfg["quickstart_len"]
        nuts, row = self._versus_nuts("3q", self.cfg["quickstart"], tune, draws,
                                      self.cfg["quickstart_seed"])
        name = (f"quickstart (examples/quickstart.py: N={_n(self.cfg['quickstart'])}, "
                f"d={self.cfg['quickstart'][2]['n_features']}, "
                f"{tune}/{draws}, seed {self.cfg['quickstart_seed']}, SurrogateHMC()): "
                "ESS/s ratio to NUTS, tune included")
        if self.not_run(3, name, "≥ 2", row if nuts["status"] == "ok" else nuts):
            return
        self.figure(3, name, row["speedup_total"], "≥ 2",
                    f"{_num(nuts['ess_per_s_total'])} ESS/s",
                    f"{_num(row['ess_per_s_total'])} ESS/s; all wall time (setup too, as "
                    f"quickstart.py prints) ratio {_num(row['speedup_wall'])}",
                    ok=None if q else row["speedup_total"] >= 2.0)

    def target4(self) -> None:
        tune, draws = self.cfg["t4_len"]
        spec = self.cfg["t4"]
        nuts, _ = self.run("4", spec, "NUTS", tune, draws, self.cfg["seed"])
        row, _ = self.run("4", spec, "SurrogateHMC", tune, draws, self.cfg["seed"])
        q = self.args.quick
        d, cond = spec[2]["d"], spec[2]["condition_number"]
        name = f"SurrogateHMC min bulk ESS (d={d}, cond {cond:g}, {tune}/{draws})"
        if not self.not_run(4, name, "≥ 400", row):
            self.figure(4, name, row["min_ess_bulk"], "≥ 400",
                        _fmt(nuts["min_ess_bulk"], "min_ess_bulk") if nuts["status"] == "ok"
                        else nuts["note"],
                        f"min tail ESS {_fmt(row['min_ess_tail'], 'min_ess_tail')}, r-hat "
                        f"{_rhat(row['max_rhat'])}, {int(row['n_logp'])} logp + "
                        f"{int(row['n_grad'])} grad evaluations",
                        ok=None if q else row["min_ess_bulk"] >= 400)
        name = f"exactness: max |z| of the {d} means vs exact"
        if not self.not_run(4, name, f"≤ {Z_EXACT}", row):
            self.figure(4, name, row["mean_err_mcse"], f"≤ {Z_EXACT} ({d} z's)",
                        _num(nuts["mean_err_mcse"]) if nuts["status"] == "ok" else "",
                        f"max |sd/exact sd - 1| {_num(row['sd_err'])} (NUTS "
                        f"{_num(nuts['sd_err'])}); max |mean err|/sd {_num(row['mean_err'])}",
                        ok=None if q else row["mean_err_mcse"] <= Z_EXACT)

    def target5(self) -> None:
        tune, draws = self.cfg["t5_len"]
        nuts, row = self._versus_nuts("5", self.cfg["t5"], tune, draws, self.cfg["seed"])
        q = self.args.quick
        d = self.cfg["t5"][2]["n_features"]
        name = f"{self.args.sampler}: acceptance (fraction of draws moved; d={d}, {tune}/{draws})"
        if not self.not_run(5, name, "≥ 0.6", row):
            self.figure(5, name, row["mean_accept"], "≥ 0.6",
                        f"{_num(nuts['mean_accept'])} (NUTS mean acceptance_rate)" if
                        nuts["status"] == "ok" else "", "",
                        ok=None if q else row["mean_accept"] >= 0.6)
        name = f"{self.args.sampler}: min ESS/s ratio to NUTS, tune included (d={d})"
        if not self.not_run(5, name, "≥ 2", row if nuts["status"] == "ok" else nuts):
            self.figure(5, name, row["speedup_total"], "≥ 2",
                        f"{_num(nuts['ess_per_s_total'])} ESS/s",
                        f"{_num(row['ess_per_s_total'])} ESS/s; draws only ratio "
                        f"{_num(row['speedup_draws'])}; min ESS "
                        f"{_fmt(row['min_ess_bulk'], 'min_ess_bulk')} vs NUTS "
                        f"{_fmt(nuts['min_ess_bulk'], 'min_ess_bulk')}",
                        ok=None if q else row["speedup_total"] >= 2.0)

    def run_all(self) -> None:
        with _blas_limit(1):
            for t in self.args.order:
                if t in self.args.targets:
                    getattr(self, f"target{t}")()
        self.finished = _dt.datetime.now(_dt.timezone.utc).strftime("%H:%M UTC")
        self.write()

    # ------------------------------------------------------------------ output
    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        figures = []
        for t in self.args.targets:
            got = self.figures.get(t) or []
            figures += got or [dict(target=t, figure="(all figures)", value=NOT_RUN, limit="",
                                    nuts="", detail="", **{"pass": "–"})]
        pd.DataFrame(figures, columns=FIGURE_COLUMNS).to_csv(self.out / f"{self.tag}.csv",
                                                             index=False)
        run_cols = ["target", "seed", "model_kwargs", "wall_s", "speedup_wall", *COLUMNS]
        pd.DataFrame(self.runs, columns=run_cols).to_csv(self.out / f"{self.tag}_runs.csv",
                                                         index=False)
        elapsed = time.time() - self.t_start
        status = (f"complete: started {self.started:%Y-%m-%d %H:%M} UTC, finished "
                  f"{self.finished}, wall time {elapsed / 60:.1f} min" if self.finished else
                  f"PARTIAL (running or stopped): started {self.started:%Y-%m-%d %H:%M} UTC, "
                  f"{elapsed / 60:.1f} min so far")
        lines = [f"# Issue 21 targets: tuning that pays for itself ({self.tag})", ""]
        lines += [f"- **run**: {status}"]
        lines += [f"- **{k}**: {v}" for k, v in self.meta.items()]
        lines += [
            "",
            "Figures, the issue's limits, and NUTS's figure from the same run (same process, "
            "same model, lengths and seed unless the row says otherwise). `PASS`/`FAIL` is "
            "against the issue's limit; `–` when there is no limit or no number"
            + (" (`--quick`: small models, no verdicts)" if self.args.quick else "") + ".",
            "",
            "| " + " | ".join(FIGURE_COLUMNS) + " |",
            "|" + "|".join("---" for _ in FIGURE_COLUMNS) + "|",
        ]
        for f in figures:
            lines.append("| " + " | ".join(_fmt(f[c], c) if c != "target" else str(f[c])
                                           for c in FIGURE_COLUMNS) + " |")
        lines += ["", "## Runs", "",
                  "One harness row per run (`benchmarks.harness.run_one`). A solve / evaluation "
                  "is one forward pass (`n_logp`) or one gradient / adjoint pass (`n_grad`); "
                  "`evals_per_ess` = (n_logp + n_grad) / min bulk ESS, tune included. "
                  "`mean_err_mcse`: against the same run's NUTS (PDE, logistic) or the exact "
                  "moments (Gaussian). `speedup_wall`: min ESS per second of the whole "
                  "`pm.sample` call (setup included) over NUTS's.", ""]
        cols = ["target", "model", "model_kwargs", "sampler", "seed", "status", "tune", "draws",
                "min_ess_bulk", "max_rhat", "n_logp", "n_grad", "evals_per_ess", "wall_s", "tune_s",
                "draws_s", "setup_s", "ess_per_s_draws", "ess_per_s_total", "speedup_draws",
                "speedup_total", "speedup_wall", "mean_accept", "divergences", "mean_err_mcse",
                "sd_err", "note"]
        lines += ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        for r in self.runs:
            lines.append("| " + " | ".join(_fmt(r.get(c), c) for c in cols) + " |")
        lines += ["", "Column meanings: `benchmarks/harness.py` (`COLUMN_DOC`)."]
        (self.out / f"{self.tag}.md").write_text("\n".join(lines) + "\n")


def _num(value: Any) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(v):
        return "–"
    if math.isinf(v):
        return "inf"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def _rhat(value: Any) -> str:
    v = float(value)
    return "–" if math.isnan(v) else f"{v:.3f}"


def _n(spec: tuple) -> str:
    from benchmarks.models import MODEL_SIZES

    name, size, overrides = spec
    n = {**MODEL_SIZES[name][1][size], **overrides}.get("n_obs")
    return f"{n:.0e}".replace("e+0", "e") if n else "?"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--targets", default="1,2,3,4,5", help="comma-separated subset of 1-5")
    p.add_argument("--order", default="4,1,2,3,5",
                   help="order in which the selected targets run (default cheap first)")
    p.add_argument("--quick", action="store_true", help="small models, short chains (smoke)")
    p.add_argument("--sampler", default="SurrogateHMC",
                   help="step method of targets 3 and 5 (the quickstart is always SurrogateHMC)")
    p.add_argument("--out", type=Path, default=DEFAULT_RESULTS_DIR)
    p.add_argument("--tag", help="file stem (default tuning_payoff, or tuning_payoff_quick)")
    p.add_argument("--machine-note", default="",
                   help="what else ran on the machine, for the results' header")
    p.add_argument("--max-run-minutes", type=float, default=None,
                   help="stop any single run after this long and report it 'not run (time)'")
    p.add_argument("--stop-at", default=None,
                   help="HH:MM (UTC): runs not finished by then are reported 'not run (time)'")
    args = p.parse_args(argv)
    args.targets = [int(t) for t in split_names(args.targets)]
    args.order = [int(t) for t in split_names(args.order)]
    bad = [t for t in args.targets if t not in ALL_TARGETS]
    if bad:
        p.error(f"unknown targets {bad}; known: {list(ALL_TARGETS)}")
    args.order += [t for t in ALL_TARGETS if t not in args.order]
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    harness.log_to_stderr(harness._log, "payoff")
    payoff = Payoff(args, argv)
    payoff.run_all()
    md = payoff.out / f"{payoff.tag}.md"
    print(md.read_text())
    print(f"written: {md}\n         {payoff.out / (payoff.tag + '.csv')}\n         "
          f"{payoff.out / (payoff.tag + '_runs.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
