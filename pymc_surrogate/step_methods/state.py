"""Everything one chain learns, grouped by concern.

With ``cores=1`` PyMC reuses the step object for every chain and restores only the fields
of ``_state_class`` between chains, so all of it lives in ``ChainState``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pymc.step_methods.compound import StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.step_methods.step_sizes import DualAverageAdaptation

from pymc_surrogate.core.tail_jumps import CauchyJumps, TailJumpCheck
from pymc_surrogate.core.types import ChainPoint
from pymc_surrogate.step_methods.training import TrainingSet
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["ChainState", "SurrogateStepState"]


@dataclass
class ChainState:
    """One chain's state; the comments group the fields by the module that owns them."""

    # --- kernel adaptation (base.py): mass matrix, step sizes, trajectory length
    training: TrainingSet
    metric: Any
    step_adapt: DualAverageAdaptation
    explore_adapt: DualAverageAdaptation
    path_adapt: DualAverageAdaptation | None = None  # corrections.py: Hamiltonian length
    # --- the chain: current point (cached true logp) and tuning trace
    current: ChainPoint | None = None
    current_key: bytes | None = None
    positions: list = field(default_factory=list)  # chain states during tune (for scale)
    position_potentials: list = field(default_factory=list)  # their true potentials
    iteration: int = 0
    # --- counters (stats)
    total_logp_evals: int = 0
    total_grad_evals: int = 0
    draw_divergences: int = 0
    n_fits: int = 0
    n_adaptations: int = 0
    # --- the surrogate (refit.py, training.py)
    surrogate: Any = None  # what the trajectories run on (fixed within a transition)
    learner: Any = None  # online surrogates: the one that keeps learning (partial_fit)
    whitening: Whitening | None = None
    frozen: bool = False
    last_fit_iteration: int = 0
    accept_since_fit: list = field(default_factory=list)
    surrogate_start: int = 0  # iteration of the first fit
    weight_reference: float = 0.0  # the lowest potential of the last fit (for weights)
    last_fit_error: str | None = None  # why the last fit failed (None after a good one)
    # --- exploration and the stall fallback (exploration.py)
    explore_history: np.ndarray | None = None  # frozen DE history when exploring in draws
    prior_draws: np.ndarray | None = None  # seeds the DE history early in exploration
    recent_moves: deque = field(default_factory=deque)  # accepted flags, last surrogate steps
    paused: bool = False  # tune: surrogate stuck, exploring until the next fit
    explore_probability: float = 0.0  # draws: share of exploration steps (stuck surrogate)
    # --- tail jumps (heavy_tails.py)
    tail_jumps: CauchyJumps | None = None
    tail_jump_probability: float = 0.0
    tail_jump_check: TailJumpCheck | None = None
    # Warnings for the next draws' `warning` stat: PyMC logs that stat in the parent process
    # with any `cores`, where a warnings.warn in a worker process would be lost.
    pending_warnings: deque = field(default_factory=deque)


@dataclass_state
class SurrogateStepState(StepMethodState):
    tune: bool
    chain: Any
