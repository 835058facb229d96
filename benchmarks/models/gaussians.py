"""Gaussian targets with exact moments: the narrow Gaussian of rns-hmc Figure 3 and a general one."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from scipy.stats import ortho_group

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations

__all__ = ["GaussianLogp", "make_gaussian", "make_narrow_gaussian", "make_correlated_gaussian", "narrow_covariance"]


class GaussianLogp(Op):
    """``log_norm - (x - mean)' precision (x - mean) / 2`` in numpy, with no gradient: the
    whole log-posterior as an evaluate-only model server returns it."""

    __props__ = ()

    def __init__(self, mean: np.ndarray, precision: np.ndarray, log_norm: float = 0.0):
        self.mean, self.precision, self.log_norm = mean, precision, float(log_norm)

    def make_node(self, x):
        return Apply(self, [pt.as_tensor_variable(x)], [pt.dscalar()])

    def perform(self, node, inputs, output_storage):
        r = np.asarray(inputs[0], dtype=np.float64) - self.mean
        output_storage[0][0] = np.asarray(self.log_norm - 0.5 * r @ self.precision @ r)

    def __eq__(self, other):
        return type(self) is type(other) and self.mean is other.mean

    def __hash__(self):
        return hash((type(self), id(self.mean)))


def make_gaussian(
    mean: np.ndarray,
    cov: np.ndarray,
    name: str = "gaussian",
    description: str = "",
    var_name: str = "x",
    black_box: bool = False,
) -> tuple[pm.Model, ModelInfo]:
    """Model whose posterior is exactly ``N(mean, cov)``.

    The variable is ``pm.Flat`` and the whole (normalised) Gaussian log density is one
    ``pm.Potential`` on the counted variable, so the posterior is exactly the Gaussian (no prior
    enters) and every evaluation is counted.

    Parameters
    ----------
    mean : ndarray, shape (d,)
        Posterior mean.
    cov : ndarray, shape (d, d)
        Posterior covariance, symmetric positive definite.
    name : str
        Short model name for the info record.
    description : str
        Description for the info record.
    var_name : str
        Name of the free variable.
    black_box : bool
        The log density as one evaluate-only Op (:class:`GaussianLogp`), no gradient.

    Returns
    -------
    model : pm.Model
        Free variable ``var_name`` of shape ``(d,)``, initial point 0.
    info : ModelInfo
        Exact reference: ``mean`` and ``sqrt(diag(cov))``; ``extra`` holds ``mean`` and ``cov``.
    """
    mean = np.asarray(mean, dtype=np.float64)
    cov = np.asarray(cov, dtype=np.float64)
    d = mean.shape[0]
    # Precision and log-determinant from an eigendecomposition: stable for ill-conditioned cov.
    evals, evecs = np.linalg.eigh(cov)
    if evals.min() <= 0:
        raise ValueError("cov must be positive definite")
    precision = (evecs / evals) @ evecs.T
    precision = 0.5 * (precision + precision.T)
    log_norm = -0.5 * (d * np.log(2 * np.pi) + np.sum(np.log(evals)))
    counter = EvaluationCounter()
    with pm.Model() as model:
        x = pm.Flat(var_name, shape=d)
        counted = count_evaluations(x, counter)
        if black_box:
            logp = GaussianLogp(mean, precision, log_norm)(counted)
        else:
            r = counted - pt.constant(mean)
            logp = log_norm - 0.5 * pt.dot(r, pt.dot(pt.constant(precision), r))
        pm.Potential("gaussian_logp", logp)
    info = ModelInfo(
        name=name,
        counter=counter,
        param_names=[var_name],
        ref_mean={var_name: mean.copy()},
        ref_sd={var_name: np.sqrt(np.diag(cov))},
        description=description or f"Gaussian N(mean, cov) in {d} dimensions",
        has_gradient=not black_box,
        extra={"mean": mean, "cov": cov},
    )
    return model, info


def narrow_covariance(d: int = 32, wide: float = 1.0, narrow: float = 0.01) -> np.ndarray:
    """Covariance with eigenvector ``1/sqrt(d)`` at eigenvalue ``wide``, all others ``narrow``.

    Parameters
    ----------
    d : int
        Dimension.
    wide, narrow : float
        Eigenvalue along ``(1, ..., 1)/sqrt(d)`` and along its orthogonal complement.

    Returns
    -------
    ndarray, shape (d, d)
        ``narrow * I + (wide - narrow) u u'``.
    """
    u = np.full(d, 1.0 / np.sqrt(d))
    return narrow * np.eye(d) + (wide - narrow) * np.outer(u, u)


def make_narrow_gaussian(d: int = 32) -> tuple[pm.Model, ModelInfo]:
    """The 32-dimensional narrow Gaussian of rns-hmc Figure 3.

    Zero mean (the paper does not state one), covariance with eigenvector
    ``(1, ..., 1)/sqrt(d)`` at eigenvalue 1.0 and all other eigenvalues 0.01: 31 confined
    directions and one ten times wider, all coordinates correlated (marginal sd
    ``sqrt(0.01 + 0.99/d)``, pairwise correlation ``0.99/d / (0.01 + 0.99/d)``).

    Parameters
    ----------
    d : int
        Dimension (paper: 32).

    Returns
    -------
    model : pm.Model
        Free variable ``x`` of shape ``(d,)``.
    info : ModelInfo
        Exact reference moments.
    """
    return make_gaussian(
        np.zeros(d),
        narrow_covariance(d),
        name="narrow_gaussian",
        description=(
            f"Narrow Gaussian, rns-hmc Fig. 3: d={d}, zero mean, eigenvalue 1.0 along "
            "(1,...,1)/sqrt(d), 0.01 on the other d-1 directions."
        ),
    )


def make_correlated_gaussian(
    d: int = 10, condition_number: float = 100.0, scale: float = 1.0, seed: int = 0
) -> tuple[pm.Model, ModelInfo]:
    """Gaussian with random rotation, log-spaced spectrum and random mean.

    Parameters
    ----------
    d : int
        Dimension.
    condition_number : float
        Ratio of the largest to the smallest covariance eigenvalue.
    scale : float
        Largest marginal scale: covariance eigenvalues run log-uniformly from ``scale^2``
        down to ``scale^2 / condition_number``.
    seed : int
        Seed of the rotation (Haar-distributed) and of the mean (``N(0, scale^2 I)``).

    Returns
    -------
    model : pm.Model
        Free variable ``x`` of shape ``(d,)``.
    info : ModelInfo
        Exact reference moments.
    """
    rng = np.random.default_rng(seed)
    evals = scale**2 * np.geomspace(1.0, 1.0 / condition_number, d)
    rot = ortho_group.rvs(d, random_state=rng) if d > 1 else np.ones((1, 1))
    cov = (rot * evals) @ rot.T
    cov = 0.5 * (cov + cov.T)
    mean = scale * rng.normal(size=d)
    return make_gaussian(
        mean,
        cov,
        name="correlated_gaussian",
        description=(
            f"Correlated Gaussian: d={d}, condition number {condition_number:g}, random "
            f"rotation and mean (seed {seed})."
        ),
    )
