"""posteriordb ``arma-arma11``: an ARMA(1, 1) time series (200 simulated observations).

Translates posteriordb's Stan model ``arma11`` on the data set ``arma``, posteriordb commit
28f8d3d6e975315f42aa274a8399f21e07a43b30::

    mu ~ normal(0, 10);  phi ~ normal(0, 2);  theta ~ normal(0, 2)
    sigma ~ cauchy(0, 2.5), real<lower=0> sigma
    nu[1] = mu + phi * mu;  err[1] = y[1] - nu[1]            (err[0] taken as 0)
    nu[t] = mu + phi * y[t-1] + theta * err[t-1];  err[t] = y[t] - nu[t]
    err ~ normal(0, sigma)

Differences from the Stan program: none in the density.  The recursion
``err[t] + theta * err[t-1] = y[t] - mu - phi * y[t-1]`` is solved as one lower-bidiagonal
triangular system (``solve_triangular``, differentiable) instead of a loop; the half-Cauchy
prior is ``pm.HalfCauchy(2.5)`` (Stan's Cauchy on ``<lower=0>``, a constant factor apart).
``phi`` and ``theta`` are unconstrained, as in Stan (no stationarity or invertibility
constraint).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations
from benchmarks.posteriordb.reference import load_data

__all__ = ["POSTERIOR", "CHEAP", "make_model"]

#: posteriordb posterior name.
POSTERIOR = "arma-arma11"
#: Cheap enough for the short CI run.
CHEAP = True


def _solve_lower(a: pt.TensorVariable, b: pt.TensorVariable) -> pt.TensorVariable:
    # pytensor.tensor.linalg on PyTensor >= 2.x; slinalg is its deprecated home in PyTensor 3.
    linalg = getattr(pt, "linalg", None)
    solve = getattr(linalg, "solve_triangular", None)
    if solve is None:
        from pytensor.tensor.slinalg import solve_triangular as solve
    return solve(a, b, lower=True)


def make_model() -> tuple[pm.Model, ModelInfo]:
    """Build the PyMC model of ``arma-arma11``.

    Returns
    -------
    model : pm.Model
        Free variables ``mu``, ``phi``, ``theta`` and ``sigma``.
    info : ModelInfo
        Counter on the likelihood, ``param_names = ["mu", "phi", "theta", "sigma"]``.
    """
    data = load_data("arma")
    y = np.asarray(data["y"], dtype=float)
    n = len(y)
    y_prev = np.concatenate([[0.0], y[:-1]])
    first = np.zeros(n)
    first[0] = 1.0  # nu[1] = mu + phi * mu: the AR term uses mu where y[0] would be
    sub = np.eye(n, k=-1)  # err[t-1] feeds err[t]
    counter = EvaluationCounter()
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 10.0)
        phi = pm.Normal("phi", 0.0, 2.0)
        theta = pm.Normal("theta", 0.0, 2.0)
        sigma = pm.HalfCauchy("sigma", 2.5)
        par = count_evaluations(pt.stack([mu, phi, theta, sigma]), counter)
        mu_, phi_, theta_, sigma_ = par[0], par[1], par[2], par[3]
        rhs = y - mu_ - phi_ * (y_prev + first * mu_)
        err = _solve_lower(pt.eye(n) + theta_ * sub, rhs)
        pm.Potential("err", pm.logp(pm.Normal.dist(0.0, sigma_), err).sum())
    info = ModelInfo(
        name=POSTERIOR,
        counter=counter,
        param_names=["mu", "phi", "theta", "sigma"],
        description=f"posteriordb {POSTERIOR}: ARMA(1,1) likelihood, T={n}.",
        has_gradient=True,
        extra={"posteriordb_model": "arma11", "data_name": "arma"},
    )
    return model, info
