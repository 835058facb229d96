"""posteriordb ``eight_schools-eight_schools_centered``: the centred eight-schools hierarchy.

Translates posteriordb's Stan model ``eight_schools_centered`` on the data set
``eight_schools`` (J = 8 schools; Rubin 1981, Gelman et al. BDA ch. 5), posteriordb commit
28f8d3d6e975315f42aa274a8399f21e07a43b30::

    tau ~ cauchy(0, 5);  theta ~ normal(mu, tau);  y ~ normal(theta, sigma);  mu ~ normal(0, 5)
    array[J] real theta;  real mu;  real<lower=0> tau

10 free parameters (``mu``, ``tau``, ``theta[1..8]``), sampled in the centred form: the
funnel between ``tau`` and ``theta`` (``log tau`` on the sampler's space) is kept on purpose.

**Reference.** posteriordb has no draws of the centred program (NUTS is biased on it: it
cannot enter the funnel's neck).  Its posterior definition points to
``eight_schools-eight_schools_noncentered``'s reference draws instead
(``reference_posterior_name``), and so do we: the non-centred program
(``theta_trans ~ normal(0, 1)``, ``theta = theta_trans * tau + mu``, same priors and
likelihood) is the same posterior over ``(mu, tau, theta)``, the map
``theta_tilde -> mu + tau * theta_tilde`` having Jacobian ``tau^J``, which is exactly the
density ratio of ``normal(theta | mu, tau)`` and ``normal(theta_tilde | 0, 1)``.  Those
draws store ``theta`` (Stan's transformed parameter), ``mu`` and ``tau``, so
``reference/eight_schools-eight_schools_centered.json`` summarises them as they are (Stan,
10 chains x 1 000 kept draws, adapt_delta 0.95; its ``source`` line names the file).

Differences from the Stan program: none in the density.  ``tau``'s half-Cauchy is
``pm.HalfCauchy(beta=5)`` (Stan's truncated ``cauchy(0, 5)``: a constant apart), with PyMC's
log transform as Stan's; PyMC keeps the normal densities' constants, which Stan's ``~``
drops.  Trace names ``mu``, ``tau``, ``theta`` (shape 8, 0-based in PyMC; Stan's
``theta[1..8]``).  The counter wraps ``theta``, the only input of the likelihood.
"""

from __future__ import annotations

import numpy as np
import pymc as pm

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations
from benchmarks.posteriordb.reference import load_data

__all__ = ["POSTERIOR", "CHEAP", "make_model"]

#: posteriordb posterior name.
POSTERIOR = "eight_schools-eight_schools_centered"
#: Cheap enough for the short CI run.
CHEAP = True


def make_model() -> tuple[pm.Model, ModelInfo]:
    """Build the PyMC model of ``eight_schools-eight_schools_centered``.

    Returns
    -------
    model : pm.Model
        Free variables ``mu``, ``tau`` (log-transformed) and ``theta`` (8,).
    info : ModelInfo
        Counter on the likelihood, ``param_names = ["mu", "tau", "theta"]``.
    """
    data = load_data("eight_schools")
    y = np.asarray(data["y"], dtype=float)
    sigma = np.asarray(data["sigma"], dtype=float)
    n_schools = int(data["J"])

    counter = EvaluationCounter()
    with pm.Model() as model:
        mu = pm.Normal("mu", mu=0.0, sigma=5.0)
        tau = pm.HalfCauchy("tau", beta=5.0)
        theta = pm.Normal("theta", mu=mu, sigma=tau, shape=n_schools)
        counted = count_evaluations(theta, counter)
        pm.Normal("y", mu=counted, sigma=sigma, observed=y)
    info = ModelInfo(
        name=POSTERIOR,
        counter=counter,
        param_names=["mu", "tau", "theta"],
        description=(
            "posteriordb eight_schools-eight_schools_centered: centred hierarchical normal "
            f"model, J={n_schools} schools, mu ~ N(0, 5), tau ~ half-Cauchy(0, 5), "
            "theta ~ N(mu, tau), y ~ N(theta, sigma); reference = posteriordb's non-centred "
            "draws (the same posterior)."
        ),
        has_gradient=True,
        extra={"posteriordb_model": "eight_schools_centered", "data_name": "eight_schools"},
    )
    return model, info
