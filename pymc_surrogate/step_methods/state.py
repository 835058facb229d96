"""Everything one chain learns, grouped by concern.

With ``cores=1`` PyMC reuses the step object for every chain and restores only the fields
of ``_state_class`` between chains, so all of it lives in one ``ChainState``.
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

__all__ = ["ChainState", "Counts", "FailureLog", "FitSchedule", "ExploreState", "TailState", "OnlineState", "HealthRecord", "CoverageState", "CheckState", "SurrogateStepState"]


@dataclass
class Counts:
    """What the chain has spent and done (stats)."""

    logp_evals: int = 0
    grad_evals: int = 0
    draw_divergences: int = 0
    fits: int = 0
    failed_fits: int = 0  # fits or online updates skipped for a numerical failure
    adaptations: int = 0  # online surrogates: switches to newly learned weights
    eval_failures: int = 0  # model evaluations that raised or gave NaN / +inf (rejections)


@dataclass
class FailureLog:
    """Failed model evaluations of the chain (evaluator.py): what was told, the run of them."""

    told: frozenset = frozenset()  # kinds of failure whose first occurrence was logged
    frequent_told: bool = False  # the "frequent failures" warning was given
    next_check: int = 50  # model evaluations at which their share is next judged (doubled)
    raised: int = 0  # the failures that were exceptions (and time-outs)
    in_a_row: int = 0  # failures since the model last answered
    first_in_a_row: tuple | None = None  # the first of them: (where and why, traceback text)


@dataclass
class FitSchedule:
    """The refit schedule (refit.py)."""

    last_iteration: int = 0  # the iteration after the last fit (or failed attempt)
    accept_since: list = field(default_factory=list)  # correction acceptances since then
    recent_corrections: deque = field(default_factory=deque)  # the last surrogate steps' (tune)
    first_iteration: int = 0  # iteration of the first fit
    weight_reference: float = 0.0  # the lowest potential of the last fit (for weights)
    last_error: str | None = None  # why the last fit failed (None after a good one)


@dataclass
class ExploreState:
    """Exploration and the stall fallback (exploration.py)."""

    history: np.ndarray | None = None  # frozen DE history when exploring in draws
    prior_draws: np.ndarray | None = None  # seeds the DE history early in exploration
    recent_moves: deque = field(default_factory=deque)  # accepted flags, last surrogate steps
    paused: bool = False  # tune: surrogate stuck, exploring until the next fit
    probability: float = 0.0  # draws: share of exploration steps (stuck surrogate)
    probe: Any = None  # a Laplace approximation from values or gradients (surrogates/laplace.py)
    probe_size: int = 0  # training-set size at the last probe fit
    probe_draws: np.ndarray | None = None  # its draws: the DE history while it exists
    adapted: int = 0  # tune's updates of the DE scale factor (explore_adapt)
    units: int = 0  # exploration done in tune: iterations, or model calls when batched


@dataclass
class CheckState:
    """Tuning on the surrogate alone and its checks (surrogate_tuning.py)."""

    acceptances: list = field(default_factory=list)  # expected correction acceptances
    last_error: float | None = None  # U - U~ at the last checked state
    last_good: ChainPoint | None = None  # the last state known inside the support
    left: bool = False  # the checks found the surrogate poor: tuning is exact from then on


@dataclass
class TailState:
    """Tail jumps in the draws (heavy_tails.py)."""

    jumps: CauchyJumps | None = None
    probability: float = 0.0
    check: TailJumpCheck | None = None


@dataclass
class OnlineState:
    """Online learning of VariationalHMC (variational_hmc.py)."""

    stopped: bool = False  # the stopping time t0 has passed: the surrogate is fixed
    score_error: float = np.nan  # running relative score error of points before learning them
    updates: int = 0  # gradients learnt online
    laplace_fallback: bool = False  # the Laplace term is the tuning covariance (told once)


@dataclass
class HealthRecord:
    """What the draws have shown so far (health.py)."""

    draws: int = 0
    rejected_in_a_row: int = 0
    fallback: int = 0
    surrogate_draws: int = 0
    surrogate_acceptance: float = 0.0  # sum over surrogate draws
    potentials: list = field(default_factory=list)  # true potentials of the draws
    positions: list = field(default_factory=list)  # and their positions
    next_check: int = 100  # draws at which shares are next judged (then doubled)
    told: frozenset = frozenset()  # symptoms already warned about


@dataclass(frozen=True)
class CoverageState:
    """The surrogate's temperature and the Pareto k of its weights (coverage.py)."""

    temperature: float = 1.0
    khat: float = np.nan  # at temperature 1: how narrow the fit itself is
    tempered_khat: float = np.nan  # at the chosen temperature


@dataclass
class ChainState:
    """One chain's state: kernel adaptation, the chain, the surrogate, and the groups."""

    training: TrainingSet
    metric: Any
    step_adapt: DualAverageAdaptation
    explore_adapt: DualAverageAdaptation
    path_adapt: DualAverageAdaptation | None = None  # corrections.py: Hamiltonian length
    # exploration.py: exact HMC's own mass matrix and step size once a fit has replaced
    # ``metric`` and ``step_adapt`` with the surrogate's (None: no fit yet, they are these)
    exact_metric: Any = None
    exact_step_adapt: DualAverageAdaptation | None = None
    inner_transitions: int = 1  # corrections.py: surrogate transitions a draw (n_inner="auto")
    draw_bound: Any = None  # draw_bound.py: the draws' QuadraticConfidence (None: none)
    current: ChainPoint | None = None  # with its true logp, cached
    current_key: bytes | None = None
    current_approximate: bool = False  # current's potential is the surrogate's (surrogate_tuning.py)
    on_surrogate: bool = False  # this tuning iteration moves on the surrogate alone
    iteration: int = 0
    writer: str | None = None  # the chain's name in the evaluation store (sharing.py)
    store_cursor: int = 0  # the last store row it has read
    frozen: bool = False  # tuning has ended
    positions: list = field(default_factory=list)  # chain states during tune (for scale)
    position_potentials: list = field(default_factory=list)  # their true potentials
    surrogate: Any = None  # what the trajectories run on (fixed within a transition)
    learner: Any = None  # online policies: the surrogate that keeps learning (partial_fit)
    whitening: Whitening | None = None  # the posterior scale of the last fit
    counts: Counts = field(default_factory=Counts)
    failures: FailureLog = field(default_factory=FailureLog)
    fits: FitSchedule = field(default_factory=FitSchedule)
    explore: ExploreState = field(default_factory=ExploreState)
    checks: CheckState = field(default_factory=CheckState)
    tails: TailState = field(default_factory=TailState)
    health: HealthRecord = field(default_factory=HealthRecord)
    online: OnlineState = field(default_factory=OnlineState)
    coverage: CoverageState = field(default_factory=CoverageState)
    # Warnings for the next draws' `warning` stat: PyMC logs that stat in the parent process
    # with any `cores`, where a warnings.warn in a worker process would be lost.
    pending_warnings: deque = field(default_factory=deque)


@dataclass_state
class SurrogateStepState(StepMethodState):
    tune: bool
    chain: Any
