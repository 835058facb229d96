"""Polynomial heteroscedastic Gaussian regressions: the coordinates of ``TriangularMap``.

``y ~ N(m(x), s(x)^2)`` with ``m`` a polynomial of degree 0-2 and ``log s`` one of degree 0-1
in ``x``, fitted by penalised maximum likelihood; their features and derivatives, and the
held-out log-likelihood that chooses a degree (``triangular_map.py``).
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["LOG_SCALE_CLIP", "LOG_SCALE_MARGIN", "feature_derivatives", "features", "fit_regression", "held_out", "held_out_loglik",
           "loglik", "mean_terms", "saturate", "scale_terms"]

#: Log-scales this far (nats) beyond the range the states reach saturate smoothly: a
#: linear log-scale fitted on a funnel's states would otherwise send ``s`` to 0 or to
#: overflow far outside them, where the map has no data to say what the scale is.
LOG_SCALE_MARGIN = 1.0
#: Log-scales are clipped here inside the fit's objective (overflow guard only).
LOG_SCALE_CLIP = 30.0


def mean_terms(k: int, degree: int, cross: bool = True) -> list[tuple[int, ...]]:
    """Monomials of the conditional mean: (), (j,), (i, j) up to ``degree`` in k inputs
    (``cross=False``: the squares (j, j) only)."""
    terms = [()]
    if degree >= 1:
        terms += [(j,) for j in range(k)]
    if degree >= 2:
        terms += (list(itertools.combinations_with_replacement(range(k), 2)) if cross
                  else [(j, j) for j in range(k)])
    return terms


def scale_terms(k: int, degree: int) -> list[tuple[int, ...]]:
    """Monomials of the log-scale: constant, and linear from degree 1 on."""
    return mean_terms(k, min(degree, 1))


def features(inputs: np.ndarray, terms: list[tuple[int, ...]]) -> np.ndarray:
    out = np.ones((inputs.shape[0], len(terms)))
    for f, term in enumerate(terms):
        for j in term:
            out[:, f] *= inputs[:, j]
    return out


def feature_derivatives(inputs: np.ndarray, terms: list[tuple[int, ...]]) -> np.ndarray:
    """``d feature_f / d input_j``, shape (n, k, n_terms)."""
    n, k = inputs.shape
    out = np.zeros((n, k, len(terms)))
    for f, term in enumerate(terms):
        if len(term) == 1:
            out[:, term[0], f] = 1.0
        elif len(term) == 2:
            a, b = term
            out[:, a, f] += inputs[:, b]
            out[:, b, f] += inputs[:, a]
    return out


def saturate(eta: np.ndarray, low: float, high: float) -> tuple[np.ndarray, np.ndarray]:
    """``eta`` inside ``[low, high]``, bent smoothly (C2) to at most ``LOG_SCALE_MARGIN``
    beyond it; and its derivative."""
    width = LOG_SCALE_MARGIN
    above, below = eta > high, eta < low
    out, slope = eta.copy(), np.ones_like(eta)
    t = np.tanh((eta[above] - high) / width)
    out[above], slope[above] = high + width * t, 1.0 - t**2
    t = np.tanh((eta[below] - low) / width)
    out[below], slope[below] = low + width * t, 1.0 - t**2
    return out, slope


# ---------------------------------------------------------------- the regression
def held_out(n: int, share: float, blocks: int = 10) -> np.ndarray:
    """A mask of ``share`` of ``n`` rows held out, as whole blocks spread over the rows."""
    held = np.zeros(n, dtype=bool)
    n_held = int(round(share * blocks))
    if n < 2 * blocks or n_held == 0:
        return held
    edges = np.linspace(0, n, blocks + 1).astype(int)
    for b in np.linspace(1, blocks - 1, n_held).round().astype(int):
        held[edges[b]:edges[b + 1]] = True
    return held


def fit_regression(inputs: np.ndarray, target: np.ndarray, degree: int,
                    ridge: float, cross: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Maximum likelihood of ``target ~ N(m(inputs), exp(eta(inputs))^2)``, penalised.

    Block coordinate descent on the negative log-likelihood per point, which is convex in
    each block: the mean's coefficients by weighted least squares at the current scales,
    then a damped Newton step for the log-scale's (its Hessian ``psi^T diag(2 r^2 / s^2)
    psi`` is positive semi-definite). Closed-form at degree 0. ``cross=False``: no
    products of two inputs in the mean (:func:`mean_terms`).
    """
    k = inputs.shape[1]
    phi = features(inputs, mean_terms(k, degree, cross))
    psi = features(inputs, scale_terms(k, degree))
    n, p_m = phi.shape
    penalty_m = np.r_[0.0, np.full(p_m - 1, ridge)]
    penalty_s = np.r_[0.0, np.full(psi.shape[1] - 1, ridge)]
    jitter = 1e-10 * np.eye(p_m)
    a = np.linalg.solve(phi.T @ phi / n + np.diag(penalty_m) + jitter, phi.T @ target / n)
    b = np.zeros(psi.shape[1])
    b[0] = np.log(max(np.std(target - phi @ a), 1e-8))
    if degree == 0:
        return a, b  # the Gaussian's maximum likelihood

    def objective(a, b):
        eta = np.clip(psi @ b, -LOG_SCALE_CLIP, LOG_SCALE_CLIP)
        r = target - phi @ a
        return np.mean(0.5 * r**2 * np.exp(-2.0 * eta) + eta) + 0.5 * (
            penalty_m @ a**2 + penalty_s @ b**2)

    value = objective(a, b)
    for _ in range(100):
        w = np.exp(-2.0 * np.clip(psi @ b, -LOG_SCALE_CLIP, LOG_SCALE_CLIP))
        # least squares, not solve: weights exp(-2 eta) up to e^60 make the normal
        # equations numerically singular where a log-scale runs to its clip
        a = np.linalg.lstsq((phi.T * w) @ phi / n + np.diag(penalty_m) + jitter,
                            phi.T @ (w * target) / n, rcond=None)[0]
        r2w = (target - phi @ a)**2 * w
        grad = psi.T @ (1.0 - r2w) / n + penalty_s * b
        hess = (psi.T * (2.0 * r2w)) @ psi / n + np.diag(penalty_s) + 1e-10 * np.eye(b.size)
        step = np.linalg.lstsq(hess, grad, rcond=None)[0]
        current = objective(a, b)
        for _ in range(30):  # halve the Newton step until the objective does not rise
            trial = b - step
            new = objective(a, trial)
            if new <= current:
                break
            step = 0.5 * step
        else:
            trial, new = b, current
        b = trial
        if value - new < 1e-10:
            break
        value = new
    return a, b


def loglik(inputs, target, a, b, degree, cross=True) -> np.ndarray:
    k = inputs.shape[1]
    mean = features(inputs, mean_terms(k, degree, cross)) @ a
    eta = np.clip(features(inputs, scale_terms(k, degree)) @ b, -LOG_SCALE_CLIP, LOG_SCALE_CLIP)
    return -0.5 * ((target - mean) * np.exp(-eta))**2 - eta - 0.5 * np.log(2 * np.pi)


def held_out_loglik(inputs, target, fit_rows, held, degree, ridge, cross=True) -> np.ndarray:
    """Per held-out row, the log-likelihood of a fit to the other rows."""
    a, b = fit_regression(inputs[fit_rows], target[fit_rows], degree, ridge, cross)
    return loglik(inputs[held], target[held], a, b, degree, cross)
