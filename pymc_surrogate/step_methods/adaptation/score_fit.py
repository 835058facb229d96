"""``ScoreFit``: VariationalHMC's surrogate family, a score network with a Laplace term.

The network learns the model's gradients (vhmc §3.2-3.3); its Laplace regulariser
(§3.4) is a Gaussian at the mode, from the exploration's Newton probe or, where that
failed, the tuning states.
"""

from __future__ import annotations

import numpy as np
from pymc.stats.convergence import WarningType

from pymc_surrogate.step_methods.adaptation.surrogate_fit import SurrogateFit
from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.surrogates.score_network import FULL_QUADRATIC_DIM, LaplaceTerm
from pymc_surrogate.surrogates.whitening import Whitening, robust_cholesky

__all__ = ["ScoreFit"]


class ScoreFit(SurrogateFit):
    """A score network fitted to the gradients near the typical set, with a Laplace term.

    Parameters
    ----------
    estimator, policy, context, dim, has_gradient
        As ``SurrogateFit``.
    exploration : Exploration
        Its Newton probe (mode and inverse Hessian) gives the Laplace term.
    frame : Frame
        The chain's frame: the probe is in the model's coordinates, usable only in the
        affine frame.
    health : ChainHealth
        Where the note that the tuning states stand in for the probe goes.
    """

    def __init__(self, estimator, policy, context, dim: int, has_gradient: bool,
                 exploration, frame, health):
        super().__init__(estimator, policy, context, dim, has_gradient)
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
        scale = chain.whitening
        if scale is None:
            return None
        if not chain.online.laplace_fallback:
            chain.online.laplace_fallback = True
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


def _laplace_whitening(laplace: LaplaceTerm, fallback: Whitening) -> Whitening:
    """The whitening of ``N(mode, precision^-1)``, or ``fallback`` if it is not finite."""
    try:
        chol = robust_cholesky(np.linalg.inv(laplace.precision))
    except (np.linalg.LinAlgError, ValueError):
        return fallback
    if not np.all(np.isfinite(chol)):
        return fallback
    return Whitening(np.asarray(laplace.mode, dtype=np.float64), chol)
