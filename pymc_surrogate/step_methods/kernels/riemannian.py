"""RNS-RMHMC (rns-hmc §3.4): surrogate transitions on a position-dependent metric.

With ``metric="riemannian"`` a network-surrogate step runs its surrogate transitions as
Riemannian HMC (``core/riemannian.py``): the SoftAbs metric of the surrogate's Hessian, its
derivatives from the surrogate's closed-form third derivatives
(``surrogates/curvature.py``), the generalised leapfrog, all in the chain's whitened frame
(the posterior scale of the last fit), where SoftAbs's floor is
scale-free. None of it evaluates the model; the true logp corrects each transition as in
the Euclidean kernel, so the chain stays exact.
"""

from __future__ import annotations

import numpy as np
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_surrogate.core.jitter import jittered_trajectory
from pymc_surrogate.core.riemannian import (
    riemannian_move,
    riemannian_surrogate_transition,
)
from pymc_surrogate.core.softabs import geometry, in_frame, tempered3
from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods.part import ChainPart
from pymc_surrogate.step_methods.tuning import Tuning
from pymc_surrogate.surrogates.curvature import random_network_derivatives
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["RIEMANNIAN_STATS", "RiemannianKernel", "riemannian_stats"]

RIEMANNIAN_STATS = {
    "riemannian": (bool, []),
    "fixed_point_iterations": (np.float64, []),
    "implicit_failures": (np.int64, []),
}


@dataclass_state
class RiemannianState(DataClassState):
    fixed_point_iterations: float = np.nan  # of the last transition (a stat)
    implicit_failures: int = 0  # inner moves of the last transition ended by one


def riemannian_stats(kernel: RiemannianKernel | None) -> dict:
    """The stats of the last transition (``RIEMANNIAN_STATS``), for either metric."""
    if kernel is None:
        return {"riemannian": False, "fixed_point_iterations": np.nan, "implicit_failures": 0}
    return kernel.stats()


class RiemannianKernel(ChainPart):
    """Surrogate transitions as Riemannian HMC with the SoftAbs metric (RNS-RMHMC).

    Parameters
    ----------
    metric : {"riemannian", "riemannian-diagonal"}
        SoftAbs of the surrogate's Hessian, or of its diagonal only (cheaper, blind to
        correlations).
    softabs_alpha : float
        SoftAbs's sharpness (eigenvalues ``lam`` become ``lam coth(alpha lam)``).
    tuning : Tuning
        ``riemannian_warm_up``.
    """

    _state_class = RiemannianState

    def __init__(self, metric: str, softabs_alpha: float, tuning: Tuning):
        self.diagonal = metric == "riemannian-diagonal"
        self.softabs_alpha = float(softabs_alpha)
        self.tuning = tuning
        self.reset()

    @staticmethod
    def check(context_dim: int) -> None:
        """After the step knows its block: what the Riemannian kernel cannot do (its
        settings are checked by ``HMCKernel``)."""
        if context_dim:
            raise ValueError(
                "metric='riemannian' needs the step to sample all of the model's continuous "
                "variables (its metric is the whole surrogate's Hessian); it was given a "
                "block of a CompoundStep."
            )

    @staticmethod
    def field(surrogate, temperature: float):
        """The surrogate with its Hessian and third derivatives, at ``U~ / T``."""
        return tempered3(lambda q: random_network_derivatives(surrogate, q), temperature)

    def transition(self, current: ChainPoint, evaluate, field, step_size: float,
                   path_length: float, n_inner: int, frame: Whitening,
                   max_energy_error: float, rng: np.random.Generator) -> TransitionInfo:
        """``n_inner`` Riemannian transitions on ``field``, then the true test.

        ``frame`` is where the moves run: the chain's whitened coordinates. SoftAbs floors
        the metric's eigenvalues at ``1 / alpha``, a curvature in the coordinates' units.
        In the parameters' units that floor stiffened kilpisjarvi's intercept (sd 30,
        curvature 1e-3) a thousandfold: min ESS 15, R-hat 1.20, where the Euclidean kernel,
        whose mass matrix is this scale, was right. In the frame the posterior has unit
        scale, and the floor, the step size and the implicit steps' tolerances are
        relative to it.
        """
        result = riemannian_surrogate_transition(
            current, evaluate, field, self.softabs_alpha, step_size, path_length,
            n_inner, rng, max_energy_error, frame=frame, diagonal=self.diagonal,
        )
        self.fixed_point_iterations = result.fixed_point_iterations
        self.implicit_failures = result.implicit_failures
        return result.info

    def warm_up(self, field, frame: Whitening, start: np.ndarray, adapt, path_length: float,
                max_energy_error: float, rng: np.random.Generator) -> float:
        """The step size for a new surrogate: dual averaging (``adapt``, started at the
        Euclidean warm-up's step) over Riemannian moves on ``field`` alone (no model
        evaluation), then on through tuning on the transitions' inner acceptance.

        A metric of the local curvature wants another step than the Euclidean one (2-d
        funnel: 0.02-0.08 against 0.18-0.25, at which 784 and 891 inner moves of two
        chains' 1000 draws ended in an implicit step that did not converge), and the draws
        run on the final fit, whose curvature can differ from the fit tuning adapted to (a
        step tuned at acceptance 0.78 left 1531 failed inner moves in one chain's draws).
        """
        field = in_frame(field, frame, self.diagonal)
        geom = geometry(frame.to_white(start), field, self.softabs_alpha)
        for _ in range(self.tuning.riemannian_warm_up):
            eps, steps = jittered_trajectory(adapt.current(True), path_length, rng,
                                             shortest=0.5)
            move = riemannian_move(geom, field, self.softabs_alpha, eps, steps, rng,
                                   max_energy_error=max_energy_error)
            adapt.update(move.accept_prob, True)
            geom = move.geom
        return adapt.current(False)

    def stats(self) -> dict:
        """The last transition's stats; cleared, so a draw without one reports none."""
        out = {"riemannian": True, "fixed_point_iterations": self.fixed_point_iterations,
               "implicit_failures": self.implicit_failures}
        self.fixed_point_iterations, self.implicit_failures = np.nan, 0
        return out
