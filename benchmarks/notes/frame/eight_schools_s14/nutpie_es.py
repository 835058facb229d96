"""Run from the repository root: PYTHONPATH=. python nutpie_es.py POSTERIOR (nutpie 0.16.8, peers venv).

nutpie (numba, low-rank modified mass matrix) on a posteriordb posterior, 2 x (1000 + 1000),
seeds 0-9, judged as benchmarks/real_posteriors.py judges; evaluations = 2 per leapfrog step
(tuning included), divergences counted in the draws."""
import sys, warnings
import nutpie
from benchmarks import posteriordb as pdb
from benchmarks.posteriordb.reference import load_reference, reference_arrays, variable_shapes
from benchmarks.real_posteriors import compare_with_reference, classify
warnings.filterwarnings("ignore")
posterior = sys.argv[1]
model, info = pdb.make_model(posterior)
ref = reference_arrays(load_reference(posterior), variable_shapes(model, info.param_names),
                       pdb.param_rename(posterior))
compiled = nutpie.compile_pymc_model(model)
for seed in range(10):
    idata = nutpie.sample(compiled, draws=1000, tune=1000, chains=2, cores=1, seed=seed,
                          low_rank_modified_mass_matrix=True, progress_bar=False)
    row = compare_with_reference(idata.posterior, list(info.param_names), ref, 2)
    steps = int(idata.sample_stats["n_steps"].sum()) + int(idata.warmup_sample_stats["n_steps"].sum())
    row["divergences"] = int(idata.sample_stats["diverging"].sum())
    print(posterior, seed, classify(row), f"z {row['max_abs_z']:.2f} at {row['z_at']} rhat {row['max_rhat']:.3f}",
          f"sd {row['sd_ratio_min']:.3f}-{row['sd_ratio_max']:.3f} tails_ok {row['tails_ok']}",
          f"ess {row['min_ess_bulk']:.0f} evals/ess {2 * steps / row['min_ess_bulk']:.1f} div {row['divergences']}", flush=True)
