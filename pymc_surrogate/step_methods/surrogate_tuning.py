"""Tuning on the surrogate alone, with the model evaluated at the chain's states now and
then instead of at every iteration's correction.

Tuning iterations are discarded, so they need no exact correction. After its first fit a
chain tunes this way when

* its store held a finished run's tuning (``sharing.py``: a kept file of an earlier run;
  ``EvaluationStore.tuned``). Exact tuning spent one solve on every iteration's correction:
  766-799 solves before the first draw of a 1000-draw rerun with the default ``tune=1000``
  (black-box PDE). A killed run's store is not enough: its surrogate had not yet been
  refined by tuning's corrections, whose evaluations the rerun then makes;
* or it explores a black box in batches on an executor (``executor=``): the states are
  then evaluated ``explore_tries`` at a time, where exact tuning made one call an
  iteration, so that a shorter exploration did not shorten tuning.

The chain moves on the surrogate (tempered as tuning tempers it, ``coverage.py``); the
correction's evaluation is the surrogate's own, so it accepts what the surrogate kernel
accepts. Every ``Tuning.surrogate_check_interval`` iterations the model is evaluated at
the chain's state (and, batched, at states spaced evenly since the last check): training
data for the refits, and a check of the surrogate where the chain went. The change of the
surrogate's error between consecutive checked states gives the exact correction's expected
acceptance for a move between them; refits follow it as they follow the corrections'
acceptance in exact tuning, and when it stays poor, or a checked state is outside the
model's support, the chain tunes exactly from then on. The first draw evaluates the state
tuning left, and the draws are corrected by the model as always.
"""

from __future__ import annotations

import numpy as np
from pymc.stats.convergence import WarningType

from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods.state import ChainState

__all__ = ["SurrogateTuning"]


class SurrogateTuning:
    """Mixin of ``SurrogateStep``: tuning iterations on the surrogate alone."""

    def _tunes_on_surrogate(self, chain: ChainState) -> bool:
        """Whether this tuning iteration moves the chain on the surrogate alone."""
        return ((self.sharing.tuned or self._batched_exploration) and self.tune
                and not chain.frozen and chain.surrogate is not None
                and not chain.explore.paused and not chain.checks.left
                and self.context.dim == 0)

    def _surrogate_point(self, chain: ChainState, q: np.ndarray) -> ChainPoint:
        """``q`` with the (untempered) surrogate's potential in place of the model's."""
        value, grad = self.context.field(chain.surrogate)(q)
        return ChainPoint(q, float(value), grad)

    def _model_or_surrogate(self, chain: ChainState, current: ChainPoint, with_grad: bool,
                            record: bool, field):
        """The current point and the evaluation a surrogate step's correction uses.

        The model's; or, in tuning on the surrogate alone, ``field``'s (what the
        trajectories run on), so that the correction accepts what the surrogate kernel
        accepts and the chain samples the surrogate's posterior.
        """
        if chain.on_surrogate:
            def evaluate(q: np.ndarray) -> ChainPoint:
                value, grad = field(q)[:2]
                return ChainPoint(q, float(value), grad)

            return evaluate(current.q), evaluate
        return current, lambda q: self._evaluate(chain, q, with_grad=with_grad, record=record)

    def _adapt_on_surrogate(self, chain: ChainState, info: TransitionInfo) -> None:
        """Tuning's adaptation after a move on the surrogate alone: the step size (which
        learns from surrogate steps only in any case) and the chain's states, whose true
        potentials are unknown (NaN) until a check evaluates them."""
        chain.step_adapt.update(info.adapt_stat, True)
        chain.positions.append(info.point.q)
        chain.position_potentials.append(np.nan)
        if chain.checks.last_good is None:  # the state the first fit found the chain in
            chain.checks.last_good = chain.current

    def _check_surrogate(self, chain: ChainState) -> None:
        """Every ``surrogate_check_interval`` iterations, the model at the chain's states.

        One state, or ``explore_tries`` spaced evenly over the interval when batched,
        evaluated at once. Each consecutive pair's errors ``e = U - U~`` give the mean
        acceptance the exact correction would have for a move between them (either way,
        ``(1 + exp(-|e1 - e0|)) / 2``, at least 0.5); refits follow it, and below
        ``surrogate_check_acceptance`` on average over ``surrogate_check_window`` pairs the
        chain tunes exactly from here on.
        """
        interval = self.tuning.surrogate_check_interval
        if chain.iteration % interval:
            return
        n = self.explore_tries if self._batched_exploration else 1
        rows = [len(chain.positions) - 1 - j * (interval // n) for j in reversed(range(n))]
        states = np.array([chain.positions[row] for row in rows])
        if self._batched_exploration:
            points = self._evaluate_batch(chain, states)
        else:
            points = [self._evaluate(chain, states[0], with_grad=self.has_gradient)]
        for row, point in zip(rows, points):
            chain.position_potentials[row] = point.potential
            if not np.isfinite(point.potential):
                continue
            error = point.potential - self._surrogate_point(chain, point.q).potential
            if chain.checks.last_error is not None:
                acceptance = 0.5 * (1.0 + np.exp(-abs(error - chain.checks.last_error)))
                chain.checks.acceptances.append(acceptance)
                chain.fits.accept_since.append(acceptance)
            chain.checks.last_error = error
            chain.checks.last_good = point
        if np.isfinite(points[-1].potential):
            chain.current, chain.current_approximate = points[-1], False
        else:  # the surrogate led the chain out of the support: back to the last good state
            chain.current, chain.current_approximate = chain.checks.last_good, False
            self._tune_exactly(chain, "took a chain outside the model's support (its last "
                                      "state inside is restored)")
            return
        recent = chain.checks.acceptances[-self.tuning.surrogate_check_window:]
        if (len(recent) == self.tuning.surrogate_check_window
                and np.mean(recent) < self.tuning.surrogate_check_acceptance):
            self._tune_exactly(chain, f"is poor where a chain went (mean expected correction "
                                      f"acceptance {np.mean(recent):.2f} over its last "
                                      f"{len(recent)} checked states)")
        elif chain.fits.accept_since and self._fit_due(chain):
            if np.mean(chain.fits.accept_since) < self.tuning.good_acceptance:
                self._refit(chain)
                chain.checks.last_error = None  # another surrogate: errors start again
            else:  # the surrogate is good: postpone the (costly) refit
                chain.fits.last_iteration = chain.iteration + 1
                chain.fits.accept_since = []

    def _tune_exactly(self, chain: ChainState, why: str) -> None:
        chain.checks.left = True
        self._warn(
            chain, WarningType.BAD_PARAMS,
            f"the surrogate, on which a chain tuned alone, {why}; the chain tunes with "
            f"exact corrections from tuning iteration {chain.iteration} on.",
            level="info",
        )
