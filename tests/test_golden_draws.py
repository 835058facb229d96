"""Golden draws: a refactor that should change nothing must leave every draw bit-identical.

Both step methods, default settings, on three small models (a correlated Gaussian with a
gradient, the same Gaussian as a black box, and a curved non-Gaussian), 2 chains, ``cores=1``,
fixed seeds. The arrays in ``tests/golden/`` were recorded with the package versions stored
beside them; floating-point paths differ between numpy / PyTensor versions, so the comparison
runs only on those versions (CI's fresh environments resolve them until a dependency
releases; then regenerate), and on the BLAS kernels they were recorded with: another
processor's kernels round differently, and tuning amplifies that (the same versions on
another machine, 2026-11-26: draws 1e-13 apart on the Gaussian, different from the first
draw on the black box and curved models). A deliberate change of the draws regenerates them in its own
commit that says why::

    PYMC_SURROGATE_REGENERATE_GOLDEN=1 python -m pytest tests/test_golden_draws.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pymc as pm
import pytensor
import pytest
import scipy

from pymc_surrogate import AdaptiveSurrogateHMC, SurrogateHMC
from pymc_surrogate.compat import posterior_dataset
from tests.conftest import correlated_gaussian, gaussian_model

GOLDEN = Path(__file__).parent / "golden"
REGENERATE = os.environ.get("PYMC_SURROGATE_REGENERATE_GOLDEN") == "1"


def _blas_architecture() -> str:
    """The kernel family numpy's BLAS chose for this processor (OpenBLAS: SkylakeX, Haswell,
    Zen, ...): another one rounds differently, and the tuning amplifies the last digit into
    other draws (black-box and curved models: different from the first draw)."""
    from threadpoolctl import threadpool_info

    return ",".join(sorted({str(info.get("architecture", info.get("internal_api")))
                            for info in threadpool_info() if info.get("user_api") == "blas"}))


def _numpy_simd() -> str:
    """The SIMD targets numpy dispatches its own loops to on this processor (``exp``,
    ``log``: the softplus features): an AVX-512 machine rounds them differently from an
    AVX2 one under the same BLAS kernels (2026-11-28: OpenBLAS "Haswell" on an AVX-512
    EPYC, every golden draw of the AVX2 machine that recorded them different)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy < 2
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    return ",".join(sorted(name for name in __cpu_dispatch__ if __cpu_features__.get(name)))


VERSIONS = {"numpy": np.__version__, "scipy": scipy.__version__, "pymc": pm.__version__,
            "pytensor": pytensor.__version__, "blas_architecture": _blas_architecture(),
            "numpy_simd": _numpy_simd()}
# One file per PyMC generation: both are tested in CI.
TAG = f"pymc{pm.__version__.split('.')[0]}"
RUN = dict(draws=150, chains=2, cores=1, progressbar=False, compute_convergence_checks=False)


def curved_model() -> pm.Model:
    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 1.0)
        pm.Normal("y", x**2, 0.5)
    return model


MODELS = {
    "gaussian": (lambda: gaussian_model(*correlated_gaussian(3, seed=3)), 300),
    "black_box": (lambda: gaussian_model(*correlated_gaussian(3, seed=3), black_box=True), 500),
    "curved": (curved_model, 300),
}
STEPS = {"SurrogateHMC": SurrogateHMC, "AdaptiveSurrogateHMC": AdaptiveSurrogateHMC}


def _draws(model_name: str, step_name: str) -> dict[str, np.ndarray]:
    build, tune = MODELS[model_name]
    with build():
        idata = pm.sample(step=STEPS[step_name](), tune=tune, random_seed=2024, **RUN)
    post = posterior_dataset(idata)
    stats = posterior_dataset(idata, "sample_stats")
    out = {f"draw_{name}": post[name].values for name in post.data_vars}
    out["total_model_evals"] = stats["total_model_evals"].values
    return out


@pytest.mark.parametrize("step_name", STEPS)
@pytest.mark.parametrize("model_name", MODELS)
def test_draws_are_unchanged(model_name, step_name):
    path = GOLDEN / f"{TAG}_{model_name}_{step_name}.npz"
    meta = GOLDEN / f"{TAG}_versions.json"
    got = _draws(model_name, step_name)
    if REGENERATE:
        GOLDEN.mkdir(exist_ok=True)
        np.savez_compressed(path, **got)
        meta.write_text(json.dumps(VERSIONS, indent=1) + "\n")
        return
    recorded = json.loads(meta.read_text())
    if recorded != VERSIONS:
        pytest.skip(f"golden draws recorded with {recorded}, running {VERSIONS}: regenerate")
    want = np.load(path)
    assert sorted(want.files) == sorted(got)
    for key in want.files:
        np.testing.assert_array_equal(got[key], want[key], err_msg=f"{key} changed")
