"""Print each frame decision (map degrees, misfits) on flat box / banana / haario2, SurrogateHMC frame=triangular."""
import sys
sys.path.insert(0, sys.argv[3])
import numpy as np, pymc as pm, arviz as az
import pymc_surrogate as ps
from pymc_surrogate.step_methods.adaptation import transport_frame as tf
orig_fit = tf.TriangularMap.fit
pm_ = tf.potential_misfit
def misfit(z, u):
    v = pm_(z, u); misfit.log.append(v); return v
misfit.log = []
tf.potential_misfit = misfit
orig = tf.Frame.fitted
def fitted(self, states, potentials):
    misfit.log.clear()
    new = orig(self, states, potentials)
    print(f"fit n={len(states)} -> {'affine' if new is None else list(new.degrees_)} misfit map/affine {np.round(misfit.log,3).tolist()}", flush=True)
    return new
tf.Frame.fitted = fitted
seed = int(sys.argv[1]); kind = sys.argv[2]
sys.path.insert(0, sys.argv[3] + "/benchmarks")
if kind == "flat":
  with pm.Model() as model:
        pm.Uniform("u", 0.0, 1.0, shape=2, default_transform=None, initval=np.array([0.3, 0.6]))
        draws = 4000
else:
        import banana_coverage as bc
        model = bc.curved_models(kind)[0]["black_box"][0]
        draws = 1000
with model:
    step = ps.SurrogateHMC(frame=sys.argv[4] if len(sys.argv) > 4 else "triangular")
    idata = pm.sample(step=step, tune=1000, draws=draws, chains=2, cores=1, random_seed=seed, progressbar=False, compute_convergence_checks=False)
print(kind, seed, "ESS per chain", [az.ess(idata.posterior.isel(chain=[c])).to_array().values.round().tolist() for c in range(2)], "deg", idata.sample_stats.frame_degree.values[:, -1])
