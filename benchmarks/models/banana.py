"""Banana-shaped posterior of sparse-grid-hmc §4.2 (Zhang, Shahbaba & Zhao, precomputing strategy)."""

from __future__ import annotations

import numpy as np
import pymc as pm
from scipy.integrate import trapezoid

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations

__all__ = ["make_banana", "banana_beta2_marginal", "banana_reference_moments", "banana_log_density"]


def banana_log_density(
    beta1: np.ndarray,
    beta2: np.ndarray,
    y: np.ndarray,
    sigma_y: float = 2.0,
    sigma_beta: float = 1.0,
) -> np.ndarray:
    """Unnormalised log posterior ``-U(beta)`` of sparse-grid-hmc eq. (4.1), vectorised.

    Uses the sufficient statistic ``mean(y)``: ``sum_i (y_i - m)^2`` equals
    ``N (ybar - m)^2`` plus a constant.

    Parameters
    ----------
    beta1, beta2 : ndarray
        Broadcastable coordinates.
    y : ndarray
        Observations.
    sigma_y, sigma_beta : float
        Noise and prior standard deviations.

    Returns
    -------
    ndarray
        Log density up to an additive constant.
    """
    n, ybar = len(y), float(np.mean(y))
    m = beta1 + beta2**2
    return -n * (ybar - m) ** 2 / (2 * sigma_y**2) - (beta1**2 + beta2**2) / (2 * sigma_beta**2)


def banana_beta2_marginal(
    y: np.ndarray, sigma_y: float = 2.0, sigma_beta: float = 1.0, n_grid: int = 200_001
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """``beta2``'s marginal density on a quadrature grid, and ``beta1 | beta2``.

    With ``s2 = sigma_y^2 / N`` and ``a = ybar - beta2^2``: ``beta1 | beta2 ~ N(mu1, v)``,
    ``mu1 = v a / s2``, ``v = 1 / (1/s2 + 1/sigma_beta^2)``, and
    ``p(beta2) ∝ N(beta2; 0, sigma_beta^2) N(a; 0, s2 + sigma_beta^2)``.

    Returns
    -------
    b2, density, mu1 : ndarray, shape (n_grid,)
        Grid, ``p(beta2)`` normalised by the trapezoid rule, ``E[beta1 | beta2]``.
    v : float
        ``Var[beta1 | beta2]``.
    """
    n, ybar = len(y), float(np.mean(y))
    s2 = sigma_y**2 / n
    v = 1.0 / (1.0 / s2 + 1.0 / sigma_beta**2)
    # Far beyond where either the prior or the likelihood leaves any mass.
    half_width = 12.0 * sigma_beta + np.sqrt(abs(ybar) + 12.0 * np.sqrt(s2 + sigma_beta**2))
    b2 = np.linspace(-half_width, half_width, n_grid)
    a = ybar - b2**2
    logw = -(b2**2) / (2 * sigma_beta**2) - a**2 / (2 * (s2 + sigma_beta**2))
    w = np.exp(logw - logw.max())
    return b2, w / trapezoid(w, b2), v * a / s2, v


def banana_reference_moments(
    y: np.ndarray, sigma_y: float = 2.0, sigma_beta: float = 1.0, n_grid: int = 200_001
) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and sd of ``(beta1, beta2)`` by one-dimensional quadrature.

    Given ``beta2`` the model is conjugate in ``beta1``: with ``s2 = sigma_y^2 / N`` and
    ``a = ybar - beta2^2``, ``beta1 | beta2 ~ N(v a / s2, v)`` with
    ``v = 1 / (1/s2 + 1/sigma_beta^2)``, and
    ``p(beta2) ∝ N(beta2; 0, sigma_beta^2) N(a; 0, s2 + sigma_beta^2)``.
    So only the marginal of ``beta2`` needs quadrature (trapezoid on a fine grid; the integrand
    is smooth and decays like a Gaussian in ``beta2^2``, so the rule is accurate to ~1e-12).

    Parameters
    ----------
    y : ndarray
        Observations.
    sigma_y, sigma_beta : float
        Noise and prior standard deviations.
    n_grid : int
        Number of quadrature nodes.

    Returns
    -------
    mean, sd : ndarray, shape (2,)
    """
    b2, w, mu1, v = banana_beta2_marginal(y, sigma_y, sigma_beta, n_grid)
    e_b1 = trapezoid(w * mu1, b2)
    e_b1sq = v + trapezoid(w * mu1**2, b2)
    e_b2 = trapezoid(w * b2, b2)
    e_b2sq = trapezoid(w * b2**2, b2)
    mean = np.array([e_b1, e_b2])
    sd = np.sqrt(np.array([e_b1sq - e_b1**2, e_b2sq - e_b2**2]))
    return mean, sd


def make_banana(
    n_obs: int = 100, sigma_y: float = 2.0, sigma_beta: float = 1.0, seed: int = 0
) -> tuple[pm.Model, ModelInfo]:
    """Banana-shaped posterior of sparse-grid-hmc §4.2.

    Model: ``beta = (beta1, beta2) ~ N(0, sigma_beta^2 I)``,
    ``y_i | beta ~ N(beta1 + beta2^2, sigma_y^2)``, ``i = 1..N``, with data simulated at
    ``beta1 + beta2^2 = 1``, ``sigma_y = 2``, ``sigma_beta = 1``, ``N = 100``.

    Parameters
    ----------
    n_obs : int
        Number of observations N.
    sigma_y, sigma_beta : float
        Noise and prior standard deviations.
    seed : int
        Seed of the simulated data.

    Returns
    -------
    model : pm.Model
        Free variable ``beta`` of shape ``(2,)``.
    info : ModelInfo
        Reference mean/sd by quadrature (:func:`banana_reference_moments`).
    """
    rng = np.random.default_rng(seed)
    y = 1.0 + sigma_y * rng.normal(size=n_obs)
    counter = EvaluationCounter()
    with pm.Model() as model:
        beta = pm.Normal("beta", mu=0.0, sigma=sigma_beta, shape=2)
        b = count_evaluations(beta, counter)
        pm.Normal("y", mu=b[0] + b[1] ** 2, sigma=sigma_y, observed=y)
    mean, sd = banana_reference_moments(y, sigma_y, sigma_beta)
    info = ModelInfo(
        name="banana",
        counter=counter,
        param_names=["beta"],
        ref_mean={"beta": mean},
        ref_sd={"beta": sd},
        description=(
            f"Banana, sparse-grid-hmc §4.2: y_i ~ N(beta1 + beta2^2, {sigma_y}^2), N={n_obs}, "
            f"beta ~ N(0, {sigma_beta}^2 I), data simulated at beta1 + beta2^2 = 1."
        ),
        has_gradient=True,
        extra={"y": y, "sigma_y": sigma_y, "sigma_beta": sigma_beta, "seed": seed},
    )
    return model, info
