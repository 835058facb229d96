"""A hierarchical SBC model with exact posterior draws (eight-schools shaped, J = 4).

Written as a PyMC user writes it, non-centred::

    mu ~ N(0, 1),   tau ~ HalfNormal(1),   eta_j ~ N(0, 1),
    theta_j = mu + tau * eta_j,   y_j | theta_j ~ N(theta_j, sigma_j^2),   j = 1..4,

with known ``sigma = (1, 1, 2, 2)``. The data rarely pin ``tau`` down: its posterior keeps
mass near 0 (the neck of the funnel in ``(log tau, theta)``) and a long right tail, which is
what a surrogate fitted to a chain's tuning states tends to cut off. Sampled in
``(mu, log tau, eta)`` (d = 6); SBC ranks ``mu``, ``tau`` and ``theta0 = theta_1``.

Exact posterior draws by the classic route (Gelman et al., *Bayesian Data Analysis*, §5.4):
``mu`` integrates out in closed form, so ``p(log tau | y)`` is known up to a constant and is
drawn by inversion on a fine grid (6000 cells over [-12, 3]: cell width 0.0025, far below any
posterior scale of ``log tau``); then ``mu | tau, y`` and ``theta_j | mu, tau, y`` are normal.
"""

from __future__ import annotations

import numpy as np
import pymc as pm

from tests.reliability.sbc import SBCModel

__all__ = ["HIERARCHICAL", "hierarchical_model", "simulate_hierarchical",
           "hierarchical_posterior_draws"]

SIGMA = np.array([1.0, 1.0, 2.0, 2.0])
MU_PRIOR_SD = 1.0
PARAMS = ("mu", "tau", "theta0")
_LOG_TAU = np.linspace(-12.0, 3.0, 6001)


def hierarchical_model() -> pm.Model:
    with pm.Model() as model:
        y = pm.Data("y", np.zeros(SIGMA.size))
        mu = pm.Normal("mu", 0.0, MU_PRIOR_SD)
        tau = pm.HalfNormal("tau", 1.0)
        eta = pm.Normal("eta", 0.0, 1.0, shape=SIGMA.size)
        theta = mu + tau * eta
        pm.Deterministic("theta0", theta[0])
        pm.Normal("obs", theta, SIGMA, observed=y)
    return model


def simulate_hierarchical(rng: np.random.Generator) -> tuple[dict[str, float], np.ndarray]:
    """Parameters from the prior and data from the model (numpy, independent of PyMC)."""
    mu = rng.normal(0.0, MU_PRIOR_SD)
    tau = abs(rng.normal())
    theta = mu + tau * rng.normal(size=SIGMA.size)
    y = rng.normal(theta, SIGMA)
    return {"mu": float(mu), "tau": float(tau), "theta0": float(theta[0])}, y


def _given_tau(y: np.ndarray, tau: np.ndarray):
    """``log p(log tau | y)`` up to a constant, and ``mu | tau, y ~ N(m, 1 / precision)``,
    for each ``tau`` (``y_j | mu, tau ~ N(mu, sigma_j^2 + tau^2)``, mu integrated out)."""
    var = SIGMA**2 + tau[:, None] ** 2
    precision = 1.0 / MU_PRIOR_SD**2 + np.sum(1.0 / var, axis=1)
    m = np.sum(y / var, axis=1) / precision
    log_marginal = (-0.5 * np.sum(np.log(var) + y**2 / var, axis=1)
                    + 0.5 * m**2 * precision - 0.5 * np.log(precision))
    log_prior = -0.5 * tau**2 + np.log(tau)  # HalfNormal(1) in log tau (Jacobian tau)
    return log_marginal + log_prior, m, precision


def _theta0_mean(y, tau, mu):
    """``E[theta_1 | mu, tau, y]``: precision-weighted between ``y_1`` and ``mu``."""
    return (tau**2 * y[0] + SIGMA[0] ** 2 * mu) / (tau**2 + SIGMA[0] ** 2)


def hierarchical_posterior_draws(y: np.ndarray, n: int, rng: np.random.Generator,
                                 scale: float = 1.0) -> dict[str, np.ndarray]:
    """Independent exact posterior draws; ``scale != 1`` shrinks (widens) them about the
    exact posterior mean in ``(mu, log tau, theta0)``: an sd ``1 - scale`` too small."""
    y = np.asarray(y, dtype=np.float64)
    mid = 0.5 * (_LOG_TAU[1:] + _LOG_TAU[:-1])
    log_density, m, precision = _given_tau(y, np.exp(mid))
    weight = np.exp(log_density - log_density.max())
    weight /= weight.sum()
    cell = rng.choice(mid.size, size=n, p=weight)
    log_tau = _LOG_TAU[cell] + rng.uniform(size=n) * np.diff(_LOG_TAU)[cell]
    tau = np.exp(log_tau)
    _, m_draw, precision_draw = _given_tau(y, tau)
    mu = rng.normal(m_draw, 1.0 / np.sqrt(precision_draw))
    theta_sd = 1.0 / np.sqrt(1.0 / SIGMA[0] ** 2 + 1.0 / tau**2)
    theta0 = rng.normal(_theta0_mean(y, tau, mu), theta_sd)
    if scale != 1.0:
        tau_mid = np.exp(mid)
        means = {"mu": weight @ m, "log_tau": weight @ mid,
                 "theta0": weight @ _theta0_mean(y, tau_mid, m)}
        mu = means["mu"] + scale * (mu - means["mu"])
        tau = np.exp(means["log_tau"] + scale * (log_tau - means["log_tau"]))
        theta0 = means["theta0"] + scale * (theta0 - means["theta0"])
    return {"mu": mu, "tau": tau, "theta0": theta0}


HIERARCHICAL = SBCModel("hierarchical", PARAMS, hierarchical_model, simulate_hierarchical,
                        hierarchical_posterior_draws)
