"""Riemannian manifold HMC on a field with Hessians and third derivatives.

The Hamiltonian ``U(q) + 1/2 log det G(q) + 1/2 p^T G(q)^-1 p`` with the SoftAbs metric
``G`` (``core/softabs.py``) is not separable; the generalised leapfrog (Girolami &
Calderhead 2011, eq. 16-18) integrates it with two implicit half-steps solved by Newton's
method. A step whose implicit equation does not converge, or a trajectory that does not
retrace itself when run back from its end with the momentum reversed, is a divergence: it
is never accepted, so the kernel stays reversible. On a surrogate none of it costs a model
evaluation (rns-hmc §3.4, RNS-RMHMC); the true logp corrects each transition.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_surrogate.core.jitter import jittered_trajectory
from pymc_surrogate.core.metropolis import metropolis_accept
from pymc_surrogate.core.softabs import Field3, Geometry, geometry, in_frame
from pymc_surrogate.core.transitions import correct_surrogate_move
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = [
    "RiemannianMove",
    "hamiltonian",
    "leapfrog_step",
    "riemannian_move",
    "riemannian_surrogate_transition",
    "sample_momentum",
]


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
