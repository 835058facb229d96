"""Hard geometry with known posteriors: an ill-conditioned linear inverse problem and Neal's funnel.

Both come as *black boxes* (a Python Op without a gradient, as a user's solver would be) or
with a PyTensor gradient, and both know their exact posterior, so a benchmark or a test can
say whether a sampler is right, not only whether it mixes.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from scipy.optimize import brentq

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations
from benchmarks.models.gaussians import make_gaussian

__all__ = ["heat_inverse_problem", "make_heat_inverse", "make_funnel", "FUNNEL_SCALE",
           "served_gaussian", "make_served_gaussian"]


class MatrixForward(Op):
    """``theta -> G @ theta`` evaluated in numpy, with no gradient: a stand-in for a solver."""

    __props__ = ()

    def __init__(self, matrix: np.ndarray):
        self.matrix = np.asarray(matrix, dtype=np.float64)

    def make_node(self, theta):
        theta = pt.as_tensor_variable(theta)
        return Apply(self, [theta], [pt.dvector()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = self.matrix @ np.asarray(inputs[0], dtype=np.float64)

    def __eq__(self, other):
        return type(self) is type(other) and self.matrix is other.matrix

    def __hash__(self):
        return hash((type(self), id(self.matrix)))


def heat_inverse_problem(
    d: int = 20, condition_number: float = 1e6, n_obs: int = 30, time: float = 2e-3, seed: int = 0
) -> dict[str, np.ndarray]:
    """A 1-d heat equation's initial condition from noisy observations of the later state.

    The initial condition is a Karhunen-Loeve expansion ``u0(x) = sum_k theta_k phi_k(x)
    / k`` on ``[0, 1]`` with ``phi_k = sqrt(2) sin(k pi x)`` and ``theta ~ N(0, I_d)``; the
    heat equation damps mode ``k`` by ``exp(-k^2 pi^2 T)``; ``n_obs`` point values of the
    state at time ``T``, at random sensor locations, are observed with noise ``sigma``
    (random locations make the modes' posteriors correlated; on a regular grid the
    sines are orthogonal and the posterior is nearly independent). The forward map is linear, so
    the posterior is exactly Gaussian with precision ``I + G^T G / sigma^2``; ``sigma`` is
    chosen so that this precision has the requested condition number.

    Returns
    -------
    dict
        ``forward`` (n_obs, d), ``sigma``, ``observed``, ``true_theta``, ``mean``, ``cov``.
    """
    rng = np.random.default_rng(seed)
    k = np.arange(1, d + 1)
    x = np.sort(rng.uniform(0.0, 1.0, n_obs))
    forward = np.sqrt(2.0) * np.sin(np.pi * np.outer(x, k)) * np.exp(-(k**2) * np.pi**2 * time) / k
    gram = forward.T @ forward
    gram_eigs = np.linalg.eigvalsh(gram)

    def log_condition(log_sigma: float) -> float:
        eigs = 1.0 + gram_eigs / np.exp(2 * log_sigma)
        return np.log(eigs.max() / eigs.min()) - np.log(condition_number)

    sigma = float(np.exp(brentq(log_condition, -30.0, 10.0)))
    true_theta = rng.standard_normal(d)
    observed = forward @ true_theta + sigma * rng.standard_normal(n_obs)
    precision = np.eye(d) + gram / sigma**2
    cov = np.linalg.inv(precision)
    cov = 0.5 * (cov + cov.T)
    mean = cov @ (forward.T @ observed) / sigma**2
    return {"forward": forward, "sigma": sigma, "observed": observed,
            "true_theta": true_theta, "mean": mean, "cov": cov}


def make_heat_inverse(
    d: int = 20, condition_number: float = 1e6, gradient: bool = False, seed: int = 0
) -> tuple[pm.Model, ModelInfo]:
    """The heat-equation inverse problem as a PyMC model with its exact posterior.

    Parameters
    ----------
    d : int
        Karhunen-Loeve coefficients sampled.
    condition_number : float
        Condition number of the posterior precision (1e4-1e8 are the hard cases).
    gradient : bool
        False: the forward map is a black-box Op (evaluations only). True: ``pt.dot``.
    seed : int
        Seed of the synthetic data.
    """
    problem = heat_inverse_problem(d, condition_number, seed=seed)
    counter = EvaluationCounter()
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, 1.0, shape=d)
        counted = count_evaluations(theta, counter)
        if gradient:
            predicted = pt.dot(pt.constant(problem["forward"]), counted)
        else:
            predicted = MatrixForward(problem["forward"])(counted)
        pm.Normal("y", mu=predicted, sigma=problem["sigma"], observed=problem["observed"])
    info = ModelInfo(
        name=f"heat_inverse_{'adjoint' if gradient else 'blackbox'}",
        counter=counter,
        param_names=["theta"],
        ref_mean={"theta": problem["mean"]},
        ref_sd={"theta": np.sqrt(np.diag(problem["cov"]))},
        description=(
            f"1-d heat equation initial condition, {d} KL coefficients, linear forward map "
            f"({'gradient' if gradient else 'black box'}); exact Gaussian posterior with "
            f"precision condition number {condition_number:.0e}."
        ),
        has_gradient=gradient,
        extra={"mean": problem["mean"], "cov": problem["cov"], "sigma": problem["sigma"]},
    )
    return model, info


#: Standard deviation of the funnel's log-scale ``v`` (Neal 2003).
FUNNEL_SCALE = 3.0


class FunnelLogp(Op):
    """Neal's funnel log density of ``(v, x_1..x_{d-1})`` in numpy, with no gradient."""

    __props__ = ()

    def make_node(self, v, x):
        return Apply(self, [pt.as_tensor_variable(v), pt.as_tensor_variable(x)], [pt.dscalar()])

    def perform(self, node, inputs, output_storage):
        v, x = float(inputs[0]), np.asarray(inputs[1], dtype=np.float64)
        logp = -0.5 * (v / FUNNEL_SCALE) ** 2 - 0.5 * x.size * v - 0.5 * np.sum(x**2) * np.exp(-v)
        output_storage[0][0] = np.asarray(logp)


