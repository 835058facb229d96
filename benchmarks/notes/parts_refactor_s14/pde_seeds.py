"""evals/ESS of one step method on pde_blackbox over seeds (tuning table targets 1-2)."""
import sys
from benchmarks import harness
from benchmarks.harness import Reference
from benchmarks.models import build_model
import pymc_surrogate

sampler, tune, seeds, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
model, info = build_model("pde_blackbox", "default")
for seed in map(int, seeds.split(",")):
    row = harness.run_one(model, info, sampler, pymc_surrogate.STEP_METHODS[sampler], draws=1000,
                          tune=tune, chains=2, seed=seed, reference=Reference(None, None, source="none"))
    print(tag, sampler, tune, seed, row["min_ess_bulk"], f"{row['max_rhat']:.3f}",
          row["n_logp"], f"{row['evals_per_ess']:.2f}", flush=True)
