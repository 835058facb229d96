"""posteriordb ``hudson_lynx_hare-lotka_volterra``: predator-prey ODE on the lynx-hare pelts.

Translates posteriordb's Stan model ``lotka_volterra`` (Carpenter's Stan case study) on the
data set ``hudson_lynx_hare`` (Hudson's Bay Company pelts 1900-1920, N = 20 times after the
initial one), posteriordb commit 28f8d3d6e975315f42aa274a8399f21e07a43b30::

    du/dt = (alpha - beta v) u;   dv/dt = (-gamma + delta u) v      (u = hares, v = lynxes)
    array[4] real<lower=0> theta = {alpha, beta, gamma, delta}
    array[2] real<lower=0> z_init;  array[2] real<lower=0> sigma
    z = integrate_ode_rk45(dz_dt, z_init, 0, ts, theta, ..., 1e-5, 1e-3, 500)
    theta[{1, 3}] ~ normal(1, 0.5);  theta[{2, 4}] ~ normal(0.05, 0.05)
    sigma ~ lognormal(-1, 1);  z_init ~ lognormal(log(10), 1)
    y_init[k] ~ lognormal(log(z_init[k]), sigma[k]);  y[:, k] ~ lognormal(log(z[:, k]), sigma[k])

The ODE solution is a **black box**: the Op
:class:`~benchmarks.posteriordb.ode.ODESolution`, whose ``perform`` calls
``scipy.integrate.solve_ivp`` (LSODA, rtol = atol = 1e-8) and which has no gradient, so the
model has none (``has_gradient=False``); it stands for the expensive simulators the package
targets.  Differences from the Stan program: the solver and its tolerances (Stan's rk45 at
rtol 1e-5, atol 1e-3, at most 500 steps; ours is more accurate, the difference in ``z`` is far
below the noise, ``sigma`` ~ 0.25 on the log scale); a solve that fails, takes more than
:data:`MAX_RHS_CALLS` right-hand-side calls, or returns a non-positive population gives logp
``-inf`` (Stan rejects such a proposal the same way).  The normal priors on the positive
``theta`` are ``pm.Normal`` with a log transform, unnormalised on ``theta > 0`` as in Stan.
The generated quantities are left out.

**Initial point.**  The posterior has local modes that catch chains: from PyMC's default
initial point (the prior means, ``theta = (1, 0.05, 1, 0.05)``) a local optimiser ends at
logp -172.9 (``sigma`` ~ 0.6, a poor fit) instead of the main mode's -133.0, and from Stan-style
uniform(-2, 2) unconstrained starts it ends at the main mode in only 3 of 10 tries (the others
at -165 to -2 560).  A 4 x 25 000-iteration ``DEMetropolisZ`` run from the default point did
not converge (min ESS 7, R-hat >> 1.01).  The benchmark measures sampling, not mode finding,
so the model sets ``initval`` to a rounded point of the main mode's basin,
``theta = (0.5, 0.025, 0.8, 0.025)``, ``z_init = y_init`` (the observed initial
populations), ``sigma = (0.5, 0.5)`` (from there the optimiser reaches the main mode);
``make_model(pymc_default_init=True)`` leaves PyMC's default.  The initial point does not
change the density.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.distributions import transforms

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations
from benchmarks.posteriordb.ode import MAX_RHS_CALLS, ODESolution
from benchmarks.posteriordb.reference import load_data

__all__ = ["POSTERIOR", "CHEAP", "MAX_RHS_CALLS", "make_model"]

#: posteriordb posterior name.
POSTERIOR = "hudson_lynx_hare-lotka_volterra"
#: Not in the short CI run (each logp is an ODE solve, ~2-5 ms).
CHEAP = False


def _lotka_volterra(t: float, z: np.ndarray, theta: tuple[float, ...]) -> list[float]:
    """``dz/dt`` for ``z = (hares, lynxes)``, ``theta = (alpha, beta, gamma, delta)``."""
    alpha, beta, gamma, delta = theta
    u, v = z
    return [(alpha - beta * v) * u, (-gamma + delta * u) * v]


def make_model(pymc_default_init: bool = False) -> tuple[pm.Model, ModelInfo]:
    """Build the PyMC model of ``hudson_lynx_hare-lotka_volterra`` (black-box ODE).

    Parameters
    ----------
    pymc_default_init : bool
        Keep PyMC's default initial point (prior means; in a local mode's basin) instead of
        the point in the main mode's basin described in the module docstring.

    Returns
    -------
    model : pm.Model
        Free variables ``theta`` (4,), ``z_init`` (2,) and ``sigma`` (2,).
    info : ModelInfo
        Counter on the likelihood, ``param_names = ["theta", "z_init", "sigma"]``,
        ``has_gradient=False``.
    """
    data = load_data("hudson_lynx_hare")
    ts = np.asarray(data["ts"], dtype=float)
    y_init = np.asarray(data["y_init"], dtype=float)
    y = np.asarray(data["y"], dtype=float)  # (N, 2): hares, lynxes
    counter = EvaluationCounter()
    solution = ODESolution(_lotka_volterra, ts, n_states=2)
    init = {
        "theta": np.array([0.5, 0.025, 0.8, 0.025]),
        "z_init": y_init.copy(),
        "sigma": np.array([0.5, 0.5]),
    }
    if pymc_default_init:
        init = {"theta": None, "z_init": None, "sigma": None}
    with pm.Model() as model:
        theta = pm.Normal(
            "theta",
            mu=np.array([1.0, 0.05, 1.0, 0.05]),
            sigma=np.array([0.5, 0.05, 0.5, 0.05]),
            transform=transforms.log,
            initval=init["theta"],
        )
        z_init = pm.LogNormal(
            "z_init", mu=np.log(10.0), sigma=1.0, shape=2, initval=init["z_init"]
        )
        sigma = pm.LogNormal("sigma", mu=-1.0, sigma=1.0, shape=2, initval=init["sigma"])
        par = count_evaluations(pt.concatenate([theta, z_init, sigma]), counter)
        z0, sig = par[4:6], par[6:8]
        z = solution(par[0:4], z0)
        pm.LogNormal("y_init", mu=pt.log(z0), sigma=sig, observed=y_init)
        pm.LogNormal("y", mu=pt.log(z), sigma=sig, observed=y)
    info = ModelInfo(
        name=POSTERIOR,
        counter=counter,
        param_names=["theta", "z_init", "sigma"],
        description=(
            f"posteriordb {POSTERIOR}: Lotka-Volterra ODE (black-box solve_ivp Op, no "
            f"gradient), lognormal errors, N={len(ts)} times."
        ),
        has_gradient=False,
        extra={"posteriordb_model": "lotka_volterra", "data_name": "hudson_lynx_hare"},
    )
    return model, info
