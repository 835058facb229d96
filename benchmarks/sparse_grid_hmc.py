"""SparseGridHMC benchmarks (issue 20; sparse-grid-hmc §4.1-4.4), side by side with PyMC.

Commands (results in ``benchmarks/results/sparse_grid_<tag>.md/.csv``)::

    OMP_NUM_THREADS=1 python -m benchmarks.sparse_grid_hmc --tag paper
    OMP_NUM_THREADS=1 python -m benchmarks.sparse_grid_hmc --cases pde20 --tag pde20 --skip-precompute
    OMP_NUM_THREADS=1 python -m benchmarks.sparse_grid_hmc --cases sweep --tag sweep --skip-precompute

Cases ``paper``: the GP hyperparameters (d = 3, §4.3), banana and logistic regression in 2-d
with the full grid (§4.1-4.2), and the elliptic PDE black box in d = 5 (§4.4) against
SurrogateHMC, DEMetropolisZ and Slice (and NUTS on the adjoint-gradient model). ``pde20``:
the showcase's d = 20 PDE, black box (against SurrogateHMC and DEMetropolisZ) and with its
adjoint gradient (against NUTS). ``sweep``: logistic regression, N = 10^5, d = 2 ... 40
(§4.5), SparseGridHMC against NUTS, with a plot of the ESS/s ratio and the acceptance. The grid
is precomputed in this process (``executor="serial"``), inside the timed run, so the
in-process evaluation counter sees every node: ``setup_s`` is the precompute and
``speedup_all`` compares min bulk ESS per second of *everything* (precompute, tune,
draws) with the baseline. A second table times the PDE precompute alone through process
pools of 1 and 2 workers (and a Dask ``LocalCluster`` when ``distributed`` is installed).
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pymc as pm

from benchmarks.harness import (
    DEFAULT_RESULTS_DIR,
    Reference,
    _add_speedups,
    _describe,
    _empty_row,
    environment_meta,
    reference_moments,
    run_one,
    write_results,
)
from benchmarks.models import build_model
from pymc_surrogate import GridBox
from pymc_surrogate.step_methods.sparse_grid_hmc import SparseGridHMC
from pymc_surrogate.surrogates import SmolyakGrid

_log = logging.getLogger("benchmarks.sparse_grid_hmc")

GRID = dict(executor="serial", progressbar=False)

#: (case, registry model, model overrides, reference key or None, samplers)
CASES = [
    ("gp", "gp", {}, "gp_default", ["SparseGridHMC", "NUTS"]),
    ("banana", "banana", {}, "banana_default", ["SparseGridHMC", "NUTS"]),
    ("logistic_2d", "logistic", {"n_obs": 100, "n_features": 2}, "sgrid_logistic2",
     ["SparseGridHMC", "NUTS"]),
    ("pde5_blackbox", "pde_blackbox", {"n_modes": 5, "mesh_size": 30, "gradient": False}, None,
     ["SparseGridHMC", "SurrogateHMC", "DEMetropolisZ", "Slice"]),
    ("pde5_adjoint", "pde_blackbox", {"n_modes": 5, "mesh_size": 30, "gradient": True}, None,
     ["SparseGridHMC", "NUTS"]),
]


#: The showcase's PDE (d = 20): black box and adjoint gradient.
PDE20_CASES = [
    ("pde20_blackbox", "pde_blackbox", {"n_modes": 20, "mesh_size": 30, "gradient": False}, None,
     ["SparseGridHMC", "SurrogateHMC", "DEMetropolisZ"]),
    ("pde20_adjoint", "pde_blackbox", {"n_modes": 20, "mesh_size": 30, "gradient": True}, None,
     ["SparseGridHMC", "NUTS"]),
]

SWEEP_DIMS = (2, 5, 10, 20, 40)


def sweep_cases(dims=SWEEP_DIMS, n_obs: int = 100_000) -> list[tuple]:
    """Logistic regression of growing dimension (sgHMC §4.5), no reference (NUTS beside)."""
    return [(f"logistic_d{d}", "logistic", {"n_obs": n_obs, "n_features": d}, None,
             ["SparseGridHMC", "NUTS"]) for d in dims]


def _samplers() -> dict:
    import pymc_surrogate

    return {"SparseGridHMC": SparseGridHMC, "SurrogateHMC": pymc_surrogate.SurrogateHMC,
            "DEMetropolisZ": pm.DEMetropolisZ, "Slice": pm.Slice, "NUTS": None}


def run_cases(draws: int, tune: int, chains: int, seed: int, max_nodes: int, tag: str,
              out_dir: Path, cases: list[tuple] = CASES, command: str = "") -> pd.DataFrame:
    samplers = _samplers()
    rows: list[dict] = []
    meta = {
        "command": command or (f"python -m benchmarks.sparse_grid_hmc --tag {tag} --draws {draws} "
                               f"--tune {tune} --chains {chains} --seed {seed} --max-nodes {max_nodes}"),
        "settings": f"draws={draws} tune={tune} chains={chains} cores=1 seed={seed}; "
                    f"SparseGridHMC(surrogate=SmolyakGrid(max_nodes={max_nodes}), executor='serial'): its precompute "
                    "is in setup_s and in n_logp/n_grad",
        **environment_meta(),
    }
    for case, name, overrides, ref_key, names in cases:
        model, info = build_model(name, "default", **overrides)
        reference = Reference(None, None, source="none: not computed")
        if ref_key is not None:
            try:
                reference = reference_moments(ref_key, "x", model, info, has_gradient=True,
                                              draws=2000, tune=1000, chains=4)
            except Exception as exc:  # noqa: BLE001 - the table says why
                reference = Reference(None, None, source=f"none: {_describe(exc)}")
        base = {"chains": chains, "tune": tune, "draws": draws}
        for sampler in names:
            row = _empty_row(case, "default", sampler, ref_source=reference.source, **base)
            kwargs = (dict(GRID, surrogate=SmolyakGrid(max_nodes=max_nodes), rng=seed)
                      if sampler == "SparseGridHMC" else None)
            _log.info("%s / %s ...", case, sampler)
            try:
                row.update(run_one(model, info, sampler, samplers[sampler], draws=draws,
                                   tune=tune, chains=chains, seed=seed, reference=reference,
                                   sampler_kwargs=kwargs))
                row["status"] = "ok"
                row["ess_per_s_all"] = row["min_ess_bulk"] / row["total_s"]
            except Exception as exc:  # noqa: BLE001
                row.update(status="error", note=_describe(exc))
            _log.info("%s", {k: row.get(k) for k in ("model", "sampler", "min_ess_bulk",
                                                        "total_s", "n_logp", "n_grad")})
            rows.append(row)
            _add_speedups(rows)
            _speedup_all(rows)
            write_results(rows, out_dir, f"sparse_grid_{tag}", meta)
    return pd.DataFrame(rows)


def _speedup_all(rows: list[dict]) -> None:
    """ESS per second of the whole run (precompute included) against the baseline, in
    ``note`` (the harness's table has no such column)."""
    for row in rows:
        base = next((r for r in rows if r["model"] == row["model"]
                     and r["sampler"] == row.get("baseline")), None)
        if base is None or row["status"] != "ok" or "ess_per_s_all" not in base:
            continue
        ratio = row["ess_per_s_all"] / base["ess_per_s_all"]
        row["note"] = f"all-in ESS/s (setup+tune+draws) x{ratio:.2f} vs {base['sampler']}"


def time_precompute(workers: list[int], max_nodes: int, tag: str, out_dir: Path) -> pd.DataFrame:
    """Wall time of the PDE (d = 5) precompute through process pools and Dask."""
    model, _ = build_model("pde_blackbox", "default", n_modes=5, mesh_size=30, gradient=False)
    rows = []
    bounds = (-1.5 * np.ones(5), 1.5 * np.ones(5))
    with model:
        for n in workers:
            with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn")) as pool:
                start = time.perf_counter()
                step = SparseGridHMC(domain=GridBox(bounds=bounds), surrogate=SmolyakGrid(max_nodes=max_nodes), executor=pool, progressbar=False)
                rows.append({"executor": f"ProcessPoolExecutor({n})", "workers": n,
                             "nodes": step.precompute_["nodes"],
                             "seconds": time.perf_counter() - start})
        start = time.perf_counter()
        step = SparseGridHMC(domain=GridBox(bounds=bounds), surrogate=SmolyakGrid(max_nodes=max_nodes), **GRID)
        rows.append({"executor": "serial", "workers": 0, "nodes": step.precompute_["nodes"],
                     "seconds": time.perf_counter() - start})
        try:
            import distributed
        except ImportError:
            rows.append({"executor": "dask LocalCluster", "workers": np.nan, "nodes": np.nan,
                         "seconds": np.nan, "note": "distributed not installed"})
        else:
            for n in workers:
                with distributed.LocalCluster(n_workers=n, threads_per_worker=1) as cluster, \
                        distributed.Client(cluster) as client:
                    start = time.perf_counter()
                    step = SparseGridHMC(domain=GridBox(bounds=bounds), surrogate=SmolyakGrid(max_nodes=max_nodes), executor=client.get_executor(), progressbar=False)
                    rows.append({"executor": f"dask LocalCluster({n})", "workers": n,
                                 "nodes": step.precompute_["nodes"],
                                 "seconds": time.perf_counter() - start})
    frame = pd.DataFrame(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out_dir / f"sparse_grid_{tag}_precompute.csv", index=False)
    columns = list(frame.columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row) + " |"
              for row in frame.itertuples(index=False)]
    meta = environment_meta()
    (out_dir / f"sparse_grid_{tag}_precompute.md").write_text(
        "# SparseGridHMC precompute wall time, elliptic PDE d = 5 (mesh 30)\n\n"
        f"{meta['versions']}; {meta['machine']}\n\nWorkers start by spawn (pymc imported "
        "and the logp compiled once per worker, inside the time); the machine's 2 cores "
        "are shared with other jobs.\n\n" + "\n".join(lines) + "\n"
    )
    return frame


