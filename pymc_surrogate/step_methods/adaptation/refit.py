"""Refits during tune: when, on what data, and the checks before a fit drives the chain.

A refit re-estimates the posterior scale and the mass matrix, fits a new surrogate (the
step's ``SurrogateFit``, ``surrogate_fit.py``), rejects fits whose own draws fall into a
spurious well (trying the family's ``tamer_settings`` in turn), and re-adapts the mass
matrix (``mass_matrix.py``) and step size on the surrogate, at no model evaluation. The
schedule is ``RefitSchedule``'s; ``Refits`` is the step's adaptation of its surrogate in the
sense of an ``(init, update, final)`` triple: ``update`` after each tuning iteration,
``final`` when tuning ends.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import numpy as np
from pymc.stats.convergence import WarningType

from pymc_surrogate.core.adaptation import SurrogateWarmUp, warm_up_on_surrogate
from pymc_surrogate.core.types import TransitionInfo
from pymc_surrogate.step_methods.adaptation.access import ChainAccess
from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["Refits"]


class Refits:
    """A chain's surrogate refits in tune: the pipeline, for every step method.

    Parameters
    ----------
    fit : SurrogateFit
        The step's surrogate family: how a fit is made, and what it needs.
    learned : LearnedSurrogate
        The chain's training data, tuning states and surrogate (where a refit's new
        surrogate and scale go).
    schedule : RefitSchedule
        When the chain refits (the part that owns the schedule's state).
    policy : TrainingPolicy
        Which training points a fit learns from.
    tuning : Tuning
        The refit constants (``good_acceptance``, ``stuck_*``).
    dim : int
        The block's dimension.
    context : BlockContext
        The block's coordinates and the other blocks' values (the surrogate's field).
    kernel : SurrogateKernel
        The surrogate trajectories, whose metric and step size a refit re-adapts.
    mass_matrix : MassMatrix
        How the metric is estimated.
    coverage : Coverage
        The temperature a new fit is chosen at.
    exploration : Exploration
        The exact warm-up: paused, resumed or frozen as the fits go.
    sharing : SharedEvaluations
        The exploration iterations all chains ran (a first fit waits for them).
    explore_steps : int
        The warm-up's iterations before a first fit.
    """

    def __init__(self, fit, learned, schedule, policy, tuning, dim: int, context, kernel,
                 mass_matrix, coverage, exploration, sharing, explore_steps: int):
        self.fit = fit
        self.learned = learned
        self.schedule = schedule
        self.policy = policy
        self.tuning = tuning
        self.dim = dim
        self.context = context
        self.kernel = kernel
        self.mass_matrix = mass_matrix
        self.coverage = coverage
        self.exploration = exploration
        self.sharing = sharing
        self.explore_steps = explore_steps

    # ------------------------------------------------------------- the data
    def late_states(self) -> tuple[np.ndarray, np.ndarray]:
        """The second half of the tuning states and their true potentials (NaN after a
        move on the surrogate alone, ``surrogate_tuning.py``; ``LearnedSurrogate``)."""
        return self.learned.late_states()

    def relevant(self) -> np.ndarray:
        """Indices of the training points a fit learns from (``LearnedSurrogate.relevant``)."""
        return self.learned.relevant()

    def suggested_tune(self) -> int:
        """Tuning iterations after which a surrogate is usually fitted and refined."""
        return int(max(1000, 2 * self.explore_steps))

    def enough_data(self, access: ChainAccess) -> bool:
        """Enough exploration (of all chains sharing a store) and enough points to fit."""
        access.read_shared()
        return (self.sharing.exploration() >= self.explore_steps
                and self.fit.shortfall(access.chain, self.explore_steps) is None)

    def _data_shortfall(self, chain: ChainState) -> list[str]:
        """What a chain lacked for a first fit, for the warning when tuning ends without one."""
        short = []
        if self.sharing.exploration() < self.explore_steps:
            short.append(f"{self.sharing.exploration()} exploration iterations, fewer than the "
                         f"{self.explore_steps} before a first fit")
        points = self.fit.shortfall(chain, self.explore_steps)
        return short + ([points] if points else [])

    # ----------------------------------------------------- update and final
    def update(self, access: ChainAccess, info: TransitionInfo) -> None:
        """After a tuning iteration: a first fit, a refit on the schedule, or a pause of
        a surrogate that stopped moving the chain."""
        chain = access.chain
        tempered = self.coverage.tempers_tuning
        if self.learned.surrogate is None:
            if self.enough_data(access) and self.schedule.due(chain.iteration, tempered):
                access.refit()
            return
        if self.exploration.paused:
            if self.schedule.due(chain.iteration, tempered):
                access.refit()
            return
        if self.exploration.stuck():
            self.exploration.pause()
            return
        self.schedule.note(info.correction_acceptance)
        if self.schedule.wants_refit(chain.iteration, tempered):
            access.refit()

    def final(self, access: ChainAccess) -> bool:
        """The fit on all tuning data when tuning ends; False if the draws have no surrogate."""
        chain, warn = access.chain, access.warn
        if self.learned.surrogate is None and not self.enough_data(access):
            self.exploration.freeze(access.model_access(), access.rng)
            short = self._data_shortfall(chain)
            warn(
                WarningType.BAD_PARAMS,
                f"a chain ended tuning too early to fit a surrogate ({'; '.join(short)}). Its "
                "draws use the exact exploration kernel instead (stat `fallback`): correct, "
                "but it mixes slower and costs more model evaluations. Increase `tune` (to at "
                f"least {self.suggested_tune()} for this model).",
            )
            return False
        stuck = self.exploration.paused or self.exploration.stuck()
        access.refit()
        if self.learned.surrogate is None:
            self.exploration.freeze(access.model_access(), access.rng)
            warn(
                WarningType.BAD_PARAMS,
                f"no surrogate fit succeeded in a chain's {chain.iteration} tuning iterations "
                f"({len(self.learned.training)} training points; last failure: "
                f"{self.schedule.last_error}). Its draws use the exact exploration kernel instead "
                "(stat `fallback`): correct, but it mixes slower and costs more model "
                "evaluations. Increase `tune`, or check that the model's logp is smooth and "
                "finite near the posterior.",
            )
            return False
        if self.schedule.last_error is not None:
            warn(
                WarningType.BAD_PARAMS,
                f"the final surrogate fit of a chain failed ({self.schedule.last_error}); its "
                "draws use the surrogate fitted earlier in tuning, which may move the chain "
                "less well. Increase `tune` for more training data.",
            )
        if stuck:
            # A surrogate that stopped moving the chain in tune may do so again in the
            # draws; a fixed share of exact exploration steps keeps the chain exact and
            # moving (a mixture of two kernels that both leave the posterior invariant).
            self.exploration.freeze(access.model_access(), access.rng,
                                    probability=self.tuning.stuck_explore_probability)
            warn(
                WarningType.BAD_ACCEPTANCE,
                f"the surrogate moved a chain in fewer than {self.tuning.stuck_acceptance:.0%} of "
                f"its last {self.tuning.stuck_window} tuning iterations. "
                f"{self.tuning.stuck_explore_probability:.0%} of that chain's draws use the exact "
                "exploration kernel instead (stat `fallback`): correct, but it mixes slower "
                "and costs more model evaluations. Increase `tune`, or the warm-up "
                "(`warmup=WarmUp(steps=...)`) for a better first surrogate.",
            )
        return True

    # ------------------------------------------------------------- a refit
    def refit(self, access: ChainAccess) -> None:
        """Re-estimate the posterior scale, the mass matrix and the surrogate.

        A numerical failure anywhere on the way (a singular system, a non-finite fit,
        NaN reaching a decomposition) skips this fit: the chain keeps its previous
        kernel, the stat ``failed_fits`` counts it, and the next one is tried on the
        refit schedule. It never ends the run.
        """
        chain, learned = access.chain, self.learned
        kept = (learned.snapshot(), self.fit.learner, self.kernel.snapshot(),
                self.coverage.sampling_state)
        access.read_shared()
        try:
            learned.use_scale(self._posterior_scale(dense=True))
            states = self.late_states()[0]
            chain_scale = (learned.whitening
                           if self.fit.dense_at_first(self.mass_matrix, self.exploration.probe,
                                                      states)
                           else self._posterior_scale(dense=False))
            self._use_metric(chain_scale, access.rng)
            surrogate = self._fit(access)
            surrogate, warm_up = self._without_spurious_well(access, chain_scale, surrogate)
            first = learned.surrogate is None
            self.use_surrogate(surrogate)
            self.choose_coverage(access)
            self._adapt_to_surrogate(access, chain_scale, warm_up)
            access.adapted(chain_scale)
        except (np.linalg.LinAlgError, ValueError, FloatingPointError) as err:
            learned.restore(kept[0])
            self.fit.keep_learner(kept[1])
            self.kernel.restore(kept[2])
            self.coverage.sampling_state = kept[3]
            # Try again on the refit schedule, not at every iteration.
            learned.failed()
            self.schedule.failed(chain.iteration, err)
            if access.tune:  # stop_tuning reports the outcome of the final fit
                access.warn(
                    WarningType.BAD_PARAMS,
                    f"surrogate fit failed at tuning iteration {chain.iteration} ({err}); "
                    "keeping the previous kernel and retrying later (stat `failed_fits`).",
                    level="debug",
                )
            return
        self.schedule.fitted(chain.iteration, first)
        if first:  # exploration's kernel, kept for the fallback
            self.exploration.keep_exact_kernel(*kept[2][:2])
        self.exploration.resume()
        learned.fitted()

    def _fit(self, access: ChainAccess, **settings) -> Any:
        """A new fit of the step's family to the training points near the typical set."""
        keep = self.relevant()
        if self.fit.weighted:
            self.schedule.weigh_from(float(np.min(self.learned.training.potentials[keep])))
        return self.fit.fit(access.chain, keep, access.rng, **settings)

    def _posterior_scale(self, dense: bool) -> Whitening:
        return self.fit.posterior_scale(
            self.late_states()[0],
            lambda: self.learned.training.positions[self.relevant()], dense)

    def _use_metric(self, scale: Whitening, rng: np.random.Generator) -> None:
        """The surrogate trajectories' mass matrix: the covariance of ``scale``."""
        self.kernel.use(metric=self.mass_matrix.metric(scale, rng.spawn(1)[0]))

    def use_surrogate(self, surrogate) -> None:
        """Make ``surrogate`` the chain's; an online policy keeps it as the family's learner
        and runs the trajectories on a fixed copy (``SurrogateFit.keep_learner``)."""
        if self.policy.online:
            self.fit.keep_learner(surrogate)
            surrogate = copy.copy(surrogate)
        self.learned.use(surrogate)
        self.kernel.new_surrogate()
        self.fit.use(surrogate)

    def choose_coverage(self, access: ChainAccess) -> None:
        """The temperature of the surrogate just fitted (no model evaluation)."""
        keep, training = self.relevant(), self.learned.training
        message = self.coverage.choose(
            self.context.field(self.learned.surrogate), training.positions[keep],
            training.potentials[keep], access.tune,
        )
        if message:
            access.warn(WarningType.CONVERGENCE, message)

    def _adapt_to_surrogate(self, access: ChainAccess, chain_scale: Whitening,
                            warm_up: SurrogateWarmUp) -> None:
        """Mass matrix and step size from the surrogate's own draws (``MassMatrix.adapt``):
        no model evaluation."""
        field = access.field()
        step = self.mass_matrix.adapt(
            warm_up, chain_scale, self.late_states()[0],
            sample=lambda step_size, n: self._warm_up(access, chain_scale, field, step_size, n),
            use=lambda scale: self._use_metric(scale, access.rng),
            frame=self.fit.scale_frame(),
        )
        self.kernel.use(step_size=step)

    def _warm_up(self, access: ChainAccess, chain_scale: Whitening, field,
                 initial_step: float, n_samples: int = 0) -> SurrogateWarmUp:
        """HMC on ``field`` (``q -> (U~, dU~/dq)``) alone with the chain's metric: no
        model evaluation (the family may tune on a field of its own)."""
        chain = access.chain
        field = self.fit.warm_up_field(chain) or field
        start = chain.current.q if chain.current is not None else chain_scale.mean
        return warm_up_on_surrogate(
            field, start, self.kernel.metric, self.kernel.step_size_adaptation(initial_step),
            self.kernel.path_length, access.rng, n_samples=n_samples,
            max_energy_error=self.kernel.max_energy_error,
        )

    # ------------------------------------------------------ spurious wells
    def _without_spurious_well(
        self, access: ChainAccess, chain_scale: Whitening, fitted
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
        for candidate in itertools.chain([fitted], self._tamer_fits(access)):
            warm_up = self._warm_up(
                access, chain_scale, self.context.field(candidate), initial_step, n_samples
            )
            # (a gradient-only fit has no absolute level to compare with the data's)
            if not getattr(candidate, "has_level", True) or not self._in_spurious_well(
                warm_up.potentials
            ):
                return candidate, warm_up
            first = first or (candidate, warm_up)
        return first

    def _tamer_fits(self, access: ChainAccess):
        """Successively less flexible fits to the same data (the family's ``tamer_settings``)."""
        for settings in self.fit.tamer_settings:
            try:
                yield self._fit(access, **settings)
            except (np.linalg.LinAlgError, ValueError):
                continue

    def _in_spurious_well(self, potentials: np.ndarray) -> bool:
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
        margin = 5.0 + 2.0 * np.sqrt(self.dim)  # how far below the data a draw may go
        floor = float(np.min(self.learned.training.potentials)) - margin
        return bool(np.min(potentials, initial=np.inf) < floor)

    # ------------------------------------------------------ online learners
    def online_failed(self, access: ChainAccess, err: Exception) -> None:
        """A numerically broken online update: keep the last good surrogate, stop learning
        until the next batch fit (recursive least squares can lose positive definiteness
        on an ill-conditioned basis: 20-d linear inverse problem, condition number 2e8).
        Shared by the online learners (AdaptiveSurrogateHMC, VariationalHMC)."""
        self.fit.keep_learner(None)
        self.learned.failed()
        access.warn(
            WarningType.BAD_PARAMS,
            f"an online update of the surrogate failed numerically ({err}); keeping the last "
            "good surrogate (stat `failed_fits`). The draws stay exact.",
            level="info" if access.tune else "warn",
        )
