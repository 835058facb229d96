"""Beta-binomial overdispersion model of vhmc §4.1 (Albert 2009, LearnBayes ``cancermortality``).

Twenty Missouri cities: ``y_j`` stomach-cancer deaths among ``n_j`` people at risk.  Albert's
beta-binomial model with mean ``m`` and precision ``K``,

    p(y_j | m, K) = C(n_j, y_j) B(K m + y_j, K (1 - m) + n_j - y_j) / B(K m, K (1 - m)),
    p(m, K) ∝ 1 / (m (1 - m)) · 1 / (1 + K)^2,

sampled in the coordinates ``x1 = logit(m)``, ``x2 = log(K)``.  The vhmc paper writes
``x2 = logit(K)``, which cannot be right (K > 0 is unbounded above); Albert's LearnBayes
function ``betabinexch`` uses ``log K`` and so do we.  With the Jacobian
``|d(m, K)/d(x1, x2)| = m (1 - m) K`` the prior in ``(x1, x2)`` is ``K / (1 + K)^2``
(the ``1/(m(1-m))`` cancels), i.e. the log posterior is, up to a constant,

    sum_j [betaln(K m + y_j, K (1 - m) + n_j - y_j) - betaln(K m, K (1 - m))]
        + x2 - 2 log(1 + exp(x2)),

exactly LearnBayes' ``betabinexch``.  The data are LearnBayes' ``cancermortality``
(verbatim: the same 20 pairs appear in LearnBayes' examples and in several public ports).

The model's free variables are exactly ``x1`` and ``x2`` (two scalar ``pm.Flat``), so a step
method's raveled unconstrained vector is ``q = (x1, x2)``.  A numpy version of the log
posterior and its gradient (:func:`log_posterior`) gives the quadrature reference
(:func:`quadrature_reference`) on a dense grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from scipy.special import digamma, expit, gammaln, logsumexp

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations

__all__ = [
    "CANCER_N",
    "CANCER_Y",
    "GRID_BOX",
    "PLOT_BOX",
    "GridReference",
    "log_posterior",
    "log_rising",
    "make_betabinomial",
    "quadrature_reference",
]

#: Deaths y_j, LearnBayes ``cancermortality$y``.
CANCER_Y = np.array([0, 0, 2, 0, 1, 1, 0, 2, 1, 3, 0, 1, 1, 1, 54, 0, 0, 1, 3, 0], dtype=float)
#: People at risk n_j, LearnBayes ``cancermortality$n``.
CANCER_N = np.array(
    [1083, 855, 3461, 657, 1208, 1025, 527, 1668, 583, 582,
     917, 857, 680, 917, 53637, 874, 395, 581, 588, 383],
    dtype=float,
)  # fmt: skip

#: Box (x1_lo, x1_hi, x2_lo, x2_hi) outside which the posterior mass is below 1e-10 (the
#: outermost ring of a 1001 x 1001 grid holds 8e-12; x1 has a long right tail at small K).
GRID_BOX = (-9.5, 0.0, -2.0, 30.0)
#: LearnBayes' contour box for ``betabinexch`` (Albert 2009, Fig. 5.2): where the mass is.
PLOT_BOX = (-8.0, -4.5, 3.0, 16.5)


#: Above ``a > RISING_SERIES * (y + 1)`` the log rising factorial is summed as a series in 1/a:
#: ``gammaln(a + y) - gammaln(a)`` loses everything to cancellation there (at K = e^40,
#: gammaln(K) ~ 1e19 and its rounding error ~ 1e3: a chain that wandered out there met
#: model logps of +1e6 that were pure rounding).
RISING_SERIES = 1e4


def _power_sums(y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``S_k = sum_{i < y} i^k`` for k = 1, 2, 3."""
    y = np.asarray(y, dtype=float)
    s1 = y * (y - 1.0) / 2.0
    return s1, (y - 1.0) * y * (2.0 * y - 1.0) / 6.0, s1**2


