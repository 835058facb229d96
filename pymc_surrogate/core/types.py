"""State and info of a transition, as NamedTuples (BlackJAX style): immutable, cheap, typed."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pymc_surrogate.core.integrator import TrajectoryEnd

__all__ = ["ChainPoint", "Trajectory", "HMCMove", "TransitionInfo"]


class ChainPoint(NamedTuple):
    """A position with its true potential and (if known) gradient of the potential."""

    q: np.ndarray
    potential: float
    grad: np.ndarray | None


class Trajectory(NamedTuple):
    """One jittered leapfrog trajectory from a fresh momentum, on the field that drove it."""

    end: TrajectoryEnd
    kinetic_start: float
    kinetic_end: float  # +inf when the trajectory diverged
    step_size: float  # the jittered step actually used


class HMCMove(NamedTuple):
    """One Metropolis-adjusted HMC move on a field (the surrogate, or the true model)."""

    q: np.ndarray
    potential: float
    grad: np.ndarray
    accepted: bool
    accept_prob: float
    diverged: bool
    energy_error: float
    kinetic: float  # kinetic energy at the end of the move (accepted or not)
    n_steps: int
    step_size: float


class TransitionInfo(NamedTuple):
    """What a transition did, for stats and adaptation (build it with keywords)."""

    point: ChainPoint
    accepted: bool
    accept_prob: float  # the reported acceptance (stat ``accept``)
    adapt_stat: float  # the acceptance statistic the step size adapts on
    diverging: bool
    energy: float
    energy_error: float
    surrogate_energy_error: float = np.nan
    n_steps: int = 0
    step_size: float = np.nan
    # Acceptance of the true-model correction alone (the surrogate's quality); None for
    # kernels with one Metropolis test, where it is accept_prob.
    correction_prob: float | None = None

    @property
    def correction_acceptance(self) -> float:
        return self.accept_prob if self.correction_prob is None else self.correction_prob
