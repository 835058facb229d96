"""posteriordb ``gp_pois_regr-gp_pois_regr``: latent-GP Poisson regression with hyperparameters.

Translates posteriordb's Stan model ``gp_pois_regr`` on the data set ``gp_pois_regr`` (the
Stan benchmark's simulated data: N = 11 points ``x``, counts ``k``; ``y`` is not used),
posteriordb commit 28f8d3d6e975315f42aa274a8399f21e07a43b30::

    cov = gp_exp_quad_cov(x, alpha, rho) + diag_matrix(rep_vector(1e-10, N))
    f = cholesky_decompose(cov) * f_tilde
    rho ~ gamma(25, 4);  alpha ~ normal(0, 2);  f_tilde ~ normal(0, 1)
    k ~ poisson_log(f)
    real<lower=0> rho, alpha;  vector[N] f_tilde

``gp_exp_quad_cov(x, alpha, rho)[i, j] = alpha^2 exp(-(x_i - x_j)^2 / (2 rho^2))``.  13 free
parameters: ``rho``, ``alpha`` (log-transformed, as in Stan) and the whitened latent values
``f_tilde`` (11).

Differences from the Stan program: none in the density.  ``rho`` is
``pm.Gamma(alpha=25, beta=4)`` (shape, rate), ``alpha`` ``pm.HalfNormal(2)`` (Stan's truncated
``normal(0, 2)``: a constant apart), ``poisson_log(f)`` is ``pm.Poisson(mu=exp(f))`` (PyMC
keeps the ``-log k!`` constant Stan's ``~`` drops).  The Cholesky factor uses PyTensor's
``cholesky`` (``on_error="nan"``: a factorisation that fails gives a NaN logp, rejected like
Stan's exception).

**Reference and trace names.** posteriordb's reference draws of this posterior (Stan,
10 chains x 1 000 kept draws, adapt_delta 0.99, max_treedepth 15) store ``rho``, ``alpha`` and
the transformed parameter ``f``, not ``f_tilde``.  The model therefore records ``f`` as a
``pm.Deterministic`` (computed from the uncounted free variables, so recording it costs no
counted evaluation) and ``param_names = ["rho", "alpha", "f"]``: the reference comparison
**and the runner's min ESS** are over ``rho``, ``alpha``, ``f[1..11]``, not over
``f_tilde``.  (Recovering ``f_tilde = L^-1 f`` from the stored draws is numerically
meaningless: ``L`` is conditioned by the 1e-10 jitter.)
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.tensor.slinalg import cholesky

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations
from benchmarks.posteriordb.reference import load_data

__all__ = ["POSTERIOR", "CHEAP", "JITTER", "NOT_IN_REFERENCE", "make_model"]

#: posteriordb posterior name.
POSTERIOR = "gp_pois_regr-gp_pois_regr"
#: Cheap enough for the short CI run.
CHEAP = True
#: Free variables the reference draws do not store (compared through ``f`` instead).
NOT_IN_REFERENCE = ("f_tilde",)
#: Diagonal added to the covariance, as in the Stan program.
JITTER = 1e-10


def _latent(rho: pt.TensorVariable, alpha: pt.TensorVariable, f_tilde: pt.TensorVariable,
            sq_dist: np.ndarray) -> pt.TensorVariable:
    """``f = cholesky(alpha^2 exp(-d^2 / (2 rho^2)) + 1e-10 I) @ f_tilde``."""
    n = sq_dist.shape[0]
    cov = alpha**2 * pt.exp(-0.5 * pt.constant(sq_dist) / rho**2) + JITTER * pt.eye(n)
    return pt.dot(cholesky(cov, lower=True, on_error="nan"), f_tilde)


def make_model() -> tuple[pm.Model, ModelInfo]:
    """Build the PyMC model of ``gp_pois_regr-gp_pois_regr``.

    Returns
    -------
    model : pm.Model
        Free variables ``rho``, ``alpha``, ``f_tilde`` (11,); deterministic ``f`` (11,).
    info : ModelInfo
        Counter on the likelihood, ``param_names = ["rho", "alpha", "f"]``.
    """
    data = load_data("gp_pois_regr")
    x = np.asarray(data["x"], dtype=float)
    k = np.asarray(data["k"], dtype=np.int64)
    n = len(x)
    sq_dist = (x[:, None] - x[None, :]) ** 2

    counter = EvaluationCounter()
    with pm.Model() as model:
        rho = pm.Gamma("rho", alpha=25.0, beta=4.0)
        alpha = pm.HalfNormal("alpha", sigma=2.0)
        f_tilde = pm.Normal("f_tilde", mu=0.0, sigma=1.0, shape=n)
        # The trace's f (posteriordb's reference parameter), off the counted path.
        pm.Deterministic("f", _latent(rho, alpha, f_tilde, sq_dist))
        theta = count_evaluations(pt.concatenate([rho[None], alpha[None], f_tilde]), counter)
        f = _latent(theta[0], theta[1], theta[2:], sq_dist)
        pm.Poisson("k", mu=pt.exp(f), observed=k)
    info = ModelInfo(
        name=POSTERIOR,
        counter=counter,
        param_names=["rho", "alpha", "f"],
        description=(
            "posteriordb gp_pois_regr-gp_pois_regr: latent GP (squared-exponential kernel, "
            f"N={n} points, whitened f_tilde) with Poisson counts, rho ~ Gamma(25, 4), "
            "alpha ~ N+(0, 2); 13 free parameters, compared on rho, alpha, f."
        ),
        has_gradient=True,
        extra={"posteriordb_model": "gp_pois_regr", "data_name": "gp_pois_regr"},
    )
    return model, info
