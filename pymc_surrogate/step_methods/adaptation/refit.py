"""Refits during tune: when, on what data, and the checks before a fit drives the chain.

A refit re-estimates the posterior scale and the mass matrix, fits a new surrogate (through
the ``Surrogate`` protocol: ``fit`` and ``value_and_grad`` only), rejects fits whose own
draws fall into a spurious well (trying ``tamer_settings`` in turn), and re-adapts the mass
matrix (``mass_matrix.py``) and step size on the surrogate, at no model evaluation.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import numpy as np
from pymc.stats.convergence import WarningType

from pymc_surrogate.core.adaptation import SurrogateWarmUp, warm_up_on_surrogate
from pymc_surrogate.core.types import TransitionInfo
from pymc_surrogate.step_methods.adaptation.coverage import tempered
from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.surrogates.base import with_params
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["Refits"]


class Refits:
    """Mixin of ``SurrogateStep``: the refit schedule and pipeline."""

    #: Settings for ``_make_surrogate`` after a spurious well, tamest last.
    tamer_settings: tuple[dict, ...] = ()

    def _make_surrogate(self, whitening: Whitening, random_state, **settings):
        """A new, unfitted copy of the step's estimator (``surrogate=``), in the chain's
        whitening and with a random stream of its own."""
        return with_params(self.surrogate, **settings, whitening=whitening,
                           random_state=random_state)

    def _relevant(self, chain: ChainState) -> np.ndarray:
        """Indices of the training points a fit learns from: within the energy window
        above the lowest of them, none deeper than ``TrainingPolicy.mode_depth`` below the
        chain's lowest late tuning state.

        A climb to the mode on a funnel reaches the density's peak in the neck, where
        there is no mass: referenced to it, the window kept only neck points (centred
        eight schools: 50 of 1436-3165, potential -49 at log tau -13.55 where the chain's
        states lay at 28-40; the d = 10 funnel: 3 of 717-2365, and every fit failed).
        """
        window = self.policy.energy_window(self.dim)
        states = self._late_tuning_states(chain)[1]
        states = states[np.isfinite(states)]
        floor = float(states.min()) - self.policy.mode_depth(self.dim) if states.size else -np.inf
        return chain.training.relevant(window, floor)

    def _fit_surrogate(self, chain: ChainState, **settings):
        """Fit a new surrogate to the training data near the typical set, weighted."""
        training = chain.training
        keep = self._relevant(chain)
        inputs, whitening = self.context.training_inputs(
            training.positions[keep], training.contexts[keep]
        )
        surrogate = self._make_surrogate(whitening, self.rng.spawn(1)[0], **settings)
        potentials = training.potentials[keep]
        self.refits.weight_reference = float(np.min(potentials))
        weights = self.policy.weights(potentials, self.refits.weight_reference, self.dim)
        return surrogate.fit(inputs, potentials, training.gradients[keep], sample_weight=weights)

    def _min_points(self) -> int:
        return self.policy.min_points(self.dim, self.has_gradient)

    def _final_fit(self, chain: ChainState) -> bool:
        """The fit on all tuning data when tuning ends; False if the draws have no surrogate."""
        if chain.surrogate is None and not self._enough_data(chain):
            self.exploration.freeze(self._model_access(chain), self.rng)
            short = self._data_shortfall(chain)
            self._warn(
                chain, WarningType.BAD_PARAMS,
                f"a chain ended tuning too early to fit a surrogate ({'; '.join(short)}). Its "
                "draws use the exact exploration kernel instead (stat `fallback`): correct, "
                "but it mixes slower and costs more model evaluations. Increase `tune` (to at "
                f"least {self._suggested_tune()} for this model).",
            )
            return False
        stuck = self.exploration.paused or self.exploration.stuck()
        self._refit(chain)
        if chain.surrogate is None:
            self.exploration.freeze(self._model_access(chain), self.rng)
            self._warn(
                chain, WarningType.BAD_PARAMS,
                f"no surrogate fit succeeded in a chain's {chain.iteration} tuning iterations "
                f"({len(chain.training)} training points; last failure: "
                f"{self.refits.last_error}). Its draws use the exact exploration kernel instead "
                "(stat `fallback`): correct, but it mixes slower and costs more model "
                "evaluations. Increase `tune`, or check that the model's logp is smooth and "
                "finite near the posterior.",
            )
            return False
        if self.refits.last_error is not None:
            self._warn(
                chain, WarningType.BAD_PARAMS,
                f"the final surrogate fit of a chain failed ({self.refits.last_error}); its "
                "draws use the surrogate fitted earlier in tuning, which may move the chain "
                "less well. Increase `tune` for more training data.",
            )
        if stuck:
            # A surrogate that stopped moving the chain in tune may do so again in the
            # draws; a fixed share of exact exploration steps keeps the chain exact and
            # moving (a mixture of two kernels that both leave the posterior invariant).
            self.exploration.freeze(self._model_access(chain), self.rng,
                                    probability=self.tuning.stuck_explore_probability)
            self._warn(
                chain, WarningType.BAD_ACCEPTANCE,
                f"the surrogate moved a chain in fewer than {self.tuning.stuck_acceptance:.0%} of "
                f"its last {self.tuning.stuck_window} tuning iterations. "
                f"{self.tuning.stuck_explore_probability:.0%} of that chain's draws use the exact "
                "exploration kernel instead (stat `fallback`): correct, but it mixes slower "
                "and costs more model evaluations. Increase `tune`, or the warm-up "
                "(`warmup=WarmUp(steps=...)`) for a better first surrogate.",
            )
        return True

    def _data_shortfall(self, chain: ChainState) -> list[str]:
        """What a chain lacked for a first fit, for the warning when tuning ends without one."""
        short = []
        if self.sharing.exploration() < self.explore_steps:
            short.append(f"{self.sharing.exploration()} exploration iterations, fewer than the "
                         f"{self.explore_steps} before a first fit")
        points = self._points_shortfall(chain)
        return short + ([points] if points else [])

    def _points_shortfall(self, chain: ChainState) -> str | None:
        """Too little to learn from, said in what the surrogate learns from (None: enough)."""
        if len(chain.training) >= self._min_points():
            return None
        return f"{len(chain.training)} training points, fewer than the {self._min_points()} a fit needs"

    def _enough_data(self, chain: ChainState) -> bool:
        """Enough exploration (of all chains sharing a store) and enough points to fit."""
        self._read_shared(chain)
        return (self.sharing.exploration() >= self.explore_steps
                and self._points_shortfall(chain) is None)

    def _after_tune_iteration(self, chain: ChainState, info: TransitionInfo) -> None:
        if chain.surrogate is None:
            if self._enough_data(chain) and self._fit_due(chain):
                self._refit(chain)
            return
        if self.exploration.paused:
            if self._fit_due(chain):
                self._refit(chain)
            return
        if self.exploration.stuck():
            self.exploration.pause()
            return
        self.refits.note(info.correction_acceptance)
        if self.refits.wants_refit(chain.iteration, self.coverage.tempers_tuning):
            self._refit(chain)

    def _fit_due(self, chain: ChainState) -> bool:
        """Fits (and retries after a failed one) at geometrically spaced iterations."""
        return self.refits.due(chain.iteration, self.coverage.tempers_tuning)

    def _late_tuning_states(self, chain: ChainState) -> tuple[np.ndarray, np.ndarray]:
        """The second half of the tuning states (past the initial transient) and their
        true potentials (NaN after a move on the surrogate alone, ``surrogate_tuning.py``): the
        chain's posterior sample for scales and checks."""
        start = len(chain.positions) // 2
        positions = np.array(chain.positions[start:]).reshape(-1, self.dim)
        return positions, np.array(chain.position_potentials[start:])

    def _use_metric(self, scale: Whitening) -> None:
        """The surrogate trajectories' mass matrix: the covariance of ``scale``."""
        self.kernel.use(metric=self.mass_matrix.metric(scale, self.rng.spawn(1)[0]))

    def _dense_chain_scale(self, chain: ChainState) -> bool:
        """Whether the surrogate is first sampled with a dense mass matrix
        (``MassMatrix.dense_at_first``, from the exploration's probe and the chain's
        late tuning states)."""
        probe = self.exploration.probe
        return self.mass_matrix.dense_at_first(None if probe is None else probe.cov,
                                               self._late_tuning_states(chain)[0])

    def _scale_frame(self) -> Whitening | None:
        """A scale known before sampling, in which mass matrices are estimated (None: the
        parameters' own; SparseGridHMC: its box's Gaussian)."""
        return None

    def _adapt_to_surrogate(
        self, chain: ChainState, chain_scale: Whitening, warm_up: SurrogateWarmUp
    ) -> None:
        """Mass matrix and step size from the surrogate's own draws (``MassMatrix.adapt``):
        no model evaluation."""
        field = self._surrogate_field(chain)
        step = self.mass_matrix.adapt(
            warm_up, chain_scale, self._late_tuning_states(chain)[0],
            sample=lambda step_size, n: self._warm_up(chain, chain_scale, field, step_size, n),
            use=self._use_metric, frame=self._scale_frame(),
        )
        self.kernel.use(step_size=step)

    def _posterior_scale(self, chain: ChainState, dense: bool) -> Whitening:
        positions = self._late_tuning_states(chain)[0]
        if len(np.unique(positions, axis=0)) <= self.dim:
            # A chain that has barely moved says nothing about the scale; the spread of
            # what was evaluated near the typical set is a safer guess than a degenerate
            # covariance.
            positions = chain.training.positions[self._relevant(chain)]
        return Whitening.from_samples(positions, dense=dense and positions.shape[0] > self.dim)

    def _refit(self, chain: ChainState) -> None:
        """Re-estimate the posterior scale, the mass matrix and the surrogate.

        A numerical failure anywhere on the way (a singular system, a non-finite fit,
        NaN reaching a decomposition) skips this fit: the chain keeps its previous
        kernel, the stat ``failed_fits`` counts it, and the next one is tried on the
        refit schedule. It never ends the run.
        """
        kept = (chain.surrogate, chain.learner, self.kernel.snapshot(), chain.whitening,
                self.coverage.sampling_state)
        self._read_shared(chain)
        try:
            chain.whitening = self._posterior_scale(chain, dense=True)
            chain_scale = (chain.whitening if self._dense_chain_scale(chain)
                           else self._posterior_scale(chain, dense=False))
            self._use_metric(chain_scale)
            surrogate = self._fit_surrogate(chain)
            surrogate, warm_up = self._without_spurious_well(chain, chain_scale, surrogate)
            first = chain.surrogate is None
            self._use_surrogate(chain, surrogate)
            self._choose_coverage(chain)
            self._adapt_to_surrogate(chain, chain_scale, warm_up)
        except (np.linalg.LinAlgError, ValueError, FloatingPointError) as err:
            (chain.surrogate, chain.learner, kernel, chain.whitening,
             self.coverage.sampling_state) = kept
            self.kernel.restore(kernel)
            # Try again on the refit schedule, not at every iteration.
            chain.counts.failed_fits += 1
            self.refits.failed(chain.iteration, err)
            if self.tune:  # stop_tuning reports the outcome of the final fit
                self._warn(
                    chain, WarningType.BAD_PARAMS,
                    f"surrogate fit failed at tuning iteration {chain.iteration} ({err}); "
                    "keeping the previous kernel and retrying later (stat `failed_fits`).",
                    level="debug",
                )
            return
        self.refits.fitted(chain.iteration, first)
        if first:  # exploration's kernel, kept for the fallback
            self.exploration.keep_exact_kernel(*kept[2][:2])
        self.exploration.resume()
        chain.counts.fits += 1

    def _warm_up(self, chain: ChainState, chain_scale: Whitening, field,
                 initial_step: float, n_samples: int = 0) -> SurrogateWarmUp:
        """HMC on ``field`` (``q -> (U~, dU~/dq)``) alone with the chain's metric: no
        model evaluation."""
        start = chain.current.q if chain.current is not None else chain_scale.mean
        return warm_up_on_surrogate(
            field, start, self.kernel.metric, self.kernel.step_size_adaptation(initial_step),
            self.kernel.path_length, self.rng, n_samples=n_samples,
            max_energy_error=self.kernel.max_energy_error,
        )

    def _without_spurious_well(
        self, chain: ChainState, chain_scale: Whitening, fitted
    ) -> tuple[Any, SurrogateWarmUp]:
        """The new fit, or the first tamer refit whose own draws are not in a spurious well.

        Each candidate is sampled (the warm-up's first phase, which the chosen one keeps);
        if every one has a well, the first fit, which follows the data best, is kept: far
        wells behind a barrier rarely reach the chain's trajectories, while a fit without
        hidden nodes, tried as a last resort, lost the black-box banana's shape (ESS
        800-2000 down to 36-315).
        """
        initial_step = self.kernel.step_adapt.current(False)
        n_samples = max(200, 4 * self.dim)
        first = None
        for candidate in itertools.chain([fitted], self._tamer_fits(chain)):
            warm_up = self._warm_up(
                chain, chain_scale, self.context.field(candidate), initial_step, n_samples
            )
            # (a gradient-only fit has no absolute level to compare with the data's)
            if not getattr(candidate, "has_level", True) or not self._in_spurious_well(
                chain, warm_up.potentials
            ):
                return candidate, warm_up
            first = first or (candidate, warm_up)
        return first

    def _tamer_fits(self, chain: ChainState):
        """Successively less flexible fits to the same data (``tamer_settings``)."""
        for settings in self.tamer_settings:
            try:
                yield self._fit_surrogate(chain, **settings)
            except (np.linalg.LinAlgError, ValueError):
                continue

    def _in_spurious_well(self, chain: ChainState, potentials: np.ndarray) -> bool:
        """Whether surrogate draws (their surrogate ``potentials``) lie far below every
        potential ever evaluated.

        The lowest evaluated potential is within a few units of the true minimum (a climb
        to the mode, or an exploration of the typical set), and a faithful surrogate's
        draws sit above its minimum. Far below, the surrogate has a well where it has no
        data: flexible fits with little regularisation make them (Student-t(3), d = 3,
        value-and-gradient fit with 500 nodes and a ridge of 1e-12 of its scale: a well
        15 below the mode, 4 sd from the nearest training point, held 99.9% of the
        surrogate's mass). The correction keeps the chain exact, but its proposals then
        head for the well and are rejected, and the regions around go unvisited.
        """
        floor = float(np.min(chain.training.potentials)) - self._well_margin()
        return bool(np.min(potentials, initial=np.inf) < floor)

    def _well_margin(self) -> float:
        """How far below what the data say a surrogate's draws may go before it is a well."""
        return 5.0 + 2.0 * np.sqrt(self.dim)

    def _use_surrogate(self, chain: ChainState, surrogate) -> None:
        """Make ``surrogate`` the chain's (subclasses reset what depends on it).

        An online policy keeps the fit as the chain's learner (``partial_fit``) and runs
        the trajectories on a fixed copy: the surrogate must not change within a
        transition, and a new one is swapped in only by the diminishing adaptation.
        """
        if self.policy.online:
            chain.learner = surrogate
            surrogate = copy.copy(surrogate)
        chain.surrogate = surrogate
        self.kernel.new_surrogate()

    def _online_failed(self, chain: ChainState, err: Exception) -> None:
        """A numerically broken online update: keep the last good surrogate, stop learning
        until the next batch fit (recursive least squares can lose positive definiteness
        on an ill-conditioned basis: 20-d linear inverse problem, condition number 2e8).
        Shared by the online learners (AdaptiveSurrogateHMC, VariationalHMC)."""
        chain.learner = None
        chain.counts.failed_fits += 1
        self._warn(
            chain, WarningType.BAD_PARAMS,
            f"an online update of the surrogate failed numerically ({err}); keeping the last "
            "good surrogate (stat `failed_fits`). The draws stay exact.",
            level="info" if self.tune else "warn",
        )

    def _surrogate_field(self, chain: ChainState):
        """``q -> (U~, dU~/dq)`` the surrogate kernels run on: the chain's surrogate at the
        current context, at the temperature that makes it cover the posterior
        (coverage.py), in a black box's draws lowered where its data thin out
        (draw_bound.py)."""
        return self.draw_bound.lower(
            tempered(self.context.field(chain.surrogate), self.coverage.temperature),
            chain.frozen,
        )
