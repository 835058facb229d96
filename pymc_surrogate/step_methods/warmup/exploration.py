"""Exact kernels before a surrogate exists, and when a surrogate stalls.

Exploration is exact HMC on the true model when it has a gradient (every leapfrog point is
training data), else a differential-evolution random walk (DE-MCz). The same kernel is the
fallback while a stuck surrogate is set aside in tune, and a fixed share of the draws of a
chain whose surrogate stalled (a mixture of two exact kernels). This part is the warm-up
every step method shares: the exact exploration that gathers the training data, which the
chains share through the evaluation store.
"""

from __future__ import annotations

import warnings
from collections import deque
from typing import Any, Callable, NamedTuple

import numpy as np
from pymc.step_methods.hmc.quadpotential import QuadPotentialFullAdapt
from pymc.step_methods.state import DataClassState, dataclass_state
from pymc.step_methods.step_sizes import DualAverageAdaptation

from pymc_surrogate.core.transitions import (
    differential_evolution_jump,
    differential_evolution_transition,
    exact_hmc_transition,
    multiple_try_transition,
)
from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods.part import ChainPart
from pymc_surrogate.step_methods.tuning import Tuning
from pymc_surrogate.step_methods.warmup.mode_climb import (
    climb_to_mode,
    unresolved_curvature_message,
)
from pymc_surrogate.surrogates.laplace import laplace_from_values

__all__ = ["Exploration", "ModelAccess", "default_explore_steps"]

#: Tuning updates of DE-MCz's scale factor before the draws use its averaged value.
MIN_SCALE_UPDATES = 50


def default_explore_steps(has_gradient: bool, dim: int) -> int:
    """Exploration iterations before a first fit ("auto")."""
    # Exact HMC gathers d+1 equations at every leapfrog point, so a short run gives
    # a good fit; a random walk gives one equation a step and mixes slowly.
    if has_gradient:
        return 60
    return int(max(300, 30 * dim))


class ModelAccess(NamedTuple):
    """What exploration asks of the model, through the step (one chain's closures)."""

    evaluate: Callable[[np.ndarray, bool], ChainPoint]  # counted, kept as training data
    diagnose: Callable[[np.ndarray], ChainPoint]  # with its gradient, counted, not kept
    evaluate_batch: Callable[[np.ndarray], list[ChainPoint]]  # at once, on the executor
    evaluate_state: Callable[[np.ndarray], ChainPoint]  # the chain's state, with its gradient
    late_states: Callable[[], np.ndarray]  # the chain's late tuning states
    draw_prior: Callable[[int], np.ndarray]  # n draws that seed DE's population
    training: Any  # the chain's TrainingSet (read only)
    warn: Callable[[str], None]  # a warning for the chain (BAD_PARAMS)


@dataclass_state
class ExplorationState(DataClassState):
    scale_adapt: Any = None  # DE-MCz's scale factor, dual-averaged in tune
    adapted: int = 0  # its tuning updates
    # exact HMC's own mass matrix and step size once a fit has given the surrogate kernel
    # its own (None: no fit yet, exploration runs on the kernel's)
    exact_metric: Any = None
    exact_step_adapt: Any = None
    history: Any = None  # frozen DE history when exploring in draws
    prior_draws: Any = None  # seeds the DE history early in exploration
    probe: Any = None  # a Laplace approximation from values or gradients
    probe_size: int = 0  # training-set size at the last probe fit
    probe_draws: Any = None  # its draws: the DE history while it exists
    recent_moves: Any = None  # accepted flags of the last surrogate steps
    paused: bool = False  # tune: surrogate stuck, exploring until the next fit
    probability: float = 0.0  # draws: share of exploration steps (stuck surrogate)


