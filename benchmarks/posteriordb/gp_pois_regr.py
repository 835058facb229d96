"""posteriordb ``gp_pois_regr-gp_regr``: GP regression hyperparameters on 11 points.

Translates posteriordb's Stan model ``gp_regr`` on the data set ``gp_pois_regr`` (the Stan
benchmark's simulated data; only ``x`` and ``y`` are used, not the counts ``k``), posteriordb
commit 28f8d3d6e975315f42aa274a8399f21e07a43b30::

    cov = gp_exp_quad_cov(x, alpha, rho) + diag_matrix(rep_vector(sigma, N))
    rho ~ gamma(25, 4);  alpha ~ normal(0, 2);  sigma ~ normal(0, 1)
    y ~ multi_normal_cholesky(0, cholesky_decompose(cov))
    real<lower=0> rho, alpha, sigma

``gp_exp_quad_cov(x, alpha, rho)[i, j] = alpha^2 exp(-(x_i - x_j)^2 / (2 rho^2))``.  Note that
the Stan program adds ``sigma`` (not ``sigma^2``) to the diagonal; the translation does the
same, so ``sigma`` here is a noise *variance*.

Differences from the Stan program: none in the density.  The half-normal priors of the
``<lower=0>`` parameters are ``pm.HalfNormal`` (Stan's unnormalised truncation differs by a
constant), ``rho`` is ``pm.Gamma(alpha=25, beta=4)`` (shape, rate); all three use PyMC's log
transform, as Stan does.  Trace names ``rho``, ``alpha``, ``sigma``.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations
from benchmarks.posteriordb.reference import load_data

__all__ = ["POSTERIOR", "CHEAP", "make_model"]

#: posteriordb posterior name.
POSTERIOR = "gp_pois_regr-gp_regr"
#: Cheap enough for the short CI run.
CHEAP = True


def make_model() -> tuple[pm.Model, ModelInfo]:
    """Build the PyMC model of ``gp_pois_regr-gp_regr``.

    Returns
    -------
    model : pm.Model
        Free variables ``rho``, ``alpha``, ``sigma``.
    info : ModelInfo
        Counter on the likelihood, ``param_names = ["rho", "alpha", "sigma"]``.
    """
    data = load_data("gp_pois_regr")
    x = np.asarray(data["x"], dtype=float)
    y = np.asarray(data["y"], dtype=float)
    n = len(x)
    sq_dist = (x[:, None] - x[None, :]) ** 2

    counter = EvaluationCounter()
    with pm.Model() as model:
        rho = pm.Gamma("rho", alpha=25.0, beta=4.0)
        alpha = pm.HalfNormal("alpha", sigma=2.0)
        sigma = pm.HalfNormal("sigma", sigma=1.0)
        theta = count_evaluations(pt.stack([rho, alpha, sigma]), counter)
        cov = theta[1] ** 2 * pt.exp(-0.5 * pt.constant(sq_dist) / theta[0] ** 2)
        cov = cov + theta[2] * pt.eye(n)  # sigma, not sigma^2, as in the Stan program
        pm.MvNormal("y", mu=np.zeros(n), cov=cov, observed=y)
    info = ModelInfo(
        name=POSTERIOR,
        counter=counter,
        param_names=["rho", "alpha", "sigma"],
        description=(
            "posteriordb gp_pois_regr-gp_regr: exact GP regression, squared-exponential kernel, "
            f"N={n} points, hyperparameters rho ~ Gamma(25, 4), alpha ~ N+(0, 2), "
            "sigma ~ N+(0, 1) (sigma enters the diagonal unsquared)."
        ),
        has_gradient=True,
        extra={"posteriordb_model": "gp_regr", "data_name": "gp_pois_regr"},
    )
    return model, info
