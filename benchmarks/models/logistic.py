"""Simulated logistic regression of rns-hmc §5.1 (Zhang, Shahbaba & Zhao, random-bases surrogates)."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations

__all__ = ["make_logistic_regression", "simulate_logistic_data"]


def simulate_logistic_data(
    n_obs: int = 100_000, n_features: int = 50, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Simulate the design, responses and true coefficients of rns-hmc §5.1.

    Parameters
    ----------
    n_obs : int
        Number of observations N.
    n_features : int
        Number of coefficients d, the first one multiplying the constant column 0.1.
    seed : int
        Seed of the data generator.

    Returns
    -------
    X : ndarray, shape (n_obs, n_features)
        Design ``(0.1 * 1, X1)`` with ``X1 ~ N(0, I / 100)``.
    y : ndarray, shape (n_obs,)
        Binary responses as float64.
    beta_true : ndarray, shape (n_features,)
        True coefficients, ``U[0, 1]^d``.
    """
    rng = np.random.default_rng(seed)
    X = np.empty((n_obs, n_features))
    X[:, 0] = 0.1
    X[:, 1:] = rng.normal(0.0, 0.1, size=(n_obs, n_features - 1))
    beta_true = rng.uniform(0.0, 1.0, size=n_features)
    p = 1.0 / (1.0 + np.exp(-(X @ beta_true)))
    y = (rng.uniform(size=n_obs) < p).astype(np.float64)
    return X, y, beta_true


def make_logistic_regression(
    n_obs: int = 100_000, n_features: int = 50, seed: int = 0
) -> tuple[pm.Model, ModelInfo]:
    """Bayesian logistic regression on simulated data (rns-hmc §5.1).

    Model: ``beta ~ N(0, 100 I)`` (sd 10), ``y_i ~ Bernoulli(sigmoid(x_i' beta))`` with the
    design of :func:`simulate_logistic_data`.  The likelihood is a ``pm.Potential``
    ``sum(y * eta - softplus(eta))`` on ``eta = X @ beta``: one matrix-vector product forward
    and one back, the cheapest form PyTensor offers for this model.

    Parameters
    ----------
    n_obs : int
        Number of observations N (paper: 10^5).
    n_features : int
        Number of coefficients d (paper: 50).
    seed : int
        Seed of the simulated data.

    Returns
    -------
    model : pm.Model
        Free variable ``beta`` of shape ``(n_features,)``.
    info : ModelInfo
        No analytic reference (``ref_mean``/``ref_sd`` are None); ``extra`` holds
        ``beta_true``.
    """
    X, y, beta_true = simulate_logistic_data(n_obs, n_features, seed)
    counter = EvaluationCounter()
    with pm.Model() as model:
        beta = pm.Normal("beta", mu=0.0, sigma=10.0, shape=n_features)
        eta = pt.dot(pt.constant(X), count_evaluations(beta, counter))
        pm.Potential("loglik", pt.sum(pt.constant(y) * eta - pt.softplus(eta)))
    info = ModelInfo(
        name="logistic",
        counter=counter,
        param_names=["beta"],
        description=(
            f"Logistic regression, rns-hmc §5.1: N={n_obs}, d={n_features}, X=(0.1·1, X1), "
            "X1 ~ N(0, I/100), beta_true ~ U[0,1]^d, prior beta ~ N(0, 100 I)."
        ),
        has_gradient=True,
        extra={"beta_true": beta_true, "n_obs": n_obs, "n_features": n_features, "seed": seed},
    )
    return model, info
