"""Bayesian probit regression of vhmc §4.2 (N = 10^4, d = 5, prior N(0, 100 I))."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.distributions.dist_math import normal_lcdf

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations

__all__ = ["make_probit_regression", "simulate_probit_data"]


def simulate_probit_data(
    n_obs: int = 10_000, n_features: int = 5, seed: int = 0, theta_scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Simulate a probit data set.

    Parameters
    ----------
    n_obs, n_features : int
        N and d.
    seed : int
        Seed of the data generator.
    theta_scale : float
        sd of the true coefficients.

    Returns
    -------
    X : ndarray, shape (n_obs, n_features)
        Design, first column 1 (intercept), the others ``N(0, 1)``.
    y : ndarray, shape (n_obs,)
        ``y_n ~ Bernoulli(Phi(x_n' theta))`` as float64.
    theta_true : ndarray, shape (n_features,)
        ``N(0, theta_scale^2 I)``.

    Notes
    -----
    The paper says only "simulated from the model".  A draw from the N(0, 100 I) prior would
    make ``|x' theta|`` of order 20 and the classes nearly separable (a posterior dominated
    by the prior's tails), so the true coefficients are drawn with sd ``theta_scale`` = 1.
    """
    rng = np.random.default_rng(seed)
    theta_true = rng.normal(0.0, theta_scale, size=n_features)
    X = np.empty((n_obs, n_features))
    X[:, 0] = 1.0
    X[:, 1:] = rng.normal(size=(n_obs, n_features - 1))
    from scipy.stats import norm

    y = (rng.uniform(size=n_obs) < norm.cdf(X @ theta_true)).astype(np.float64)
    return X, y, theta_true


def make_probit_regression(
    n_obs: int = 10_000, n_features: int = 5, seed: int = 0
) -> tuple[pm.Model, ModelInfo]:
    """Probit regression with a counted likelihood.

    Model: ``theta ~ N(0, 100 I)`` (sd 10), ``P(y_n = 1) = Phi(x_n' theta)``; the log
    likelihood ``sum log Phi((2 y_n - 1) x_n' theta)`` uses PyMC's stable ``normal_lcdf``.

    Parameters
    ----------
    n_obs, n_features, seed : int
        Passed to :func:`simulate_probit_data`.

    Returns
    -------
    model : pm.Model
        Free variable ``theta`` of shape ``(n_features,)``, initial point 0 (the paper's
        "starting point the origin").
    info : ModelInfo
        ``extra`` holds ``theta_true`` and the data settings.
    """
    X, y, theta_true = simulate_probit_data(n_obs, n_features, seed)
    sign = 2.0 * y - 1.0
    counter = EvaluationCounter()
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, 10.0, shape=n_features)
        eta = pt.dot(pt.constant(X), count_evaluations(theta, counter))
        pm.Potential("loglik", pt.sum(normal_lcdf(0.0, 1.0, pt.constant(sign) * eta)))
    info = ModelInfo(
        name="probit",
        counter=counter,
        param_names=["theta"],
        description=(
            f"Probit regression, vhmc §4.2: N={n_obs}, d={n_features}, X = (1, N(0, I)), "
            "theta_true ~ N(0, I), prior theta ~ N(0, 100 I)."
        ),
        has_gradient=True,
        extra={"theta_true": theta_true, "n_obs": n_obs, "n_features": n_features, "seed": seed},
    )
    return model, info
