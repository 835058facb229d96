"""Riemannian manifold HMC on a field with Hessians and third derivatives.

The metric is SoftAbs (Betancourt 2013, "A general metric for Riemannian manifold
Hamiltonian Monte Carlo"): the Hessian ``H = Q diag(lam) Q^T`` of the potential with its
eigenvalues mapped to ``f(lam) = lam coth(alpha lam)``, positive definite where ``U`` is not
convex, ``|lam|`` for large ``alpha |lam|`` and ``1 / alpha`` near zero. The Hamiltonian
``U(q) + 1/2 log det G(q) + 1/2 p^T G(q)^-1 p`` is not separable; the generalised
leapfrog (Girolami & Calderhead 2011, eq. 16-18) integrates it with two implicit
half-steps solved by Newton's method. A step whose implicit equation does not converge,
or a trajectory that does not retrace itself when run back from its end with the
momentum reversed, is a divergence: it is never accepted, so the kernel stays reversible.

SoftAbs is not scale-free: its floor ``1 / alpha`` is a curvature in the coordinates' units,
so a direction of sd 30 (curvature 1e-3) gets a metric 1000 times too stiff. The
transition therefore runs in a frame ``q = m + L z`` (``framed``), the chain's whitened
coordinates, where the posterior has unit scale. The map is constant and linear: the
density in ``z`` is proportional to the one in ``q``, and the kernel stays exact.

A ``field`` here is ``q -> (U, dU/dq, d2U/dq2, third)``: the third derivatives as a dense
``(d, d, d)`` array or a list of structured parts (``surrogates/third_derivatives.py``)
whose contractions cost ``O(s d^2)`` for ``s`` terms instead of ``O(d^4)``. On a surrogate
it costs no model evaluation (rns-hmc §3.4, RNS-RMHMC).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from pymc_surrogate.core.jitter import jittered_trajectory
from pymc_surrogate.core.metropolis import metropolis_accept
from pymc_surrogate.core.transitions import correct_surrogate_move
from pymc_surrogate.surrogates.third_derivatives import (
    RankOneCubes,
    diagonal_derivative,
    pull_back,
    rotate,
)
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = [
    "Field3",
    "Geometry",
    "RiemannianMove",
    "diagonal_field",
    "framed",
    "geometry",
    "in_frame",
    "hamiltonian",
    "leapfrog_step",
    "riemannian_move",
    "riemannian_surrogate_transition",
    "tempered3",
    "sample_momentum",
    "softabs",
]

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


def _whitened(geom: Geometry, p: np.ndarray) -> np.ndarray:
    """``u = diag(1/f) Q^T p``: ``G^-1 p = Q u``."""
    return (geom.eigvecs.T @ p) / geom.metric_eigvals


def _velocity(geom: Geometry, p: np.ndarray) -> np.ndarray:
    return geom.eigvecs @ _whitened(geom, p)


def _grad_kinetic_quadratic(geom: Geometry, p: np.ndarray) -> np.ndarray:
    """``d/dq_i (1/2 p^T G^-1 p) = -1/2 u^T (J o M_i) u``."""
    u = _whitened(geom, p)
    kinetic = None
    for part in geom.third:
        term = part.kinetic(geom.divided, u)
        kinetic = term if kinetic is None else kinetic + term
    return -0.5 * (np.zeros(u.size) if kinetic is None else kinetic)


def _rows(geom: Geometry, u: np.ndarray) -> np.ndarray:
    """``W[i] = (J o M_i) u``: ``u^T W[i]`` is ``2 d/dq_i`` of the kinetic term's
    negative, and ``W`` is in both implicit half-steps' Newton Jacobians."""
    rows = None
    for part in geom.third:
        term = part.rows(geom.divided, u)
        rows = term if rows is None else rows + term
    return np.zeros((u.size, u.size)) if rows is None else rows


def _grad_q(geom: Geometry, p: np.ndarray) -> np.ndarray:
    return geom.grad_phi + _grad_kinetic_quadratic(geom, p)


def hamiltonian(geom: Geometry, p: np.ndarray) -> float:
    """``U + 1/2 log det G + 1/2 p^T G^-1 p`` (the constant ``d/2 log 2 pi`` left out)."""
    rotated = geom.eigvecs.T @ p
    return float(geom.potential + 0.5 * np.sum(np.log(geom.metric_eigvals))
                 + 0.5 * np.sum(rotated**2 / geom.metric_eigvals))


def sample_momentum(geom: Geometry, rng: np.random.Generator) -> np.ndarray:
    """``p ~ N(0, G(q))``."""
    return geom.eigvecs @ (np.sqrt(geom.metric_eigvals) * rng.standard_normal(geom.q.shape[0]))


class LeapfrogStep(NamedTuple):
    geom: Geometry
    p: np.ndarray
    iterations: int  # Newton iterations of both implicit half-steps
    converged: bool


