"""SoftAbs geometry of a field with Hessians and third derivatives (Betancourt 2013).

The metric is the Hessian ``H = Q diag(lam) Q^T`` of the potential with its eigenvalues
mapped to ``f(lam) = lam coth(alpha lam)``: positive definite where ``U`` is not convex,
``|lam|`` for large ``alpha |lam|`` and ``1 / alpha`` near zero. ``geometry`` gathers it at
a point (eigen-decomposition, log-determinant, the derivatives the generalised leapfrog
needs, ``core/riemannian.py``).

SoftAbs is not scale-free: its floor ``1 / alpha`` is a curvature in the coordinates' units,
so a direction of sd 30 (curvature 1e-3) gets a metric 1000 times too stiff. The
transition therefore runs in a frame ``q = m + L z`` (``framed``), the chain's whitened
coordinates, where the posterior has unit scale. The map is constant and linear: the
density in ``z`` is proportional to the one in ``q``, and the kernel stays exact.

A ``field`` here is ``q -> (U, dU/dq, d2U/dq2, third)``: the third derivatives as a dense
``(d, d, d)`` array or a list of structured parts (``surrogates/third_derivatives.py``)
whose contractions cost ``O(s d^2)`` for ``s`` terms instead of ``O(d^4)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from pymc_surrogate.surrogates.third_derivatives import (
    RankOneCubes,
    diagonal_derivative,
    pull_back,
    rotate,
)
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["Field3", "Geometry", "diagonal_field", "framed", "geometry", "in_frame",
           "softabs", "tempered3"]

Field3 = Callable[[np.ndarray], tuple[float, np.ndarray, np.ndarray, object]]

#: ``alpha |lam|`` below which ``lam coth(alpha lam)`` is evaluated by its series.
_SERIES_BELOW = 1e-4


def softabs(lam: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """``f(lam) = lam coth(alpha lam)`` and ``f'(lam)``, elementwise and overflow-free."""
    lam = np.asarray(lam, dtype=np.float64)
    x = lam if alpha == 1.0 else alpha * lam  # (1 * lam and y / 1 are exact)
    ax = np.abs(x)
    if ax.size and ax.min() >= _SERIES_BELOW:  # the usual case: no series branch
        e = np.exp(-2.0 * ax)
        one_minus = 1.0 - e
        coth = (1.0 + e) / one_minus
        inv_sinh2 = 4.0 * e / one_minus**2
        f = ax * coth
        return (f if alpha == 1.0 else f / alpha), np.sign(x) * (coth - ax * inv_sinh2)
    small = ax < _SERIES_BELOW
    safe = np.where(small, 1.0, ax)
    # coth|x| and 1 / sinh^2|x| through e^{-2|x|}, which cannot overflow.
    e = np.exp(-2.0 * safe)
    coth = (1.0 + e) / (1.0 - e)
    inv_sinh2 = 4.0 * e / (1.0 - e) ** 2
    f = np.where(small, (1.0 + x * x / 3.0) / alpha, ax * coth / alpha)
    df = np.where(small, 2.0 * x / 3.0, np.sign(x) * (coth - ax * inv_sinh2))
    return f, df


def framed(field: Field3, frame: Whitening) -> Field3:
    """``field`` in the frame's whitened coordinates ``z``, ``q = mean + L z``.

    Value unchanged, gradient ``L^T g``, Hessian ``L^T H L``, third derivatives with each
    index contracted with ``L`` (``third_derivatives.pull_back``, structure kept).
    """
    chol = frame.chol if frame.dense else np.diag(frame.chol)
    cache = _PulledBack(chol)

    def in_frame(z: np.ndarray):
        value, grad, hessian, third = field(frame.from_white(z))
        return value, chol.T @ grad, chol.T @ hessian @ chol, cache(third)

    return in_frame


class _PulledBack:
    """``pull_back(third, chol)``, with the pulled-back vectors of each ``RankOneCubes``
    kept for the next call while the part's ``vectors`` is the same array.

    A random network's cubes have the same vectors (its hidden weights) at every position
    and only their coefficients change, so ``vectors @ chol``, an ``O(s d^2)`` product,
    is the same each time; reusing it changes nothing (the same product of the same
    arrays). The cache holds its source arrays, so their ids cannot be reused.
    """

    def __init__(self, chol: np.ndarray, size: int = 4) -> None:
        self.chol, self.size, self.kept = chol, size, []  # [(vectors, vectors @ chol)]

    def __call__(self, third) -> list:
        parts = third if isinstance(third, list | tuple) else [third]
        return [self._cubes(part) if isinstance(part, RankOneCubes) else
                pull_back([part], self.chol)[0] for part in parts]

    def _cubes(self, part: RankOneCubes) -> RankOneCubes:
        for vectors, pulled in self.kept:
            if vectors is part.vectors:
                return part._replace(vectors=pulled)
        pulled = part.pulled_back(self.chol).vectors
        self.kept = [(part.vectors, pulled), *self.kept[: self.size - 1]]
        return part._replace(vectors=pulled)


