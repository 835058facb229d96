"""Gaussian-process hyperparameter posterior of sparse-grid-hmc §4.3."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations

__all__ = ["make_gp_model", "simulate_gp_data", "GP_PARAM_NAMES"]

#: Sampled parameters, all on the log scale as in the paper.
GP_PARAM_NAMES = ["log_eta", "log_l", "log_J"]


def _sq_dists(x: np.ndarray) -> np.ndarray:
    diff = x[:, None, :] - x[None, :, :]
    return np.sum(diff**2, axis=-1)


def simulate_gp_data(
    n_obs: int = 100,
    eta: float = 1.0,
    l: float = 1.0,  # noqa: E741 - the paper's name
    J: float = 0.5,
    input_range: float = 5.0,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw inputs and one GP realisation for the model of sparse-grid-hmc §4.3.

    Parameters
    ----------
    n_obs : int
        Number of data points.
    eta, l, J : float
        True signal variance, inverse squared length scale (the kernel is
        ``eta * exp(-l * r^2)``) and noise variance.
    input_range : float
        Inputs are uniform on ``[0, input_range]^2``.
    seed : int
        Seed of the inputs and of the draw.

    Returns
    -------
    x : ndarray, shape (n_obs, 2)
    y : ndarray, shape (n_obs,)
    """
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, input_range, size=(n_obs, 2))
    cov = eta * np.exp(-l * _sq_dists(x)) + J * np.eye(n_obs)
    y = np.linalg.cholesky(cov) @ rng.normal(size=n_obs)
    return x, y


def make_gp_model(
    n_obs: int = 100,
    seed: int = 0,
    eta: float = 1.0,
    l: float = 1.0,  # noqa: E741 - the paper's name
    J: float = 0.5,
    input_range: float = 5.0,
) -> tuple[pm.Model, ModelInfo]:
    """Posterior of the three GP hyperparameters of sparse-grid-hmc §4.3.

    Model (as in the paper): ``Y ~ N(0, Sigma)``,
    ``Sigma_ij = eta * exp(-l * ||x_i - x_j||^2) + J * delta_ij``, with independent priors
    ``log eta, log l, log J ~ N(-1, 1)``.  The sampled parameters are the logs
    ``(log_eta, log_l, log_J)`` themselves, so the prior is a plain normal on them (no
    Jacobian), and ``U`` is exactly the paper's potential energy.

    The paper gives neither the inputs, nor N, nor the true hyperparameters.  Our choice:
    inputs uniform on ``[0, 5]^2`` and one draw of the GP at ``eta = 1, l = 1, J = 0.5``.
    At N = 100, seed 0, the posterior (long NUTS run) has mean about (-0.37, 0.46, -0.42) and
    sd about (0.39, 0.44, 0.21): well inside the paper's domain of interest
    ``[-1.6, 1.6]^2 x [-1.2, 0.4]``, with ``log_eta`` and ``log_l`` correlated.

    Parameters
    ----------
    n_obs : int
        Number of data points; every logp costs an O(N^3) Cholesky factorisation.
    seed : int
        Seed of the simulated data.
    eta, l, J : float
        True hyperparameters used to simulate the data.
    input_range : float
        Inputs are uniform on ``[0, input_range]^2``.

    Returns
    -------
    model : pm.Model
        Scalar free variables ``log_eta``, ``log_l``, ``log_J``.
    info : ModelInfo
        No analytic reference; ``extra`` holds the data and true values.
    """
    x, y = simulate_gp_data(n_obs, eta, l, J, input_range, seed)
    counter = EvaluationCounter()
    with pm.Model() as model:
        log_eta = pm.Normal("log_eta", mu=-1.0, sigma=1.0)
        log_l = pm.Normal("log_l", mu=-1.0, sigma=1.0)
        log_J = pm.Normal("log_J", mu=-1.0, sigma=1.0)
        # One counting node for the three parameters, so one likelihood evaluation counts once.
        theta = pt.exp(count_evaluations(pt.stack([log_eta, log_l, log_J]), counter))
        cov = theta[0] * pt.exp(-theta[1] * pt.constant(_sq_dists(x))) + theta[2] * pt.eye(n_obs)
        pm.MvNormal("y", mu=np.zeros(n_obs), cov=cov, observed=y)
    info = ModelInfo(
        name="gp",
        counter=counter,
        param_names=list(GP_PARAM_NAMES),
        description=(
            f"GP hyperparameters, sparse-grid-hmc §4.3: N={n_obs} inputs U[0,{input_range:g}]^2, "
            "kernel eta*exp(-l r^2) + J delta, log-params ~ N(-1, 1); data drawn at "
            f"eta={eta:g}, l={l:g}, J={J:g} (seed {seed})."
        ),
        has_gradient=True,
        extra={
            "x": x,
            "y": y,
            "true": {"log_eta": np.log(eta), "log_l": np.log(l), "log_J": np.log(J)},
            "seed": seed,
        },
    )
    return model, info
