"""SurrogateHMC on pde_blackbox (tuning table target 2 settings) at one seed: a hash of the
draws, the min bulk ESS and the evaluations, so two commits can be compared draw for draw."""
import hashlib, sys, time
import numpy as np
import pymc_surrogate
from benchmarks.harness import sample_counted
from benchmarks.models import build_model
from pymc_surrogate.compat import posterior_dataset
import arviz as az

seed, tag = int(sys.argv[1]), sys.argv[2]
draws = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
model, info = build_model("pde_blackbox", "default")
t = time.time()
run = sample_counted(model, info, "SurrogateHMC", pymc_surrogate.STEP_METHODS["SurrogateHMC"],
                     draws=draws, tune=1000, chains=2, seed=seed)
post = posterior_dataset(run.idata)
x = np.concatenate([post[n].values.reshape(2, draws, -1) for n in post.data_vars], axis=2)
np.save(f"/work/s14/pde_{tag}_{seed}.npy", x)
ess = float(min(az.ess(post)[n].values.min() for n in post.data_vars))
st = posterior_dataset(run.idata, "sample_stats")
evals = int(st["total_model_evals"].values[:, -1].sum())
print(tag, seed, hashlib.sha1(x.tobytes()).hexdigest()[:12], f"ess {ess:.0f} evals {evals} "
      f"evals/ess {evals / ess:.2f} wall {time.time() - t:.0f}s", flush=True)