def leapfrog_step(geom: Geometry, p: np.ndarray, step_size: float, field: Field3,
                  alpha: float, tol: float = 1e-8, max_iter: int = 50,
                  final_momentum: bool = True) -> LeapfrogStep:
    """One generalised leapfrog step (Girolami & Calderhead 2011, eq. 16-18).

    ``p_half = p - eps/2 dH/dq(q, p_half)`` and ``q' = q + eps/2 (G(q)^-1 +
    G(q')^-1) p_half``, each solved by Newton's method to ``tol`` (the last update's
    max-norm, relative to the iterate's scale), then ``p' = p_half - eps/2 dH/dq(q',
    p_half)``. Without ``final_momentum`` the last half-step is left out and ``p`` is
    ``p_half`` (for a caller that needs only where the step ends).
    """
    with np.errstate(over="ignore", invalid="ignore"):  # a blow-up is a non-convergence
        return _leapfrog_step(geom, p, step_size, field, alpha, tol, max_iter,
                              final_momentum)


def _leapfrog_step(geom, p, step_size, field, alpha, tol, max_iter,
                   final_momentum=True) -> LeapfrogStep:
    """The two implicit half-steps by Newton's method from the explicit guesses.

    Plain fixed-point iteration failed on a fitted network's curvature: the p-equation's
    map oscillated without contracting (steps of 0.7, 0.71, 0.72, ...) in 19 and the
    q-equation's in 29 of 300 steps at step size 0.3 (2-d funnel, 500 softplus nodes).
    Both Jacobians come from the same rows ``W[i] = (J o M_i) u``:
    ``I - eps/2 W D Q^T`` for ``p`` and ``I + eps/2 Q D W^T`` (at ``q'``) for ``q``.
    """
    half = 0.5 * step_size
    eye = np.eye(p.size)
    eigvecs, metric_eigvals = geom.eigvecs, geom.metric_eigvals
    # residual p_half - p + eps/2 (grad_phi - 1/2 W u), Jacobian I - eps/2 W D Q^T
    shift = p - half * geom.grad_phi
    half_q_d = (half * eigvecs / metric_eigvals).T  # eps/2 (Q D)^T, D = diag(1 / f)

    def momentum_equation(p_half):
        u = (eigvecs.T @ p_half) / metric_eigvals
        rows = _rows(geom, u)
        return p_half - shift - (0.5 * half) * (rows @ u), eye - rows @ half_q_d

    p_half, iterations, converged = _newton(p - half * _grad_q(geom, p), momentum_equation,
                                            tol, max_iter)
    if not converged:
        return LeapfrogStep(geom, p_half, iterations, False)
    start_velocity = _velocity(geom, p_half)

    # residual q' - q - eps/2 (v + Q' u'), Jacobian I + eps/2 Q' D' W'^T
    start = geom.q + half * start_velocity

    def position_equation(q_new):
        end = geometry(q_new, field, alpha)
        if not end.finite:
            return None
        vecs, f = end.eigvecs, end.metric_eigvals
        u = (vecs.T @ p_half) / f
        return q_new - start - half * (vecs @ u), eye + (half * vecs / f) @ _rows(end, u).T

    q_new, more, converged = _newton(geom.q + step_size * start_velocity, position_equation,
                                     tol, max_iter)
    iterations += more
    end = geometry(q_new, field, alpha) if converged else geom
    if not (converged and end.finite):
        return LeapfrogStep(geom, p_half, iterations, False)
    if not final_momentum:
        return LeapfrogStep(end, p_half, iterations, True)
    return LeapfrogStep(end, p_half - half * _grad_q(end, p_half), iterations, True)


def _newton(x: np.ndarray, system, tol: float, max_iter: int) -> tuple[np.ndarray, int, bool]:
    """Solve ``residual(x) = 0`` by Newton's method; ``system(x)`` gives ``(residual,
    jacobian)``, or None where it cannot be evaluated. Converged when the last update's
    max-norm, relative to the iterate's scale, is below ``tol``."""
    solve, isfinite, absolute = np.linalg.solve, np.isfinite, np.abs
    for iteration in range(1, max_iter + 1):
        equation = system(x)
        if equation is None:
            return x, iteration, False
        try:
            update = solve(equation[1], equation[0])
        except np.linalg.LinAlgError:
            return x, iteration, False
        x = x - update
        if not isfinite(x).all():
            return x, iteration, False
        if absolute(update).max() / (1.0 + absolute(x).max()) < tol:
            return x, iteration, True
    return x, max_iter, False


class RiemannianMove(NamedTuple):
    """One Metropolis-adjusted Riemannian HMC move on a field."""

    geom: Geometry  # where the chain is after the move
    accepted: bool
    accept_prob: float
    diverged: bool
    energy_error: float
    n_steps: int
    fixed_point_iterations: float  # per leapfrog step
    implicit_failures: int  # steps whose implicit equation did not converge (0 or 1)
    irreversible: bool  # the trajectory did not retrace itself


