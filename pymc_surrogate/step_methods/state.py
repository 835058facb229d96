"""Everything one chain learns, grouped by concern.

With ``cores=1`` PyMC reuses the step object for every chain and restores only the fields
of ``_state_class`` between chains, so all of it lives in one ``ChainState``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pymc.step_methods.compound import StepMethodState
from pymc.step_methods.state import dataclass_state

from pymc_surrogate.core.types import ChainPoint
from pymc_surrogate.step_methods.adaptation.training import TrainingSet
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["ChainState", "Counts", "KernelChainState", "KernelHistory",
           "OnlineState", "SurrogateStepState"]


@dataclass
class Counts:
    """What the chain has spent and done (stats)."""

    logp_evals: int = 0
    grad_evals: int = 0
    fits: int = 0
    failed_fits: int = 0  # fits or online updates skipped for a numerical failure
    adaptations: int = 0  # online surrogates: switches to newly learned weights
    eval_failures: int = 0  # model evaluations that raised or gave NaN / +inf (rejections)


@dataclass
class OnlineState:
    """Online learning of VariationalHMC (variational_hmc.py)."""

    stopped: bool = False  # the stopping time t0 has passed: the surrogate is fixed
    score_error: float = np.nan  # running relative score error of points before learning them
    updates: int = 0  # gradients learnt online
    laplace_fallback: bool = False  # the Laplace term is the tuning covariance (told once)


@dataclass
class ChainState:
    """One chain's state: kernel adaptation, the chain, the surrogate, and the groups."""

    training: TrainingSet
    current: ChainPoint | None = None  # with its true logp, cached
    current_key: bytes | None = None
    current_approximate: bool = False  # current's potential is the surrogate's (surrogate_tuning.py)
    on_surrogate: bool = False  # this tuning iteration moves on the surrogate alone
    iteration: int = 0
    frozen: bool = False  # tuning has ended
    positions: list = field(default_factory=list)  # chain states during tune (for scale)
    position_potentials: list = field(default_factory=list)  # their true potentials
    surrogate: Any = None  # what the trajectories run on (fixed within a transition)
    learner: Any = None  # online policies: the surrogate that keeps learning (partial_fit)
    whitening: Whitening | None = None  # the posterior scale of the last fit
    counts: Counts = field(default_factory=Counts)
    online: OnlineState = field(default_factory=OnlineState)


@dataclass
class KernelHistory:
    """What KernelHMC adds to a chain's state: the history it learns from (kernel_hmc.py)."""

    states: list = field(default_factory=list)  # surrogate inputs (q, context) of the states
    frozen_start: int | None = None  # first state of the draws' history (past the burn-in)
    fit_end: int = 0  # states seen by the fit being made
    learner_end: int = 0  # states the finite learner has absorbed
    fitted_on: int = 0  # states the current surrogate was fitted to
    adaptations: int = 0  # surrogate updates by the vanishing adaptation
    updated: bool = False  # this iteration updated the surrogate
    told_failure: bool = False


@dataclass
class KernelChainState(ChainState):
    """KernelHMC's chain state."""

    kernel: KernelHistory = field(default_factory=KernelHistory)


@dataclass_state
class SurrogateStepState(StepMethodState):
    tune: bool
    chain: Any
    tails: Any
    draw_bound: Any
    coverage: Any
    health: Any
    far: Any
    sharing: Any
    surrogate_tuning: Any
    kernel: Any
    exploration: Any
    frame: Any
    schedule: Any
    evaluator: Any
