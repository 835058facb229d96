"""Run from the repository root: PYTHONPATH=. python benchmarks/notes/frame/s13_nutpie_funnel2.py (nutpie 0.16.8 in a peers venv).

nutpie (numba, low-rank modified mass matrix) on the 2-d funnel with its gradient, 2 x (1000 + 1000),
seeds 0-9, judged by banana_coverage.measure; evaluations = 2 per leapfrog step, tuning included."""
import warnings, numpy as np, nutpie
from benchmarks.banana_coverage import funnel_reference, measure
from benchmarks.models.hard_geometry import make_funnel
warnings.filterwarnings("ignore")
model, info = make_funnel(2, gradient=True)
compiled = nutpie.compile_pymc_model(model)
ref = funnel_reference()
for seed in range(10):
    idata = nutpie.sample(compiled, draws=1000, tune=1000, chains=2, cores=1, seed=seed,
                          low_rank_modified_mass_matrix=True, progress_bar=False)
    row = measure(idata, ref, ("v", "x"))
    steps = int(idata.sample_stats["n_steps"].sum()) + int(idata.warmup_sample_stats["n_steps"].sum())
    div = int(idata.sample_stats["diverging"].sum())
    print(seed, row["status"], f"z {row['max_abs_z']:.2f} rhat {row['max_rhat']:.3f} sd {row['sd_ratio_1']:.3f} {row['sd_ratio_2']:.3f}",
          f"ess {row['min_ess_bulk']:.0f} evals/ess {2 * steps / row['min_ess_bulk']:.1f} div {div}", row["reasons"], flush=True)
