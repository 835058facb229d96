"""``RefitSchedule``: when a chain refits its surrogate in tune, and how the fits went.

Fits come at geometrically spaced iterations (``Tuning.refit_growth``; tempered tuning
``Tuning.tempered_refit_growth``). A due refit is postponed while the surrogate's
corrections since the last fit accept at least ``Tuning.good_acceptance``: a refit is
costly, and a surrogate that moves the chain needs none. A failed fit is retried on the
same schedule, not at every iteration. The part also keeps the last surrogate steps'
acceptances, from which the draws' number of inner moves is chosen
(``SurrogateKernel.choose_inner``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import field

import numpy as np
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_surrogate.step_methods.part import ChainPart
from pymc_surrogate.step_methods.tuning import Tuning

__all__ = ["RefitSchedule"]


@dataclass_state
class RefitScheduleState(DataClassState):
    last_iteration: int = 0  # the iteration after the last fit (or failed attempt)
    accept_since: list = field(default_factory=list)  # correction acceptances since then
    recent_corrections: deque = field(default_factory=deque)  # the last surrogate steps' (tune)
    first_iteration: int = 0  # iteration of the first fit
    weight_reference: float = 0.0  # the lowest potential of the last fit (its weights')
    last_error: str | None = None  # why the last fit failed (None after a good one)


class RefitSchedule(ChainPart):
    """A chain's refit schedule in tune.

    Parameters
    ----------
    tuning : Tuning
        ``refit_growth``, ``tempered_refit_growth``, ``refit_offset``,
        ``good_acceptance`` and ``inner_window`` (the acceptances kept for the draws).
    """

    _state_class = RefitScheduleState

    def __init__(self, tuning: Tuning):
        self.tuning = tuning
        self.reset()

    def reset(self) -> None:
        super().reset()
        self.recent_corrections = deque(maxlen=self.tuning.inner_window)

    def due(self, iteration: int, tempered: bool) -> bool:
        """Whether a fit (or a retry after a failed one) is due after ``iteration``."""
        if self.last_iteration == 0:
            return True
        growth = self.tuning.tempered_refit_growth if tempered else self.tuning.refit_growth
        return iteration + 1 >= growth * self.last_iteration + self.tuning.refit_offset

    def weigh_from(self, lowest: float) -> None:
        """The lowest potential of a new fit's points, which its weights (and the online
        updates' after it) are relative to."""
        self.weight_reference = lowest

    def start_after(self, iteration: int) -> None:
        """The first refit of a surrogate made before the chain (a grid): due as if one
        had been fitted after ``iteration``."""
        self.last_iteration = iteration

    def note(self, acceptance: float) -> None:
        """A surrogate step's correction acceptance in tune."""
        self.accept_since.append(acceptance)
        self.recent_corrections.append(acceptance)

    def note_checks(self, acceptances: list[float]) -> None:
        """The acceptances of checks of the surrogate by the model (tuning on it alone)."""
        self.accept_since.extend(acceptances)

    def wants_refit(self, iteration: int, tempered: bool) -> bool:
        """Due, with corrections since the last fit that accept too rarely. A due refit
        of a surrogate whose corrections accept well is postponed: the schedule restarts."""
        if not (self.accept_since and self.due(iteration, tempered)):
            return False
        if np.mean(self.accept_since) < self.tuning.good_acceptance:
            return True
        self.restart(iteration)
        return False

    def restart(self, iteration: int) -> None:
        """The schedule counts from ``iteration`` on."""
        self.last_iteration = iteration + 1
        self.accept_since = []

    def fitted(self, iteration: int, first: bool) -> None:
        """A fit at ``iteration`` succeeded (``first``: the chain's first surrogate)."""
        self.last_error = None
        if first:
            self.first_iteration = iteration
        self.restart(iteration)

    def failed(self, iteration: int, err: Exception) -> None:
        """A fit at ``iteration`` failed numerically: retried on the schedule."""
        self.restart(iteration)
        self.last_error = f"{type(err).__name__}: {err}"
