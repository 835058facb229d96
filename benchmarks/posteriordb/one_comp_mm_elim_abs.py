"""posteriordb ``one_comp_mm_elim_abs-one_comp_mm_elim_abs``: a one-compartment PK ODE.

Translates posteriordb's Stan model ``one_comp_mm_elim_abs`` (stat_comp_benchmarks' pkpd:
first-order absorption, Michaelis-Menten elimination) on the data set of the same name
(N_t = 20 simulated concentrations), posteriordb commit
28f8d3d6e975315f42aa274a8399f21e07a43b30::

    dC/dt = exp(-k_a t) D k_a / V  (t > 0)  -  (V_m / V) C / (K_m + C),   C(t0 = 0) = 0
    real<lower=0> k_a, K_m, V_m, sigma;  each ~ cauchy(0, 1)
    C = integrate_ode_bdf(...);  C_hat[n] ~ lognormal(log(C[n]), sigma)

The ODE solution is a **black box**: a PyTensor Op whose ``perform`` calls
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

from collections.abc import Sequence
from typing import Any

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from scipy.integrate import solve_ivp

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations
from benchmarks.posteriordb.reference import load_data

__all__ = ["POSTERIOR", "CHEAP", "MAX_RHS_CALLS", "OneCompartmentSolution", "make_model"]

#: posteriordb posterior name.
POSTERIOR = "one_comp_mm_elim_abs-one_comp_mm_elim_abs"
#: Not in the short CI run (each logp is an ODE solve, ~2 ms).
CHEAP = False
#: Right-hand-side budget per solve (logp ``-inf`` beyond it); a few hundred at the posterior.
MAX_RHS_CALLS = 50_000


class _Budget(Exception):
    pass


class _OneCompartmentRHS:
    """Right-hand side with a call budget (module-level class: picklable)."""

    def __init__(self, k_a: float, K_m: float, V_m: float, D: float, V: float,
                 budget: int) -> None:
        self.k_a, self.K_m, self.V_m, self.D, self.V = k_a, K_m, V_m, D, V
        self.calls, self.budget = 0, budget

    def __call__(self, t: float, c: np.ndarray) -> list[float]:
        self.calls += 1
        if self.calls > self.budget:
            raise _Budget
        dose = np.exp(-self.k_a * t) * self.D * self.k_a / self.V if t > 0 else 0.0
        return [dose - (self.V_m / self.V) * c[0] / (self.K_m + c[0])]


class OneCompartmentSolution(Op):
    """Concentrations ``C`` at ``times`` from scalars ``k_a``, ``K_m``, ``V_m``; no gradient.

    Parameters
    ----------
    times : sequence of float
        Measurement times (> t0).
    t0, D, V : float
        Initial time, total dose and compartment volume (data).
    rtol, atol : float
        ``solve_ivp`` tolerances.
    method : str
        ``solve_ivp`` method.
    max_rhs_calls : int
        Right-hand-side budget per solve; beyond it the output is zeros (logp ``-inf``).

    Notes
    -----
    Unusable solutions (failed, over budget, non-positive, non-finite) come out as 0, whose
    ``log`` makes the lognormal likelihood ``-inf``.
    """

    __props__ = ("times", "t0", "D", "V", "rtol", "atol", "method", "max_rhs_calls")

    def __init__(
        self,
        times: Sequence[float],
        t0: float,
        D: float,
        V: float,
        rtol: float = 1e-8,
        atol: float = 1e-8,
        method: str = "LSODA",
        max_rhs_calls: int = MAX_RHS_CALLS,
    ) -> None:
        self.times = tuple(float(t) for t in times)
        self.t0, self.D, self.V = float(t0), float(D), float(V)
        self.rtol, self.atol = float(rtol), float(atol)
        self.method = str(method)
        self.max_rhs_calls = int(max_rhs_calls)

    def make_node(self, k_a: Any, K_m: Any, V_m: Any) -> Apply:
        inputs = [pt.as_tensor_variable(v, dtype="float64") for v in (k_a, K_m, V_m)]
        return Apply(self, inputs, [pt.dvector()])

    def solve(self, k_a: float, K_m: float, V_m: float) -> np.ndarray:
        """The solution at ``times``, zeros where it is unusable."""
        out = np.zeros(len(self.times))
        if not np.all(np.isfinite([k_a, K_m, V_m])):
            return out
        rhs = _OneCompartmentRHS(float(k_a), float(K_m), float(V_m), self.D, self.V,
                                 self.max_rhs_calls)
        try:
            sol = solve_ivp(rhs, (self.t0, self.times[-1]), [0.0], method=self.method,
                            t_eval=self.times, rtol=self.rtol, atol=self.atol)
        except _Budget:
            return out
        if not sol.success or sol.y.shape[1] != len(self.times):
            return out
        c = sol.y[0]
        return np.where(np.isfinite(c) & (c > 0), c, 0.0)

    def perform(self, node: Apply, inputs: list[np.ndarray], outputs: list) -> None:
        outputs[0][0] = self.solve(*(float(v) for v in inputs))

    def infer_shape(self, fgraph, node, input_shapes):
        return [(len(self.times),)]


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
    solution = OneCompartmentSolution(times, data["t0"], data["D"], data["V"])
    counter = EvaluationCounter()
    with pm.Model() as model:
        k_a = pm.HalfCauchy("k_a", 1.0)
        K_m = pm.HalfCauchy("K_m", 1.0)
        V_m = pm.HalfCauchy("V_m", 1.0)
        sigma = pm.HalfCauchy("sigma", 1.0)
        par = count_evaluations(pt.stack([k_a, K_m, V_m, sigma]), counter)
        conc = solution(par[0], par[1], par[2])
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
