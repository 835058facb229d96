"""``LearnedSurrogate``: what a chain has learned — its training data, its tuning states,
the surrogate its trajectories run on and the posterior scale of its fit.

The refits (``refit.py``) make a new surrogate and scale; the online policies swap in a
newer copy of their learner (the family's, ``surrogate_fit.py``) by the vanishing
adaptation; the evaluations (``evaluation/chain_evaluation.py``) and the other chains'
shared rows add training data. Each does so through this part's methods, so the chain's
learned state has one owner.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any

import numpy as np
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_surrogate.step_methods.adaptation.training import TrainingSet
from pymc_surrogate.step_methods.part import ChainPart
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["LearnedSurrogate"]


@dataclass_state
class LearnedSurrogateState(DataClassState):
    training: TrainingSet | None = None  # every model evaluation the chain learns from
    positions: list = field(default_factory=list)  # the chain's states in tune (for scale)
    position_potentials: list = field(default_factory=list)  # their true potentials (NaN: unknown)
    surrogate: Any = None  # what the trajectories run on (fixed within a transition)
    whitening: Whitening | None = None  # the posterior scale of the last fit
    fits: int = 0
    failed_fits: int = 0  # fits or online updates skipped for a numerical failure
    adaptations: int = 0  # online surrogates: switches to newly learned weights


class LearnedSurrogate(ChainPart):
    """A chain's training data, tuning states, surrogate and posterior scale.

    Parameters
    ----------
    dim : int
        The block's dimension.
    context_dim : int
        The other blocks' values kept with each training point (a compound step).
    policy : TrainingPolicy
        The energy window and mode depth of the points a fit learns from.
    """

    _state_class = LearnedSurrogateState

    def __init__(self, dim: int, context_dim: int, policy):
        self.dim, self.context_dim, self.policy = dim, context_dim, policy
        self.reset()

    def reset(self) -> None:
        super().reset()
        self.training = TrainingSet(self.dim, self.context_dim)

    # ------------------------------------------------------------- the data
    def add_point(self, point, context: np.ndarray | None) -> None:
        """A model evaluation (a finite ``ChainPoint``, at the other blocks' ``context``)."""
        self.training.append(point.q, point.potential, point.grad, context)

    def add_rows(self, rows) -> None:
        """Rows other chains evaluated (``StoredRows``, in the chain's coordinates)."""
        self.training.extend(rows.positions, rows.potentials, rows.gradients, rows.contexts)

    def add_state(self, q: np.ndarray, potential: float) -> None:
        """A tuning state of the chain and its true potential (NaN: not evaluated)."""
        self.positions.append(q)
        self.position_potentials.append(potential)

    def set_state_potential(self, row: int, potential: float) -> None:
        """The true potential of tuning state ``row``, evaluated after the move."""
        self.position_potentials[row] = potential

    def late_states(self) -> tuple[np.ndarray, np.ndarray]:
        """The second half of the tuning states (past the initial transient) and their
        true potentials: the chain's posterior sample for scales and checks."""
        start = len(self.positions) // 2
        positions = np.array(self.positions[start:]).reshape(-1, self.dim)
        return positions, np.array(self.position_potentials[start:])

    def relevant(self) -> np.ndarray:
        """Indices of the training points a fit learns from: within the energy window
        above the lowest of them, none deeper than ``TrainingPolicy.mode_depth`` below the
        chain's lowest late tuning state.

        A climb to the mode on a funnel reaches the density's peak in the neck, where
        there is no mass: referenced to it, the window kept only neck points (centred
        eight schools: 50 of 1436-3165, potential -49 at log tau -13.55 where the chain's
        states lay at 28-40; the d = 10 funnel: 3 of 717-2365, and every fit failed).
        """
        window = self.policy.energy_window(self.dim)
        states = self.late_states()[1]
        states = states[np.isfinite(states)]
        floor = float(states.min()) - self.policy.mode_depth(self.dim) if states.size else -np.inf
        return self.training.relevant(window, floor)

    def reframe(self, to_new: Callable) -> None:
        """Everything kept in coordinates into a new frame: ``to_new(q, u, g) -> (q, u, g)``."""
        self.training.convert(to_new)
        if self.positions:
            q, u, _ = to_new(np.array(self.positions),
                             np.array(self.position_potentials, dtype=np.float64), None)
            self.positions[:], self.position_potentials[:] = list(q), list(u)

    # ----------------------------------------------------------- the surrogate
    def snapshot(self) -> tuple:
        """What a failed refit restores (``restore``)."""
        return self.surrogate, self.whitening

    def restore(self, kept: tuple) -> None:
        self.surrogate, self.whitening = kept

    def use_scale(self, whitening: Whitening) -> None:
        """The posterior scale a refit estimated."""
        self.whitening = whitening

    def use(self, surrogate: Any) -> None:
        """Make ``surrogate`` the one the chain's trajectories run on."""
        self.surrogate = surrogate

    def adopt(self, candidate: Any) -> None:
        """The vanishing adaptation swaps in a newer surrogate (counted in ``adaptations``)."""
        self.surrogate = candidate
        self.adaptations += 1

    def fitted(self) -> None:
        self.fits += 1

    def failed(self) -> None:
        """A fit or an online update failed numerically (stat ``failed_fits``)."""
        self.failed_fits += 1
