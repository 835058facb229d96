"""Bayesian independent component analysis of vhmc §4.4 (simulated, 5 sources: 25 parameters).

The paper uses the first 5 channels of the MEG data of Vigário et al. (1997); here the
mixtures are simulated so that the true unmixing matrix is known: ``N`` draws of ``k``
independent unit-variance Laplace sources, mixed by a random matrix ``A``
(``x_n = A s_n``), so the true unmixing matrix is ``W_0 = A^{-1}`` (up to the row
permutation and scaling every ICA solution is defined up to).

Model (Welling & Teh 2011, as in the paper):
``p(x | W) = |det W| prod_i p(w_i' x)`` with ``p(y) = 1 / (2 pi cosh(y / 2))`` (the paper's
``[4 cosh(y/2)]^{-1}`` up to its normalising constant, which does not change the posterior),
and ``w_ij ~ N(0, 100)`` (sd 10).  The posterior is invariant under signed row permutations
of ``W``: it has ``2^k k!`` equivalent modes and a chain stays in one of them, so posterior
means are taken per chain and compared with :func:`amari_distance`, which ignores row
permutation and scaling.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations

__all__ = ["align_rows", "amari_distance", "make_ica", "simulate_ica_data"]


def amari_distance(W: np.ndarray, W0: np.ndarray, normalize: bool = True) -> float:
    """Amari distance between an unmixing matrix and a reference one.

    With ``P = W W0^{-1}`` (the identity up to a scaled permutation when ``W`` separates the
    sources as ``W0`` does), Amari, Cichocki & Yang (1996) define

    ``E = sum_i (sum_j |p_ij| / max_k |p_ik| - 1) + sum_j (sum_i |p_ij| / max_k |p_kj| - 1)``,

    zero exactly when ``P`` is a scaled permutation matrix.

    Parameters
    ----------
    W, W0 : ndarray, shape (k, k)
        Estimated and reference unmixing matrices (``W0`` invertible).
    normalize : bool
        Divide ``E`` by its maximum ``2 k (k - 1)`` so that the distance lies in [0, 1].

    Returns
    -------
    float

    References
    ----------
    .. [1] Amari, Cichocki & Yang (1996), "A new learning algorithm for blind signal
       separation", *Advances in Neural Information Processing Systems* 8, 757-763.
    """
    W = np.asarray(W, dtype=float)
    W0 = np.asarray(W0, dtype=float)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape != W0.shape:
        raise ValueError(f"W and W0 must be square and of one shape; got {W.shape}, {W0.shape}")
    P = np.abs(W @ np.linalg.inv(W0))
    k = P.shape[0]
    rows = np.sum(P.sum(axis=1) / P.max(axis=1) - 1.0)
    cols = np.sum(P.sum(axis=0) / P.max(axis=0) - 1.0)
    distance = float(rows + cols)
    return distance / (2.0 * k * (k - 1)) if normalize and k > 1 else distance


def align_rows(W: np.ndarray, W_ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The signed row permutation that brings ``W`` closest to ``W_ref``.

    The ICA posterior is invariant under ``W -> S P W`` (``P`` a permutation, ``S`` a diagonal
    of signs: the source density is symmetric); this finds the ``S P`` minimising
    ``||S P W - W_ref||_F`` (Hungarian assignment on the rows, each row at its better sign),
    so that draws of chains sitting in different modes can be pooled.

    Parameters
    ----------
    W, W_ref : ndarray, shape (k, k)

    Returns
    -------
    order : ndarray of int, shape (k,)
        ``W[order]`` are the rows in ``W_ref``'s order.
    signs : ndarray, shape (k,)
        Signs to multiply the reordered rows by; aligned ``= signs[:, None] * W[order]``
        (for a stack of draws ``(..., k, k)``: ``signs[:, None] * draws[..., order, :]``).
    """
    from scipy.optimize import linear_sum_assignment

    W = np.asarray(W, dtype=float)
    W_ref = np.asarray(W_ref, dtype=float)
    plus = np.linalg.norm(W_ref[:, None, :] - W[None, :, :], axis=-1)  # (ref row, W row)
    minus = np.linalg.norm(W_ref[:, None, :] + W[None, :, :], axis=-1)
    ref_rows, order = linear_sum_assignment(np.minimum(plus, minus))
    order = order[np.argsort(ref_rows)]
    rows = np.arange(len(order))
    signs = np.where(minus[rows, order] < plus[rows, order], -1.0, 1.0)
    return order, signs


def simulate_ica_data(
    n_obs: int = 5000, n_sources: int = 5, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Simulate mixtures of independent heavy-tailed sources.

    Parameters
    ----------
    n_obs, n_sources : int
        N and k.
    seed : int
        Seed of the data generator.

    Returns
    -------
    X : ndarray, shape (n_obs, n_sources)
        Observations ``x_n = A s_n`` (rows).
    A : ndarray, shape (k, k)
        Mixing matrix, standard normal entries (redrawn until its condition number is < 10).
    W0 : ndarray, shape (k, k)
        True unmixing matrix ``A^{-1}``.
    """
    rng = np.random.default_rng(seed)
    S = rng.laplace(0.0, 1.0 / np.sqrt(2.0), size=(n_obs, n_sources))  # unit variance
    while True:
        A = rng.normal(size=(n_sources, n_sources))
        if np.linalg.cond(A) < 10.0:
            break
    return S @ A.T, A, np.linalg.inv(A)


def make_ica(n_obs: int = 5000, n_sources: int = 5, seed: int = 0) -> tuple[pm.Model, ModelInfo]:
    """ICA posterior over the unmixing matrix with a counted likelihood.

    Parameters
    ----------
    n_obs, n_sources, seed : int
        Passed to :func:`simulate_ica_data`.

    Returns
    -------
    model : pm.Model
        Free variable ``W`` of shape ``(k, k)``, prior ``N(0, 100)`` per entry, initial
        point the identity (``W = 0`` has ``det W = 0``: log-likelihood ``-inf``).
    info : ModelInfo
        ``extra`` holds ``W0`` (true unmixing matrix), ``A`` and the data settings.
    """
    X, A, W0 = simulate_ica_data(n_obs, n_sources, seed)
    counter = EvaluationCounter()
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, 10.0, shape=(n_sources, n_sources), initval=np.eye(n_sources))
        Wc = count_evaluations(W, counter)
        Y = pt.dot(pt.constant(X), Wc.T)  # y_n = W x_n, as rows
        # log p(y) = -log cosh(y/2) - log(2 pi); log cosh(z) = logaddexp(z, -z) - log 2
        log_source = -(pt.logaddexp(Y / 2.0, -Y / 2.0) - np.log(2.0)) - np.log(2.0 * np.pi)
        log_det = pt.log(pt.abs(pt.linalg.det(Wc)))
        pm.Potential("loglik", n_obs * log_det + pt.sum(log_source))
    info = ModelInfo(
        name="ica",
        counter=counter,
        param_names=["W"],
        description=(
            f"ICA, vhmc §4.4 (simulated): N={n_obs} mixtures of {n_sources} unit-variance "
            "Laplace sources, A ~ N(0,1) entries (cond < 10), p(y) = 1/(2 pi cosh(y/2)), "
            "W entries ~ N(0, 100)."
        ),
        has_gradient=True,
        extra={"W0": W0, "A": A, "n_obs": n_obs, "n_sources": n_sources, "seed": seed},
    )
    return model, info
