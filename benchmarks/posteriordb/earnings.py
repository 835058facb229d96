"""posteriordb ``earnings-logearn_interaction_z``: log earnings on standardised height and sex.

Translates posteriordb's Stan model ``logearn_interaction_z`` (ARM ch. 4, Gelman & Hill 2006)
on the data set ``earnings`` (N = 1192), posteriordb commit
28f8d3d6e975315f42aa274a8399f21e07a43b30::

    log_earn = log(earn);  z_height = (height - mean(height)) / sd(height)
    inter = z_height .* male
    log_earn ~ normal(beta[1] + beta[2] z_height + beta[3] male + beta[4] inter, sigma)
    vector[4] beta (flat);  real<lower=0> sigma (flat)

Differences from the Stan program: none in the density.  Stan's implicit flat priors are
``pm.Flat`` (``beta``) and ``pm.HalfFlat`` (``sigma``, log transform as in Stan); ``sd`` is the
sample standard deviation (``ddof=1``) as Stan's ``sd``.  PyMC keeps the normal density's
constant, which Stan's ``~`` drops (no effect on the posterior).  Trace names: ``beta`` (shape
4, 0-based in PyMC; Stan's ``beta[1..4]``) and ``sigma``.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations
from benchmarks.posteriordb.reference import load_data

__all__ = ["POSTERIOR", "CHEAP", "make_model"]

#: posteriordb posterior name.
POSTERIOR = "earnings-logearn_interaction_z"
#: Cheap enough for the short CI run.
CHEAP = True


def make_model() -> tuple[pm.Model, ModelInfo]:
    """Build the PyMC model of ``earnings-logearn_interaction_z``.

    Returns
    -------
    model : pm.Model
        Free variables ``beta`` (4,) and ``sigma``.
    info : ModelInfo
        Counter on the likelihood, ``param_names = ["beta", "sigma"]``; no analytic reference.
    """
    data = load_data("earnings")
    earn = np.asarray(data["earn"], dtype=float)
    height = np.asarray(data["height"], dtype=float)
    male = np.asarray(data["male"], dtype=float)
    log_earn = np.log(earn)
    z_height = (height - height.mean()) / height.std(ddof=1)  # Stan's sd: N - 1
    # Design matrix of Stan's linear predictor, columns in beta's order.
    X = np.column_stack([np.ones_like(z_height), z_height, male, z_height * male])

    counter = EvaluationCounter()
    with pm.Model() as model:
        beta = pm.Flat("beta", shape=4)
        sigma = pm.HalfFlat("sigma")
        theta = count_evaluations(pt.concatenate([beta, sigma[None]]), counter)
        mu = pt.dot(pt.constant(X), theta[:4])
        pm.Normal("log_earn", mu=mu, sigma=theta[4], observed=log_earn)
    info = ModelInfo(
        name=POSTERIOR,
        counter=counter,
        param_names=["beta", "sigma"],
        description=(
            "posteriordb earnings-logearn_interaction_z (ARM ch. 4): linear regression of "
            f"log earnings on z(height), male and their interaction, N={len(earn)}, flat priors."
        ),
        has_gradient=True,
        extra={"posteriordb_model": "logearn_interaction_z", "data_name": "earnings"},
    )
    return model, info
