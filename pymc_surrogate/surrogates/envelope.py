"""A heavy-tailed envelope around a surrogate density: tails no lighter, wells no deeper.

Both corrections accept a move from ``q`` to ``q'`` with a factor ``w(q') / w(q)``,
``w = pi / pi~`` (posterior over surrogate density). Past its training data a surrogate
with a quadratic base is too light (``w`` large: the chain seldom gets there and, once
there, stays) and a flexible fit can have wells (``w`` tiny: trajectories head there and
are rejected, so the chain does not go that way). Both are exact in the limit; in a run of
a few thousand draws the tails of a heavier-tailed posterior come out wrong. On a
Student-t(3) (d = 3) the two-sided 2% tail came out at 0.011-0.016 on average over seeds;
with the exact potential in place of the surrogate, 0.020; wells 100 and more below the
true potential sat 12-20 units out along one axis of the final fit.

The density the trajectories run on is

    pi~(q)  proportional to  exp(-max(U_s, U_env - depth)) + exp(-U_env)

with ``U_env`` a multivariate Student-t(2) at the posterior's mean and scale:

* the second term bounds ``w`` in the tails wherever the posterior is no heavier than the
  Student-t (Hesterberg's defensive mixture); it holds ``weight`` of the surrogate's mass,
  but never tops the surrogate's density at the surrogate's own draws, so in the bulk the
  trajectories see the surrogate;
* the floor ``U_env - depth`` (a soft maximum, past the radius of the surrogate's draws)
  fills wells: ``depth`` is as far as the surrogate falls below the envelope at its own
  draws, plus the well check's margin.
"""

from __future__ import annotations

import numpy as np
import scipy.stats
from scipy.special import gammaln, logsumexp

from pymc_surrogate.core.integrator import ValueAndGrad
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["TailEnvelope", "with_tail_envelope"]


class TailEnvelope:
    """Potential ``offset + (nu + d) / 2 log(1 + |z|^2 / nu)``, ``z = L^{-1} (q - mean)``
    (a Student-t's), with a wall beyond ``radius``.

    Parameters
    ----------
    scale : Whitening
        Location and scale (``cov = L L^T``) of the Student-t: the posterior's estimate.
    offset : float
        The potential at ``scale.mean``.
    nu : float
        Degrees of freedom: the envelope covers posteriors whose tails are no heavier.
    radius : float
        Beyond this radius in whitened coordinates, ``(|z| - radius)^2 / 2`` is added, as
        the surrogate's own trust wall: no trajectory runs to absurd values where the model
        may not even evaluate.
    reference_points, reference_potentials : ndarray
        A few of the surrogate's draws and its potentials there when ``offset`` was set.
    depth : float
        How far below the envelope the surrogate may go beyond ``floor_radius`` (whitened);
        further down is a spurious well.
    floor_radius : float
        Whitened radius inside which the surrogate is not floored.
    """

    def __init__(self, scale: Whitening, offset: float, nu: float, radius: float,
                 reference_points: np.ndarray, reference_potentials: np.ndarray,
                 depth: float, floor_radius: float):
        self.scale = scale
        self.offset = float(offset)
        self.nu = float(nu)
        self.radius = float(radius)
        self.reference_points = reference_points
        self.reference_potentials = reference_potentials
        self.depth = float(depth)
        self.floor_radius = float(floor_radius)
        self._exponent = 0.5 * (self.nu + scale.dim)
        self._inv_chol = scale.inverse_chol()

    @classmethod
    def fit(
        cls,
        scale: Whitening,
        samples: np.ndarray,
        potentials: np.ndarray,
        reach: np.ndarray,
        well_margin: float,
        weight: float = 0.05,
        nu: float = 2.0,
    ) -> TailEnvelope:
        """The envelope for a surrogate, given draws of its density.

        ``samples`` are draws of the surrogate density and ``potentials`` its potential
        there. The envelope holds ``weight`` of the surrogate's mass, by an importance-
        sampling estimate of the surrogate's normalising constant, but its density never
        exceeds the surrogate's at any of the draws: in the bulk the trajectories see the
        surrogate whatever the estimate's error. Past the draws' largest whitened radius
        the surrogate is floored at ``depth`` below the envelope: the largest gap at the
        draws plus ``well_margin``. The wall sits at twice the largest whitened radius of
        the points ``reach`` (the training data). Twenty of the draws are kept as
        references for the surrogate's level (see :meth:`level`).
        """
        samples, potentials = np.atleast_2d(samples), np.asarray(potentials, dtype=float)
        dim = scale.dim
        white = scale.to_white(samples)
        shape = 0.5 * (nu + dim) * np.log1p(np.sum(white**2, axis=1) / nu)
        offset = float(np.max(potentials - shape))  # equal to the surrogate at one draw
        log_z = _log_normalising_constant(samples, potentials)
        if np.isfinite(log_z):
            chol_diagonal = np.diag(scale.chol) if scale.dense else scale.chol
            log_norm = (gammaln(0.5 * (nu + dim)) - gammaln(0.5 * nu)
                        - 0.5 * dim * np.log(nu * np.pi) - np.sum(np.log(chol_diagonal)))
            offset = max(offset, -np.log(weight) - log_z - log_norm)
        radius = 2.0 * float(np.max(np.linalg.norm(scale.to_white(np.atleast_2d(reach)), axis=1)))
        # Only past the draws' radius: inside, the gap to the envelope varies with the
        # envelope's scale error by more than the margin (a d = 50, condition-1000
        # Gaussian's chain stalled with the floor applied everywhere).
        depth = float(np.max(offset + shape - potentials)) + well_margin
        floor_radius = float(np.sqrt(np.max(np.sum(white**2, axis=1))))
        kept = np.linspace(0, len(samples) - 1, min(20, len(samples))).astype(int)
        return cls(scale, offset, nu, radius, samples[kept], potentials[kept], depth,
                   floor_radius)

    def level(self, value_and_grad: ValueAndGrad) -> float:
        """How far the surrogate ``value_and_grad`` has moved since the envelope was set:
        the median change of its potential at the reference draws.

        In a compound step the other blocks' values, and in an adaptive surrogate the
        online weights, shift the surrogate's level, and a fixed envelope would then hold
        far more (or less) than its share of the mass. A median over draws, not the value at
        one point: anchored at its centre, the envelope moved with an online update near
        that point (PDE, AdaptiveSurrogateHMC, min ESS 123 where the median gives 1148).
        """
        changes = [value_and_grad(q)[0] - u
                   for q, u in zip(self.reference_points, self.reference_potentials)]
        level = float(np.median(changes)) if changes else 0.0
        return level if np.isfinite(level) else 0.0

    def _whiten(self, q: np.ndarray) -> tuple[np.ndarray, float]:
        z = self._inv_chol @ (q - self.scale.mean)
        return z, float(z @ z)

    def _value(self, r2: float) -> float:
        value = self.offset + self._exponent * np.log1p(r2 / self.nu)
        if r2 > self.radius**2:
            value += 0.5 * (np.sqrt(r2) - self.radius) ** 2
        return float(value)

    def _grad(self, z: np.ndarray, r2: float) -> np.ndarray:
        scale = 2.0 * self._exponent / (self.nu + r2)
        if r2 > self.radius**2:
            scale += 1.0 - self.radius / np.sqrt(r2)
        return self._inv_chol.T @ (scale * z)

    def value_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        z, r2 = self._whiten(q)
        return self._value(r2), self._grad(z, r2)


