"""An ABC benchmark with a known answer: the 10-d skew-normal simulator of kmc §6.

Simulator (kmc §6, after Meeds et al. 2015): ``y | theta ~ SN_d(theta, I, alpha)``, density
``2 N(y; theta, I) Phi(<alpha, y - theta>)``, ``alpha = 1_d``; the observation ``y*`` is one
draw at ``theta = 1_d`` (seeded). Prior ``theta ~ N(0, PRIOR_SD^2 I)``.

ABC likelihood with a Gaussian kernel of width ``eps``:
``L_eps(theta) = E_{y ~ SN(theta)} N(y*; y, eps^2 I)``. Its unbiased Monte Carlo estimate
from ``S`` simulations, ``(1/S) sum_s N(y*; y_s, eps^2 I)``, is what a pseudo-marginal
ABC-MCMC evaluates (kmc §6: "an unbiased Monte Carlo estimator of the approximate
likelihood"); every evaluation draws fresh simulations. This is *not* Wood's Gaussian
synthetic likelihood (biased in ``S``; the HABC bias kmc shows).

Known answer: a skew-normal plus independent ``N(0, eps^2 I)`` noise is skew-normal again
(``y - theta = delta |u0| + N(0, I - delta delta^T)``, so adding the noise gives
``Omega = (1 + eps^2) I`` with the same ``delta``), hence
``L_eps(theta) = 2 N(y* - theta; 0, c I) Phi(alpha'^T (y* - theta))``, ``c = 1 + eps^2``,
``delta = alpha / sqrt(1 + |alpha|^2)``, ``alpha' = (delta / c) / sqrt(1 - |delta|^2 / c)``.
With the Gaussian prior the ABC posterior is a Gaussian times one ``Phi`` of a linear form:
its moments follow from a one-dimensional quadrature along ``alpha'``
(:func:`abc_posterior_moments`), exactly up to the quadrature.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from scipy.special import log_ndtr, logsumexp

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations

__all__ = ["make_skew_normal_abc", "make_skew_normal_smc_abc", "abc_posterior_moments",
           "simulate_skew_normal", "NoisyABCLoglik", "abc_exact_loglik", "skew_normal_data"]

PRIOR_SD = 5.0


def simulate_skew_normal(rng, theta, alpha, n):
    """``n`` draws of ``SN(theta, I, alpha)``: ``x0 ~ N(0, I)`` kept if ``alpha.x0 > u``,
    ``u ~ N(0, 1)``, else ``-x0`` (density ``2 phi(x) Phi(alpha.x)``)."""
    theta = np.asarray(theta, dtype=np.float64)
    x0 = rng.standard_normal((n, theta.size))
    u = rng.standard_normal(n)
    x = np.where((x0 @ alpha > u)[:, None], x0, -x0)
    return theta + x


def skew_normal_data(d: int = 10, seed: int = 0) -> np.ndarray:
    """The observation ``y*``: one draw at ``theta = alpha = 1_d``."""
    rng = np.random.default_rng(seed)
    return simulate_skew_normal(rng, np.ones(d), np.ones(d), 1)[0]


def _abc_alpha(alpha: np.ndarray, eps: float) -> tuple[float, np.ndarray]:
    c = 1.0 + eps**2
    delta = alpha / np.sqrt(1.0 + alpha @ alpha)
    return c, (delta / c) / np.sqrt(1.0 - delta @ delta / c)


def abc_exact_loglik(theta, y_obs, alpha, eps):
    """``log L_eps(theta)`` in closed form (numpy)."""
    c, a2 = _abc_alpha(alpha, eps)
    z = y_obs - np.asarray(theta)
    d = y_obs.size
    return (np.log(2.0) - 0.5 * np.sum(z * z, -1) / c - 0.5 * d * np.log(2 * np.pi * c)
            + log_ndtr(z @ a2))


def abc_posterior_moments(y_obs, alpha, eps, prior_sd=PRIOR_SD, n_grid=20001):
    """Exact mean and sd of the ABC posterior (1-d quadrature along ``alpha'``)."""
    c, a2 = _abc_alpha(alpha, eps)
    v = 1.0 / (1.0 / prior_sd**2 + 1.0 / c)
    m = v * y_obs / c
    k = np.sqrt(v) * np.linalg.norm(a2)
    e = a2 / np.linalg.norm(a2)
    b0 = a2 @ (y_obs - m)
    s = np.linspace(-15.0, 15.0, n_grid)
    logw = -0.5 * s**2 + log_ndtr(b0 - k * s)
    w = np.exp(logw - logw.max())
    w /= w.sum()
    es = np.sum(w * s)
    vs = np.sum(w * s**2) - es**2
    mean = m + np.sqrt(v) * e * es
    sd = np.sqrt(v * (1.0 + (vs - 1.0) * e**2))
    return mean, sd


class NoisyABCLoglik(Op):
    """``log`` of ``(1/S) sum_s N(y*; y_s, eps^2 I)``, ``y_s ~ SN(theta, I, alpha)`` drawn
    afresh at every call (``S`` simulations). Random output, no gradient."""

    def __init__(self, y_obs, alpha, eps: float, n_sim: int, seed: int | None = None):
        self.y_obs = np.asarray(y_obs, dtype=np.float64)
        self.alpha = np.asarray(alpha, dtype=np.float64)
        self.eps = float(eps)
        self.n_sim = int(n_sim)
        self.rng = np.random.default_rng(seed)

    def make_node(self, theta):
        return Apply(self, [pt.as_tensor_variable(theta)], [pt.dscalar()])

    def perform(self, node, inputs, output_storage):
        y = simulate_skew_normal(self.rng, inputs[0], self.alpha, self.n_sim)
        r = self.y_obs - y
        d = self.y_obs.size
        value = (logsumexp(-0.5 * np.sum(r * r, axis=1) / self.eps**2) - np.log(self.n_sim)
                 - 0.5 * d * np.log(2 * np.pi * self.eps**2))
        output_storage[0][0] = np.asarray(value)


def _info(name, counter, y_obs, alpha, eps, n_sim, description, has_gradient):
    mean, sd = abc_posterior_moments(y_obs, alpha, eps)
    return ModelInfo(
        name=name, counter=counter, param_names=["theta"],
        ref_mean={"theta": mean}, ref_sd={"theta": sd}, description=description,
        has_gradient=has_gradient,
        extra={"y_obs": y_obs, "eps": eps, "n_sim": n_sim},
    )


def make_skew_normal_abc(d: int = 10, eps: float = 1.0, n_sim: int = 10, noisy: bool = True,
                         seed: int = 0, op_seed: int | None = 12345):
    """Pseudo-marginal ABC model (``noisy=True``: the estimate from ``n_sim`` simulations per
    evaluation, a black box) or the same ABC posterior with the closed-form likelihood
    (``noisy=False``, PyTensor, with a gradient)."""
    alpha = np.ones(d)
    y_obs = skew_normal_data(d, seed)
    counter = EvaluationCounter()
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, PRIOR_SD, shape=d)
        tc = count_evaluations(theta, counter)
        if noisy:
            loglik = NoisyABCLoglik(y_obs, alpha, eps, n_sim, op_seed)(tc)
        else:
            c, a2 = _abc_alpha(alpha, eps)
            z = pt.constant(y_obs) - tc
            loglik = (np.log(2.0) - 0.5 * pt.sum(z**2) / c - 0.5 * d * np.log(2 * np.pi * c)
                      + pm.logcdf(pm.Normal.dist(0.0, 1.0), pt.dot(z, pt.constant(a2))))
        pm.Potential("abc_loglik", loglik)
    desc = (f"skew-normal ABC, d = {d}, eps = {eps}, "
            + (f"likelihood estimated from {n_sim} simulations per evaluation" if noisy
               else "closed-form ABC likelihood"))
    return model, _info("skew_normal_abc" if noisy else "skew_normal_abc_exact", counter, y_obs,
                        alpha, eps, n_sim if noisy else 0, desc, not noisy)


