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
                 reference_points: np.ndarray | None = None,
                 reference_potentials: np.ndarray | None = None,
                 depth: float = np.inf, floor_radius: float = 0.0):
        self.scale = scale
        self.offset = float(offset)
        self.nu = float(nu)
        self.radius = float(radius)
        self.reference_points = np.zeros((0, scale.mean.shape[0])) if reference_points is None else reference_points
        self.reference_potentials = np.zeros(0) if reference_potentials is None else reference_potentials
        self.depth = float(depth)
        self.floor_radius = float(floor_radius)
        self._exponent = 0.5 * (self.nu + scale.mean.shape[0])
        self._inv_chol = scale.inverse_chol()

    @classmethod
    def fit(
        cls,
        scale: Whitening,
        samples: np.ndarray,
        potentials: np.ndarray,
        reach: np.ndarray,
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
        draws plus the well check's margin. The wall sits at twice the largest whitened
        radius of the points ``reach`` (the training data). Twenty of the draws are kept as
        references for the surrogate's level (see :func:`with_tail_envelope`).
        """
        samples, potentials = np.atleast_2d(samples), np.asarray(potentials, dtype=float)
        unit = cls(scale, 0.0, nu, radius=np.inf)
        shape = np.array([unit.value_and_grad(q)[0] for q in samples])
        offset = float(np.max(potentials - shape))  # equal to the surrogate at one draw
        log_z = _log_normalising_constant(samples, potentials)
        if np.isfinite(log_z):
            dim = samples.shape[1]
            log_norm = (gammaln(unit._exponent) - gammaln(0.5 * nu)
                        - 0.5 * dim * np.log(nu * np.pi)
                        + np.linalg.slogdet(unit._inv_chol)[1])
            offset = max(offset, -np.log(weight) - log_z - log_norm)
        radius = 2.0 * float(np.max(np.linalg.norm(scale.to_white(np.atleast_2d(reach)), axis=1)))
        # Only past the draws' radius: inside, the gap to the envelope varies with the
        # envelope's scale error by more than the margin (a d = 50, condition-1000
        # Gaussian's chain stalled with the floor applied everywhere).
        depth = float(np.max(offset + shape - potentials)) + 5.0 + 2.0 * np.sqrt(samples.shape[1])
        reach_of_draws = float(np.max(np.linalg.norm(scale.to_white(samples), axis=1)))
        kept = np.linspace(0, len(samples) - 1, min(20, len(samples))).astype(int)
        return cls(scale, offset, nu, radius, samples[kept], potentials[kept], depth,
                   reach_of_draws)

    def beyond_floor_radius(self, q: np.ndarray) -> bool:
        z = self._inv_chol @ (q - self.scale.mean)
        return bool(z @ z > self.floor_radius**2)

    def value_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        z = self._inv_chol @ (q - self.scale.mean)
        r2 = float(z @ z)
        value = self.offset + self._exponent * np.log1p(r2 / self.nu)
        grad_z = (2.0 * self._exponent / (self.nu + r2)) * z
        r = np.sqrt(r2)
        if r > self.radius:
            excess = r - self.radius
            value += 0.5 * excess**2
            grad_z = grad_z + (excess / r) * z
        return float(value), self._inv_chol.T @ grad_z


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


def with_tail_envelope(value_and_grad: ValueAndGrad, envelope: TailEnvelope) -> ValueAndGrad:
    """``q -> (U~, dU~/dq)`` of the mixture ``exp(-U_s) + exp(-U_env)``.

    The envelope moves up and down with the surrogate's level: the median change of its
    potential at the reference draws. In a compound step the other blocks' values, and in
    an adaptive surrogate the online weights, shift that level, and a fixed envelope would
    then hold far more (or less) than its share of the mass. (Anchored at one point, the
    envelope's centre, it did: on the PDE, AdaptiveSurrogateHMC's min ESS fell to 123 at a
    seed where the median gives 1232.)
    """
    changes = [value_and_grad(q)[0] - u for q, u in
               zip(envelope.reference_points, envelope.reference_potentials)]
    level = float(np.median(changes)) if changes else 0.0
    shift = level if np.isfinite(level) else 0.0

    def mixed(q: np.ndarray) -> tuple[float, np.ndarray]:
        u, grad = value_and_grad(q)
        u_env, grad_env = envelope.value_and_grad(q)
        u_env += shift
        if not np.isfinite(u):
            return u_env, grad_env
        floor = u_env - envelope.depth
        if u < floor + 40.0 and envelope.beyond_floor_radius(q):  # soft max(u, floor)
            high = max(u, floor)
            a, b = np.exp(u - high), np.exp(floor - high)
            u, grad = high + float(np.log(a + b)), (a * grad + b * grad_env) / (a + b)
        low = min(u, u_env)
        a, b = np.exp(low - u), np.exp(low - u_env)
        total = a + b
        return low - float(np.log(total)), (a * grad + b * grad_env) / total

    return mixed