class Exploration(ChainPart):
    """The exact exploration kernels, their adaptation, and the stall fallback.

    Parameters
    ----------
    has_gradient : bool
        Exact HMC (with) or DE-MCz (without the model's gradient).
    dim : int
        The block's dimension.
    path_length, max_energy_error : float
        The step's.
    tries : int or None
        Proposals a multiple-try exploration iteration evaluates at once on the executor
        (None: serial exploration).
    pseudo_marginal : bool
        The logp is a noisy estimate kept at the current state.
    tuning : Tuning
    """

    _state_class = ExplorationState

    def __init__(self, has_gradient: bool, dim: int, path_length: float,
                 max_energy_error: float, tries: int | None, pseudo_marginal: bool,
                 tuning: Tuning, difference_scale: np.ndarray | None = None,
                 difference_rounding: Callable | None = None, names: list | None = None):
        self.has_gradient = has_gradient
        self.dim = dim
        self.path_length = path_length
        self.max_energy_error = max_energy_error
        self.tries = tries
        self.pseudo_marginal = pseudo_marginal
        self.tuning = tuning
        #: When the gradients are finite differences: each coordinate's scale (the
        #: climb's Hessian steps are relative to it, None: 1) and their rounding (a point
        #: -> per coordinate); else None. ``names``: the coordinates', for messages.
        self.difference_scale = difference_scale
        self.difference_rounding = difference_rounding
        self.names = names
        self.reset()

    def reset(self) -> None:
        super().reset()
        self.scale_adapt = DualAverageAdaptation(1.0, self.target, 0.05, 0.75, 10)
        self.recent_moves = deque(maxlen=self.tuning.stuck_window)

    @property
    def batched(self) -> bool:
        """Black-box exploration on an executor: multiple-try Metropolis, its tries at once."""
        return self.tries is not None and not self.has_gradient

    @property
    def units(self) -> int:
        """What an exploration iteration counts toward ``explore_steps``: its model calls
        when batched (``2 tries - 1``: as many points to learn from as that many serial
        steps), else 1."""
        return 2 * self.tries - 1 if self.batched else 1

    @property
    def target(self) -> float:
        """The acceptance DE-MCz's scale is dual-averaged toward: 0.3, or 0.07 with a noisy
        logp, the optimum of a pseudo-marginal random walk (Sherlock, Thiery, Roberts &
        Rosenthal 2015, Ann. Statist. 43: acceptance about 0.07 at var log L^ about 3.3).
        At var log L^ 1.58 the noise alone accepted a move of size zero 38% of the
        time, so 0.3 drove the scale to its 0.01 floor, the tuning states to a sliver
        (sd 0.01 against 0.4-0.7) and the chain's fit with them (R-hat up to 1.23)."""
        return 0.07 if self.pseudo_marginal else 0.3

    # ------------------------------------------------------------ the stall
    def note_move(self, accepted: bool) -> None:
        """A surrogate step's outcome, for the stall check."""
        self.recent_moves.append(accepted)

    def stuck(self) -> bool:
        """Whether the surrogate has stopped moving the chain."""
        # Pseudo-marginal: rejection runs of 50-130 are the noise's, an ideal sampler's too
        # (var log L^ about 1.5); the fallback then spent 25% of the draws on a random walk.
        if self.pseudo_marginal:
            return False
        moves = self.recent_moves
        return (len(moves) >= self.tuning.stuck_window
                and np.mean(moves) < self.tuning.stuck_acceptance)

    def pause(self) -> None:
        """Set a stuck surrogate aside: exploration until the next fit."""
        self.paused = True

    def resume(self) -> None:
        """A new surrogate: the stall check starts again."""
        self.recent_moves.clear()
        self.paused = False

    def now(self, has_surrogate: bool, frozen: bool, rng: np.random.Generator) -> bool:
        """Whether this iteration explores: before a first fit, while a stuck surrogate is
        set aside, and as a share of a stalled chain's draws."""
        if not has_surrogate:
            return True
        if not frozen:
            return self.paused
        return self.probability > 0 and rng.uniform() < self.probability

    def never_in_draws(self) -> None:
        """The draws have no exploration share (their target is not the model's)."""
        self.probability = 0.0

    def freeze(self, access: ModelAccess, rng: np.random.Generator,
               probability: float | None = None) -> None:
        """Tuning has ended: fix the draws' DE history (and their share of exploration)."""
        if probability is not None:
            self.probability = probability
        self.history = self._history(access)

    # ------------------------------------------------------------ the kernels
    def exact_kernel(self, kernel) -> tuple[Any, Any]:
        """Exact HMC's mass matrix and step-size adaptation: the chain's own before the
        first fit, then the ones exploration had adapted, which the fallback goes on with.

        The fallback once ran on the surrogate's: after a first fit in a funnel's neck
        (centred eight schools) the surrogate trajectories' step size fell to 1e-7 - 1e-9
        by dual averaging on their rejections, and its metric was the chain's late
        tuning states; exact HMC at that step size accepted every move (energy error
        1e-13) without moving, its states shrank the next fit's metric, and all four
        chains kept one value of tau from tuning iteration 100 to the last draw.

        Returns
        -------
        metric : QuadPotential
        step_adapt : DualAverageAdaptation
        """
        if self.exact_metric is None:
            return kernel.metric, kernel.step_adapt
        return self.exact_metric, self.exact_step_adapt

    def keep_exact_kernel(self, metric, step_adapt) -> None:
        """At the first fit: exploration goes on with the kernel it had adapted."""
        if self.exact_metric is None:
            self.exact_metric, self.exact_step_adapt = metric, step_adapt

    def step(self, current: ChainPoint, access: ModelAccess, kernel, first: bool,
             tuning_now: bool, rng: np.random.Generator) -> TransitionInfo:
        """One exact exploration transition: HMC, or DE-MCz without gradients; ``first``:
        the chain's first tuning iteration (a gradient model's climb to the mode)."""
        if self.has_gradient:
            if current.grad is None:
                current = access.evaluate_state(current.q)
            if first and self.tuning.start_at_mode:
                current = self._climb(current, access, kernel, rng)
            metric, step_adapt = self.exact_kernel(kernel)
            return exact_hmc_transition(
                current, lambda q: access.evaluate(q, True), metric,
                step_adapt.current(tuning_now),
                min(self.path_length, self.tuning.explore_path_length),
                self.max_energy_error, rng, max_steps=self.tuning.explore_max_steps,
            )
        if tuning_now:
            current = self._update_probe(current, access, rng)
        history = self.history if self.history is not None else self._history(access)
        scale = self.scale(tuning_now)
        # Draws of the probe span every direction: no isotropic steps needed.
        isotropic_share = 0.0 if self.probe is not None else 1.0 / 3.0
        if self.batched:
            return multiple_try_transition(
                current, access.evaluate_batch,
                lambda rng: differential_evolution_jump(history, scale, self.dim, rng,
                                                        isotropic_share),
                self.tries, rng, step_size=scale,
            )
        return differential_evolution_transition(
            current, lambda q: access.evaluate(q, False), history, scale, rng,
            isotropic_share=isotropic_share,
        )

    def adapt(self, info: TransitionInfo, kernel, has_surrogate: bool) -> None:
        """Tuning's update after an exploration transition.

        Exact HMC adapts its own kernel, before the first fit and in the fallback after
        it, never the surrogate's (SparseGridHMC's, there from the start): the surrogate
        trajectories' step size learns from their steps only.
        """
        if not self.has_gradient:
            self.scale_adapt.update(info.adapt_stat, True)
            self.adapted += 1
        elif not has_surrogate or self.exact_metric is not None:
            metric, step_adapt = self.exact_kernel(kernel)
            step_adapt.update(info.adapt_stat, True)
            metric.update(info.point.q, info.point.grad, True)

    def scale(self, tuning_now: bool) -> float:
        """DE-MCz's scale factor: dual averaging's, or 1 (DE-MCz's optimum for a Gaussian)
        in draws after fewer than ``MIN_SCALE_UPDATES`` tuning updates.

        Dual averaging is built for HMC step sizes and overshoots early (it starts at
        ``mu = log(10 x initial)``); a random walk's factor never needs to leave [0.01, 3].
        Its average after three tuning iterations was 2.67: on N(0, I), d = 20, with
        ``tune=3``, every one of 300 fallback draws was rejected (a constant chain).
        """
        if not tuning_now and self.adapted < MIN_SCALE_UPDATES:
            return 1.0
        return float(np.clip(self.scale_adapt.current(tuning_now), 0.01, 3.0))

    # ------------------------------------------------------------ the probe
    def _climb(self, current: ChainPoint, access: ModelAccess, kernel,
               rng: np.random.Generator) -> ChainPoint:
        """The climb to the mode (``mode_climb.py``); its probe starts a dense metric."""
        unresolved: list[int] = []
        current, probe = climb_to_mode(current, lambda q: access.evaluate(q, True),
                                       access.diagnose, self.tuning, self.difference_scale,
                                       self.difference_rounding, unresolved)
        if unresolved:
            access.warn(unresolved_curvature_message(unresolved, self.names, -current.potential))
        if probe is None:
            return current
        self.probe = probe
        with warnings.catch_warnings():  # "experimental": it is PyMC's dense NUTS metric
            warnings.filterwarnings("ignore", "QuadPotentialFullAdapt", UserWarning)
            kernel.use(metric=QuadPotentialFullAdapt(
                self.dim, current.q.copy(), probe.cov, 10, rng=rng.spawn(1)[0]))
        return current

    def _update_probe(self, current: ChainPoint, access: ModelAccess,
                      rng: np.random.Generator) -> ChainPoint:
        """Refit the black-box exploration's Laplace probe; return where tuning goes on.

        Every ``max(10, d)`` new evaluations, a quadratic is fitted to the lowest
        potentials evaluated so far (``surrogates/laplace.py``); its Gaussian then shapes
        the differential-evolution jumps (their history is drawn from it), as a
        covariance estimate from the chain's own states cannot while the chain is stuck
        (20-d linear inverse problem, precision condition number 1e8: a random walk with
        prior-scale jumps accepted nothing in 600 steps). The quadratic's minimum is
        evaluated and the chain moves there if it is lower: a derivative-free Newton step,
        as the climb to the mode (``mode_climb.py``) for gradient models (warm-up draws are discarded, so where
        tuning goes is free to choose).
        """
        training = access.training
        if len(training) < self.probe_size + max(10, self.dim):
            return current
        self.probe_size = len(training)
        try:
            probe = laplace_from_values(training.positions, training.potentials)
        except (np.linalg.LinAlgError, ValueError):  # numerically broken: keep the last one
            probe = None
        if probe is None:
            return current
        self.probe = probe
        self.probe_draws = probe.draw(rng, 10 * self.dim)
        candidate = access.evaluate(probe.mean, False)
        if candidate.potential < current.potential:
            return candidate
        return current

    def _history(self, access: ModelAccess) -> np.ndarray:
        """Past states the differential-evolution jumps are drawn from.

        The second half of the path (past the initial transient, as PyMC's DEMetropolisZ
        draws from its tuning history). While that is short, draws from the prior are
        added, as DE-MC starts from a population: differences of a chain's first few
        states span only the directions it has moved in, and a chain that starts with
        tiny steps then stays confined to them.
        """
        if self.probe is not None:
            return self.probe_draws
        history = access.late_states()
        if len(history) < 10 * self.dim:
            if self.prior_draws is None:
                self.prior_draws = access.draw_prior(10 * self.dim)
            history = np.vstack([self.prior_draws, history])
        return history
