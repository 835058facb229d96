"""Chains that share their evaluations against chains alone, on the black-box PDE (issue 36).

Issue 36's first line: SurrogateHMC and AdaptiveSurrogateHMC with ``tune=300``, 4 chains
sharing their store, right (R-hat <= 1.01) with <= 5 solves per pooled min ESS, tune
included::

    PYTHONPATH=. python benchmarks/shared_store.py --tag tune300
    python benchmarks/shared_store.py --samplers SurrogateHMC --cores 4 --sharing shared \
        --seeds 1-5 --tag tune300_seeds

Each run is one ``pm.sample`` on the black-box PDE (``benchmarks.models.make_pde_model``,
the forward solve only) with ``store=EvaluationStore()`` (the chains, in every process,
share a temporary store) or
``store=False`` (each chain alone). Columns: ``solves`` = the steps' ``total_model_evals``
summed over the chains (tune included; counted in every process, any ``cores``),
``min_ess`` = the least bulk ESS of a coordinate over the pooled chains,
``solves_per_ess``, ``max_rhat``, ``first_fit`` = per chain the first tuning iteration on a
surrogate (``tune`` when none), ``fallback`` = the share of draws on the exact exploration
kernel, ``max_z`` = the largest |mean - reference| / MCSE over coordinates against NUTS
with the adjoint gradient on the same posterior (run once, same seed, 4 x (1000 + 1000)),
``wall_s``. ``right`` = R-hat <= 1.01 and max_z <= 4. Per chain (where a run went wrong,
one chain usually did): ``chain_min_ess``, the least bulk ESS of a coordinate in that
chain alone, and ``longest_rejection_run``, its most draws rejected in a row.
``--step-kwargs '{"warmup": {"steps": 400}}'`` passes settings to the step (a variant to compare);
``--variant tail_tempering`` patches the step with one of ``benchmarks/line1_variants.py``.
Output: ``benchmarks/results/shared_store_<tag>.{csv,md}``, rewritten after every run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
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

import pymc_surrogate  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    DEFAULT_RESULTS_DIR, environment_meta, format_cell, git_commit, parse_seeds, split_names,
)
from benchmarks.models import make_pde_model  # noqa: E402
from pymc_surrogate import EvaluationStore  # noqa: E402
from pymc_surrogate.compat import posterior_dataset  # noqa: E402

Z_LIMIT, RHAT_LIMIT = 4.0, 1.01


def draws_of(idata) -> np.ndarray:
    """The posterior of theta as (chain, draw, d)."""
    values = np.asarray(posterior_dataset(idata)["theta"])
    return values.reshape(values.shape[0], values.shape[1], -1)


def reference(args) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NUTS with the adjoint gradient: mean, sd and MCSE of the mean per coordinate."""
    model, _ = make_pde_model(n_modes=args.modes, mesh_size=args.mesh, gradient=True)
    with model:
        idata = pm.sample(draws=args.ref_draws, tune=1000, chains=4, cores=args.ref_cores,
                          random_seed=args.seed, progressbar=False,
                          compute_convergence_checks=False)
    values = draws_of(idata)
    flat = values.reshape(-1, values.shape[2])
    ess = np.array([float(az.ess(values[:, :, j])) for j in range(values.shape[2])])
    return flat.mean(0), flat.std(0), flat.std(0) / np.sqrt(ess)


def longest_rejection_run(accepted: np.ndarray) -> int:
    """The most consecutive rejected draws in one chain's ``accepted`` stat."""
    longest = run = 0
    for moved in accepted:
        run = 0 if moved > 0.5 else run + 1
        longest = max(longest, run)
    return longest


def measure(idata, ref, tune: int) -> dict:
    values = draws_of(idata)
    d = values.shape[2]
    ess = np.array([float(az.ess(values[:, :, j])) for j in range(d)])
    rhat = np.array([float(az.rhat(values[:, :, j])) for j in range(d)])
    flat = values.reshape(-1, d)
    mean, sd = flat.mean(0), flat.std(0)
    z = (mean - ref[0]) / np.sqrt((sd / np.sqrt(ess)) ** 2 + ref[2] ** 2)
    stats = idata.sample_stats
    solves = int(np.asarray(stats["total_model_evals"])[:, -1].sum())
    warm = getattr(idata, "warmup_sample_stats", None)
    first_fit = []
    if warm is not None and "uses_surrogate" in warm:
        for row in np.asarray(warm["uses_surrogate"]):
            first_fit.append(int(np.argmax(row)) if row.any() else tune)
    return {
        "solves": solves,
        "min_ess": float(ess.min()),
        "solves_per_ess": solves / max(float(ess.min()), 1e-9),
        "max_rhat": float(rhat.max()),
        "max_z": float(np.abs(z).max()),
        "sd_ratio_range": f"{(sd / ref[1]).min():.2f}-{(sd / ref[1]).max():.2f}",
        "first_fit": " ".join(map(str, first_fit)),
        "fallback": float(np.asarray(stats["fallback"]).mean()),
        "chain_min_ess": " ".join(
            f"{min(float(az.ess(values[c:c + 1, :, j])) for j in range(d)):.0f}"
            for c in range(values.shape[0])),
        "longest_rejection_run": " ".join(
            str(longest_rejection_run(row)) for row in np.asarray(stats["accepted"])),
        "right": bool(rhat.max() <= RHAT_LIMIT and np.abs(z).max() <= Z_LIMIT),
    }


