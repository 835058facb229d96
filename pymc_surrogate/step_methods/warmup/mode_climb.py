"""The climb toward the mode that starts a gradient model's tuning, and its Laplace probe.

Pure functions of the model's evaluations: ``evaluate(q)`` is a counted model evaluation
with its gradient, kept as training data; ``diagnose(q)`` one that is counted but not kept
(a diagnostic Hessian's gradients).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.optimize

from pymc_surrogate.core.types import ChainPoint
from pymc_surrogate.step_methods.tuning import Tuning
from pymc_surrogate.surrogates.laplace import Gaussian, laplace_at

__all__ = ["climb_to_mode", "unresolved_curvature_message"]

#: Nats of Laplace mass by which an earlier iterate of the start-of-tune climb must beat a
#: later one to replace it: a factor e in mass, far below a neck's loss (eight schools: 37
#: nats) and above the wobble of a converged climb's last iterates (logistic d = 20: 0.01).
MASS_MARGIN = 1.0

Evaluate = Callable[[np.ndarray], ChainPoint]
#: A point -> the rounding error of each coordinate of its finite-difference gradient.
Rounding = Callable[[ChainPoint], np.ndarray]

#: A finite-difference Hessian's column is resolved when its diagonal entry moved the
#: gradient by this many times the gradient's rounding (a 3% error) ...
RESOLVED = 30.0
#: ... else it is differenced again with steps this many times longer, at most this many
#: times (steps up to 1e-6 x 1e6: the coordinate's scale itself).
STEP_GROWTH, MAX_GROWTHS = 100.0, 3


def climb_to_mode(start: ChainPoint, evaluate: Evaluate, diagnose: Evaluate,
                  tuning: Tuning, scale: np.ndarray | None = None,
                  rounding: Rounding | None = None, unresolved: list | None = None
                  ) -> tuple[ChainPoint, Gaussian | None]:
    """A few L-BFGS iterations toward the mode before the first exploration step, kept
    only as far as they climb toward the posterior's mass; where tuning starts, and the
    Laplace probe there (None: none).

    Warm-up draws are discarded, so where tuning starts is free to choose. Starting
    in the typical set skips the long transient of HMC from a poor initial point (at a
    tiny step with a unit mass matrix), and every evaluation on the way is training
    data near the posterior. Bounded to ``mode_iterations``; on a posterior whose
    density is unbounded (a funnel) that bound did not keep the climb out of the neck
    (centred eight schools: log tau 1.61 to -13.55 in 32 iterations, where the chains
    then stayed), so ``_where_the_mass_is`` walks back along the climb's iterates.
    ``scale``: each coordinate's scale, to which the Hessian's difference steps are
    relative (None: 1); ``rounding``: the gradients' rounding where they are finite
    differences (see ``_hessian``), and then ``unresolved``, if given, receives the
    coordinates whose curvature the differences could not resolve (no probe then).
    """
    dim = start.q.size
    best = [start]
    seen = {start.q.tobytes(): start}

    def potential_and_grad(q):
        point = evaluate(q)
        seen[point.q.tobytes()] = point
        if np.isfinite(point.potential) and point.potential < best[0].potential:
            best[0] = point
        if not np.isfinite(point.potential):
            return 1e300, np.zeros_like(q)
        return point.potential, point.grad

    iterates = [start]

    def record(q):
        point = seen.get(np.asarray(q, dtype=np.float64).tobytes())
        if point is not None and np.isfinite(point.potential):
            iterates.append(point)

    scipy.optimize.minimize(
        potential_and_grad, start.q, jac=True, method="L-BFGS-B", callback=record,
        options={"maxiter": tuning.mode_iterations, "maxfun": 2 * tuning.mode_iterations},
    )
    if dim > tuning.max_hessian_dim:
        return best[0], None
    if iterates[-1] is not best[0]:
        iterates.append(best[0])
    hessian = _hessian(best[0], evaluate, scale, rounding)
    current, hessian = _where_the_mass_is(iterates, hessian, diagnose, scale, rounding)
    if unresolved is not None:
        unresolved.extend(int(i) for i in np.flatnonzero(np.isnan(np.diag(hessian))))
    return _newton_from_gradients(current, hessian, evaluate,
                                  tuning.newton_steps if current is best[0] else 0)


def _hessian(point: ChainPoint, evaluate: Evaluate, scale: np.ndarray | None = None,
             rounding: Rounding | None = None) -> np.ndarray:
    """``U``'s Hessian at ``point`` by forward differences of ``d`` gradients, steps of
    1e-6 times the larger of ``|q_i|`` and the coordinate's ``scale`` (None: 1).

    Gradients by central differences (``rounding``: their rounding error at a point, per
    coordinate) carry rounding of about ``eps |U| / h``: in a coordinate whose sd is 1e3,
    a step of 1e-6 moves the gradient by 1e-12, below it, and the curvature came out at
    any sign and size (VariationalHMC's sds 0.29-0.73 of the truth). With ``rounding``,
    a coordinate whose gradient moved by less than ``RESOLVED`` times it is differenced
    again at steps ``STEP_GROWTH`` times longer, at most ``MAX_GROWTHS`` times; a
    curvature still unresolved is NaN (no Laplace approximation, no walk-back there)."""
    step = 1e-6 * np.maximum(1.0 if scale is None else scale, np.abs(point.q))
    # (scipy squeezes the Jacobian of a 1-d gradient to shape (1,))
    hessian = scipy.optimize.approx_fprime(point.q, lambda q: evaluate(q).grad, step).reshape(
        point.q.size, point.q.size)
    if rounding is None:
        return hessian
    noise = rounding(point)
    for j in range(point.q.size):
        for _ in range(MAX_GROWTHS):
            if abs(hessian[j, j]) * step[j] >= RESOLVED * noise[j]:
                break
            step[j] *= STEP_GROWTH
            shifted = point.q.copy()
            shifted[j] += step[j]
            hessian[:, j] = (evaluate(shifted).grad - point.grad) / step[j]
        if not abs(hessian[j, j]) * step[j] >= RESOLVED * noise[j]:
            hessian[j, j] = np.nan
    return hessian


def _where_the_mass_is(iterates: list[ChainPoint], hessian: np.ndarray,
                       diagnose: Evaluate, scale: np.ndarray | None = None,
                       rounding: Rounding | None = None) -> tuple[ChainPoint, np.ndarray]:
    """The climb's iterate to start from, and ``U``'s Hessian there.

    The climb lowers ``U``; the typical set is where the mass is, and the mass near a
    point is, by Laplace's approximation, ``log m(q) = -U(q) - log|det H(q)| / 2``
    (up to a constant): on a Gaussian ``-U`` plus a constant, so the climb's end wins;
    where some coordinates are conditionally Gaussian given the others (a funnel,
    a centred hierarchy) exactly the log marginal density of the others, which falls
    in the neck as fast as ``-U`` rises there. Going back from the end, the iterate
    halfway to the start replaces the current one while it carries ``MASS_MARGIN``
    nats more: one diagnostic Hessian when the climb stands (centred eight schools:
    ``log m`` -41.0 at log tau -0.57, -78.4 at the end, log tau -13.55). An earlier
    iterate whose Hessian has a non-positive diagonal entry is no Laplace mass (``|det|``
    of a Hessian that rounding made indefinite can be any size) and never replaces it.

    Parameters
    ----------
    iterates : list of ChainPoint
        The climb's start, its iterates, and its end (the lowest potential) last.
    hessian : ndarray of shape (d, d)
        ``U``'s Hessian at the end.
    diagnose : callable
        The model's point with its gradient, counted but not kept.
    scale : ndarray of shape (d,), optional
    rounding : callable, optional
        The coordinates' scales for the Hessian's steps, and the finite-difference
        gradients' rounding (``_hessian``).

    Returns
    -------
    point : ChainPoint
        The end, or the earlier iterate with the most mass found.
    hessian : ndarray of shape (d, d)
        ``U``'s Hessian there.
    """
    index = len(iterates) - 1
    mass = _laplace_log_mass(iterates[index], hessian)
    while index > 0:
        earlier = index // 2
        earlier_hessian = _hessian(iterates[earlier], diagnose, scale, rounding)
        earlier_mass = _laplace_log_mass(iterates[earlier], earlier_hessian)
        # NaN (a singular or non-finite Hessian) fails the test: the later point stays
        if not (earlier_mass > mass + MASS_MARGIN and np.all(np.diag(earlier_hessian) > 0)):
            break
        index, mass, hessian = earlier, earlier_mass, earlier_hessian
    return iterates[index], hessian


def _newton_from_gradients(current: ChainPoint, hessian: np.ndarray, evaluate: Evaluate,
                           steps: int) -> tuple[ChainPoint, Gaussian | None]:
    """Newton steps with a finite-difference Hessian, and the Laplace probe that starts a
    dense exploration metric.

    L-BFGS stalls on a ridge: on a regression with an uncentred covariate
    (intercept-slope correlation -0.9999) its relative-decrease test stopped it 2.3
    posterior sds from the mode, and exact HMC with a diagonal mass matrix then crawls
    along the ridge at the step size of its narrowest direction (tune and draws, sd
    0.1 of the posterior's). The Hessian at the climb's end, ``d + 1`` gradient
    evaluations by forward differences (a regression on the climb's own gradients
    could not see the ridge's curvature under the log-scale's nonlinearity), gives
    the Newton steps (kept only while they lower the potential) and the covariance
    that starts a dense mass matrix adapting to the chain's states as PyMC's
    ``QuadPotentialFullAdapt`` does. ``steps`` is 0 when ``_where_the_mass_is`` went
    back from the climb's end: they would chase the density into the neck the climb was
    taken back from.
    """
    probe = step = laplace_at(current.q, current.grad, hessian)
    for _ in range(steps):
        if step is None:
            break
        candidate = evaluate(step.mean)
        if not candidate.potential < current.potential:
            break
        current = candidate
        step = laplace_at(current.q, current.grad, hessian)
    return current, probe


def _laplace_log_mass(point: ChainPoint, hessian: np.ndarray) -> float:
    """``-U - log|det H| / 2``: the log of Laplace's approximation to the mass near
    ``point`` (up to a constant); NaN when ``H`` is singular or not finite. ``|det|``:
    a saddle's negative curvatures still set its local width."""
    sign, logdet = np.linalg.slogdet(0.5 * (hessian + hessian.T))
    if sign == 0 or not np.isfinite(logdet):
        return np.nan
    return -point.potential - 0.5 * logdet


def unresolved_curvature_message(coordinates: list[int], names: list | None,
                                 logp: float) -> str:
    """The warning when finite differences left no usable curvature for ``coordinates``
    at the climb's end, where the logp is ``logp`` (``_hessian``)."""
    which = ", ".join(f"`{names[i]}`" if names and i < len(names) else f"coordinate {i}"
                      for i in coordinates)
    return (
        f"finite differences of the logp could not resolve its curvature in {which} "
        f"at the climb's end: even steps a million times the first change the gradient "
        f"by less than the differences' rounding (the logp is {logp:.3g} "
        "there, and its rounding is relative to that size). Parameters on very "
        "different scales, or a logp with a large constant, do this; the mode's "
        "Laplace approximation is set aside, and the draws of these coordinates may "
        "have the wrong spread. Give the model a gradient, priors on the parameters' "
        "own scales, or parameters rescaled to similar sizes."
    )
