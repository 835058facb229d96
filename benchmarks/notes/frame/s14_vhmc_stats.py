"""VariationalHMC on the 2-d funnel with a gradient (banana_coverage's funnel2): the run's
verdict and the sample stats a user could look at, per chain, for seeds given."""
import sys
import numpy as np
import pymc_surrogate
from benchmarks.banana_coverage import curved_models, measure
from benchmarks.harness import sample_counted
from pymc_surrogate.compat import posterior_dataset

models, ref = curved_models("funnel2")
sampler = sys.argv[1]
for seed in map(int, sys.argv[2].split(",")):
    model, info = models["gradient" if sampler == "VariationalHMC" else "black_box"]
    run = sample_counted(model, info, sampler, pymc_surrogate.STEP_METHODS[sampler], draws=1000,
                         tune=1000, chains=2, seed=seed, keep_warnings=True)
    row = measure(run.idata, ref, info.param_names)
    st = posterior_dataset(run.idata, "sample_stats")
    post = posterior_dataset(run.idata)
    print(f"== seed {seed}: {row['status']} {row['reasons']} warned={len(run.warnings)}")
    for c in range(2):
        v = post["v"].values[c]
        s = {k: st[k].values[c] for k in st.data_vars}
        print(f" chain {c}: v range {v.min():.2f}..{v.max():.2f} share v>4.5 {np.mean(v > 4.5):.3f} (exact 0.067)"
              f" v<-4.5 {np.mean(v < -4.5):.3f}; accept {s['accept'].mean():.2f}; step {np.median(s['step_size']):.3f};"
              f" n_steps {np.median(s['n_steps']):.0f}; frame_degree {s['frame_degree'][-1]}; khat {s['coverage_khat'][-1]:.2f};"
              f" tail_jump {s['tail_jump'].sum()}; surrogate_energy_error |.| med {np.median(np.abs(s['surrogate_energy_error'])):.2f}"
              f" q95 {np.quantile(np.abs(s['surrogate_energy_error']), 0.95):.2f}; fallback {s['fallback'].mean():.2f}; diverging {s['diverging'].sum()}")
        # acceptance where v is high vs low
        hi = v > 3
        print(f"   accept where v>3: {s['accept'][hi].mean() if hi.any() else float('nan'):.2f}, v<0: {s['accept'][v<0].mean():.2f}")
