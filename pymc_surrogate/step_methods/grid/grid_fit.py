"""``GridFit``: SparseGridHMC's surrogate family, a grid fitted once before sampling.

The grid is built and evaluated at the end of the first chain's warm-up (or given): a
refit fits nothing, and only re-adapts the metric and step size on the grid. The chain's
scale is the box's Gaussian (the Laplace approximation, checked by the model) until the
chain has states enough to estimate it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from pymc.stats.convergence import WarningType

from pymc_surrogate.step_methods.adaptation.surrogate_fit import SurrogateFit
from pymc_surrogate.step_methods.grid.field import (
    OUTSIDE_SHARE,
    POOR_MOVE_RATE,
    outside_states_message,
    poor_moves_message,
    short_tuning_message,
)
from pymc_surrogate.surrogates.whitening import Whitening, robust_cholesky

__all__ = ["COMPOUND_BLACK_BOX", "GHMC_COMPLETE", "GridFit"]

#: Told for a black-box SparseGridHMC in a compound step.
COMPOUND_BLACK_BOX = (
    "SparseGridHMC in a CompoundStep without a gradient: the grid interpolates this block's "
    "potential at the other variables' values when it is built. The draws stay exact "
    "(true-logp correction) but mix poorly when those values move far; sample all "
    "continuous variables with one SparseGridHMC where you can."
)
#: Told with ``exact=False``.
GHMC_COMPLETE = (
    "SparseGridHMC(exact=False): the paper's GHMC-complete. After tuning, draws inside the "
    "domain are accepted with the interpolated potential, not the model's: they follow "
    "exp(-U~), whose KL divergence from the posterior is at most 2 max|U - U~| "
    "(sparse-grid-hmc Thm 5.1), not the exact posterior (stat `approximate`). Use "
    "exact=True for exact draws."
)


class GridFit(SurrogateFit):
    """The step's grid, in the scale of its box.

    Parameters
    ----------
    estimator, learned, policy, context, dim, has_gradient
        As ``SurrogateFit``.
    field : callable
        ``(chain, model_outside) -> field``: the grid's field; the metric and step size
        are tuned on it with ``model_outside=False``.
    precompute : GridPrecompute
        Builds and holds the grid.
    potential : GridPotential
        The grid's potential inside its box and the model's continuation outside.
    exploration : Exploration
        The warm-up whose probe and states the box is found from, and the fallback kernel
        outside the box.
    tuning : Tuning
        ``refit_growth``, ``refit_offset``: the first re-adaptation on the grid.
    """

    weighted = False

    def __init__(self, estimator, learned, policy, context, dim: int, has_gradient: bool,
                 field: Callable, precompute, potential, exploration, tuning):
        super().__init__(estimator, learned, policy, context, dim, has_gradient)
        self.field = field
        self.precompute, self.potential = precompute, potential
        self.exploration, self.tuning = exploration, tuning

    def prepare_refit(self, access) -> bool:
        """The first fit, at the end of the warm-up, builds the grid (outside the refit's
        numerical-failure guard: a failing model is reported, not retried)."""
        if self.precompute.grid is None:
            access.read_shared()
            keep, training = self.learned.relevant(), self.learned.training
            self.precompute.build(None if self.precompute.given is not None else {
                "positions": training.positions[keep], "potentials": training.potentials[keep],
                "mode_depth": self.policy.mode_depth(self.dim),
                "probe": self.exploration.probe, "n_evaluations": len(training)})
        return True

    def tuning_ended(self, access, exact: bool, suggested_tune: int) -> None:
        """A chain's tuning on the grid is over: warn where it moved poorly in the box or
        tuned too briefly to re-adapt on the grid, and give a black box's draws a share of
        the exact exploration kernel when its states lay outside the box."""
        states, tuned = self.learned.late_states()[0], access.chain.iteration
        moves = self.potential.move_rate_in_box(states)
        if moves is not None and moves < POOR_MOVE_RATE:
            access.warn(WarningType.BAD_ACCEPTANCE, poor_moves_message(moves))
        # the first re-adaptation on the grid (a chain on a grid starts its schedule at 1)
        first_refit = int(np.ceil(self.tuning.refit_growth + self.tuning.refit_offset))
        if tuned < first_refit:
            access.warn(WarningType.BAD_PARAMS,
                        short_tuning_message(tuned, first_refit, suggested_tune))
        share = self.potential.outside_share(states) if not self.has_gradient else 0.0
        if (exact and share > self.potential.outside_threshold()
                and self.exploration.probability == 0.0):
            self.exploration.freeze(access.model_access(), access.rng,
                                    probability=min(share, OUTSIDE_SHARE[1]))
            if share > 0.2:
                access.warn(WarningType.BAD_PARAMS,
                            outside_states_message(share, self.exploration.probability))

    def fit(self, chain, keep: np.ndarray, rng: np.random.Generator, **settings):
        """The grid: a designed surrogate is fitted once, before sampling."""
        return self.precompute.grid

    def scale_frame(self) -> Whitening:
        """The box's Gaussian: mass matrices are estimated relative to it (a ridge
        regression's sd of 3.5e-5 drowned in an absolute regulariser: step size 2e-3,
        256 leapfrog steps a draw, ESS 5)."""
        box = self.precompute.box
        return Whitening(box.mean, robust_cholesky(box.cov))

    def posterior_scale(self, states: np.ndarray, evaluated: Callable[[], np.ndarray],
                        dense: bool) -> Whitening:
        """The box's Gaussian until tuning has ``5 d`` distinct late states (at least 20)
        to estimate the scale from (d = 20 with tune = 3 re-adapted the metric on a
        handful of states: sd z-scores down to -7.7), then the states' covariance."""
        box = self.scale_frame()
        if len(np.unique(states, axis=0)) >= max(20, 5 * self.dim):
            return Whitening.from_samples(states, dense=dense, frame=box)
        return box if dense else Whitening(box.mean, np.sqrt(np.diag(self.precompute.box.cov)))

    def dense_at_first(self, mass_matrix, probe, states: np.ndarray) -> bool:
        """``dense_mass="auto"``: dense when the box's Gaussian is strongly correlated (a
        grid's chain makes no exploration probe: a ridge regression, correlation
        -0.99999, then got a diagonal metric, ESS 5)."""
        return mass_matrix.dense_at_first(self.precompute.box.cov, None)

    def warm_up_field(self, chain):
        """The grid alone, with its continuation outside the box, never the model (an
        adjoint PDE's warm-up otherwise spent thousands of solves on trajectories that
        leave the box)."""
        return self.field(chain, model_outside=False)
