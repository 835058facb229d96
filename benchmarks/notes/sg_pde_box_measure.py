"""SparseGridHMC on the black-box PDE: box, evaluations, share in box, R-hat/ESS/solves.
usage: python measure.py CODE_ROOT d seed out.npz [extra kwargs dict]"""
import sys, logging, warnings, time, json
root, d, seed, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, root)
warnings.filterwarnings("ignore")
import numpy as np, pymc as pm, arviz as az
from benchmarks.models.elliptic_pde import make_pde_model
from pymc_surrogate import SparseGridHMC
kw = eval(sys.argv[5]) if len(sys.argv) > 5 else {}
model, info = make_pde_model(n_modes=d, mesh_size=30, gradient=False)
records = []
class H(logging.Handler):
    def emit(self, r): records.append(r.getMessage())
logging.getLogger("pymc").addHandler(H()); logging.getLogger("pymc").setLevel(logging.WARNING)
fitted = {}
try:
    from pymc_surrogate.step_methods.grid import domain as _dom
    orig = _dom.GridDomain._warm_up_domain
    def wrapped(self, chain):
        keep = self._relevant(chain)
        pos, pot = chain.training.positions[keep], chain.training.potentials[keep]
        near = pot <= pot.min() + self.policy.mode_depth(self.dim)
        fitted.update(n_training=int(len(chain.training)), n_relevant=int(keep.sum() if keep.dtype == bool else len(pos)),
                      n_near=int(near.sum()), n_near_unique=int(len(np.unique(pos[near], axis=0))),
                      probe=self.exploration.probe is not None)
        fitted["near_positions"] = pos[near]
        return orig(self, chain)
    _dom.GridDomain._warm_up_domain = wrapped
except ImportError:
    pass
t = time.time()
with model:
    step = SparseGridHMC(**kw)
    idata = pm.sample(step=step, tune=1000, draws=1000, chains=2, cores=1, random_seed=seed,
                      progressbar=False, compute_convergence_checks=False)
secs = time.time() - t
rhat = float(az.rhat(idata).to_array().max()); ess = float(az.ess(idata).to_array().min())
solves = int(info.problem.n_forward) + int(info.problem.n_adjoint)
x = idata.posterior["theta"].values
inb = idata.sample_stats["in_domain"].values
g = step.grid_
tr = g.transform
lo, up = g.domain_
print(json.dumps(dict(root=root, d=d, seed=seed, kw=repr(kw), rhat=rhat, ess=ess, solves=solves, solves_per_ess=solves / ess,
                      secs=round(secs), in_box=inb.mean(axis=1).round(3).tolist(), precompute={k: v for k, v in step.precompute_.items() if k not in ("saved",)},
                      level=str(getattr(g, "level_", getattr(g, "level", None))),
                      fitted={k: v for k, v in fitted.items() if k != "near_positions"})), flush=True)
for m in records:
    if "SparseGridHMC" in m: print("WARN:", m[:300])
np.savez(out, draws=x, in_box=inb, lower=lo, upper=up, tmean=tr.center if tr is not None else np.zeros(d),
         axes=tr.axes if tr is not None else np.eye(d), box_mean=step.box_mean_, box_cov=step.box_cov_,
         near=fitted.get("near_positions", np.zeros((0, d))), rhat=rhat, ess=ess, solves=solves,
         theta_true=info.theta_true)
