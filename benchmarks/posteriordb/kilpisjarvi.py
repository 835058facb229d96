"""posteriordb ``kilpisjarvi_mod-kilpisjarvi``: linear regression with a badly scaled predictor.

Translates posteriordb's Stan model ``kilpisjarvi`` on the data set ``kilpisjarvi_mod``
(summer temperature at Kilpisjärvi against year, 1952-2013, with years shifted to about 4 000
so that intercept and slope are almost perfectly correlated), posteriordb commit
28f8d3d6e975315f42aa274a8399f21e07a43b30::

    alpha ~ normal(pmualpha, psalpha);  beta ~ normal(pmubeta, psbeta)
    y ~ normal(alpha + beta * x, sigma);  real<lower=0> sigma (no prior: flat)

Differences from the Stan program: none in the density.  Stan's implicit flat prior on
``sigma`` is ``pm.HalfFlat`` (log transform, as Stan's ``<lower=0>``).  The posterior
correlation of ``alpha`` and ``beta`` is about -0.9999: the test is ill-conditioning.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations
from benchmarks.posteriordb.reference import load_data

__all__ = ["POSTERIOR", "CHEAP", "make_model"]

#: posteriordb posterior name.
POSTERIOR = "kilpisjarvi_mod-kilpisjarvi"
#: Cheap enough for the short CI run.
CHEAP = True


def make_model() -> tuple[pm.Model, ModelInfo]:
    """Build the PyMC model of ``kilpisjarvi_mod-kilpisjarvi``.

    Returns
    -------
    model : pm.Model
        Free variables ``alpha``, ``beta`` and ``sigma``.
    info : ModelInfo
        Counter on the likelihood, ``param_names = ["alpha", "beta", "sigma"]``.
    """
    data = load_data("kilpisjarvi_mod")
    x = np.asarray(data["x"], dtype=float)
    y = np.asarray(data["y"], dtype=float)
    counter = EvaluationCounter()
    with pm.Model() as model:
        alpha = pm.Normal("alpha", mu=data["pmualpha"], sigma=data["psalpha"])
        beta = pm.Normal("beta", mu=data["pmubeta"], sigma=data["psbeta"])
        sigma = pm.HalfFlat("sigma")
        theta = count_evaluations(pt.stack([alpha, beta, sigma]), counter)
        pm.Normal("y", mu=theta[0] + theta[1] * x, sigma=theta[2], observed=y)
    info = ModelInfo(
        name=POSTERIOR,
        counter=counter,
        param_names=["alpha", "beta", "sigma"],
        description=(
            f"posteriordb {POSTERIOR}: Gaussian linear regression, N={len(y)}, x = year "
            "shifted to ~4000 (alpha-beta correlation ~ -0.9999), flat prior on sigma."
        ),
        has_gradient=True,
        extra={"posteriordb_model": "kilpisjarvi", "data_name": "kilpisjarvi_mod"},
    )
    return model, info
