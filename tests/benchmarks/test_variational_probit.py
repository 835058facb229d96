"""VariationalHMC(exact=False) on vhmc §4.2's probit model: flagged, and as accurate as the
committed benchmark (benchmarks/results/variational_probit.csv) says.

The reference (a 4 x 5000-draw NUTS run, target_accept 0.9, seed 20240601) is vendored from
the benchmark's cache (tests/benchmarks/data/variational_probit_reference.json), so the test
runs offline. The run repeats the benchmark's settings (2 x (1000 + 1000), seed 0): on the
package versions of the committed row it reproduces its figure; elsewhere the figure moves
by Monte Carlo error, which the tolerance is derived from.
"""

import csv
import json
import warnings
from pathlib import Path

import numpy as np
import pymc as pm
import pytest

from benchmarks.models.probit import make_probit_regression
from pymc_surrogate import VariationalHMC
from pymc_surrogate.compat import bulk_ess

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "variational_probit.csv"
REFERENCE = Path(__file__).parent / "data" / "variational_probit_reference.json"


def _reported(sampler: str, column: str) -> float:
    with RESULTS.open() as handle:
        for row in csv.DictReader(handle):
            if row["sampler"] == sampler:
                return float(row[column])
    raise KeyError(sampler)


def _cov_error(draws: np.ndarray, ref_cov: np.ndarray) -> float:
    cov = np.cov(draws.reshape(-1, draws.shape[-1]), rowvar=False)
    return float(np.linalg.norm(cov - ref_cov) / np.linalg.norm(ref_cov))


def test_free_form_probit_error_is_the_benchmarks():
    reference = json.loads(REFERENCE.read_text())
    ref_cov = np.asarray(reference["cov"])
    model, _ = make_probit_regression()
    with model:
        with pytest.warns(UserWarning, match="follow the surrogate"):
            step = VariationalHMC(exact=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(draws=1000, tune=1000, chains=2, cores=1, step=step, random_seed=0,
                              progressbar=False, compute_convergence_checks=False)
    stats = idata.sample_stats
    assert stats.approximate.values.all() and stats.model_evals.values.sum() == 0
    draws = idata.posterior["theta"].values
    error = _cov_error(draws, ref_cov)
    # Monte Carlo error of a sample covariance from n effective draws (Wishart):
    # E|C - S|_F^2 = sum_ij (S_ii S_jj + S_ij^2) / n; here about 0.045 at n = 2900, and it
    # dominates: exact VariationalHMC 0.081 and NUTS 0.088 in the same table
    ess = min(bulk_ess(column) for column in draws.reshape(-1, draws.shape[-1]).T)
    noise = float(np.sqrt(np.sum(np.outer(np.diag(ref_cov), np.diag(ref_cov)) + ref_cov**2) / ess)
                  / np.linalg.norm(ref_cov))
    reported = _reported("VariationalHMC:free", "cov_rel_frobenius")
    # the run and the committed figure are both within the Monte Carlo band (PyMC 5: 0.048
    # reproduced; PyMC 6's random streams: 0.086); a surrogate 10% too narrow gives about 0.19
    assert error <= 2.5 * noise and reported <= 2.5 * noise, (error, reported, noise)
    # the claim, from the same table: better than full-rank ADVI, even given 50000
    # iterations (3.5x NUTS's time) rather than NUTS's wall time
    assert error < _reported("ADVI (50000 iterations)", "cov_rel_frobenius")
