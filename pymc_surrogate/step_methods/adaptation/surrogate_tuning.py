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

from dataclasses import field
from typing import Any, Callable, NamedTuple

import numpy as np
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods.part import ChainPart
from pymc_surrogate.step_methods.tuning import Tuning

__all__ = ["SurrogateChecks", "SurrogateTuning"]


class SurrogateChecks(NamedTuple):
    """What a check of the surrogate asks of the step for one chain."""

    evaluate: Callable[[np.ndarray], list]  # the model at rows of states (ChainPoints)
    surrogate_potential: Callable[[np.ndarray], float]  # the untempered surrogate's U~(q)
    restart: Callable[[ChainPoint], None]  # the chain goes on from this state, exactly evaluated
    refit: Callable[[], None]  # the step's refit
    warn: Callable[[str], None]  # an info-level note for the chain


@dataclass_state
class SurrogateTuningState(DataClassState):
    acceptances: list = field(default_factory=list)  # expected correction acceptances
    last_error: float | None = None  # U - U~ at the last checked state
    last_good: Any = None  # the last ChainPoint known inside the support
    left: bool = False  # the checks found the surrogate poor: tuning is exact from then on


class SurrogateTuning(ChainPart):
    """Tuning iterations on the surrogate alone, and the checks of the model between them.

    Parameters
    ----------
    wanted : bool
        Whether the step tunes this way after its first fit: its store held a finished
        run's tuning, or it explores a black box in batches.
    checked_per_check : int
        States evaluated at each check: the executor's tries when batched, else 1.
    tuning : Tuning
        ``surrogate_check_interval``, ``surrogate_check_window``,
        ``surrogate_check_acceptance``.
    """

    _state_class = SurrogateTuningState

    def __init__(self, wanted: bool, checked_per_check: int, tuning: Tuning):
        self.wanted = wanted
        self.checked_per_check = checked_per_check
        self.tuning = tuning
        self.reset()

    def reframe(self, to_new: Callable[[ChainPoint], ChainPoint]) -> None:
        """The kept state in the chain's new coordinates (a change of frame)."""
        if self.last_good is not None:
            self.last_good = to_new(self.last_good)

    def active(self, tuning_now: bool, has_surrogate: bool, paused: bool) -> bool:
        """Whether this tuning iteration moves the chain on the surrogate alone."""
        return (self.wanted and tuning_now and has_surrogate and not paused
                and not self.left)

    def start(self, current: ChainPoint) -> None:
        """Note the state the chain was in when it began to move on the surrogate."""
        if self.last_good is None:
            self.last_good = current

    def rows(self, iteration: int, n_states: int) -> list[int]:
        """The tuning states to evaluate now (rows of the chain's path; empty: no check).

        Every ``surrogate_check_interval`` iterations: the last state, or
        ``checked_per_check`` spaced evenly over the interval.
        """
        interval = self.tuning.surrogate_check_interval
        if iteration % interval:
            return []
        n = self.checked_per_check
        return [n_states - 1 - j * (interval // n) for j in reversed(range(n))]

    def judge(self, points: list[ChainPoint],
              surrogate_potential: Callable[[np.ndarray], float]) -> tuple[list, str | None]:
        """Record the checked states; return the expected acceptances they give and why
        tuning must now be exact (None: it goes on on the surrogate).

        Each consecutive pair's errors ``e = U - U~`` give the mean acceptance the exact
        correction would have for a move between them (either way,
        ``(1 + exp(-|e1 - e0|)) / 2``, at least 0.5); below
        ``surrogate_check_acceptance`` on average over ``surrogate_check_window`` pairs the
        chain tunes exactly from here on, and so it does when a checked state is outside
        the model's support.
        """
        new = []
        for point in points:
            if not np.isfinite(point.potential):
                continue
            error = point.potential - surrogate_potential(point.q)
            if self.last_error is not None:
                new.append(0.5 * (1.0 + np.exp(-abs(error - self.last_error))))
            self.last_error = error
            self.last_good = point
        self.acceptances.extend(new)
        if not np.isfinite(points[-1].potential):
            self.left = True
            return new, ("took a chain outside the model's support (its last state inside "
                         "is restored)")
        recent = self.acceptances[-self.tuning.surrogate_check_window:]
        if (len(recent) == self.tuning.surrogate_check_window
                and np.mean(recent) < self.tuning.surrogate_check_acceptance):
            self.left = True
            return new, (f"is poor where a chain went (mean expected correction acceptance "
                         f"{np.mean(recent):.2f} over its last {len(recent)} checked states)")
        return new, None

    def new_surrogate(self) -> None:
        """Another surrogate: the errors start again."""
        self.last_error = None

    # ------------------------------------------------------------ the iteration
    def after_move(self, info: TransitionInfo, current: ChainPoint, kernel, learned) -> None:
        """Tuning's adaptation after a move on the surrogate alone: the step size (which
        learns from surrogate steps only in any case) and the chain's state, whose true
        potential is unknown (NaN) until a check evaluates it."""
        kernel.step_adapt.update(info.adapt_stat, True)
        learned.add_state(info.point.q, np.nan)
        self.start(current)  # the state the first fit found

    def check(self, iteration: int, learned, schedule, tempers: bool,
              access: SurrogateChecks) -> None:
        """Now and then, the model at the chain's states: training data, the chain back
        at its last state inside the model's support, and refits or exact tuning as the
        checks say."""
        rows = self.rows(iteration, len(learned.positions))
        if not rows:
            return
        points = access.evaluate(np.array([learned.positions[row] for row in rows]))
        for row, point in zip(rows, points):
            learned.set_state_potential(row, point.potential)
        acceptances, why = self.judge(points, access.surrogate_potential)
        schedule.note_checks(acceptances)
        access.restart(self.last_good)
        if why is not None:
            access.warn(f"the surrogate, on which a chain tuned alone, {why}; the chain tunes "
                        f"with exact corrections from tuning iteration {iteration} on.")
        elif schedule.wants_refit(iteration, tempers):
            access.refit()
            self.new_surrogate()
