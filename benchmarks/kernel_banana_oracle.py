"""KernelHMC on the black-box banana: is the lite kernel fit narrower than the posterior
even when fitted to iid posterior draws?

Fits KernelExpFamilyLite (default settings: sigma and lam by cross-validation) to n iid
draws of the banana posterior (quadrature sampler) and measures, on 4000 other iid
draws, the Pareto k of the weights exp(U~/T - U) and their largest log weight above the
median (nats).  No sampling; a few seconds::

    PYTHONPATH=. python benchmarks/kernel_banana_oracle.py
"""
import sys, os
for v in ("OPENBLAS_NUM_THREADS","OMP_NUM_THREADS","MKL_NUM_THREADS"): os.environ.setdefault(v,"1")
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import numpy as np
from benchmarks.models.banana import banana_beta2_marginal, banana_log_density, make_banana
from pymc_surrogate.surrogates.kernel_exp_family import KernelExpFamilyLite
from pymc_surrogate.compat import pareto_khat
_, info = make_banana(); y = info.extra["y"]
b2g, w, mu1, v = banana_beta2_marginal(y)
def draws(n, seed):
    rng = np.random.default_rng(seed); idx = rng.choice(len(b2g), n, p=w/w.sum())
    return np.c_[mu1[idx] + np.sqrt(v)*rng.standard_normal(n), b2g[idx]]
ref = draws(4000, 1); Uref = -banana_log_density(ref[:,0], ref[:,1], y)
for n in (100, 200, 500):
  for seed in range(3):
    s = KernelExpFamilyLite(random_state=seed).fit(draws(n, 100+seed))
    for T in (1.0, 2.0):
        lw = np.array([s.value_and_grad(r)[0] for r in ref])/T - Uref
        print(f"n {n} seed {seed} T {T}: sigma {s.sigma_:.3g} lam {s.lam_:.3g} khat {pareto_khat(lw):.2f} max-med {lw.max()-np.median(lw):.1f}")

