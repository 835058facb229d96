"""posteriordb ``hmm_example-hmm_example``: a two-state Gaussian hidden Markov model.

Translates posteriordb's Stan model ``hmm_example`` on the data set ``hmm_example`` (N = 100
observations, K = 2 states), posteriordb commit 28f8d3d6e975315f42aa274a8399f21e07a43b30::

    simplex[K] theta1;  simplex[K] theta2          (rows of the transition matrix; flat)
    positive_ordered[K] mu                          (state means)
    target += normal_lpdf(mu[1] | 3, 1) + normal_lpdf(mu[2] | 10, 1)
    target += log p(y | theta, mu)                  (forward algorithm, y[t] ~ normal(mu[z_t], 1))

Differences from the Stan program: none in the density.  The flat simplexes are
``pm.Dirichlet(a=[1, 1])`` (a constant density on the simplex); ``positive_ordered`` is the
transform ``Chain([log, ordered])`` on ``mu`` (positive, then increasing), whose Jacobian PyMC
adds as Stan does, so the ordering removes label switching exactly as in Stan; the two normal
priors are ``pm.Normal(mu=[3, 10], sigma=1)`` on that constrained vector (unnormalised on the
ordered positive set, as Stan's ``target +=``).  Stan's forward algorithm uses no initial state
distribution (``gamma[1, k]`` is the first emission alone); so does this one, written as a
``scan`` over time in log space.  The generated quantities (Viterbi path) are left out.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.distributions import transforms

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations
from benchmarks.posteriordb.reference import load_data

__all__ = ["POSTERIOR", "CHEAP", "make_model"]

#: posteriordb posterior name.
POSTERIOR = "hmm_example-hmm_example"
#: Cheap enough for the short CI run.
CHEAP = True


def _forward_step(emission: pt.TensorVariable, gamma: pt.TensorVariable,
                  log_trans: pt.TensorVariable) -> pt.TensorVariable:
    # gamma[t, k] = logsumexp_j(gamma[t-1, j] + log theta[j, k]) + emission[t, k]
    return pt.logsumexp(gamma[:, None] + log_trans, axis=0) + emission


def _scan_outputs(result):
    # PyTensor 2 returns (outputs, updates); PyTensor 3 may return the outputs alone.
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict):
        return result[0]
    return result


def make_model() -> tuple[pm.Model, ModelInfo]:
    """Build the PyMC model of ``hmm_example-hmm_example``.

    Returns
    -------
    model : pm.Model
        Free variables ``theta1`` (2,), ``theta2`` (2,) and ``mu`` (2,, increasing, positive).
    info : ModelInfo
        Counter on the likelihood, ``param_names = ["theta1", "theta2", "mu"]``.
    """
    data = load_data("hmm_example")
    y = np.asarray(data["y"], dtype=float)
    k = int(data["K"])
    if k != 2:
        raise ValueError("the Stan model's priors name mu[1] and mu[2]: K must be 2")
    counter = EvaluationCounter()
    positive_ordered = transforms.Chain([transforms.log, transforms.ordered])
    with pm.Model() as model:
        theta1 = pm.Dirichlet("theta1", a=np.ones(k))
        theta2 = pm.Dirichlet("theta2", a=np.ones(k))
        mu = pm.Normal(
            "mu", mu=np.array([3.0, 10.0]), sigma=1.0, shape=k,
            transform=positive_ordered, initval=np.array([3.0, 10.0]),
        )
        par = count_evaluations(pt.concatenate([theta1, theta2, mu]), counter)
        log_trans = pt.log(pt.stack([par[0:k], par[k:2 * k]]))  # [from j, to k]
        mu_ = par[2 * k:3 * k]
        # log normal(y[t] | mu[k], 1) for all t, k.
        emission = -0.5 * (y[:, None] - mu_[None, :]) ** 2 - 0.5 * np.log(2 * np.pi)
        gammas = _scan_outputs(pytensor.scan(
            _forward_step, sequences=[emission[1:]], outputs_info=[emission[0]],
            non_sequences=[log_trans],
        ))
        pm.Potential("hmm_loglik", pt.logsumexp(gammas[-1]))
    info = ModelInfo(
        name=POSTERIOR,
        counter=counter,
        param_names=["theta1", "theta2", "mu"],
        description=(
            f"posteriordb {POSTERIOR}: 2-state Gaussian HMM, N={len(y)}, forward algorithm; "
            "positive ordered state means."
        ),
        has_gradient=True,
        extra={"posteriordb_model": "hmm_example", "data_name": "hmm_example"},
    )
    return model, info
