"""``SurrogateFit``: how a step's surrogate family is made and fitted at a refit.

What differs between the step methods at a refit is their surrogate family: what it learns
from (the model's values and gradients near the typical set; gradients only; the chain's
states; a designed grid) and the scale it is sampled in. Each step chooses a
``SurrogateFit`` (``SurrogateStep.fit``); the refits (``refit.py``) call it and do the rest
(the posterior scale, the checks for a spurious well, the mass matrix and step size on the
surrogate) the same way for all five. This default is the regression on the training data
that the random networks (SurrogateHMC, AdaptiveSurrogateHMC) use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_surrogate.step_methods.adaptation.learned_surrogate import LearnedSurrogate
from pymc_surrogate.step_methods.adaptation.training import TrainingPolicy
from pymc_surrogate.step_methods.evaluation.block_context import BlockContext
from pymc_surrogate.step_methods.part import ChainPart
from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.surrogates.base import with_params
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["SurrogateFit"]


@dataclass_state
class SurrogateFitState(DataClassState):
    """A family's own chain state: an online policy's learner."""

    learner: Any = None  # the fit that keeps learning (partial_fit); its copies drive the chain


class SurrogateFit(ChainPart):
    """A regression of the potential on the training data near the typical set, weighted.

    Parameters
    ----------
    estimator : Surrogate
        The step's ``surrogate=`` (unfitted): each fit is a copy with its settings, in the
        chain's whitening and with a random stream of its own.
    learned : LearnedSurrogate
        The chain's training data and surrogate (the part the fits learn from).
    policy : TrainingPolicy
        What the step learns from and how the training points are weighted.
    context : BlockContext
        The block's coordinates and, in a compound step, the other blocks' values.
    dim : int
        The block's dimension.
    has_gradient : bool
        Whether the training data carry the model's gradient.
    settings : dict, optional
        Settings every fit of this family is made with (e.g. ``max_training_error``).
    tamer_settings : tuple of dict, optional
        Settings of successively less flexible fits to the same data, tried in turn when a
        fit's own draws fall into a spurious well (``refit.py``), tamest last.
    """

    _state_class = SurrogateFitState

    def __init__(self, estimator: Any, learned: LearnedSurrogate, policy: TrainingPolicy,
                 context: BlockContext, dim: int, has_gradient: bool,
                 settings: dict | None = None, tamer_settings: tuple[dict, ...] = ()):
        self.reset()
        self.estimator = estimator
        self.learned = learned
        self.policy = policy
        self.context = context
        self.dim = dim
        self.has_gradient = has_gradient
        self.settings = dict(settings or {})
        self.tamer_settings = tamer_settings

    def new(self, whitening: Whitening, random_state, **settings) -> Any:
        """A new, unfitted copy of the estimator in ``whitening``."""
        return with_params(self.estimator, **{**self.settings, **settings},
                           whitening=whitening, random_state=random_state)

    #: Whether the fit weighs its points by their potentials relative to the lowest
    #: (the online updates then weigh new points the same way).
    weighted = True

    def fit(self, chain: ChainState, keep: np.ndarray, rng: np.random.Generator,
            **settings) -> Any:
        """A new fit to the training rows ``keep``, weighted by their potentials relative
        to the lowest of them."""
        training = self.learned.training
        inputs, whitening = self.context.training_inputs(training.positions[keep],
                                                         training.contexts[keep])
        surrogate = self.new(whitening, rng.spawn(1)[0], **settings)
        potentials = training.potentials[keep]
        weights = self.policy.weights(potentials, float(np.min(potentials)), self.dim)
        return surrogate.fit(inputs, potentials, training.gradients[keep],
                             sample_weight=weights)

    def min_points(self) -> int:
        """The training points a first fit needs."""
        return self.policy.min_points(self.dim, self.has_gradient)

    def shortfall(self, chain: ChainState, explore_steps: int) -> str | None:
        """Too little to learn from, said in what the family learns from (None: enough)."""
        if len(self.learned.training) >= self.min_points():
            return None
        return (f"{len(self.learned.training)} training points, fewer than the {self.min_points()} "
                "a fit needs")

    def use(self, surrogate: Any) -> None:
        """Hook: ``surrogate`` has become the chain's."""

    # ------------------------------------------------------- an online learner
    def keep_learner(self, learner: Any) -> None:
        """``learner`` (a new fit, or None: stop learning) goes on learning online; the
        trajectories run on fixed copies of it (``snapshot_at``), swapped in only by the
        vanishing adaptation: the surrogate must not change within a transition."""
        self.learner = learner

    def learn(self, point, weight_reference: float) -> None:
        """A new evaluation into the learner (``partial_fit``), weighted as the batch fit
        weighs its points (relative to ``weight_reference``) so that the online fit
        continues it. Only where the posterior lives, as the batch fit: one far-out
        rejected proposal, 1e3 above the typical set, would otherwise bend the whole fit.
        Raises the numerical errors of a broken update."""
        if self.learner is None:
            return
        weight = self.online_weight(point, weight_reference)
        if weight is None:
            return
        self.learner.partial_fit(self.context.join(point.q)[None], np.array([point.potential]),
                                 sample_weight=np.array([weight]))

    def online_weight(self, point, weight_reference: float) -> float | None:
        """The weight of a new point for the online learner, as the batch fit weighs its
        points; None above the energy window over the lowest training point."""
        lowest = float(np.min(self.learned.training.potentials))
        if point.potential > lowest + self.policy.energy_window(self.dim):
            return None
        return self.policy.weights(point.potential, weight_reference, self.dim)

    def snapshot_at(self, q: np.ndarray) -> Any:
        """A fixed copy of the learner's fit, its lazily refreshed weights checked at ``q``
        (here, not inside a trajectory). Raises where it is not finite."""
        candidate = self.learner.snapshot()
        value, grad = self.context.field(candidate)(q)
        if not (np.isfinite(value) and np.all(np.isfinite(grad))):
            raise FloatingPointError("the updated surrogate is not finite")
        return candidate

    def prepare_refit(self, access) -> bool:
        """Hook before a refit (``Tuner.refit``): False skips it."""
        return True

    def reframe(self, to_new: Callable[[np.ndarray], np.ndarray]) -> None:
        """Hook: what the family keeps in the chain's coordinates, into a new frame's."""

    def forget_the_old_data(self) -> None:
        """Hook: after ``pm.set_data``, what the family built from the old data goes."""

    # --------------------------------------------------------------- the scale
    def scale_frame(self) -> Whitening | None:
        """A scale known before sampling, in which mass matrices are estimated (None: the
        parameters' own)."""
        return None

    def posterior_scale(self, states: np.ndarray, evaluated: Callable[[], np.ndarray],
                        dense: bool) -> Whitening:
        """The posterior scale from the chain's late tuning ``states``; from the points
        ``evaluated()`` near the typical set where the chain has barely moved (its states
        say nothing about the scale, and their spread is a safer guess than a degenerate
        covariance)."""
        if len(np.unique(states, axis=0)) <= self.dim:
            states = evaluated()
        return Whitening.from_samples(states, dense=dense and states.shape[0] > self.dim)

    def dense_at_first(self, mass_matrix, probe, states: np.ndarray) -> bool:
        """Whether the surrogate is first sampled with a dense mass matrix
        (``MassMatrix.dense_at_first``, from the exploration's probe and the states)."""
        return mass_matrix.dense_at_first(None if probe is None else probe.cov, states)

    def warm_up_field(self, chain: ChainState) -> Callable | None:
        """The field the step size and metric are tuned on (None: the kernels' own)."""
        return None
