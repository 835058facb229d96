"""Per chain, the smallest bulk ESS over the traces chain health judges (the logp and every
coordinate) in the first 400 and 800 draws, with the run's verdict: funnel2 cases as
banana_coverage runs them (2 x (1000 + 1000))."""
import sys
import numpy as np
import pymc_surrogate
from benchmarks.banana_coverage import curved_models, measure
from benchmarks.harness import sample_counted
from pymc_surrogate.compat import posterior_dataset, bulk_ess

models, ref = curved_models("funnel2")
for case in sys.argv[1:]:
    sampler, seed = case.split(":")
    model, info = models["gradient" if sampler == "VariationalHMC" else "black_box"]
    run = sample_counted(model, info, sampler, pymc_surrogate.STEP_METHODS[sampler], draws=1000,
                         tune=1000, chains=2, seed=int(seed), keep_warnings=True)
    row = measure(run.idata, ref, info.param_names)
    post = posterior_dataset(run.idata)
    lp = posterior_dataset(run.idata, "sample_stats")["lp"].values
    out = []
    for c in range(lp.shape[0]):
        traces = np.column_stack([lp[c]] + [post[n].values[c].reshape(lp.shape[1], -1) for n in post.data_vars])
        out.append(tuple(round(min(bulk_ess(t[:n]) for t in traces.T), 1) for n in (400, 800, 1000)))
    print(sampler, seed, row["status"], row["reasons"], "| per chain min ESS @400/800/1000:", out,
          "| warned:", [w[:60] for w in run.warnings], flush=True)
