"""Draws of all five step methods on three small models, saved once and compared later.

The golden-draws test (``tests/test_golden_draws.py``) covers SurrogateHMC and
AdaptiveSurrogateHMC on the machine and versions that recorded it; this covers every step
method (and RNS-RMHMC and the Hamiltonian correction) on whatever machine runs it, for a
change that should leave every draw bit-identical: record before, compare after::

    REPO=. python benchmarks/draws_guard.py save /tmp/before.npz
    # ... the change ...
    REPO=. python benchmarks/draws_guard.py compare /tmp/before.npz
    REPO=. python benchmarks/draws_guard.py compare /tmp/before.npz _G   # SparseGridHMC only
    GUARD_WIDE=1 REPO=. python benchmarks/draws_guard.py save /tmp/wide.npz  # other models

``GUARD_WIDE=1``: four posteriordb posteriors and the showcase's 20-d black-box PDE in place
of the three small models (VariationalHMC on the posteriors only, which have a gradient);
``GUARD_WIDE=name,name`` (posteriordb names): those posteriors and the PDE.
``GUARD_TABLE=1``: the tuning table's logistic regression (N = 3e4, d = 50) and correlated
Gaussian (d = 32, condition number 1e4), SurrogateHMC and AdaptiveSurrogateHMC.

2 chains x (300 tune + 100 draws), ``cores=1``, seed 7; prints each run and, comparing,
every array that differs (with its largest difference) and the count.
"""
import sys, os, warnings, logging
sys.path.insert(0, os.environ.get("REPO", "/work/main"))
import numpy as np, pymc as pm
logging.getLogger("pymc").setLevel(logging.ERROR)
warnings.filterwarnings("ignore")
from pymc_surrogate import (SurrogateHMC, AdaptiveSurrogateHMC, VariationalHMC, KernelHMC,
                            SparseGridHMC)
from pymc_surrogate.compat import posterior_dataset
from tests.conftest import correlated_gaussian, gaussian_model
import pymc_surrogate; print(pymc_surrogate.__file__)

def curved():
    with pm.Model() as m:
        x = pm.Normal("x", 0.0, 1.0); pm.Normal("y", x**2, 0.5)
    return m
MODELS = {"gauss": lambda: gaussian_model(*correlated_gaussian(3, seed=3)),
          "bb": lambda: gaussian_model(*correlated_gaussian(3, seed=3), black_box=True),
          "curved": curved}
STEPS = {"S": SurrogateHMC, "A": AdaptiveSurrogateHMC, "V": VariationalHMC, "K": KernelHMC,
         "G": SparseGridHMC}
extra = {"S_riem": (SurrogateHMC, dict(kernel=dict(metric="riemannian"))),
         "S_ham": (SurrogateHMC, dict(kernel=dict(correction="hamiltonian")))}
jobs = [(m, s, STEPS[s], {}) for m in MODELS for s in STEPS if not (s == "V" and m == "bb")]
jobs += [("gauss", k, c, kw) for k, (c, kw) in extra.items()]
if os.environ.get("GUARD_WIDE"):  # models none of us wrote, and the showcase's black box
    from benchmarks import posteriordb
    from benchmarks.models.elliptic_pde import make_pde_model
    WIDE = {"pde": lambda: make_pde_model(gradient=False)[0],
            **{name.split("-")[1]: (lambda name=name: posteriordb.make_model(name)[0])
               for name in (os.environ["GUARD_WIDE"].split(",") if "-" in os.environ["GUARD_WIDE"]
                            else ("arma-arma11", "kilpisjarvi_mod-kilpisjarvi",
                                  "eight_schools-eight_schools_centered",
                                  "gp_pois_regr-gp_regr"))}}
    MODELS = WIDE
    jobs = [(m, s, STEPS[s], {}) for m in WIDE for s in STEPS if not (s == "V" and m == "pde")]
if os.environ.get("GUARD_TABLE"):  # the tuning table's (benchmarks/tuning_payoff.py) others
    from benchmarks.models.gaussians import make_correlated_gaussian
    from benchmarks.models.logistic import make_logistic_regression
    MODELS = {"logistic": lambda: make_logistic_regression(30_000, 50)[0],
              "gauss32": lambda: make_correlated_gaussian(32, 1e4)[0]}
    jobs = [(m, s, STEPS[s], {}) for m in MODELS for s in ("S", "A")]
out = {}
mode, path = sys.argv[1], sys.argv[2]
sel = sys.argv[3] if len(sys.argv) > 3 else ""
for m, s, cls, kw in jobs:
    if sel and sel not in f"{m}_{s}": continue
    with MODELS[m]():
        try:
            idata = pm.sample(step=cls(**kw), tune=300, draws=100, chains=2, cores=1,
                              random_seed=7, progressbar=False, compute_convergence_checks=False)
        except Exception as e:
            print(m, s, "ERROR", type(e).__name__, e); continue
    post = posterior_dataset(idata); st = posterior_dataset(idata, "sample_stats")
    for n in post.data_vars: out[f"{m}_{s}_{n}"] = post[n].values
    out[f"{m}_{s}_evals"] = st["total_model_evals"].values
    print(m, s, "ok", flush=True)
if mode == "save":
    np.savez(path, **out)
else:
    want = np.load(path); bad = 0
    for k in out:
        if k not in want.files: print("NEW", k); continue
        if not np.array_equal(out[k], want[k]):
            bad += 1; print("DIFF", k, np.max(np.abs(out[k] - want[k])))
    print("compared", len(out), "differ", bad)
