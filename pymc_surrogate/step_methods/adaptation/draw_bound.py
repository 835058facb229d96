"""The draws' surrogate of a black box, lowered where its training data thin out.

A frozen surrogate of a black box is fitted to about a thousand values in tune; where
they thin out, a few sd from the posterior's centre, it can lie several nats above the
potential. The chain enters such a spot and stays (the correction accepts leaving it
with probability ``exp(U - U~)`` there): on the black-box PDE one run in twenty had a
chain held 40-170 draws. Lowering the surrogate by ``kappa`` predictive sd of a
quadratic fit to the same data raises its density exactly where the fit is unsure.
That sd grows like ``|q|^2`` far out, so the lowering is capped at ``sqrt(2 d)`` nats,
twice the sd of the potential over a Gaussian posterior's typical set: uncapped, the
black-box banana's lowered surrogate put most of its mass where the posterior has none
(``Tuning.draw_bound_cap``). The field stays fixed in the draws, so they stay exact
(docs/design.md, "The draws of a black box").
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_surrogate.step_methods.part import ChainPart
from pymc_surrogate.step_methods.tuning import Tuning
from pymc_surrogate.surrogates.confidence import QuadraticConfidence

__all__ = ["DrawBound"]


@dataclass_state
class DrawBoundState(DataClassState):
    bound: Any = None  # the draws' QuadraticConfidence (None: the draws are not lowered)


class DrawBound(ChainPart):
    """The lower confidence bound a black box's draws run on.

    Parameters
    ----------
    enabled : bool
        Whether this step lowers its draws' surrogate: a black box's, corrected by the
        surrogate transition, Euclidean, not a block of a compound step.
    dim : int
        The block's dimension.
    tuning : Tuning
        ``draw_bound_kappa`` and ``draw_bound_cap``.
    """

    _state_class = DrawBoundState

    def __init__(self, enabled: bool, dim: int, tuning: Tuning):
        self.enabled = enabled
        self.dim = dim
        self.tuning = tuning
        self.reset()

    def choose(self, surrogate, positions: np.ndarray, potentials: np.ndarray,
               weights: np.ndarray) -> None:
        """When tuning ends: the confidence of a quadratic fit to the final fit's data
        (``positions``, ``potentials``, ``weights``: what that fit learnt from)."""
        polynomial = getattr(surrogate, "polynomial_", None)
        self.bound = QuadraticConfidence.fit(
            positions, potentials, weights,
            quadratic=getattr(polynomial, "quadratic", "full"),
        )

    def lower(self, field: Callable, frozen: bool) -> Callable:
        """``field`` lowered by the bound in the draws (unchanged otherwise)."""
        if not frozen or self.bound is None:
            return field
        cap = self.tuning.draw_bound_cap * np.sqrt(self.dim / 2)
        return self.bound.lower(field, self.tuning.draw_bound_kappa, cap)
