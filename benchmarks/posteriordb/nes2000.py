"""posteriordb ``nes2000-nes``: party identification regression, National Election Study 2000.

Translates posteriordb's Stan model ``nes`` (ARM ch. 4, Gelman & Hill 2006) on the data set
``nes2000`` (N = 476), posteriordb commit 28f8d3d6e975315f42aa274a8399f21e07a43b30::

    age30_44 = age_discrete == 2;  age45_64 = age_discrete == 3;  age65up = age_discrete == 4
    partyid7 ~ normal(beta[1] + beta[2] real_ideo + beta[3] race_adj + beta[4] age30_44
                      + beta[5] age45_64 + beta[6] age65up + beta[7] educ1 + beta[8] gender
                      + beta[9] income, sigma)
    vector[9] beta (flat);  real<lower=0> sigma (flat)

Differences from the Stan program: none in the density.  Stan's implicit flat priors are
``pm.Flat`` (``beta``) and ``pm.HalfFlat`` (``sigma``, log transform as in Stan).  PyMC keeps
the normal density's constant, which Stan's ``~`` drops.  Trace names: ``beta`` (shape 9,
0-based; Stan's ``beta[1..9]``) and ``sigma``.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations
from benchmarks.posteriordb.reference import load_data

__all__ = ["POSTERIOR", "CHEAP", "make_model"]

#: posteriordb posterior name.
POSTERIOR = "nes2000-nes"
#: Cheap enough for the short CI run.
CHEAP = True


def make_model() -> tuple[pm.Model, ModelInfo]:
    """Build the PyMC model of ``nes2000-nes``.

    Returns
    -------
    model : pm.Model
        Free variables ``beta`` (9,) and ``sigma``.
    info : ModelInfo
        Counter on the likelihood, ``param_names = ["beta", "sigma"]``; no analytic reference.
    """
    data = load_data("nes2000")
    col = {k: np.asarray(v, dtype=float) for k, v in data.items() if isinstance(v, list)}
    age = np.asarray(data["age_discrete"], dtype=int)
    # Design matrix of Stan's linear predictor, columns in beta's order.
    X = np.column_stack(
        [
            np.ones(data["N"]),
            col["real_ideo"],
            col["race_adj"],
            (age == 2).astype(float),
            (age == 3).astype(float),
            (age == 4).astype(float),
            col["educ1"],
            col["gender"],
            col["income"],
        ]
    )

    counter = EvaluationCounter()
    with pm.Model() as model:
        beta = pm.Flat("beta", shape=9)
        sigma = pm.HalfFlat("sigma")
        theta = count_evaluations(pt.concatenate([beta, sigma[None]]), counter)
        mu = pt.dot(pt.constant(X), theta[:9])
        pm.Normal("partyid7", mu=mu, sigma=theta[9], observed=col["partyid7"])
    info = ModelInfo(
        name=POSTERIOR,
        counter=counter,
        param_names=["beta", "sigma"],
        description=(
            "posteriordb nes2000-nes (ARM ch. 4): linear regression of 7-point party "
            f"identification on ideology, race, age group, education, gender and income, "
            f"N={data['N']}, flat priors."
        ),
        has_gradient=True,
        extra={"posteriordb_model": "nes", "data_name": "nes2000"},
    )
    return model, info
