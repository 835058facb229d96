"""posteriordb ``one_comp_mm_elim_abs-one_comp_mm_elim_abs``: a one-compartment PK ODE.

Translates posteriordb's Stan model ``one_comp_mm_elim_abs`` (stat_comp_benchmarks' pkpd:
first-order absorption, Michaelis-Menten elimination) on the data set of the same name
(N_t = 20 simulated concentrations), posteriordb commit
28f8d3d6e975315f42aa274a8399f21e07a43b30::

    dC/dt = exp(-k_a t) D k_a / V  (t > 0)  -  (V_m / V) C / (K_m + C),   C(t0 = 0) = 0
    real<lower=0> k_a, K_m, V_m, sigma;  each ~ cauchy(0, 1)
    C = integrate_ode_bdf(...);  C_hat[n] ~ lognormal(log(C[n]), sigma)

The ODE solution is a **black box**: the Op
:class:`~benchmarks.posteriordb.ode.ODESolution`, whose ``perform`` calls
``scipy.integrate.solve_ivp`` (LSODA, rtol = atol = 1e-8) and which has no gradient, so the
model has none (``has_gradient=False``).  Differences from the Stan program: the solver
(Stan's BDF at its default tolerances; ours is at least as accurate); a failed solve, one over
:data:`MAX_RHS_CALLS` right-hand-side calls, or a non-positive concentration gives logp
``-inf``; the half-Cauchy priors are ``pm.HalfCauchy(1)`` (Stan's Cauchy on ``<lower=0>``, a
constant factor apart).  ``C0 = 0`` is hard-coded as in posteriordb's version.

The posterior of ``K_m`` and ``V_m`` is heavy-tailed, with **infinite variance**: for
``K_m`` well above the concentrations the elimination is linear, ``(V_m / K_m) C / V``, so the
likelihood is flat along rays of constant ``V_m / K_m`` and the half-Cauchy priors leave a
marginal density ~ ``K_m^-3`` (Hill estimate of the survival exponent from posteriordb's draws:
about 2 for ``K_m``, 2.3-3 for ``V_m``).  Their sample sds (the reference's 7.3 for ``K_m``)
are not stable statistics and their MCSEs are approximate: judge these two by the quantile
shares, not the sd ratio.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations
from benchmarks.posteriordb.ode import MAX_RHS_CALLS, ODESolution
from benchmarks.posteriordb.reference import load_data

__all__ = ["POSTERIOR", "CHEAP", "MAX_RHS_CALLS", "make_model"]

#: posteriordb posterior name.
POSTERIOR = "one_comp_mm_elim_abs-one_comp_mm_elim_abs"
#: Not in the short CI run (each logp is an ODE solve, ~2 ms).
CHEAP = False


def _one_compartment(
    t: float, c: np.ndarray, params: tuple[float, ...], D: float, V: float
) -> list[float]:
    """``dC/dt`` for ``params = (k_a, K_m, V_m)``, dose ``D`` and volume ``V`` (data)."""
    k_a, K_m, V_m = params
    dose = np.exp(-k_a * t) * D * k_a / V if t > 0 else 0.0
    return [dose - (V_m / V) * c[0] / (K_m + c[0])]


def make_model() -> tuple[pm.Model, ModelInfo]:
    """Build the PyMC model of ``one_comp_mm_elim_abs-one_comp_mm_elim_abs`` (black box).

    Returns
    -------
    model : pm.Model
        Free variables ``k_a``, ``K_m``, ``V_m`` and ``sigma``.
    info : ModelInfo
        Counter on the likelihood, ``param_names = ["k_a", "K_m", "V_m", "sigma"]``,
        ``has_gradient=False``.
    """
    data = load_data("one_comp_mm_elim_abs")
    times = np.asarray(data["times"], dtype=float)
    c_hat = np.asarray(data["C_hat"], dtype=float)
    solution = ODESolution(
        _one_compartment, times, n_states=1, t0=data["t0"], args=(data["D"], data["V"])
    )
    counter = EvaluationCounter()
    with pm.Model() as model:
        k_a = pm.HalfCauchy("k_a", 1.0)
        K_m = pm.HalfCauchy("K_m", 1.0)
        V_m = pm.HalfCauchy("V_m", 1.0)
        sigma = pm.HalfCauchy("sigma", 1.0)
        par = count_evaluations(pt.stack([k_a, K_m, V_m, sigma]), counter)
        conc = solution(par[0:3], np.zeros(1))[:, 0]  # C(t0) = 0
        pm.LogNormal("C_hat", mu=pt.log(conc), sigma=par[3], observed=c_hat)
    info = ModelInfo(
        name=POSTERIOR,
        counter=counter,
        param_names=["k_a", "K_m", "V_m", "sigma"],
        description=(
            f"posteriordb {POSTERIOR}: one-compartment PK ODE with Michaelis-Menten "
            f"elimination (black-box solve_ivp Op, no gradient), N_t={len(times)}."
        ),
        has_gradient=False,
        extra={"posteriordb_model": "one_comp_mm_elim_abs", "data_name": "one_comp_mm_elim_abs"},
    )
    return model, info
