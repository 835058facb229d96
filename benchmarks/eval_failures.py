"""Failed model evaluations as rejections: every step method on a model that fails.

A 2-d N(0, I) whose black-box likelihood (a PyTensor Op without gradient) raises
``ValueError`` ("solver did not converge") for x[0] > 2, or returns NaN there; and one that
raises at random, one call in 50. Each step method (VariationalHMC with
``use_gradient="finite_difference"``, as the reliability suite runs black boxes) samples
2 chains x (1000 tune + 1000 draws), ``cores=1``. Per run: ``max`` (x[0]'s largest draw,
<= 2 in the failing-region runs), ``z_mean`` (x[0]'s mean against the truncated normal's, in
units of ``az.mcse``), ``sd_ratio`` (x[0]'s sd over the truncated normal's; the full normal's
for the random failures), ``eval_failures`` and ``model_evals`` per chain (tune included),
``wall_s``. ``right`` = no draw beyond 2, |z| <= 4 and sd within 10%::

    PYTHONPATH=. python benchmarks/eval_failures.py [--seed 1] [--tag name]

Output: ``benchmarks/results/eval_failures[_<tag>].{csv,md}``, rewritten after every run.
The short forms of these runs are ``tests/reliability/test_eval_failures.py``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import os
import subprocess
import sys
import time
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.reliability.helpers import BlackBoxLogp, black_box_step  # noqa: E402
from tests.reliability.registry import STEPS  # noqa: E402

EDGE = 2.0
RESULTS = Path(__file__).parent / "results"
COLUMNS = ["step", "model", "seed", "right", "max", "z_mean", "sd_ratio", "eval_failures",
           "model_evals", "n_warnings", "wall_s"]


def make_logp(kind: str, seed: int):
    rng = np.random.default_rng(seed)

    def logp(q):
        if kind == "random_1_in_50":
            if rng.uniform() < 1 / 50:
                raise RuntimeError("the model server could not answer")
        elif q[0] > EDGE:
            if kind == "raise":
                raise ValueError(f"solver did not converge at {q}")
            return np.nan
        return -0.5 * q @ q

    return logp


def run(entry, kind: str, seed: int) -> dict:
    import logging

    messages = []

    class Keep(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler = Keep(logging.WARNING)
    logging.getLogger("pymc").addHandler(handler)
    try:
        with pm.Model():
            x = pm.Flat("x", shape=2, initval=np.zeros(2))
            pm.Potential("lik", BlackBoxLogp(make_logp(kind, seed), f"lik_{kind}")(x))
            started = time.perf_counter()
            idata = pm.sample(step=black_box_step(entry), tune=1000, draws=1000, chains=2,
                              cores=1, progressbar=False, random_seed=seed,
                              compute_convergence_checks=False)
            wall = time.perf_counter() - started
    finally:
        logging.getLogger("pymc").removeHandler(handler)
    law = sps.norm() if kind == "random_1_in_50" else sps.truncnorm(-np.inf, EDGE)
    x0 = idata.posterior["x"].isel(x_dim_0=0)
    result = az.mcse(x0)  # a Dataset on ArviZ 0.x, a DataArray on 1.x
    mcse = float(np.asarray(result.to_array() if hasattr(result, "to_array") else result).squeeze())
    values = x0.values
    z = (values.mean() - law.mean()) / mcse
    ratio = values.std() / law.std()
    truncated = kind != "random_1_in_50"
    right = (not truncated or values.max() <= EDGE) and abs(z) <= 4 and abs(ratio - 1) <= 0.1
    stats = idata.sample_stats
    return {
        "step": entry.id, "model": kind, "seed": seed, "right": "yes" if right else "NO",
        "max": f"{values.max():.3f}", "z_mean": f"{z:.2f}", "sd_ratio": f"{ratio:.3f}",
        "eval_failures": " / ".join(str(v) for v in stats["eval_failures"].values[:, -1]),
        "model_evals": " / ".join(str(v) for v in stats["total_model_evals"].values[:, -1]),
        "n_warnings": len(messages), "wall_s": f"{wall:.0f}",
    }


def write(rows, path: Path, command: str, seed: int) -> None:
    with open(path.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).parent).stdout.strip()
    import pytensor

    lines = [
        "# Failed model evaluations as rejections",
        "",
        f"- **command**: {command}",
        f"- **git commit**: {commit}",
        f"- **settings**: 2-d N(0, I) black box; tune=1000 draws=1000 chains=2 cores=1, seed {seed}",
        f"- **versions**: pymc {pm.__version__}, pytensor {pytensor.__version__}, "
        f"python {sys.version.split()[0]}",
        f"- **date**: {_dt.datetime.now():%Y-%m-%d %H:%M}",
        f"- **machine**: {os.cpu_count()} CPUs, shared",
        "",
        "Models: `raise` (ValueError for x[0] > 2), `nan` (NaN there), `random_1_in_50` "
        "(RuntimeError at one call in 50, at random; the law is N(0, 1)). `z_mean`: x[0]'s "
        "mean error over az.mcse; `sd_ratio`: sd over the truth's; `eval_failures` and "
        "`model_evals`: each chain's, tune included; `n_warnings`: pymc log records at "
        "WARNING or above.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tag", default="")
    parser.add_argument("--steps", default="", help="comma-separated step ids (default all)")
    parser.add_argument("--models", default="raise,nan,random_1_in_50")
    args = parser.parse_args()
    wanted = [s for s in args.steps.split(",") if s]
    entries = [e for e in STEPS if not wanted or e.id in wanted]
    path = RESULTS / ("eval_failures" + (f"_{args.tag}" if args.tag else ""))
    command = "python " + " ".join(sys.argv)
    rows = []
    for kind in args.models.split(","):
        for entry in entries:
            try:
                rows.append(run(entry, kind, args.seed))
            except Exception as err:  # noqa: BLE001 - a failed run is a result
                rows.append({"step": entry.id, "model": kind, "seed": args.seed, "right": "NO",
                             "max": "", "z_mean": "", "sd_ratio": "",
                             "eval_failures": f"{type(err).__name__}: {str(err)[:80]}",
                             "model_evals": "", "n_warnings": "", "wall_s": ""})
            print(rows[-1], flush=True)
            write(rows, path, command, args.seed)


if __name__ == "__main__":
    main()
