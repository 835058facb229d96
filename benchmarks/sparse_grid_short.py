"""SparseGridHMC alone on a short subset of benchmarks/sparse_grid_hmc.py's cases (gp,
banana, logistic_2d, pde5_blackbox), 2 x (500 + 1000), seed 0: a before/after check.

    PYTHONPATH=<tree> OMP_NUM_THREADS=1 nice -n 5 python benchmarks/sparse_grid_short.py <tag> [out_dir]

Results: ``<out_dir>/sparse_grid_<tag>.{csv,md}`` (default out_dir /tmp). The tree on
PYTHONPATH is the package measured (this repository's is only the fallback).
"""
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))
import pymc_surrogate  # noqa: E402
from benchmarks import sparse_grid_hmc as b  # noqa: E402

print(pymc_surrogate.__file__, flush=True)
cases = [(c, n, o, r, ["SparseGridHMC"]) for c, n, o, r, _ in b.CASES
         if c in ("gp", "banana", "logistic_2d", "pde5_blackbox")]
df = b.run_cases(draws=1000, tune=500, chains=2, seed=0, max_nodes=1000, tag=sys.argv[1],
                 out_dir=Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp"), cases=cases,
                 command="benchmarks/sparse_grid_short.py " + " ".join(sys.argv[1:]))
print(df[["model", "min_ess_bulk", "max_rhat", "mean_err_mcse", "sd_err", "n_logp", "n_grad",
          "evals_per_ess", "total_s"]].to_string())
