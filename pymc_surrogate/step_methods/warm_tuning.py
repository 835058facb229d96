"""Tuning on the surrogate alone, for a step made on a store that already held a finished
run's tuning (a kept file of an earlier run; ``sharing.py``).

Such a step fits at its first tuning iteration. Tuning iterations are discarded, so they
need no exact correction: they move the chain on the surrogate alone (the burn-in from
the initial point, the step size, and the states whose spread scales the final fit), and
the model is evaluated only every ``Tuning.warm_check_interval`` iterations, at the
chain's state, to check the surrogate where the chain went. Without this a rerun of 1000
draws on a finished run's store (black-box PDE, default ``tune=1000``) spent 795 solves
before its first draw, one correction per tuning iteration. When the checks say the
surrogate is poor where the chain went, the chain tunes as a fresh chain does: exact
corrections and refits, evaluating where the store is thin. The draws are corrected by
the model as always. A killed run's store (tuning not finished) is not enough: its
surrogate had not been refined by tuning's corrections, whose evaluations the rerun
then makes.
"""

from __future__ import annotations

import numpy as np
from pymc.stats.convergence import WarningType

from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods.state import ChainState

__all__ = ["WarmTuning"]


class WarmTuning:
    """Mixin of ``SurrogateStep``: tuning iterations on the surrogate alone on a warm store."""

    def _tunes_on_surrogate(self, chain: ChainState) -> bool:
        """Whether this tuning iteration moves the chain on the surrogate alone."""
        return (self._tuned_store and self.tune and not chain.frozen
                and chain.surrogate is not None and not chain.explore.paused
                and not chain.warm.left and self.context.dim == 0)

    def _surrogate_point(self, chain: ChainState, q: np.ndarray) -> ChainPoint:
        """``q`` with the (untempered) surrogate's potential in place of the model's."""
        value, grad = self.context.field(chain.surrogate)(q)
        return ChainPoint(q, float(value), grad)

    def _model_or_surrogate(self, chain: ChainState, current: ChainPoint, with_grad: bool,
                            record: bool):
        """The current point and the evaluation a surrogate step's correction uses.

        The model's; or, in tuning on the surrogate alone, the surrogate's, so that the
        correction accepts what the surrogate kernel accepts and the chain samples the
        surrogate's posterior.
        """
        if chain.on_surrogate:
            return (self._surrogate_point(chain, current.q),
                    lambda q: self._surrogate_point(chain, q))
        return current, lambda q: self._evaluate(chain, q, with_grad=with_grad, record=record)

    def _adapt_on_surrogate(self, chain: ChainState, info: TransitionInfo) -> None:
        """Tuning's adaptation after a move on the surrogate alone: the step size (which
        learns from surrogate steps only in any case) and the chain's states. Their true
        potentials are unknown (NaN) except at a check; no refit, as nothing new was
        learnt."""
        chain.step_adapt.update(info.adapt_stat, True)
        chain.positions.append(info.point.q)
        chain.position_potentials.append(np.nan)

    def _check_surrogate_at_state(self, chain: ChainState) -> None:
        """Every ``warm_check_interval`` iterations, the model at the chain's state.

        The surrogate's error there, against its error at the previous check, gives the
        mean acceptance the exact correction would have for a move between the two states
        (either way, ``(1 + exp(-|e1 - e0|)) / 2``). Below ``warm_check_acceptance`` on
        average over ``warm_check_window`` checks, the chain leaves the surrogate alone
        and tunes with exact corrections and refits from here on.
        """
        if chain.iteration % self.tuning.warm_check_interval:
            return
        true = self._evaluate(chain, chain.current.q, with_grad=self.has_gradient)
        chain.current, chain.current_approximate = true, False
        chain.position_potentials[-1] = true.potential
        error = true.potential - self._surrogate_point(chain, true.q).potential
        if chain.warm.last_error is not None:
            chain.warm.acceptances.append(0.5 * (1.0 + np.exp(-abs(error - chain.warm.last_error))))
        chain.warm.last_error = error
        recent = chain.warm.acceptances[-self.tuning.warm_check_window:]
        if (len(recent) == self.tuning.warm_check_window
                and np.mean(recent) < self.tuning.warm_check_acceptance):
            chain.warm.left = True
            self._warn(
                chain, WarningType.BAD_PARAMS,
                f"the surrogate fitted to the store is poor where a chain went (mean "
                f"expected correction acceptance {np.mean(recent):.2f} over its last "
                f"{len(recent)} checks); it tunes with exact corrections from tuning "
                f"iteration {chain.iteration} on.",
                level="info",
            )
