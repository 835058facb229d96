"""Simulation-based calibration of every exact step method (see ``sbc.py``).

Short version (default run, CI): 40 replications, ranks among L = 19 draws, 5 bins.
Thorough version (``python -m pytest -m slow tests/reliability/test_sbc.py -s``): 400
replications, L = 99, 20 bins; ``SBC_REPLICATIONS`` overrides the count. Both write their
ranks, bin counts, chi-square statistics and p-values to
``tests/reliability/results/sbc_<step>_<short|thorough>.json`` (git-ignored) and print a
summary (visible with ``-s``).

Pass criterion: every parameter's chi-square p-value above 0.001 / (number of
parameters). At a fixed seed the outcome is deterministic; a correct sampler fails it
for one seed in a thousand.
"""

from __future__ import annotations

import os

import pytest

from tests.reliability.sbc import PARAMS, run_sbc

ALPHA = 1e-3


def _check(result, results_dir, tag):
    path = result.save(results_dir, tag)
    print(f"\n{result.summary()}\n  -> {path}")
    assert result.min_p_value > ALPHA / len(PARAMS), result.summary()


@pytest.mark.parametrize("black_box", [False, True], ids=["gradient", "black_box"])
def test_sbc_short(exact_step, black_box, results_dir):
    result = run_sbc(exact_step, replications=40, n_ranks=19, n_bins=5, tune=300,
                     black_box=black_box)
    _check(result, results_dir, "short")


@pytest.mark.slow
@pytest.mark.parametrize("black_box", [False, True], ids=["gradient", "black_box"])
def test_sbc_thorough(exact_step, black_box, results_dir):
    replications = int(os.environ.get("SBC_REPLICATIONS", "400"))
    result = run_sbc(exact_step, replications=replications, n_ranks=99, n_bins=20, tune=300,
                     seed=1806, black_box=black_box)
    _check(result, results_dir, "thorough")
