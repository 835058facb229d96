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
(docs/design.md, "Why line 1 of issue 36 ...").
"""

from __future__ import annotations

import numpy as np

from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.surrogates.confidence import QuadraticConfidence

__all__ = ["DrawBound"]


class DrawBound:
    """Mixin of ``SurrogateStep``: the lower confidence bound the draws run on."""

    #: Whether this step's draws lower a black box's surrogate (SurrogateHMC's family).
    lowers_black_box_draws = False

    def _choose_draw_bound(self, chain: ChainState) -> None:
        """When tuning ends: the confidence of a quadratic fit to the final fit's data."""
        if not (self.lowers_black_box_draws and not self.has_gradient
                and self.correction == "surrogate_transition" and chain.surrogate is not None
                and chain.training.context_dim == 0):  # (a block of a compound step: no)
            return
        keep = self._relevant(chain)
        potentials = chain.training.potentials[keep]
        polynomial = getattr(chain.surrogate, "polynomial_", None)
        chain.draw_bound = QuadraticConfidence.fit(
            chain.training.positions[keep], potentials,
            self.policy.weights(potentials, float(potentials.min()), self.dim),
            quadratic=getattr(polynomial, "quadratic", "full"),
        )

    def _bounded(self, chain: ChainState, field):
        """``field`` lowered by the chain's bound in the draws (unchanged otherwise)."""
        if not chain.frozen or chain.draw_bound is None:
            return field
        cap = self.tuning.draw_bound_cap * np.sqrt(self.dim / 2)
        return chain.draw_bound.lower(field, self.tuning.draw_bound_kappa, cap)
