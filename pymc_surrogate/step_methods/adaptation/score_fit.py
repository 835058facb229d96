"""``ScoreFit``: VariationalHMC's surrogate family, a score network with a Laplace term.

The network learns the model's gradients (vhmc §3.2-3.3), in batch refits and online, one
gradient at a time, until the stopping time (Algorithm 2); its Laplace regulariser (§3.4)
is a Gaussian at the mode, from the exploration's Newton probe or, where that failed, the
tuning states.
"""

from __future__ import annotations

import numpy as np
from pymc.stats.convergence import WarningType
from pymc.step_methods.state import dataclass_state

from pymc_surrogate.core.types import ChainPoint
from pymc_surrogate.step_methods.adaptation.surrogate_fit import (
    SurrogateFit,
    SurrogateFitState,
)
from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.surrogates.score_network import FULL_QUADRATIC_DIM, LaplaceTerm
from pymc_surrogate.surrogates.whitening import Whitening, robust_cholesky

__all__ = ["ScoreFit"]

#: Weight of the newest point in the running score error (about the last 20 points).
SCORE_ERROR_SMOOTHING = 0.05
#: Online updates before ``stop_error`` may stop the learning.
MIN_UPDATES = 20


@dataclass_state
class OnlineScoreState(SurrogateFitState):
    stopped: bool = False  # the stopping time t0 has passed: the surrogate is fixed
    score_error: float = np.nan  # running relative score error of points before learning them
    updates: int = 0  # gradients learnt online
    laplace_fallback: bool = False  # the Laplace term is the tuning covariance (told once)


