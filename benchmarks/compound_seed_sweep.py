"""The compound-step checks of ``tests/reliability/test_sampling_modes.py`` at many seeds.

Runs the exact model, sampler and check of two tests with the suite's seed replaced by
each of ``--seeds`` (default 0-9), and prints per seed what the test checks:

* ``compound`` (``test_compound_step_with_a_discrete_gibbs_step``): k ~ Bernoulli(0.7),
  x_i | k ~ N(k, 2^2), the step on ``[x]`` next to ``pm.BinaryGibbsMetropolis([k])``,
  2 chains x (600 tune + 2000 draws). Checked: k's mean (0.7), x's means (0.7) and sds
  (sqrt(4.21)) by ``check_moments`` at the suite's ``FAMILY_ALPHA``, and x's bulk ESS of
  at least ``COMPOUND_MIN_ESS``.
* ``metropolis`` (``test_block_next_to_pymc_samplers[...-Metropolis]``): (x1, x2, y)
  jointly Gaussian, the step on ``[x]`` next to ``pm.Metropolis([y])``, 2 chains x
  (600 tune + 1500 draws). Checked: x's and y's means and sds (0, 1 and 0, 1.5) by
  ``check_moments`` at ``family_alpha=5e-4``.

Per seed and variable: the pooled mean and sd, their z (in MCSE units; the limit is the
check's ``n_sigma``), the summed per-chain ESS (the check's ``MIN_ESS`` floor is 100),
ArviZ's R-hat, and the check's verdict; a digest of the draws tells whether two runs of
a seed (idle and loaded machine, two package versions) drew the same chain. The last line
counts the seeds that pass.
``--step`` picks another entry of ``pymc_surrogate.STEP_METHODS`` (or ``NUTS``, PyMC's exact
sampler on the same block, the reference for what the compound scheme itself mixes); ``--timing slow`` makes
the one timed logp by which ``executor="auto"`` chooses between this process and worker
processes read as it does on a loaded machine (``fast``: as on an idle one).

Examples
--------
::

    PYTHONPATH=. python benchmarks/compound_seed_sweep.py compound --step KernelHMC
    PYTHONPATH=. python benchmarks/compound_seed_sweep.py metropolis --step SparseGridHMC
    PYTHONPATH=. python benchmarks/compound_seed_sweep.py metropolis --seeds 3 7
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

import numpy as np  # noqa: E402

import tests.conftest  # noqa: E402,F401  (the suite's thread limits and ArviZ settings)
from tests.reliability.helpers import check_moments, sample  # noqa: E402
from tests.reliability.registry import STEPS  # noqa: E402
from tests.reliability.test_sampling_modes import (  # noqa: E402
    COMPOUND_MIN_ESS,
    _joint_gaussian,
)


def _compound(entry, seed):
    import pymc as pm

    with pm.Model():
        k = pm.Bernoulli("k", p=0.7)
        x = pm.Normal("x", k * 1.0, 2.0, shape=2)
        steps = [entry([x]), pm.BinaryGibbsMetropolis([k])]
        idata = sample(steps, draws=2000, tune=600, random_seed=seed)
    checks = {"k": (0.7, None, None), "x": (0.7, np.sqrt(4.21), None)}
    return idata, checks, {"x": COMPOUND_MIN_ESS}


def _metropolis(entry, seed):
    import pymc as pm

    model, cov = _joint_gaussian()
    with model:
        steps = [entry([model["x"]]), pm.Metropolis([model["y"]])]
        idata = sample(steps, draws=1500, tune=600, random_seed=seed)
    checks = {"x": (np.zeros(2), np.ones(2), 5e-4), "y": (0.0, np.sqrt(cov[2, 2]), 5e-4)}
    return idata, checks, {}


CASES = {"compound": _compound, "metropolis": _metropolis}


def run_seed(case: str, entry, seed: int) -> tuple[bool, list[str]]:
    import arviz as az

    from tests.reliability.helpers import FAMILY_ALPHA

    started = time.perf_counter()
    idata, checks, min_ess = CASES[case](entry, seed)
    seconds = time.perf_counter() - started
    lines, passed = [], True
    for name, (mean, sd, alpha) in checks.items():
        post = idata.posterior[name]
        x = post.values.reshape(post.sizes["chain"], post.sizes["draw"], -1)
        result = check_moments(x, mean, sd, FAMILY_ALPHA if alpha is None else alpha)
        rhat = [float(np.asarray(az.rhat(x[:, :, j]))) for j in range(x.shape[2])]
        bulk = [float(np.asarray(az.ess(x[:, :, j]))) for j in range(x.shape[2])]
        failures = list(result.failures)
        if name in min_ess and min(bulk) < min_ess[name]:
            failures.append(f"ESS < {min_ess[name]}")
        passed &= not failures
        r = lambda a: np.array2string(np.round(np.asarray(a, dtype=float), 3), separator=",")  # noqa: E731
        lines.append(
            f"  {name}: mean={r(x.mean((0, 1)))} sd={r(x.std((0, 1)))} "
            f"z_mean={r(result.z_mean)} z_sd={r(result.z_sd)} (limit {result.n_sigma:.2f}) "
            f"ESS(sum of chains)={r(np.round(result.chain_ess.sum(0)))} "
            f"(chains' fewest {r(np.round(result.chain_ess.min(1)))}) bulk ESS={r(np.round(bulk))} "
            f"R-hat={r(rhat)} chi2(means)={r(result.q_mean)} (limit {result.q_limit:.1f}) "
            f"-> {', '.join(failures) or 'pass'}")
    digest = hashlib.sha1(b"".join(np.ascontiguousarray(idata.posterior[name].values).tobytes()
                                   for name in checks)).hexdigest()[:12]
    print(f"seed {seed}: {'PASS' if passed else 'FAIL'} ({seconds:.0f} s, draws' digest {digest})")
    print("\n".join(lines), flush=True)
    return passed, lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--step", default=None,
                        help="entry of STEP_METHODS or NUTS (default: KernelHMC for compound, "
                             "SparseGridHMC for metropolis)")
    parser.add_argument("--seeds", type=int, nargs="*", default=list(range(10)))
    parser.add_argument("--timing", choices=("real", "fast", "slow"), default="real",
                        help="what executor='auto' and progressbar='auto' read from their "
                             "one timed logp: the real time (default), or as on an idle "
                             "(fast, 0 s) or a loaded machine (slow, past PARALLEL_AFTER)")
    args = parser.parse_args(argv)
    if args.timing != "real":
        from pymc_surrogate.step_methods.evaluation import batch

        seconds = 0.0 if args.timing == "fast" else 2.0 * batch.PARALLEL_AFTER
        batch._serial_seconds = lambda logp, points: seconds
    logging.getLogger("pymc").setLevel(logging.ERROR)
    name = args.step or {"compound": "KernelHMC", "metropolis": "SparseGridHMC"}[args.case]
    if name == "NUTS":  # the reference: PyMC's exact NUTS on the same block
        import pymc as pm

        entry = lambda vars: pm.NUTS(vars)  # noqa: E731
    else:
        entry = {e.id: e for e in STEPS}[name]
    import pymc

    import pymc_surrogate

    print(f"{args.case} / {name}: PyMC {pymc.__version__}, timing {args.timing}, "
          f"{pymc_surrogate.__file__}")
    passes = sum(run_seed(args.case, entry, seed)[0] for seed in args.seeds)
    print(f"{passes} of {len(args.seeds)} seeds pass")
    return 0 if passes == len(args.seeds) else 1


if __name__ == "__main__":
    raise SystemExit(main())