def log_rising(a: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``log Gamma(a + y) - log Gamma(a) = sum_{i < y} log(a + i)`` and its derivative in ``a``.

    Exact (``gammaln`` / ``digamma``) for moderate ``a``; for ``a > 1e4 (y + 1)`` the series
    ``y log a + S1/a - S2/(2a^2) + S3/(3a^3)`` (``S_k = sum_{i<y} i^k``), whose truncation
    error is below ``y / 1e17``.

    Parameters
    ----------
    a : ndarray
        Positive.
    y : ndarray
        Non-negative integers (as floats), broadcastable with ``a``.

    Returns
    -------
    value, derivative : ndarray
    """
    a, y = np.broadcast_arrays(np.asarray(a, float), np.asarray(y, float))
    big = a > RISING_SERIES * (y + 1.0)
    s1, s2, s3 = _power_sums(y)
    with np.errstate(all="ignore"):
        exact = gammaln(a + y) - gammaln(a)
        d_exact = digamma(a + y) - digamma(a)
    A = np.where(big, a, 1.0)
    series = y * np.log(A) + s1 / A - s2 / (2.0 * A**2) + s3 / (3.0 * A**3)
    d_series = y / A - s1 / A**2 + s2 / A**3 - s3 / A**4
    return np.where(big, series, exact), np.where(big, d_series, d_exact)


def _log_rising_pt(a, y: np.ndarray):
    """PyTensor twin of :func:`log_rising` (value only; PyTensor differentiates it)."""
    y = np.asarray(y, dtype=float)
    s1, s2, s3 = _power_sums(y)
    big = pt.gt(a, RISING_SERIES * (y + 1.0))
    A = pt.switch(big, a, 1.0)
    series = y * pt.log(A) + s1 / A - s2 / (2.0 * A**2) + s3 / (3.0 * A**3)
    return pt.switch(big, series, pt.gammaln(a + y) - pt.gammaln(a))


def log_posterior(
    x1: np.ndarray, x2: np.ndarray, y: np.ndarray = CANCER_Y, n: np.ndarray = CANCER_N
) -> tuple[np.ndarray, np.ndarray]:
    """Unnormalised log posterior in ``(logit m, log K)`` and its gradient, vectorised.

    ``betaln(a + y, b + n - y) - betaln(a, b) = R(a, y) + R(b, n - y) - R(a + b, n)`` with
    ``R`` the log rising factorial (:func:`log_rising`), which stays accurate for any K.

    Parameters
    ----------
    x1, x2 : ndarray
        ``logit(m)`` and ``log(K)``, any broadcastable shapes.
    y, n : ndarray, shape (J,)
        Deaths and people at risk.

    Returns
    -------
    logp : ndarray
        ``betabinexch`` (LearnBayes) at every point, shape of the broadcast ``x1, x2``.
    grad : ndarray
        ``d logp / d(x1, x2)``, that shape plus a trailing axis of 2.
    """
    x1, x2 = np.broadcast_arrays(np.asarray(x1, float), np.asarray(x2, float))
    m = expit(x1)[..., None]
    K = np.exp(x2)[..., None]
    a, b = K * m, K * (1.0 - m)
    ra, dra = log_rising(a, y)
    rb, drb = log_rising(b, n - y)
    rab, drab = log_rising(a + b, n)
    logp = np.sum(ra + rb - rab, axis=-1) + x2 - 2.0 * np.logaddexp(0.0, x2)
    d_a = np.sum(dra - drab, axis=-1)
    d_b = np.sum(drb - drab, axis=-1)
    m, K, a, b = m[..., 0], K[..., 0], a[..., 0], b[..., 0]
    g1 = (d_a - d_b) * K * m * (1.0 - m)
    g2 = d_a * a + d_b * b + 1.0 - 2.0 * expit(x2)
    return logp, np.stack([g1, g2], axis=-1)


@dataclass
class GridReference:
    """Quadrature reference on a regular grid.

    Attributes
    ----------
    x1, x2 : ndarray, shape (n1,), (n2,)
        Grid axes; the grid is ``meshgrid(x1, x2, indexing="ij")``.
    log_density : ndarray, shape (n1, n2)
        Log posterior normalised as cell probabilities (``logsumexp == 0``).
    grad : ndarray, shape (n1, n2, 2)
        Gradient of the log posterior at the grid points.
    mean, sd : ndarray, shape (2,)
        Posterior mean and sd of ``(x1, x2)``.
    cov : ndarray, shape (2, 2)
        Posterior covariance.
    mode : ndarray, shape (2,)
        Grid point of highest density.
    edge_mass : float
        Probability of the outermost ring of cells (should be negligible).
    """

    x1: np.ndarray
    x2: np.ndarray
    log_density: np.ndarray
    grad: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    cov: np.ndarray
    mode: np.ndarray
    edge_mass: float

    @property
    def points(self) -> np.ndarray:
        """All grid points, shape (n1 * n2, 2), in ``log_density.ravel()`` order."""
        g1, g2 = np.meshgrid(self.x1, self.x2, indexing="ij")
        return np.column_stack([g1.ravel(), g2.ravel()])


def quadrature_reference(
    n1: int = 1001, n2: int = 1001, box: tuple[float, float, float, float] = GRID_BOX
) -> GridReference:
    """Posterior moments by quadrature (midpoint rule) on a dense regular grid.

    Parameters
    ----------
    n1, n2 : int
        Grid points along ``x1`` and ``x2``.
    box : tuple of float
        ``(x1_lo, x1_hi, x2_lo, x2_hi)``.

    Returns
    -------
    GridReference
    """
    x1 = np.linspace(box[0], box[1], n1)
    x2 = np.linspace(box[2], box[3], n2)
    g1, g2 = np.meshgrid(x1, x2, indexing="ij")
    logp, grad = log_posterior(g1, g2)
    logw = logp - logsumexp(logp)
    w = np.exp(logw)
    pts = np.stack([g1, g2], axis=-1)
    mean = np.einsum("ij,ijk->k", w, pts)
    centred = pts - mean
    cov = np.einsum("ij,ijk,ijl->kl", w, centred, centred)
    ring = np.ones_like(w, dtype=bool)
    ring[1:-1, 1:-1] = False
    i, j = np.unravel_index(np.argmax(logw), logw.shape)
    return GridReference(
        x1=x1,
        x2=x2,
        log_density=logw,
        grad=grad,
        mean=mean,
        sd=np.sqrt(np.diag(cov)),
        cov=cov,
        mode=np.array([x1[i], x2[j]]),
        edge_mass=float(w[ring].sum()),
    )


def make_betabinomial(
    y: np.ndarray = CANCER_Y,
    n: np.ndarray = CANCER_N,
    initval: tuple[float, float] = (-7.0, 6.0),
    with_reference: bool = True,
) -> tuple[pm.Model, ModelInfo]:
    """The beta-binomial model in ``(x1, x2) = (logit m, log K)`` with a counted likelihood.

    Parameters
    ----------
    y, n : ndarray, shape (J,)
        Deaths and people at risk (default: LearnBayes ``cancermortality``).
    initval : tuple of float
        Initial point, LearnBayes' ``laplace(betabinexch, c(-7, 6), ...)`` start.
    with_reference : bool
        Compute the quadrature reference moments (only valid for the default data).

    Returns
    -------
    model : pm.Model
        Free variables ``x1``, ``x2`` (scalar ``pm.Flat``), in that order; the whole log
        posterior is two ``pm.Potential`` terms.
    info : ModelInfo
        ``ref_mean`` / ``ref_sd`` from quadrature; ``extra["grid_reference"]`` keeps it.
    """
    y = np.asarray(y, dtype=float)
    n = np.asarray(n, dtype=float)
    counter = EvaluationCounter()
    with pm.Model() as model:
        x1 = pm.Flat("x1", initval=initval[0])
        x2 = pm.Flat("x2", initval=initval[1])
        xs = count_evaluations(pt.stack([x1, x2]), counter)
        m = pt.sigmoid(xs[0])
        K = pt.exp(xs[1])
        a, b = K * m, K * (1.0 - m)
        # betaln(a + y, b + n - y) - betaln(a, b), accurate for any K (see log_rising)
        loglik = _log_rising_pt(a, y) + _log_rising_pt(b, n - y) - _log_rising_pt(a + b, n)
        pm.Potential("loglik", pt.sum(loglik))
        pm.Potential("prior_jacobian", x2 - 2.0 * pt.softplus(x2))
    ref_mean = ref_sd = None
    extra: dict = {"y": y, "n": n}
    if with_reference:
        ref = quadrature_reference()
        ref_mean = {"x1": np.array(ref.mean[0]), "x2": np.array(ref.mean[1])}
        ref_sd = {"x1": np.array(ref.sd[0]), "x2": np.array(ref.sd[1])}
        extra["grid_reference"] = ref
    info = ModelInfo(
        name="betabinomial",
        counter=counter,
        param_names=["x1", "x2"],
        ref_mean=ref_mean,
        ref_sd=ref_sd,
        description=(
            "Beta-binomial overdispersion, vhmc §4.1 / Albert (2009) §5.4: LearnBayes "
            "cancermortality (20 cities), x1 = logit(m), x2 = log(K) (LearnBayes betabinexch; "
            "the paper's 'logit(K)' read as log K), prior 1/(m(1-m)) 1/(1+K)^2 with Jacobian."
        ),
        has_gradient=True,
        extra=extra,
    )
    return model, info
