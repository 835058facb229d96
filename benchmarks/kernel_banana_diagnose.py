"""KernelHMC on the black-box banana, one seed, per chain: the fit made when tuning ends
(temperature, sigma, lam, history size and distinct states), the Pareto k of
exp(U~ - U) on 4000 iid posterior draws with the largest log weight above the median,
the shares of the history and of the draws beyond the reference 2.5 / 97.5 % quantiles,
and the draws' acceptance::

    PYTHONPATH=. nice -n 10 python benchmarks/kernel_banana_diagnose.py SEED ['dict(temperature=8.0)']
"""
import sys, os, warnings, logging
for v in ("OPENBLAS_NUM_THREADS","OMP_NUM_THREADS","MKL_NUM_THREADS"): os.environ.setdefault(v,"1")
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import numpy as np, pymc as pm, arviz as az
from benchmarks.banana_coverage import black_box_banana
from benchmarks.models.banana import banana_beta2_marginal, banana_log_density, make_banana
from pymc_surrogate.step_methods.kernel_hmc import KernelHMC
from pymc_surrogate.compat import pareto_khat
logging.getLogger("pymc").setLevel(logging.ERROR)
model, info = black_box_banana()
y = info.extra["y"]
b2g, w, mu1, v = banana_beta2_marginal(y)
rng = np.random.default_rng(123)
p = w / w.sum(); idx = rng.choice(len(b2g), 4000, p=p)
ref = np.c_[mu1[idx] + np.sqrt(v) * rng.standard_normal(4000), b2g[idx]]
Uref = -banana_log_density(ref[:,0], ref[:,1], y)
captured = []
class K(KernelHMC):
    def stop_tuning(self):
        super().stop_tuning()
        ch, learned = self.chain, self.learned
        field = self._surrogate_field(ch)
        surr = learned.surrogate
        captured.append(dict(field=field, surr=surr, hist=self.fit.history().copy(),
                             cov_T=self.coverage.temperature, khat=self.coverage.khat,
                             T=getattr(surr, "temperature", np.nan),
                             sigma=getattr(surr, "sigma_", np.nan), lam=getattr(surr,"lam_",np.nan),
                             ntrain=len(learned.training), fits=learned.fits))
seed = int(sys.argv[1]); kw = eval(sys.argv[2]) if len(sys.argv) > 2 else {}
with model:
    idata = pm.sample(step=K(**kw), tune=1000, draws=2000, chains=2, cores=1, random_seed=seed, progressbar=False, compute_convergence_checks=False)
x = idata.posterior["beta"].values
q = np.quantile(ref, [0.025, 0.975], axis=0)
for c, cap in enumerate(captured):
    Us = np.array([cap["field"](r)[0] for r in ref])
    lw = Us - Uref
    h = cap["hist"]
    print(f"chain {c}: T_kernel {cap['T']:.2f} covT {cap['cov_T']:.2f} khat_cov {cap['khat']:.2f} sigma {cap['sigma']:.3g} lam {cap['lam']:.3g} fits {cap['fits']} ntrain {cap['ntrain']} hist {len(h)} uniq {len(np.unique(h,axis=0))}")
    print(f"   khat on ref draws {pareto_khat(lw):.2f}  lw spread sd {lw.std():.2f}  max-med {lw.max()-np.median(lw):.1f}")
    print(f"   hist tails: b1<q {np.mean(h[:,0]<q[0,0]):.3f} b1>q {np.mean(h[:,0]>q[1,0]):.3f} b2<q {np.mean(h[:,1]<q[0,1]):.3f} b2>q {np.mean(h[:,1]>q[1,1]):.3f}")
    xc = x[c]
    print(f"   draws tails: b1<q {np.mean(xc[:,0]<q[0,0]):.3f} b1>q {np.mean(xc[:,0]>q[1,0]):.3f} b2<q {np.mean(xc[:,1]<q[0,1]):.3f} b2>q {np.mean(xc[:,1]>q[1,1]):.3f}  mean {xc.mean(0).round(3)} sd {xc.std(0).round(3)}")
    acc = idata.sample_stats["accepted"].values[c]; fb = idata.sample_stats["fallback"].values[c]
    print(f"   draw accept {acc.mean():.3f} fallback {fb.mean():.3f} step {idata.sample_stats['step_size'].values[c].mean():.3g} nsteps {idata.sample_stats['n_steps'].values[c].mean():.1f} surrT {idata.sample_stats['surrogate_temperature'].values[c].mean():.2f}")
    # where is lw largest: region
    top = np.argsort(lw)[-200:]
    print(f"   largest-weight ref points: mean {ref[top].mean(0).round(2)}, b1 range {ref[top,0].min():.2f}..{ref[top,0].max():.2f}")
print("ref mean", ref.mean(0).round(3), "sd", ref.std(0).round(3))
print("pooled rhat", az.rhat(idata)["beta"].values.round(3), "ess", az.ess(idata)["beta"].values.round(0))

