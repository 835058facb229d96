"""The two exact corrections of a surrogate trajectory, as a step runs them.

* ``"surrogate_transition"`` (Liu 2001 §9.4; delayed acceptance): ``n_inner`` HMC
  transitions exact for the surrogate density, then one Metropolis-Hastings test with the
  true logp that corrects only the surrogate's error. ``n_inner="auto"``: one in tuning;
  in the draws several where tuning found the surrogate good.
* ``"hamiltonian"`` (rns-hmc Algorithm 3): one leapfrog trajectory on the surrogate,
  accepted with the true Hamiltonian; its length adapts to the true acceptance in tune.
"""

from __future__ import annotations

import numpy as np
from pymc.step_methods.step_sizes import DualAverageAdaptation

from pymc_surrogate.core.transitions import surrogate_hmc_transition, surrogate_transition
from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods.coverage import tempered
from pymc_surrogate.step_methods.state import ChainState

__all__ = ["CORRECTIONS", "Corrections"]

CORRECTIONS = ("surrogate_transition", "hamiltonian")


class Corrections:
    """Mixin of ``SurrogateStep``: the surrogate kernel and its exact correction."""

    correction = "surrogate_transition"
    n_inner = 1

    def _surrogate_step(
        self, chain: ChainState, current: ChainPoint, record: bool = True
    ) -> TransitionInfo:
        """One corrected surrogate transition; ``record=False``: its model evaluation is no
        training data (the full-length trials, which are no draws)."""
        with_grad = self.has_gradient and not chain.frozen
        step_size = chain.step_adapt.current(self.tune and not chain.frozen)
        field = self._surrogate_field(chain)
        if self.coverage.tempers(self._tuning_now(chain)):  # tuning only (coverage.py)
            field = tempered(field, self.coverage.tuning_temperature)
        current, evaluate = self._model_or_surrogate(chain, current, with_grad, record, field)
        if self.correction == "hamiltonian":
            return surrogate_hmc_transition(
                current, evaluate, field, chain.metric, step_size,
                self._trajectory_length(chain), self.max_energy_error, self.rng,
            )
        return surrogate_transition(
            current, evaluate, field, chain.metric, step_size,
            self.path_length, self.max_energy_error, self._inner_transitions(chain), self.rng,
        )

    def _inner_transitions(self, chain: ChainState) -> int:
        """Surrogate transitions per model evaluation (``n_inner``, or what "auto" chose)."""
        return chain.inner_transitions if self.n_inner == "auto" else self.n_inner

    def _choose_inner_transitions(self, chain: ChainState) -> None:
        """``n_inner="auto"``: several surrogate transitions a draw when the surrogate is good.

        One transition of a fixed-length HMC leaves the chain correlated (in a Gaussian,
        ``x`` anti-correlated and ``x^2`` positively), and the inner transitions cost no
        model evaluation; but when the true model rejects many proposals, a rejection
        throws the longer inner run away. So: ``Tuning.inner_transitions`` when the
        correction accepted at least ``Tuning.good_acceptance`` on average over the last
        ``Tuning.inner_window`` surrogate steps of tuning, or when the draws run on a
        black box's lowered surrogate (``draw_bound.py``), else one. Chosen once when
        tuning ends, so the draws' kernel is fixed (exact).
        """
        recent = chain.fits.recent_corrections
        good = len(recent) == recent.maxlen and np.mean(recent) >= self.tuning.good_acceptance
        # A black box's lowered surrogate (draw_bound.py) was measured with them.
        if (self.n_inner == "auto" and self.correction == "surrogate_transition"
                and (good or self.draw_bound.bound is not None)):
            chain.inner_transitions = self.tuning.inner_transitions

    def _use_surrogate(self, chain: ChainState, surrogate) -> None:
        super()._use_surrogate(chain, surrogate)
        if self.correction == "hamiltonian":
            chain.path_adapt = self._length_adaptation(self.path_length)

    def _tuned_length(self, chain: ChainState) -> float | None:
        """The Hamiltonian correction's length as tuning left it (None: not adapted)."""
        if self.correction != "hamiltonian" or chain.path_adapt is None:
            return None
        return self._clip_length(chain.path_adapt.current(False))

    def _length_adaptation(self, start: float) -> DualAverageAdaptation:
        return DualAverageAdaptation(start, self.tuning.path_target, 0.05, 0.75, 10)

    def _choose_draw_length(self, chain: ChainState, tuned: float) -> None:
        """The full path for the draws if the final fit holds the target acceptance on it,
        else ``tuned``, the length tuning arrived at for the fit before.

        Runs ``_full_length_trials`` corrected transitions at the full path from where
        tuning left the chain, one model evaluation each (counted in ``total_model_evals``,
        in no draw's ``model_evals``); the draws then start from that same state (exact:
        nothing adapts in them).

        A mean over these transitions, not dual averaging on them: fifty acceptances,
        mostly 0 or near 1, left a dual-averaged length at a third of the path for one
        chain of the black-box banana whose acceptance at the full path was 0.84.
        """
        if chain.current is None:
            return
        chain.path_adapt = None  # _trajectory_length: the full path
        current = start = self._current_point(chain, chain.current.q)
        accept = np.empty(self.tuning.full_length_trials)
        for i in range(self.tuning.full_length_trials):
            # Not training data: AdaptiveSurrogateHMC would learn from trajectories at a
            # length the draws may not use.
            info = self._surrogate_step(chain, current, record=False)
            accept[i], current = info.accept_prob, info.point
        if accept.mean() < self.tuning.path_target:
            chain.path_adapt = self._length_adaptation(tuned)  # never updated: fixed
        chain.current, chain.current_key = start, self.evaluator.key(start.q)

    def _clip_length(self, length: float) -> float:
        return float(np.clip(length, self.tuning.shortest_path * self.path_length, self.path_length))

    def _trajectory_length(self, chain: ChainState) -> float:
        if chain.path_adapt is None:
            return self.path_length
        return self._clip_length(chain.path_adapt.current(self.tune and not chain.frozen))