def _log_normalising_constant(samples: np.ndarray, potentials: np.ndarray) -> float:
    """``log Z`` of ``exp(-U)`` from its draws: ``E[g(x) exp(U(x))] = 1 / Z`` for a density
    ``g``, here a Gaussian fitted to the draws with its covariance shrunk by
    ``_REFERENCE_SHRINK`` so that ``g exp(U)`` stays bounded where the draws thin out (with
    the posterior-scale Gaussian as reference and no cap, the envelope took over the bulk of
    the d = 20 PDE posterior and the chain stalled). ``-inf`` when the draws are
    degenerate."""
    try:
        reference = scipy.stats.multivariate_normal(
            samples.mean(axis=0), _REFERENCE_SHRINK * np.cov(samples, rowvar=False)
        )
    except (np.linalg.LinAlgError, ValueError):
        return -np.inf
    log_ratio = reference.logpdf(samples).reshape(-1) + potentials
    return -float(logsumexp(log_ratio) - np.log(len(potentials)))


_REFERENCE_SHRINK = 0.8

# Where the surrogate lies this far below the envelope, the envelope's share of the mixture
# is below e^-40 (1e-18): it is left out, value and gradient.
_NEGLIGIBLE = 40.0


def with_tail_envelope(
    value_and_grad: ValueAndGrad, envelope: TailEnvelope, level: float | None = None
) -> ValueAndGrad:
    """``q -> (U~, dU~/dq)`` of ``exp(-max(U_s, U_env - depth)) + exp(-U_env)``, the
    envelope at the surrogate's current ``level`` (:meth:`TailEnvelope.level` when None).

    The envelope's gradient is computed only where it counts: in the bulk a trajectory
    pays one whitening and one logarithm a step on top of the surrogate.
    """
    shift = envelope.level(value_and_grad) if level is None else level
    floor_r2 = envelope.floor_radius**2

    def mixed(q: np.ndarray) -> tuple[float, np.ndarray]:
        u, grad = value_and_grad(q)
        z, r2 = envelope._whiten(q)
        u_env = envelope._value(r2) + shift
        if not np.isfinite(u):
            return u_env, envelope._grad(z, r2)
        floored = u < u_env - envelope.depth + _NEGLIGIBLE and r2 > floor_r2
        if not floored and u < u_env - _NEGLIGIBLE:
            return u, grad
        grad_env = envelope._grad(z, r2)
        if floored:  # a soft max(u, u_env - depth): fills spurious wells
            floor = u_env - envelope.depth
            high = max(u, floor)
            a, b = np.exp(u - high), np.exp(floor - high)
            u, grad = high + float(np.log(a + b)), (a * grad + b * grad_env) / (a + b)
        low = min(u, u_env)
        a, b = np.exp(low - u), np.exp(low - u_env)
        return low - float(np.log(a + b)), (a * grad + b * grad_env) / (a + b)

    return mixed
