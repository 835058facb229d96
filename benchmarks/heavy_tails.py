"""The pooled heavy-tail check of the test suite, for any sampler and settings, with figures.

``tests/reliability/test_exactness.py::test_heavy_tails`` only says pass or fail; this prints
what a change to the tails needs to be judged by: the pooled two-sided 20% and 2% tail
frequencies of a Student-t(3), d = 3, their z-scores, ESS and R-hat against the test's limit.

Examples
--------
::

    python benchmarks/heavy_tails.py SurrogateHMC
    python benchmarks/heavy_tails.py SurrogateHMC '{"kernel": {"n_inner": 3}}' --seed 1
    python benchmarks/heavy_tails.py NUTS            # the reference (PyMC's)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_REPO = Path(__file__).resolve().parents[1]
if str(_REPO) not in sys.path:  # run as a script: make `tests` importable
    sys.path.insert(0, str(_REPO))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sampler", help="a pymc_surrogate step class, or NUTS / HamiltonianMC")
    parser.add_argument("kwargs", nargs="?", default="{}", help="step settings as JSON")
    parser.add_argument("--seed", type=int, default=None,
                        help="first seed (default: the suite's, PYMC_SURROGATE_TEST_SEED)")
    args = parser.parse_args(argv)
    if args.seed is not None:
        os.environ["PYMC_SURROGATE_TEST_SEED"] = str(args.seed)

    import arviz as az
    import numpy as np
    import pymc as pm

    import pymc_surrogate
    from pymc_surrogate.compat import posterior_dataset
    from tests.reliability import helpers
    from tests.reliability.test_exactness import (
        HEAVY_TAIL_RUNS,
        TAIL_PROBABILITIES,
        assert_tail_frequencies,
        pooled_student_t_runs,
        tail_indicator,
    )

    settings = json.loads(args.kwargs)
    cls = getattr(pm, args.sampler, None) or pymc_surrogate.STEP_METHODS[args.sampler]
    idata = pooled_student_t_runs(lambda: cls(**settings))
    x = posterior_dataset(idata)["t"].values
    print(f"{args.sampler} {settings}: {HEAVY_TAIL_RUNS} runs x 2 chains x 2000 draws, "
          f"seeds {helpers.SEED}-{helpers.SEED + HEAVY_TAIL_RUNS - 1}")
    for prob in TAIL_PROBABILITIES:
        indicator = tail_indicator(x, prob)
        dataset = az.convert_to_dataset({"tail": indicator})
        ess = az.ess(dataset)["tail"].values
        rhat = az.rhat(dataset)["tail"].values
        freq = indicator.mean(axis=(0, 1))
        z = (freq - prob) / az.mcse(dataset, method="mean")["tail"].values  # as the check
        per_run = indicator.reshape(HEAVY_TAIL_RUNS, -1, indicator.shape[-1]).mean(axis=1)
        print(f"  {prob:g} tail: {np.round(freq, 4)}  z {np.round(z, 2)}  ESS {np.round(ess)}  "
              f"R-hat {np.round(rhat, 4)}  runs below {int(np.sum(per_run < prob))} / {per_run.size}")
    try:
        assert_tail_frequencies(idata)
    except AssertionError as failure:
        print("  check: FAILS -", str(failure).splitlines()[0])
        return 1
    print("  check: passes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
