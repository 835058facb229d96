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

The ODE solution is a **black box**: a PyTensor Op whose ``perform`` calls
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

from collections.abc import Sequence
from typing import Any

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.distributions import transforms
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from scipy.integrate import solve_ivp

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations
from benchmarks.posteriordb.reference import load_data

__all__ = ["POSTERIOR", "CHEAP", "MAX_RHS_CALLS", "LotkaVolterraSolution", "make_model"]

#: posteriordb posterior name.
POSTERIOR = "hudson_lynx_hare-lotka_volterra"
#: Not in the short CI run (each logp is an ODE solve, ~2-5 ms).
CHEAP = False
#: A solve needing more right-hand-side calls than this is abandoned (logp -inf): it bounds
#: the cost of far-out proposals.  At the posterior a solve takes a few hundred.
MAX_RHS_CALLS = 50_000


class _Budget(Exception):
    pass


class _LotkaVolterraRHS:
    """Right-hand side with a call budget (module-level class: picklable)."""

    def __init__(self, theta: np.ndarray, budget: int) -> None:
        self.alpha, self.beta, self.gamma, self.delta = (float(v) for v in theta)
        self.calls, self.budget = 0, budget

    def __call__(self, t: float, z: np.ndarray) -> list[float]:
        self.calls += 1
        if self.calls > self.budget:
            raise _Budget
        u, v = z
        return [(self.alpha - self.beta * v) * u, (-self.gamma + self.delta * u) * v]


class LotkaVolterraSolution(Op):
    """Populations ``z[n, k]`` at ``ts`` from ``theta`` (4,) and ``z_init`` (2,); no gradient.

    Parameters
    ----------
    ts : sequence of float
        Output times (> 0; the state is ``z_init`` at time 0).
    rtol, atol : float
        ``solve_ivp`` tolerances.
    method : str
        ``solve_ivp`` method.
    max_rhs_calls : int
        Right-hand-side budget per solve; beyond it the output is zeros (logp ``-inf``).

    Notes
    -----
    Non-positive or non-finite populations, and failed solves, come out as 0 so that
    ``log(z)`` is ``-inf`` and the lognormal likelihood ``-inf``: the point is rejected.
    The Op defines no ``grad``: PyTensor cannot differentiate the model.
    """

    __props__ = ("ts", "rtol", "atol", "method", "max_rhs_calls")

    def __init__(
        self,
        ts: Sequence[float],
        rtol: float = 1e-8,
        atol: float = 1e-8,
        method: str = "LSODA",
        max_rhs_calls: int = MAX_RHS_CALLS,
    ) -> None:
        self.ts = tuple(float(t) for t in ts)
        self.rtol = float(rtol)
        self.atol = float(atol)
        self.method = str(method)
        self.max_rhs_calls = int(max_rhs_calls)

    def make_node(self, theta: Any, z_init: Any) -> Apply:
        theta = pt.as_tensor_variable(theta, dtype="float64")
        z_init = pt.as_tensor_variable(z_init, dtype="float64")
        return Apply(self, [theta, z_init], [pt.dmatrix()])

    def solve(self, theta: np.ndarray, z_init: np.ndarray) -> np.ndarray:
        """The solution as an ``(len(ts), 2)`` array, zeros where it is unusable."""
        out = np.zeros((len(self.ts), 2))
        if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(z_init))):
            return out
        try:
            sol = solve_ivp(
                _LotkaVolterraRHS(theta, self.max_rhs_calls),
                (0.0, self.ts[-1]),
                np.asarray(z_init, dtype=float),
                method=self.method,
                t_eval=self.ts,
                rtol=self.rtol,
                atol=self.atol,
            )
        except _Budget:
            return out
        if not sol.success or sol.y.shape[1] != len(self.ts):
            return out
        z = sol.y.T
        return np.where(np.isfinite(z) & (z > 0), z, 0.0)

    def perform(self, node: Apply, inputs: list[np.ndarray], outputs: list) -> None:
        outputs[0][0] = self.solve(inputs[0], inputs[1])

    def infer_shape(self, fgraph, node, input_shapes):
        return [(len(self.ts), 2)]


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
    solution = LotkaVolterraSolution(ts)
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