class ScoreFit(SurrogateFit):
    """A score network fitted to the gradients near the typical set, with a Laplace term.

    Parameters
    ----------
    estimator, learned, policy, context, dim, has_gradient
        As ``SurrogateFit``.
    t0 : "tune" or int
        The stopping time of the online learning (VariationalHMC's ``t0``).
    stop_error : float or None
        Learning also stops once the running score error is below it.
    exploration : Exploration
        Its Newton probe (mode and inverse Hessian) gives the Laplace term.
    frame : Frame
        The chain's frame: the probe is in the model's coordinates, usable only in the
        affine frame.
    health : ChainHealth
        Where the note that the tuning states stand in for the probe goes.
    """

    _state_class = OnlineScoreState

    def __init__(self, estimator, learned, policy, context, dim: int, has_gradient: bool,
                 t0: int | str, stop_error: float | None, exploration, frame, health):
        super().__init__(estimator, learned, policy, context, dim, has_gradient)
        self.t0, self.stop_error = t0, stop_error
        self.exploration = exploration
        self.frame = frame
        self.health = health

    def fit(self, chain: ChainState, keep: np.ndarray, rng: np.random.Generator, **settings):
        return super().fit(chain, keep, rng, laplace=self.laplace(chain), **settings)

    def new(self, whitening: Whitening, random_state, laplace: LaplaceTerm | None = None,
            **settings):
        if laplace is not None and not self.context.dim and self.dim > FULL_QUADRATIC_DIM:
            # Above this the base's quadratic is diagonal: whitened by the Laplace covariance
            # a near-Gaussian posterior is isotropic and a diagonal quadratic fits it, while
            # the training points' spread leaves correlations it cannot follow (logistic
            # regression, d = 50: min ESS 4 of 500 with it, 400 whitened). Not below: the
            # full quadratic needs no such help, and a banana whitened by its narrow
            # Laplace covariance missed its arms (means 11 MCSE off, no warning).
            whitening = _laplace_whitening(laplace, whitening)
        return super().new(whitening, random_state, laplace=laplace, **settings)

    def laplace(self, chain: ChainState) -> LaplaceTerm | None:
        """The mode and Hessian of the Laplace regulariser (vhmc §3.4).

        The exploration's Newton probe (mode and inverse finite-difference Hessian), or,
        when it failed or is not positive definite, the tuning states' mean and covariance
        (in a learned frame too: the probe's are the model's coordinates).
        """
        probe = self.exploration.probe if self.frame.map is None else None  # model coordinates
        if probe is not None:
            try:
                precision = np.linalg.inv(probe.factor())
                precision = precision.T @ precision
                if np.all(np.isfinite(precision)):
                    return LaplaceTerm(np.asarray(probe.mean, dtype=np.float64), precision)
            except (np.linalg.LinAlgError, ValueError):
                pass
        scale = self.learned.whitening
        if scale is None:
            return None
        if not self.laplace_fallback:
            self.laplace_fallback = True
            # A debug record, not a warning: on the black-box banana it came with every
            # chain of every seed (the climb stops at the saddle between the arms), while
            # the draws were right at 9 of 10 seeds (benchmarks/banana_coverage.py).
            self.health.warn(
                WarningType.BAD_PARAMS,
                "the mode and Hessian for the Laplace regulariser were not found (the climb "
                "to the mode failed, or its Hessian is not positive definite); the tuning "
                "states' mean and covariance stand in for them. The draws stay exact.",
                "debug", chain.iteration,
            )
        inv_chol = Whitening(scale.mean[: self.dim], scale.chol[: self.dim, : self.dim]
                             if scale.dense else scale.chol[: self.dim]).inverse_chol()
        return LaplaceTerm(scale.mean[: self.dim].copy(), inv_chol.T @ inv_chol)


    def prepare_refit(self, access) -> bool:
        """Batch refits (new whitening and nodes, all the data) until the stopping time."""
        return not (self.stopped and self.learned.surrogate is not None)

    def stats(self, exact: bool, frozen: bool) -> dict:
        """VariationalHMC's own stats (``approximate``: the free-form mode's draws)."""
        surrogate = self.learned.surrogate
        approximate = not exact and frozen and surrogate is not None
        stats = {
            "approximate": approximate,
            "learning": not frozen and self.learning,
            "score_error": self.score_error,
            "laplace_weight": 1.0 - surrogate.mu_ if surrogate is not None else np.nan,
        }
        if approximate:
            stats["model_logp"] = np.nan
        return stats

    # ------------------------------------------------------------ online learning
    @property
    def learning(self) -> bool:
        """Whether the online updates go on (a learner, before the stopping time)."""
        return not self.stopped and self.learner is not None

    def learn(self, point: ChainPoint, weight_reference: float) -> None:
        """One gradient into the learner (vhmc Proposition 1), if it lies in the energy
        window; the running score error measured on it first, before it is learnt (a
        held-out error). Raises the numerical errors of a broken update."""
        learner = self.learner
        if not self.learning or point.grad is None:
            return
        weight = self.online_weight(point, weight_reference)
        if weight is None:
            return
        position = self.context.join(point.q)[None]
        error = learner.score_error(position, point.grad[None])
        self.score_error = error if np.isnan(self.score_error) else (
            (1 - SCORE_ERROR_SMOOTHING) * self.score_error + SCORE_ERROR_SMOOTHING * error)
        learner.partial_fit(position, gradients=point.grad[None],
                            sample_weight=np.array([weight]))
        if not learner.is_finite_:
            raise FloatingPointError("the updated weights are not finite")
        self.updates += 1

    def follow(self, iteration: int) -> None:
        """In tuning, the trajectories switch to the weights learnt so far (Algorithm 2)
        until the stopping time, or until the score error is below ``stop_error``."""
        learned = self.learned
        if self.stopped or learned.surrogate is None:
            return
        if self.learner is not None:
            learned.adopt(self.learner.snapshot())
        stop_at = self.t0 if self.t0 != "tune" else np.inf
        converged = (self.stop_error is not None and self.updates >= MIN_UPDATES
                     and self.score_error < self.stop_error)
        if iteration + 1 >= stop_at or converged:
            self.stopped = True
            self.learner = None


def _laplace_whitening(laplace: LaplaceTerm, fallback: Whitening) -> Whitening:
    """The whitening of ``N(mode, precision^-1)``, or ``fallback`` if it is not finite."""
    try:
        chol = robust_cholesky(np.linalg.inv(laplace.precision))
    except (np.linalg.LinAlgError, ValueError):
        return fallback
    if not np.all(np.isfinite(chol)):
        return fallback
    return Whitening(np.asarray(laplace.mode, dtype=np.float64), chol)
