"""A pseudo-marginal benchmark: a Gaussian random-effects model whose likelihood is an
unbiased importance-sampling estimate, and whose exact posterior is known.

``y_i | b_i ~ N(mu + b_i, 1)``, ``b_i ~ N(0, tau^2)``, ``i = 1..N``; priors ``mu ~ N(0, 3^2)``,
``log tau ~ N(0, 1)``. The likelihood of group ``i`` is estimated by importance sampling
from the random effect's prior, ``L_i ~ (1/K) sum_k N(y_i; mu + tau z_ik, 1)``,
``z_ik ~ N(0, 1)`` drawn afresh at every evaluation (an Op whose ``perform`` draws random
numbers); the product over groups is unbiased for the likelihood. Marginally
``y_i ~ N(mu, 1 + tau^2)``, so the exact posterior of ``(mu, log tau)`` follows by
quadrature on a grid.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from scipy.special import logsumexp

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations

__all__ = ["make_random_effects", "random_effects_posterior", "NoisyRandomEffectsLoglik",
           "random_effects_data"]

MU_SD = 3.0  # prior sd of mu
LOG_TAU_SD = 1.0  # prior sd of log tau


def random_effects_data(n_groups: int = 10, mu: float = 1.0, tau: float = 1.0, seed: int = 0):
    """``y_i = mu + b_i + e_i`` with ``b_i ~ N(0, tau^2)``, ``e_i ~ N(0, 1)``."""
    rng = np.random.default_rng(seed)
    return mu + tau * rng.standard_normal(n_groups) + rng.standard_normal(n_groups)


class NoisyRandomEffectsLoglik(Op):
    """``log`` of the importance-sampling estimate of the likelihood at ``(mu, log tau)``.

    Every call draws ``K`` fresh random effects per group: the output is random, its
    exponential unbiased for the exact likelihood. No gradient (a black box).
    """

    def __init__(self, y: np.ndarray, n_importance: int, seed: int | None = None):
        self.y = np.asarray(y, dtype=np.float64)
        self.n_importance = int(n_importance)
        self.rng = np.random.default_rng(seed)

    def make_node(self, theta):
        return Apply(self, [pt.as_tensor_variable(theta)], [pt.dscalar()])

    def perform(self, node, inputs, output_storage):
        mu, log_tau = np.asarray(inputs[0], dtype=np.float64)
        z = self.rng.standard_normal((self.y.size, self.n_importance))
        resid = self.y[:, None] - mu - np.exp(log_tau) * z
        log_w = -0.5 * resid**2 - 0.5 * np.log(2 * np.pi)
        value = np.sum(logsumexp(log_w, axis=1) - np.log(self.n_importance))
        output_storage[0][0] = np.asarray(value)


def exact_loglik(y: np.ndarray, mu, log_tau):
    """``sum_i log N(y_i; mu, 1 + tau^2)``, broadcasting over ``mu`` and ``log_tau``."""
    var = 1.0 + np.exp(2.0 * np.asarray(log_tau))[..., None]
    resid = y - np.asarray(mu)[..., None]
    return np.sum(-0.5 * resid**2 / var - 0.5 * np.log(2 * np.pi * var), axis=-1)


def random_effects_posterior(y: np.ndarray, n_grid: int = 801):
    """Exact posterior mean and sd of ``(mu, log tau)`` by quadrature on a grid."""
    mu = np.linspace(-6.0, 8.0, n_grid)
    log_tau = np.linspace(-6.0, 4.0, n_grid)
    mm, tt = np.meshgrid(mu, log_tau, indexing="ij")
    logp = (exact_loglik(y, mm, tt) - 0.5 * (mm / MU_SD) ** 2
            - 0.5 * (tt / LOG_TAU_SD) ** 2)
    w = np.exp(logp - logp.max())
    w /= w.sum()
    mean = np.array([np.sum(w * mm), np.sum(w * tt)])
    sd = np.sqrt(np.array([np.sum(w * mm**2), np.sum(w * tt**2)]) - mean**2)
    return mean, sd


def make_random_effects(
    n_groups: int = 10, n_importance: int = 4, noisy: bool = True, seed: int = 0,
    op_seed: int | None = 12345,
) -> tuple[pm.Model, ModelInfo]:
    """The random-effects model with the noisy likelihood Op (``noisy=True``) or the exact
    marginal likelihood (``noisy=False``; PyTensor, with a gradient).

    The free variable is ``theta = (mu, log tau)``.
    """
    y = random_effects_data(n_groups, seed=seed)
    counter = EvaluationCounter()
    with pm.Model() as model:
        theta = pm.Normal("theta", mu=0.0, sigma=np.array([MU_SD, LOG_TAU_SD]), shape=2)
        tc = count_evaluations(theta, counter)
        if noisy:
            loglik = NoisyRandomEffectsLoglik(y, n_importance, op_seed)(tc)
        else:
            var = 1.0 + pt.exp(2.0 * tc[1])
            loglik = pt.sum(-0.5 * (y - tc[0]) ** 2 / var - 0.5 * pt.log(2 * np.pi * var))
        pm.Potential("loglik", loglik)
    mean, sd = random_effects_posterior(y)
    info = ModelInfo(
        name="random_effects_pm" if noisy else "random_effects_exact",
        counter=counter,
        param_names=["theta"],
        ref_mean={"theta": mean},
        ref_sd={"theta": sd},
        description=(f"Gaussian random effects, {n_groups} groups, likelihood "
                     + (f"estimated by importance sampling (K = {n_importance})" if noisy
                        else "exact") + "; exact posterior by quadrature."),
        has_gradient=not noisy,
        extra={"y": y, "n_importance": n_importance},
    )
    return model, info