def plot_sweep(frame: pd.DataFrame, path: Path) -> None:
    """ESS/s against NUTS (draws; tune and precompute included) and acceptance, over d."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = frame[(frame["sampler"] == "SparseGridHMC") & (frame["status"] == "ok")].copy()
    grid["d"] = grid["dim"].astype(int)
    grid = grid.sort_values("d")
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.plot(grid["d"], grid["speedup_draws"], "o-", label="draws")
    left.plot(grid["d"], grid["speedup_total"], "s-", label="tune + draws")
    if "ess_per_s_all" in grid:
        nuts = frame[frame["sampler"] == "NUTS"].set_index("model")["ess_per_s_all"]
        left.plot(grid["d"], grid["ess_per_s_all"].values / nuts.loc[grid["model"]].values,
                  "^-", label="precompute + tune + draws")
    left.axhline(1.0, color="grey", lw=0.8)
    left.set(xlabel="d", ylabel="min ESS/s ÷ NUTS's", yscale="log",
             title="logistic regression, N = 1e5")
    left.legend()
    right.plot(grid["d"], grid["mean_accept"], "o-")
    right.set(xlabel="d", ylabel="acceptance (true logp)", ylim=(0, 1.05),
              title="SparseGridHMC acceptance")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", default="paper")
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=500)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-nodes", type=int, default=1000)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--skip-precompute", action="store_true")
    parser.add_argument("--cases", default="paper", choices=("paper", "pde20", "sweep"))
    parser.add_argument("--sweep-dims", default=",".join(map(str, SWEEP_DIMS)))
    parser.add_argument("--sweep-obs", type=int, default=100_000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out_dir = Path(DEFAULT_RESULTS_DIR)
    cases = {"paper": CASES, "pde20": PDE20_CASES,
             "sweep": sweep_cases([int(d) for d in args.sweep_dims.split(",")], args.sweep_obs)}
    command = "python -m benchmarks.sparse_grid_hmc " + " ".join(argv if argv is not None
                                                                  else sys.argv[1:])
    frame = run_cases(args.draws, args.tune, args.chains, args.seed, args.max_nodes, args.tag,
                      out_dir, cases[args.cases], command)
    if args.cases == "sweep":
        plot_sweep(frame, out_dir / f"sparse_grid_{args.tag}.png")
    print(frame[["model", "sampler", "status", "min_ess_bulk", "total_s", "setup_s",
                 "n_logp", "n_grad", "speedup_draws", "note"]].to_string())
    if not args.skip_precompute:
        workers = [int(w) for w in args.workers.split(",")]
        print(time_precompute(workers, args.max_nodes, args.tag, out_dir).to_string())


if __name__ == "__main__":
    main()