def diagonal_field(field: Field3) -> Field3:
    """``field`` with its Hessian's diagonal as the metric's source: ``G = diag(f(H_kk))``.

    The cheaper form rns-hmc used on the elliptic PDE (§5.2): no eigendecomposition, and a
    metric that ignores the off-diagonal curvature. Any smooth positive-definite metric keeps
    Riemannian HMC exact for ``exp(-U)``; ``geometry`` takes a 1-d Hessian as this form.
    """

    def diagonal(q: np.ndarray):
        value, grad, hessian, third = field(q)
        return value, grad, np.diag(hessian).copy(), [diagonal_derivative(third)]

    return diagonal


def in_frame(field: Field3, frame: Whitening | None, diagonal: bool = False) -> Field3:
    """The field the moves run on: in the frame's coordinates (``framed``; none: the
    parameters'), with the diagonal of the Hessian there as metric source if ``diagonal``."""
    if frame is not None:
        field = framed(field, frame)
    return diagonal_field(field) if diagonal else field


class Geometry(NamedTuple):
    """The field and its SoftAbs metric at one position."""

    q: np.ndarray
    potential: float
    grad: np.ndarray
    eigvecs: np.ndarray  # Q: the Hessian's eigenvectors (columns)
    metric_eigvals: np.ndarray  # f(lam): the metric's eigenvalues
    divided: np.ndarray  # J: (f_k - f_l) / (lam_k - lam_l), f'(lam_k) on the diagonal
    third: list  # the third derivatives' parts, rotated to the eigenbasis
    grad_phi: np.ndarray  # d/dq [U + 1/2 log det G]

    @property
    def finite(self) -> bool:
        return bool(math.isfinite(self.potential) and np.isfinite(self.grad_phi).all())


def geometry(q: np.ndarray, field: Field3, alpha: float) -> Geometry:
    """Evaluate ``field`` at ``q`` and build the SoftAbs metric and its derivatives.

    ``dG/dq_i = Q (J o M_i) Q^T`` with ``M_i = Q^T (dH/dq_i) Q`` (Betancourt 2013, eq. 22),
    so ``tr(G^-1 dG/dq_i) = sum_k f'(lam_k) / f(lam_k) (M_i)_kk``.
    """
    potential, grad, hessian, third = field(q)
    if np.ndim(hessian) == 1:  # diagonal_field: G = diag(f(H_kk)), dG = diag(f' dH_kk)
        lam, vecs = np.asarray(hessian, dtype=np.float64), np.eye(np.size(hessian))
        f, df = softabs(lam, alpha)
        divided = np.diag(df)
    else:
        lam, vecs = np.linalg.eigh(0.5 * (hessian + hessian.T))
        f, df = softabs(lam, alpha)
        divided = _divided_differences(lam, f, df)
    parts = rotate(third, vecs)
    ratio = df / f
    trace = np.zeros_like(lam)
    for part in parts:
        trace = trace + part.trace(ratio)
    grad = np.asarray(grad)
    return Geometry(np.asarray(q, dtype=np.float64), float(potential), grad,
                    vecs, f, divided, parts, grad + 0.5 * trace)


def _divided_differences(lam: np.ndarray, f: np.ndarray, df: np.ndarray) -> np.ndarray:
    """``J[k, l] = (f_k - f_l) / (lam_k - lam_l)``, ``(f'_k + f'_l) / 2`` where the
    eigenvalues are equal to ``1e-10`` (relative), the diagonal among them."""
    gap = np.subtract.outer(lam, lam)
    n = lam.size
    if n > 1 and (lam[1:] - lam[:-1]).min() > 1e-10 * max(1.0, -lam[0], lam[-1]):
        # eigh's eigenvalues ascend: no adjacent pair close, so only the diagonal is
        # (a NaN fails the test). (f'_k + f'_k) / 2 = f'_k exactly.
        gap.flat[:: n + 1] = 1.0
        divided = np.subtract.outer(f, f)
        divided /= gap
        divided.flat[:: n + 1] = df
        return divided
    with np.errstate(divide="ignore", invalid="ignore"):  # (a non-finite eigenvalue)
        close = np.abs(gap) <= 1e-10 * np.maximum(1.0, np.abs(lam)[:, None])
        np.copyto(gap, 1.0, where=close)
        divided = (f[:, None] - f[None, :]) / gap
        np.copyto(divided, 0.5 * (df[:, None] + df[None, :]), where=close)
    return divided


def tempered3(field: Field3, temperature: float) -> Field3:
    """``U~ / T`` and its derivatives (the coverage mechanism's tempering)."""
    if temperature == 1.0:
        return field
    cool = 1.0 / temperature

    def scaled(q: np.ndarray):
        value, grad, hessian, third = field(q)
        parts = third if isinstance(third, list | tuple) else [third]
        return (cool * value, cool * grad, cool * hessian,
                [part * cool if isinstance(part, np.ndarray) else part.scaled(cool)
                 for part in parts])

    return scaled