def riemannian_move(start: Geometry, field: Field3, alpha: float, step_size: float,
                    n_steps: int, rng: np.random.Generator, tol: float = 1e-8,
                    max_iter: int = 50, max_energy_error: float = 1000.0,
                    reversibility_tol: float = 1e-5) -> RiemannianMove:
    """Riemannian HMC on ``field``: exact for ``exp(-U)`` of that field.

    A fresh momentum from ``N(0, G(q))``, ``n_steps`` generalised leapfrog steps, and the
    Metropolis test on the Hamiltonian. Diverging (rejected without a test): an implicit
    half-step that does not converge, an energy error above ``max_energy_error``, or a
    trajectory that, run back from its end with the momentum reversed, misses its start
    by more than ``reversibility_tol`` (relative, max-norm) -- an implicit integrator is
    reversible only where its fixed points are unique.
    """
    p0 = sample_momentum(start, rng)
    h0 = hamiltonian(start, p0)
    geom, p, iterations = start, p0, 0
    for step in range(n_steps):
        result = leapfrog_step(geom, p, step_size, field, alpha, tol, max_iter)
        iterations += result.iterations
        geom, p = result.geom, result.p
        if not result.converged:
            return _diverged(start, step + 1, iterations, implicit=True)
    error = hamiltonian(geom, p) - h0
    if not np.isfinite(error) or error > max_energy_error:
        return _diverged(start, n_steps, iterations, implicit=False, error=error)
    back, p_back = geom, -p
    for back_step in range(n_steps):  # where it ends is all the check needs of the last
        result = leapfrog_step(back, p_back, step_size, field, alpha, tol, max_iter,
                               final_momentum=back_step < n_steps - 1)
        back, p_back = result.geom, result.p
        if not result.converged:
            break
    scale = 1.0 + np.max(np.abs(start.q))
    if not (result.converged and np.max(np.abs(back.q - start.q)) <= reversibility_tol * scale):
        return RiemannianMove(start, False, 0.0, True, error, n_steps,
                              iterations / n_steps, 0, True)
    accepted, prob = metropolis_accept(-error, rng)
    return RiemannianMove(geom if accepted else start, accepted, prob, False, error, n_steps,
                          iterations / n_steps, 0, False)


def _diverged(start: Geometry, n_steps: int, iterations: int, implicit: bool,
              error: float = np.inf) -> RiemannianMove:
    return RiemannianMove(start, False, 0.0, True, float(error) if np.isfinite(error) else np.inf,
                          n_steps, iterations / max(n_steps, 1), int(implicit), False)


class RiemannianTransition(NamedTuple):
    """A corrected Riemannian surrogate transition: what it did, and its implicit steps."""

    info: object  # core.types.TransitionInfo
    fixed_point_iterations: float  # per leapfrog step, over the inner moves
    implicit_failures: int  # inner moves ended by an implicit step that did not converge


def riemannian_surrogate_transition(
    current, evaluate, field: Field3, alpha: float, step_size: float, path_length: float,
    n_inner: int, rng: np.random.Generator, max_energy_error: float = 1000.0,
    tol: float = 1e-8, max_iter: int = 50, max_steps: int = 256,
    frame: Whitening | None = None, diagonal: bool = False,
) -> RiemannianTransition:
    """RNS-RMHMC's surrogate transition: ``n_inner`` Riemannian HMC moves exact for the
    surrogate ``exp(-U~)`` (jittered step and length, as the Euclidean kernel's), then one
    Metropolis-Hastings test with the true potential that corrects the surrogate's error
    (``core.transitions.surrogate_transition``'s, with a different inner kernel).

    With a ``frame`` the moves run in its whitened coordinates (``framed``): SoftAbs's
    floor, the step size and the implicit steps' tolerances are then in units of the
    frame's scale instead of the parameters'. ``current.q`` and ``evaluate`` stay in the
    parameters.
    With ``diagonal`` the metric is SoftAbs of the Hessian's diagonal there
    (``diagonal_field``).
    """
    field = in_frame(field, frame, diagonal)
    start = geometry(current.q if frame is None else frame.to_white(current.q), field, alpha)
    geom, probs, n_steps, diverged, iterations, failures = start, [], 0, False, 0.0, 0
    error, eps = 0.0, step_size
    for _ in range(n_inner):
        eps, steps = jittered_trajectory(step_size, path_length, rng, max_steps=max_steps,
                                         shortest=0.5)
        move = riemannian_move(geom, field, alpha, eps, steps, rng, tol, max_iter,
                               max_energy_error)
        geom, error = move.geom, move.energy_error
        probs.append(move.accept_prob)
        n_steps += move.n_steps
        diverged |= move.diverged
        iterations += move.fixed_point_iterations * move.n_steps
        failures += move.implicit_failures
    inner = dict(adapt_stat=float(np.mean(probs)), diverging=diverged, n_steps=n_steps,
                 surrogate_energy_error=error, step_size=eps)
    # The `energy` stat is the true potential alone (kinetic 0): the Riemannian kinetic
    # energy is the surrogate metric's, which the true model does not define.
    proposal = None if geom is start else geom.q if frame is None else frame.from_white(geom.q)
    info = correct_surrogate_move(current, evaluate, proposal, start.potential, geom.potential,
                                  0.0, inner, rng)
    return RiemannianTransition(info, iterations / max(n_steps, 1), failures)


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
