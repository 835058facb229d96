"""The surrogate kernel: its tuned values and the two exact corrections it runs.

* ``"surrogate_transition"`` (Liu 2001 §9.4; delayed acceptance): ``n_inner`` HMC
  transitions exact for the surrogate density, then one Metropolis-Hastings test with the
  true logp that corrects only the surrogate's error. ``n_inner="auto"``: one in tuning;
  in the draws several where tuning found the surrogate good.
* ``"hamiltonian"`` (rns-hmc Algorithm 3): one leapfrog trajectory on the surrogate,
  accepted with the true Hamiltonian; its length adapts to the true acceptance in tune.

As BlackJAX's ``hmc.build_kernel``, the transitions are pure functions of the core
(``core/transitions.py``) whose arguments include every tuned value; this part owns those
values (mass matrix, step size, path length, inner transitions) and their adaptation.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from pymc.step_methods.state import DataClassState, dataclass_state
from pymc.step_methods.step_sizes import DualAverageAdaptation

from pymc_surrogate.core.transitions import (
    surrogate_hmc_transition,
    surrogate_transition,
)
from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods.part import ChainPart
from pymc_surrogate.step_methods.tuning import Tuning

__all__ = ["SurrogateKernel"]


@dataclass_state
class KernelState(DataClassState):
    metric: Any = None  # the trajectories' mass matrix (a PyMC QuadPotential)
    step_adapt: Any = None  # their step size's dual averaging
    path_adapt: Any = None  # the Hamiltonian correction's length (None: the full path)
    inner_transitions: int = 1  # surrogate transitions a draw, when n_inner="auto"


class SurrogateKernel(ChainPart):
    """Surrogate trajectories, corrected with the true logp, and their tuned values.

    Parameters
    ----------
    correction : {"surrogate_transition", "hamiltonian"}
    n_inner : int or "auto"
        Surrogate transitions per model evaluation (surrogate transition only).
    path_length, target_accept, max_energy_error : float
        The step's settings.
    tuning : Tuning
        ``inner_transitions``, ``good_acceptance``, ``path_target``, ``shortest_path``,
        ``full_length_trials``.
    """

    _state_class = KernelState

    def __init__(self, correction: str, n_inner: int | str, path_length: float,
                 target_accept: float, max_energy_error: float, tuning: Tuning):
        self.correction = correction
        self.n_inner = n_inner
        self.path_length = path_length
        self.target_accept = target_accept
        self.max_energy_error = max_energy_error
        self.tuning = tuning
        self.reset()

    def step_size_adaptation(self, initial_step: float) -> DualAverageAdaptation:
        """PyMC's dual averaging toward ``target_accept``, with NUTS's settings."""
        return DualAverageAdaptation(initial_step, self.target_accept, 0.05, 0.75, 10)

    def use(self, metric=None, step_size: float | None = None) -> None:
        """A new mass matrix and/or a step size to adapt from (a fit, the warm-up)."""
        if metric is not None:
            self.metric = metric
        if step_size is not None:
            self.step_adapt = self.step_size_adaptation(step_size)

    def snapshot(self) -> tuple:
        return self.metric, self.step_adapt, self.path_adapt

    def restore(self, kept: tuple) -> None:
        self.metric, self.step_adapt, self.path_adapt = kept

    def new_surrogate(self) -> None:
        """A new surrogate: the Hamiltonian correction's length adapts again from the path."""
        if self.correction == "hamiltonian":
            self.path_adapt = self._length_adaptation(self.path_length)

    def transition(self, current: ChainPoint, evaluate: Callable, field: Callable,
                   tuning_now: bool, rng: np.random.Generator) -> TransitionInfo:
        """One corrected transition on ``field`` (``q -> (U~, dU~/dq)``) from ``current``;
        ``evaluate(q)`` is the true model's point (or the surrogate's, in tuning on it)."""
        step_size = self.step_adapt.current(tuning_now)
        if self.correction == "hamiltonian":
            return surrogate_hmc_transition(
                current, evaluate, field, self.metric, step_size,
                self.trajectory_length(tuning_now), self.max_energy_error, rng,
            )
        return surrogate_transition(
            current, evaluate, field, self.metric, step_size,
            self.path_length, self.max_energy_error, self.inner(), rng,
        )

    def adapt(self, info: TransitionInfo) -> None:
        """Tuning's update after a surrogate transition."""
        self.step_adapt.update(info.adapt_stat, True)
        if self.path_adapt is not None:
            self.path_adapt.update(info.accept_prob, True)

    def inner(self) -> int:
        """Surrogate transitions per model evaluation (``n_inner``, or what "auto" chose)."""
        return self.inner_transitions if self.n_inner == "auto" else self.n_inner

    def choose_inner(self, recent, lowered: bool) -> None:
        """``n_inner="auto"``: several surrogate transitions a draw when the surrogate is good.

        One transition of a fixed-length HMC leaves the chain correlated (in a Gaussian,
        ``x`` anti-correlated and ``x^2`` positively), and the inner transitions cost no
        model evaluation; but when the true model rejects many proposals, a rejection
        throws the longer inner run away. So: ``Tuning.inner_transitions`` when the
        correction accepted at least ``Tuning.good_acceptance`` on average over the last
        ``Tuning.inner_window`` surrogate steps of tuning (``recent``), or when the draws
        run on a black box's lowered surrogate (``lowered``, ``draw_bound.py``, measured
        with them), else one. Chosen once when tuning ends, so the draws' kernel is fixed
        (exact).
        """
        good = len(recent) == recent.maxlen and np.mean(recent) >= self.tuning.good_acceptance
        if (self.n_inner == "auto" and self.correction == "surrogate_transition"
                and (good or lowered)):
            self.inner_transitions = self.tuning.inner_transitions

    def tuned_length(self) -> float | None:
        """The Hamiltonian correction's length as tuning left it (None: not adapted)."""
        if self.correction != "hamiltonian" or self.path_adapt is None:
            return None
        return self._clip_length(self.path_adapt.current(False))

    def choose_draw_length(self, tuned: float, trial: Callable[[ChainPoint], TransitionInfo],
                           start: ChainPoint) -> None:
        """The full path for the draws if the final fit holds the target acceptance on it,
        else ``tuned``, the length tuning arrived at for the fit before.

        ``trial`` runs a corrected transition at the full path, one model evaluation each
        (counted in ``total_model_evals``, in no draw's ``model_evals``), from ``start``
        on; the draws then start from ``start`` again (exact: nothing adapts in them). A
        mean over these transitions, not dual averaging on them: fifty acceptances, mostly
        0 or near 1, left a dual-averaged length at a third of the path for one chain of
        the black-box banana whose acceptance at the full path was 0.84.
        """
        self.path_adapt = None  # the full path
        current = start
        accept = np.empty(self.tuning.full_length_trials)
        for i in range(self.tuning.full_length_trials):
            info = trial(current)
            accept[i], current = info.accept_prob, info.point
        if accept.mean() < self.tuning.path_target:
            self.path_adapt = self._length_adaptation(tuned)  # never updated: fixed

    def trajectory_length(self, tuning_now: bool) -> float:
        if self.path_adapt is None:
            return self.path_length
        return self._clip_length(self.path_adapt.current(tuning_now))

    def _length_adaptation(self, start: float) -> DualAverageAdaptation:
        return DualAverageAdaptation(start, self.tuning.path_target, 0.05, 0.75, 10)

    def _clip_length(self, length: float) -> float:
        return float(np.clip(length, self.tuning.shortest_path * self.path_length,
                             self.path_length))
