"""Leapfrog integration on an arbitrary gradient field."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

import numpy as np

__all__ = ["Metric", "TrajectoryEnd", "leapfrog"]

ValueAndGrad = Callable[[np.ndarray], tuple[float, np.ndarray]]


class Metric(Protocol):
    """The kinetic energy; PyMC's ``QuadPotential`` classes satisfy it."""

    def velocity(self, p: np.ndarray, out: np.ndarray | None = None) -> np.ndarray: ...

    def energy(self, p: np.ndarray, velocity: np.ndarray | None = None) -> float: ...

    def random(self) -> np.ndarray: ...


class TrajectoryEnd(NamedTuple):
    """The end of a leapfrog trajectory on the field that drove it.

    ``energy_range`` is max minus min of the field's Hamiltonian over all points of the
    path. It does not depend on the direction the path is traversed in, so rejecting
    on it keeps the transition reversible (and the chain exact).
    """

    q: np.ndarray
    p: np.ndarray
    potential: float
    grad: np.ndarray
    n_steps: int
    energy_range: float
    finite: bool


def leapfrog(
    q: np.ndarray,
    p: np.ndarray,
    potential: float,
    grad: np.ndarray,
    value_and_grad: ValueAndGrad,
    metric: Metric,
    step_size: float,
    n_steps: int,
    max_energy_range: float = np.inf,
) -> TrajectoryEnd:
    """Integrate Hamilton's equations for ``H = U(q) + K(p)`` with the leapfrog scheme.

    The force comes from ``value_and_grad`` (the true model or any surrogate): leapfrog
    with any position-dependent force is reversible and volume preserving, which is what
    makes an exact Metropolis correction possible (rns-hmc App. A).

    Parameters
    ----------
    q, p : ndarray of shape (d,)
        Start position and momentum.
    potential, grad : float, ndarray
        ``U(q)`` and its gradient at the start, from the same field.
    value_and_grad : callable
        ``q -> (U(q), dU/dq)``.
    metric : Metric
        Kinetic energy (mass matrix).
    step_size : float
    n_steps : int
    max_energy_range : float
        Stop early once the field's Hamiltonian has varied by more than this along the
        path (a divergence); the end is then flagged ``finite=False``.

    Returns
    -------
    TrajectoryEnd
    """
    h_low = h_high = potential + metric.energy(p)
    p = p - 0.5 * step_size * grad
    for step in range(1, n_steps + 1):
        q = q + step_size * metric.velocity(p)
        potential, grad = value_and_grad(q)
        half = -0.5 * step_size * grad
        if step < n_steps:
            kinetic = metric.energy(p + half)
            p = p + 2.0 * half
        else:
            p = p + half
            kinetic = metric.energy(p)
        h = potential + kinetic
        if not np.isfinite(h) or not np.all(np.isfinite(grad)):
            return TrajectoryEnd(q, p, potential, grad, step, np.inf, False)
        h_low, h_high = min(h_low, h), max(h_high, h)
        if h_high - h_low > max_energy_range:
            return TrajectoryEnd(q, p, potential, grad, step, h_high - h_low, False)
    return TrajectoryEnd(q, p, potential, grad, n_steps, h_high - h_low, True)