def run(sampler: str, sharing: str, cores: int, seed: int, args, ref) -> dict:
    model, _ = make_pde_model(n_modes=args.modes, mesh_size=args.mesh, gradient=False)
    cls = pymc_surrogate.STEP_METHODS[sampler]
    start = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(draws=args.draws, tune=args.tune, chains=args.chains, cores=cores,
                          random_seed=seed, progressbar=False,
                          discard_tuned_samples=False, compute_convergence_checks=False,
                          step=cls(store=EvaluationStore() if sharing == "shared" else False,
                                   **json.loads(args.step_kwargs)))
    row = {"sampler": sampler, "chains": sharing, "cores": cores, "seed": seed,
           **measure(idata, ref, args.tune)}
    row["wall_s"] = time.perf_counter() - start
    return row


def write(rows: list[dict], args, out: Path) -> None:
    frame = pd.DataFrame(rows)
    frame.to_csv(out.with_suffix(".csv"), index=False)
    meta = environment_meta()
    lines = [
        f"# Shared evaluation store: {args.tag}", "",
        f"`{' '.join(['python', 'benchmarks/shared_store.py'] + sys.argv[1:])}`", "",
        f"Black-box elliptic PDE, d = {args.modes}, mesh {args.mesh}x{args.mesh}; "
        f"{args.chains} chains x ({args.tune} + {args.draws}), seeds {args.seeds}; commit "
        f"{git_commit()}, {meta.get('versions', '')}, {_dt.datetime.now():%Y-%m-%d %H:%M}. "
        "Reference: NUTS with the adjoint gradient, 4 x (1000 + "
        f"{args.ref_draws}), seed {args.seed}. Solves are counted in every process (the "
        "steps' stats). With cores > 1 the chains' interleaving, and so what each reads "
        "from the store, varies from run to run: a seed does not fix a shared run.", "",
        "| " + " | ".join(frame.columns) + " |",
        "|" + "---|" * len(frame.columns),
    ]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(format_cell(v) for v in row.values) + " |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samplers", default="SurrogateHMC,AdaptiveSurrogateHMC")
    parser.add_argument("--sharing", default="alone,shared")
    parser.add_argument("--cores", default="1,2", help="comma-separated cores settings")
    parser.add_argument("--modes", type=int, default=20)
    parser.add_argument("--mesh", type=int, default=30)
    parser.add_argument("--tune", type=int, default=300)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1, help="the reference run's seed")
    parser.add_argument("--seeds", default="1", help="the runs' seeds, e.g. 1-3")
    parser.add_argument("--ref-draws", type=int, default=1000)
    parser.add_argument("--ref-cores", type=int, default=2)
    parser.add_argument("--step-kwargs", default="{}",
                        help="settings for the step as JSON, e.g. '{\"warmup\": {\"steps\": 400}}'")
    parser.add_argument("--variant", default=None,
                        help="a change of SurrogateHMC to measure (benchmarks/line1_variants.py)")
    parser.add_argument("--tag", default="tune300")
    parser.add_argument("--out", default=str(DEFAULT_RESULTS_DIR))
    args = parser.parse_args(argv)
    out = Path(args.out) / f"shared_store_{args.tag}"
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.variant:
        from benchmarks.line1_variants import install

        install(args.variant)
    ref = reference(args)
    rows = []
    for sampler in split_names(args.samplers):
        for sharing in split_names(args.sharing):
            for cores in (int(c) for c in args.cores.split(",")):
                for seed in parse_seeds(args.seeds):
                    rows.append(run(sampler, sharing, cores, seed, args, ref))
                print(rows[-1], flush=True)
                write(rows, args, out)
    return rows


if __name__ == "__main__":
    main()