def make_funnel(d: int = 2, gradient: bool = False) -> tuple[pm.Model, ModelInfo]:
    """Neal's funnel: ``v ~ N(0, 3^2)``, ``x_i | v ~ N(0, exp(v))``, ``i < d``.

    The marginal of ``v`` is exactly ``N(0, 9)`` and every ``x_i`` has mean 0 and sd
    ``exp(9 / 4)``; ``v``'s 1% and 99% quantiles (``-+6.98``) test whether the neck and
    the mouth are both visited.
    """
    counter = EvaluationCounter()
    with pm.Model() as model:
        if gradient:
            v = pm.Normal("v", 0.0, FUNNEL_SCALE)
            pm.Normal("x", 0.0, pt.exp(count_evaluations(v, counter) / 2), shape=d - 1)
        else:
            v = pm.Flat("v")
            x = pm.Flat("x", shape=d - 1)
            both = count_evaluations(pt.concatenate([v[None], x]), counter)
            pm.Potential("funnel", FunnelLogp()(both[0], both[1:]))
    info = ModelInfo(
        name=f"funnel{d}_{'gradient' if gradient else 'blackbox'}",
        counter=counter,
        param_names=["v", "x"],
        ref_mean={"v": np.zeros(()), "x": np.zeros(d - 1)},
        ref_sd={"v": np.full((), FUNNEL_SCALE), "x": np.full(d - 1, np.exp(FUNNEL_SCALE**2 / 4))},
        description=f"Neal's funnel, d = {d} ({'gradient' if gradient else 'black box'}).",
        has_gradient=gradient,
        extra={"v_quantiles": {0.01: -2.3263 * FUNNEL_SCALE, 0.99: 2.3263 * FUNNEL_SCALE}},
    )
    return model, info


def served_gaussian(d: int = 20, condition_number: float = 2e8, sd_min: float = 1e-4,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of a correlated Gaussian with the given precision condition
    number: sds log-spaced from ``sd_min`` to 1, a random correlation matrix shrunk toward
    the identity until the condition number is reached (the shrinkage found by root
    finding). With ``sd_min`` 0.05 and condition 1e5 the correlations reach 0.99; with
    1e-4 and 2e8 they stay below 0.8 (the kind of posterior a model server
    that returns a whole log-posterior is benchmarked with)."""
    rng = np.random.default_rng(seed)
    sds = np.geomspace(sd_min, 1.0, d)[rng.permutation(d)]
    factor = rng.standard_normal((d, 3))  # nearly rank 3: correlations near +-1
    raw = factor @ factor.T + 1e-6 * np.eye(d)
    raw /= np.sqrt(np.outer(np.diag(raw), np.diag(raw)))

    def cov(shrink: float) -> np.ndarray:
        return ((1 - shrink) * raw + shrink * np.eye(d)) * np.outer(sds, sds)

    def log_condition(shrink: float) -> float:
        eigs = np.linalg.eigvalsh(cov(shrink))
        return np.log(eigs.max() / eigs.min()) - np.log(condition_number)

    if log_condition(1.0) > 0 or log_condition(1e-9) < 0:
        raise ValueError(f"condition number {condition_number:g} is out of reach with sds "
                         f"{sd_min:g}..1 in d = {d}")
    return rng.uniform(-1.0, 1.0, d), cov(brentq(log_condition, 1e-9, 1.0))


def make_served_gaussian(d: int = 20, condition_number: float = 2e8, sd_min: float = 1e-4,
                         seed: int = 0) -> tuple[pm.Model, ModelInfo]:
    """:func:`served_gaussian`'s posterior as a model server returns it: the whole
    log-posterior behind one evaluate-only Op, on a ``pm.Flat`` vector (``pm.Potential``),
    so that PyMC knows no prior and no scale. The same posterior as the heat problem's
    with its prior in PyMC differs in exactly that."""
    mean, cov = served_gaussian(d, condition_number, sd_min, seed)
    return make_gaussian(
        mean, cov, name=f"served_gaussian{d}_{condition_number:.0e}", black_box=True,
        description=(f"{d}-d Gaussian served whole behind one black-box Op on a Flat vector, "
                     f"precision condition number {condition_number:.0e}, sds {sd_min:g} to 1."),
    )
