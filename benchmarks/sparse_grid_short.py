"""SparseGridHMC alone on a short subset of benchmarks/sparse_grid_hmc.py's cases (gp,
banana, logistic_2d, pde5_blackbox), 2 x (500 + 1000), one row per case and seed: a
before/after check.

    PYTHONPATH=<tree> OMP_NUM_THREADS=1 nice -n 10 python benchmarks/sparse_grid_short.py <tag> \
        [--seeds 0-4] [--cases gp,banana] [--out DIR]

Results: ``<out>/sparse_grid_short_<tag>.{csv,md}`` (default out benchmarks/results),
rewritten after every run. The package measured is the one on PYTHONPATH (imported before
this repository's ``benchmarks``, which serves the models, the references and the counting).

Per run, as ``benchmarks/banana_coverage.py`` judges: ``max_abs_z`` = max over the
parameters of ``|mean - ref mean| / az.mcse(mean)``; ``sd_ratio_min/max`` = sd / ref sd;
``sd_ok`` = every ``|sd - ref sd| <= 3 az.mcse(sd)``; ``max_rhat`` (rank); ``right`` =
max|z| <= 4, R-hat <= 1.01 and sd_ok (pde5_blackbox has no reference: R-hat only).
``evals_per_ess`` = every logp and gradient the counter saw (the grid included) / min bulk
ESS. The reference is the harness's (long NUTS, cached in benchmarks/cache).
"""
import argparse
import sys
import warnings
from pathlib import Path

import pymc_surrogate  # noqa: E402 - the tree on PYTHONPATH, before this repository's

_REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from benchmarks import sparse_grid_hmc as b  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    Reference, environment_meta, parse_seeds, reference_moments, sample_counted,
)
from benchmarks.models import build_model  # noqa: E402
from pymc_surrogate.compat import posterior_dataset  # noqa: E402

if hasattr(az, "Numba"):  # as banana_coverage.py: mcse(method="sd") on vector variables
    az.Numba.disable_numba()

Z_LIMIT, RHAT_LIMIT, SD_MCSE = 4.0, 1.01, 3.0
NAMES = ("gp", "banana", "logistic_2d", "pde5_blackbox")


def measure(idata, names, reference) -> dict:
    post = posterior_dataset(idata)[names]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        se, se_sd, rhat, ess = (f(post, **kw) for f, kw in (
            (az.mcse, {"method": "mean"}), (az.mcse, {"method": "sd"}), (az.rhat, {}),
            (az.ess, {"method": "bulk"})))
    row = {"max_rhat": max(float(np.max(rhat[n].values)) for n in names),
           "min_ess_bulk": min(float(np.min(ess[n].values)) for n in names)}
    if reference.mean is None:
        row.update(max_abs_z=np.nan, sd_ratio_min=np.nan, sd_ratio_max=np.nan, sd_ok=None)
        row["right"] = row["max_rhat"] <= RHAT_LIMIT
        return row
    z, ratio, ok = [], [], []
    for n in names:
        x = post[n].values
        x = x.reshape(x.shape[0] * x.shape[1], -1)
        mean, sd = x.mean(axis=0), x.std(axis=0, ddof=1)
        ref_mean = np.asarray(reference.mean[n], dtype=float).reshape(-1)
        ref_sd = np.asarray(reference.sd[n], dtype=float).reshape(-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            z += list(np.nan_to_num((mean - ref_mean) / se[n].values.reshape(-1), nan=np.inf))
        ratio += list(sd / ref_sd)
        ok += list(np.abs(sd - ref_sd) <= SD_MCSE * se_sd[n].values.reshape(-1))
    row.update(max_abs_z=float(np.max(np.abs(z))), sd_ratio_min=float(min(ratio)),
               sd_ratio_max=float(max(ratio)), sd_ok=bool(all(ok)))
    row["right"] = bool(row["max_abs_z"] <= Z_LIMIT and row["max_rhat"] <= RHAT_LIMIT
                        and row["sd_ok"])
    return row


def write(rows, out: Path, tag: str, meta: dict) -> None:
    frame = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / f"sparse_grid_short_{tag}.csv", index=False)
    cols = ["model", "seed", "right", "max_abs_z", "max_rhat", "sd_ratio_min", "sd_ratio_max",
            "sd_ok", "min_ess_bulk", "n_logp", "n_grad", "evals_per_ess", "wall_s", "error"]
    cols = [c for c in cols if c in frame]

    def cell(v):
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = [f"# SparseGridHMC short, per seed: {tag}", "",
             *(f"- **{k}**: {v}" for k, v in meta.items()), "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |"
              for r in frame[cols].itertuples(index=False)]
    lines += ["", "| model | right | median max|z| | max R-hat | sd ratios (min-max) | "
              "median evals/ESS |", "|---|---|---|---|---|---|"]
    for model, g in frame.groupby("model", sort=False):
        lines.append(
            f"| {model} | {int(g['right'].sum())} of {len(g)} | {g['max_abs_z'].median():.2f} | "
            f"{g['max_rhat'].max():.3f} | {g['sd_ratio_min'].min():.3f}-"
            f"{g['sd_ratio_max'].max():.3f} | {g['evals_per_ess'].median():.1f} |")
    (out / f"sparse_grid_short_{tag}.md").write_text("\n".join(lines) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tag")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--cases", default=",".join(NAMES))
    parser.add_argument("--out", default=str(_REPO / "benchmarks" / "results"))
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=500)
    args = parser.parse_args(argv)
    print(pymc_surrogate.__file__, flush=True)
    wanted = args.cases.split(",")
    seeds = parse_seeds(args.seeds)
    meta = {"command": "benchmarks/sparse_grid_short.py " + " ".join(argv or sys.argv[1:]),
            "package": pymc_surrogate.__file__,
            "settings": f"SparseGridHMC(executor='serial', rng=seed), "
                        f"pm.sample(chains=2, tune={args.tune}, draws={args.draws}, cores=1, "
                        "random_seed=seed)",
            "right": "max|z| <= 4 (az.mcse), R-hat <= 1.01, every |sd - ref| <= 3 mcse(sd)",
            **environment_meta()}
    rows = []
    for case, name, overrides, ref_key, _ in b.CASES:
        if case not in wanted:
            continue
        model, info = build_model(name, "default", **overrides)
        reference = Reference(None, None, source="none")
        if ref_key is not None:
            reference = reference_moments(ref_key, "x", model, info, has_gradient=True,
                                          draws=2000, tune=1000, chains=4)
        names = list(reference.mean) if reference.mean is not None else [
            v.name for v in model.free_RVs]
        for seed in seeds:
            row = {"model": case, "seed": seed}
            try:
                run = sample_counted(model, info, "SparseGridHMC", b.SparseGridHMC,
                                     draws=args.draws, tune=args.tune, chains=2, seed=seed,
                                     sampler_kwargs=dict(b.GRID, rng=seed))
                row.update(measure(run.idata, names, reference))
                row.update(n_logp=run.timing["n_logp"], n_grad=run.timing["n_grad"],
                           wall_s=run.timing.get("total_s", np.nan))
                row["evals_per_ess"] = (row["n_logp"] + row["n_grad"]) / row["min_ess_bulk"]
            except Exception as exc:  # noqa: BLE001 - the table says why
                row.update(right=False, error=f"{type(exc).__name__}: {exc}"[:200])
            print(row, flush=True)
            rows.append(row)
            write(rows, Path(args.out), args.tag, meta)


if __name__ == "__main__":
    main()