class _SimCounter:
    """Picklable simulator for ``pm.Simulator`` that counts its simulations."""

    def __init__(self, alpha):
        self.alpha = np.asarray(alpha, dtype=np.float64)
        self.count = 0

    def __call__(self, rng, theta, size=None):
        self.count += 1
        return simulate_skew_normal(rng, theta, self.alpha, 1)[0]


def make_skew_normal_smc_abc(d: int = 10, eps: float = 1.0, seed: int = 0):
    """The same ABC posterior for ``pm.sample_smc``: ``pm.Simulator`` with the Gaussian
    distance (``-0.5 ((y* - y) / eps)^2``, the same kernel up to a constant) on the identity
    summary, one simulation per evaluation. ``info.extra["simulator"].count`` counts them."""
    alpha = np.ones(d)
    y_obs = skew_normal_data(d, seed)
    sim = _SimCounter(alpha)
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, PRIOR_SD, shape=d)
        pm.Simulator("y", sim, theta, distance="gaussian", sum_stat="identity", epsilon=eps,
                     signature="(n)->(n)", observed=y_obs)
    info = _info("skew_normal_smc_abc", EvaluationCounter(), y_obs, alpha, eps, 1,
                 f"skew-normal ABC, d = {d}, eps = {eps}, pm.Simulator", False)
    info.extra["simulator"] = sim
    return model, info
