"""KernelHMC's benchmarks (issue 19): the kmc §6 banana and a pseudo-marginal model.

1. Haario's twisted Gaussian, d = 8, bananicity 0.03, V = 100 (kmc §6, App. D.2), a
   black-box Op: KernelHMC (lite and finite) side by side with ``pm.DEMetropolisZ``,
   ``pm.Slice`` and ``pm.Metropolis`` on the same Op, and NUTS on the same density written
   in PyTensor (it has the gradient). Exact moments: mean 0, sd (10, sqrt(19), 1, ...).
2. Pseudo-marginal: a Gaussian random-effects model whose likelihood is an unbiased
   importance-sampling estimate (``benchmarks/models/random_effects.py``; exact posterior
   by quadrature). KernelHMC(pseudo_marginal=True) against ``pm.Metropolis``,
   ``pm.DEMetropolisZ`` and ``pm.Slice`` with the same noisy Op (they re-evaluate the
   current state, so they target another distribution), and NUTS on the exact marginal
   likelihood for scale.

Every row through ``benchmarks/harness.py`` (``run_one``: counted evaluations, min ESS,
errors against the exact moments). Results: ``benchmarks/results/kernel_hmc_banana.*`` and
``kernel_hmc_pseudo_marginal.*``.

Examples
--------
::

    python benchmarks/kernel_hmc.py            # both tables (about 30 min on a shared core)
    python benchmarks/kernel_hmc.py --quick    # smoke run, written with a _quick suffix
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from benchmarks import harness  # noqa: E402
from benchmarks.harness import (  # noqa: E402
    DEFAULT_RESULTS_DIR,
    Reference,
    environment_meta,
    run_one,
    write_results,
)

COMMAND = "python benchmarks/kernel_hmc.py"


def _samplers(pseudo_marginal: bool):
    """(name, step class or None for NUTS, kwargs, model variant: 'blackbox' or 'exact')."""
    import pymc as pm

    from pymc_surrogate.step_methods.kernel_hmc import KernelHMC
    from pymc_surrogate.surrogates import KernelExpFamilyFinite

    if pseudo_marginal:
        kernel = [("KernelHMC", KernelHMC, {"pseudo_marginal": True})]
    else:
        kernel = [("KernelHMC lite", KernelHMC, {}),
                  ("KernelHMC finite", KernelHMC, {"surrogate": KernelExpFamilyFinite()})]
    return kernel + [
        ("DEMetropolisZ", pm.DEMetropolisZ, {}),
        ("Slice", pm.Slice, {}),
        ("Metropolis", pm.Metropolis, {}),
        ("NUTS", None, {}),
    ]


def _rows(model_name, build, samplers, settings, log):
    rows = []
    for name, step_cls, kwargs in samplers:
        model, info = build(exact=name == "NUTS")
        reference = Reference(mean=info.ref_mean, sd=info.ref_sd, source="exact")
        row = harness._empty_row(model_name, "default", name, ref_source="exact",
                                 chains=settings["chains"], tune=settings["tune"],
                                 draws=settings["draws"])
        log(f"{model_name} / {name} ...")
        try:
            row.update(run_one(model, info, "NUTS" if step_cls is None else name, step_cls,
                               reference=reference, sampler_kwargs=kwargs, **settings))
        except Exception as exc:  # noqa: BLE001 - a failing sampler is a row, not the end
            row.update(status="error", note=harness._describe(exc))
        if name == "NUTS":
            row["note"] = (row.get("note") or "") + info.description
        log(f"  min ESS {row['min_ess_bulk']:.0f}, evals/ESS {row['evals_per_ess']:.3g}, "
            f"mean z {row['mean_err_mcse']:.3g}, sd err {row['sd_err']:.3g}")
        rows.append(row)
    harness._add_speedups(rows)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run (_quick suffix)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=["banana", "pseudo_marginal"], default=None)
    parser.add_argument("--n-importance", type=int, default=4,
                        help="pseudo-marginal: importance draws per group (2: var log L^ "
                             "about 1.6 at the posterior mean with --data-seed 7)")
    parser.add_argument("--data-seed", type=int, default=0,
                        help="pseudo-marginal: seed of the random-effects data")
    parser.add_argument("--out", type=Path, default=DEFAULT_RESULTS_DIR)
    args = parser.parse_args(argv)

    from benchmarks.models.haario_banana import make_haario_banana
    from benchmarks.models.random_effects import make_random_effects

    suffix = "_quick" if args.quick else ""

    def log(message):
        print(message, file=sys.stderr, flush=True)

    if args.only in (None, "banana"):
        settings = dict(draws=300, tune=300, chains=2, seed=args.seed) if args.quick else (
            dict(draws=2000, tune=2000, chains=2, seed=args.seed))
        rows = _rows(
            "haario_banana8",
            lambda exact: make_haario_banana(8, 0.03, 100.0, gradient=exact),
            _samplers(pseudo_marginal=False), settings, log,
        )
        meta = {
            "command": COMMAND + (" --quick" if args.quick else "") + f" --seed {args.seed}",
            "model": "Haario's twisted Gaussian, d = 8, b = 0.03, V = 100 (kmc §6); black-box "
                     "Op for every sampler but NUTS (same density in PyTensor, gradient)",
            "settings": ", ".join(f"{k}={v}" for k, v in settings.items()) + ", cores=1",
            "reference": "exact moments: mean 0, sd (10, sqrt(19), 1, ..., 1)",
            **environment_meta(),
        }
        write_results(rows, args.out, f"kernel_hmc_banana{suffix}", meta)

    if args.only in (None, "pseudo_marginal"):
        settings = dict(draws=500, tune=500, chains=2, seed=args.seed) if args.quick else (
            dict(draws=5000, tune=1000, chains=2, seed=args.seed))
        rows = _rows(
            "random_effects_pm",
            lambda exact: make_random_effects(n_importance=args.n_importance, noisy=not exact,
                                              seed=args.data_seed),
            _samplers(pseudo_marginal=True), settings, log,
        )
        variant = (f" --n-importance {args.n_importance} --data-seed {args.data_seed}"
                   if (args.n_importance, args.data_seed) != (4, 0) else "")
        meta = {
            "command": COMMAND + (" --quick" if args.quick else "") + " --only pseudo_marginal"
                       + variant + f" --seed {args.seed}",
            "model": "Gaussian random effects, 10 groups (data seed "
                     f"{args.data_seed}), theta = (mu, log tau); likelihood estimated by "
                     f"importance sampling with K = {args.n_importance} draws per group at every "
                     "evaluation (pseudo-marginal); NUTS samples the exact marginal likelihood",
            "settings": ", ".join(f"{k}={v}" for k, v in settings.items()) + ", cores=1",
            "reference": "exact posterior of (mu, log tau) by quadrature on an 801 x 801 grid",
            "reading": "mean_err_mcse is the largest |mean - exact| / MCSE over (mu, log tau): "
                       "about N(0, 1) for a sampler of the right posterior",
            **environment_meta(),
        }
        tag = (f"_K{args.n_importance}_data{args.data_seed}_seed{args.seed}" if variant else "")
        write_results(rows, args.out, f"kernel_hmc_pseudo_marginal{tag}{suffix}", meta)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
