"""``GridFit``: SparseGridHMC's surrogate family, a grid fitted once before sampling.

The grid is built and evaluated at the end of the first chain's warm-up (or given): a
refit fits nothing, and only re-adapts the metric and step size on the grid. The chain's
scale is the box's Gaussian (the Laplace approximation, checked by the model) until the
chain has states enough to estimate it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pymc_surrogate.step_methods.adaptation.surrogate_fit import SurrogateFit
from pymc_surrogate.surrogates.whitening import Whitening, robust_cholesky

__all__ = ["GridFit"]


class GridFit(SurrogateFit):
    """The step's grid, in the scale of its box.

    Parameters
    ----------
    estimator, learned, policy, context, dim, has_gradient
        As ``SurrogateFit``.
    field : callable
        ``(chain, model_outside) -> field``: the grid's field; the metric and step size
        are tuned on it with ``model_outside=False``.
    """

    weighted = False

    def __init__(self, estimator, learned, policy, context, dim: int, has_gradient: bool,
                 field: Callable):
        super().__init__(estimator, learned, policy, context, dim, has_gradient)
        self.field = field
        self.precompute = None  # the step's GridPrecompute, set once the step has made it

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
