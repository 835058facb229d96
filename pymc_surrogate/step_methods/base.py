"""The PyMC glue shared by every surrogate step method."""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.optimize
from rich.progress import TextColumn
from rich.table import Column

from pymc.blocking import RaveledVars
from pymc.exceptions import SamplingError
from pymc.model import modelcontext
from pymc.stats.convergence import SamplerWarning, WarningType
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, StepMethodState
from pymc.step_methods.hmc.quadpotential import (
    QuadPotentialDiag,
    QuadPotentialDiagAdapt,
    QuadPotentialFull,
)
from pymc.step_methods.state import dataclass_state
from pymc.step_methods.step_sizes import DualAverageAdaptation
from pymc.util import get_random_generator, get_value_vars_from_user_vars
from pymc.vartypes import continuous_types

from pymc_surrogate.core.adaptation import SurrogateWarmUp, warm_up_on_surrogate
from pymc_surrogate.core.tail_jumps import (
    CauchyJumps,
    TailJumpCheck,
    assess_tail_jumps,
    independence_acceptance,
)
from pymc_surrogate.core.transitions import (
    ChainPoint,
    TransitionInfo,
    differential_evolution_transition,
    exact_hmc_transition,
    independence_transition,
)
from pymc_surrogate.step_methods.block_context import BlockContext
from pymc_surrogate.step_methods.model_functions import ModelEvaluationError, ModelFunctions
from pymc_surrogate.step_methods.training_set import TrainingSet
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["SurrogateStep", "ChainState"]


@dataclass
class ChainState:
    """Everything one chain learns: with ``cores=1`` PyMC reuses the step object for every
    chain and restores only ``_state_class`` fields, so all of it lives here."""

    training: TrainingSet
    metric: Any
    step_adapt: DualAverageAdaptation
    explore_adapt: DualAverageAdaptation
    path_adapt: DualAverageAdaptation | None = None  # trajectory length, on the true acceptance
    positions: list = field(default_factory=list)  # chain states during tune (for scale)
    position_potentials: list = field(default_factory=list)  # their true potentials
    current: ChainPoint | None = None
    current_key: bytes | None = None
    surrogate: Any = None
    whitening: Whitening | None = None
    frozen: bool = False
    iteration: int = 0
    last_fit_iteration: int = 0
    accept_since_fit: list = field(default_factory=list)
    n_fits: int = 0
    total_logp_evals: int = 0
    total_grad_evals: int = 0
    draw_divergences: int = 0
    explore_history: np.ndarray | None = None  # frozen DE history when exploring in draws
    prior_draws: np.ndarray | None = None  # seeds the DE history early in exploration
    recent_moves: deque = field(default_factory=deque)  # accepted flags, last surrogate steps
    paused: bool = False  # tune: surrogate stuck, exploring until the next fit
    explore_probability: float = 0.0  # draws: share of exploration steps (stuck surrogate)
    weight_reference: float = 0.0  # the lowest potential of the last fit (for weights)
    learner: Any = None  # online learner of adaptive surrogates
    n_adaptations: int = 0
    surrogate_start: int = 0  # iteration of the first fit
    tail_jumps: CauchyJumps | None = None  # draws: independence proposals for the tails
    tail_jump_probability: float = 0.0
    tail_jump_check: TailJumpCheck | None = None
    last_fit_error: str | None = None  # why the last fit failed (None after a good one)
    # Warnings for the next draws' `warning` stat: PyMC logs that stat in the parent process
    # with any `cores`, where a warnings.warn in a worker process would be lost.
    pending_warnings: deque = field(default_factory=deque)


@dataclass_state
class SurrogateStepState(StepMethodState):
    tune: bool
    chain: Any


class SurrogateStep(ArrayStepShared):
    """Base class: compiles the true model, runs exploration, keeps training data.

    Subclasses choose a surrogate (``_make_surrogate``, ``_fit_surrogate``) and the
    transition that uses it (``_surrogate_step``). See ``SurrogateHMC`` for the parameters.
    """

    name = "surrogate_step"
    default_blocked = True
    _state_class = SurrogateStepState

    stats_dtypes_shapes = {
        "accept": (np.float64, []),
        "accepted": (np.float64, []),
        "diverging": (bool, []),
        "energy": (np.float64, []),
        "energy_error": (np.float64, []),
        "surrogate_energy_error": (np.float64, []),
        "step_size": (np.float64, []),
        "n_steps": (np.int64, []),
        "model_logp": (np.float64, []),
        "model_evals": (np.int64, []),
        "gradient_evals": (np.int64, []),
        "total_model_evals": (np.int64, []),
        "total_gradient_evals": (np.int64, []),
        "training_size": (np.int64, []),
        "uses_surrogate": (bool, []),
        "fallback": (bool, []),
        "tail_jump": (bool, []),
        "surrogate_fits": (np.int64, []),
        "diverging_total": (np.int64, []),
        "perf_counter_diff": (np.float64, []),
        "perf_counter_start": (np.float64, []),
        "warning": (SamplerWarning, None),
    }

    def __init__(
        self,
        vars=None,
        *,
        target_accept: float = 0.8,
        path_length: float = 2.8,
        dense_mass: bool = False,
        explore_steps: int | str = "auto",
        max_energy_error: float = 1000.0,
        tail_jumps: float | str = "auto",
        use_gradient: bool | None = None,
        model=None,
        blocked: bool = True,
        rng=None,
        initial_point: dict | None = None,
        compile_kwargs: dict | None = None,
        **kwargs,
    ):
        model = modelcontext(model)
        if vars is None:
            vars = model.continuous_value_vars
        else:
            vars = get_value_vars_from_user_vars(vars, model)
        if not vars:
            discrete_names = [v.name for v in model.value_vars if v.dtype not in continuous_types]
            raise ValueError(
                f"{type(self).__name__} needs continuous variables, and this model has none"
                + (f" (its free variables {', '.join(discrete_names)} are discrete; sample them "
                   "with pm.Metropolis or pm.CategoricalGibbsMetropolis)." if discrete_names else ".")
            )
        sizes = [int(np.size((initial_point or model.initial_point())[v.name])) for v in vars]
        if sum(sizes) == 0:
            raise ValueError(
                f"{type(self).__name__}: the variables {', '.join(v.name for v in vars)} have no "
                "entries (size 0); there is nothing to sample."
            )
        discrete = [v.name for v in vars if v.dtype not in continuous_types]
        if discrete:
            raise ValueError(
                f"{type(self).__name__} samples continuous variables only, but "
                f"{', '.join(discrete)} {'is' if len(discrete) == 1 else 'are'} discrete. "
                "Assign discrete variables to another step, e.g. "
                f"pm.sample(step=[{type(self).__name__}([...continuous...]), pm.Metropolis([...])])."
            )
        if kwargs:
            raise TypeError(f"Unexpected arguments for {type(self).__name__}: {sorted(kwargs)}.")
        _check_open_unit("target_accept", target_accept)
        _check_positive("path_length", path_length)
        _check_positive("max_energy_error", max_energy_error)
        if tail_jumps != "auto" and not (
            isinstance(tail_jumps, int | float | np.integer | np.floating) and 0 <= tail_jumps < 1
        ):
            raise ValueError(
                "tail_jumps must be 'auto' or a probability in [0, 1) (0 turns them off); "
                f"got {tail_jumps!r}."
            )
        if explore_steps != "auto" and (
            not isinstance(explore_steps, int | np.integer) or explore_steps < 0
        ):
            raise ValueError(
                f"explore_steps must be a non-negative integer or 'auto'; got {explore_steps!r}."
            )

        if initial_point is None:
            initial_point = model.initial_point()
        self._model = model
        self.functions = ModelFunctions(model, vars, initial_point, use_gradient, compile_kwargs)
        # (name, shape) of each value variable in the raveled q, for error messages
        self._layout = [(v.name, np.shape(initial_point[v.name])) for v in vars]
        self.dim = int(sum(np.size(initial_point[v.name]) for v in vars))
        self.target_accept = target_accept
        self.path_length = path_length
        self.dense_mass = dense_mass
        self.max_energy_error = max_energy_error
        self.tail_jumps = tail_jumps if tail_jumps == "auto" else float(tail_jumps)
        self.explore_steps = (
            self._default_explore_steps() if explore_steps == "auto" else int(explore_steps)
        )
        self.tune = True
        super().__init__(vars, self.functions.shared, blocked=blocked, rng=rng)
        self.context = BlockContext(self.functions.shared, self.dim, type(self).__name__)
        self.chain = self._new_chain()

    # -------------------------------------------------------------- settings
    @property
    def has_gradient(self) -> bool:
        return self.functions.has_gradient

    def _default_explore_steps(self) -> int:
        # Exact HMC gathers d+1 equations at every leapfrog point, so a short run gives
        # a good fit; a random walk gives one equation a step and mixes slowly.
        if self.functions.has_gradient:
            return 60
        return int(max(300, 30 * self.dim))

    def _min_training_points(self) -> int:
        return 2 * self.dim + 10 if self.has_gradient else 4 * self.dim + 20

    # ----------------------------------------------------------- chain state
    def _new_chain(self) -> ChainState:
        initial_step = 0.25 / self.dim**0.25
        metric = QuadPotentialDiagAdapt(
            self.dim, np.zeros(self.dim), np.ones(self.dim), 10,
            early_update=self._early_mass_update, rng=self.rng.spawn(1)[0],
        )
        return ChainState(
            training=TrainingSet(self.dim, self.context.dim),
            recent_moves=deque(maxlen=self._stuck_window),
            metric=metric,
            step_adapt=self._step_size_adaptation(initial_step),
            explore_adapt=DualAverageAdaptation(1.0, 0.3, 0.05, 0.75, 10),
        )

    def _step_size_adaptation(self, initial_step: float) -> DualAverageAdaptation:
        """PyMC's dual averaging toward ``target_accept``, with NUTS's settings."""
        return DualAverageAdaptation(initial_step, self.target_accept, 0.05, 0.75, 10)

    def reset_tuning(self, start=None):
        self.chain = self._new_chain()

    def set_rng(self, rng):
        """PyMC 5: ``pm.sample`` hands each chain its own generator before it starts."""
        # Every child stream must follow it, or chains share the metric's momentum draws.
        self.rng = get_random_generator(rng, copy=False)
        self.chain.metric.set_rng(self.rng.spawn(1)[0])

    def setup_chain(self, rng, tune: int, draws: int) -> None:
        """PyMC 6: replaces ``set_rng`` (which it never calls), in every process."""
        self.set_rng(rng)

    def stop_tuning(self):
        self.tune = False
        chain = self.chain
        if chain.frozen:
            return
        chain.frozen = True
        name = type(self).__name__
        if chain.surrogate is None and not self._enough_data(chain):
            chain.explore_history = self._explore_history(chain)
            short = []
            if chain.iteration < self.explore_steps:
                short.append(f"{chain.iteration} iterations, fewer than the {self.explore_steps} "
                             "exploration steps before a first fit")
            if len(chain.training) < self._min_training_points():
                short.append(f"{len(chain.training)} training points, fewer than the "
                             f"{self._min_training_points()} a fit needs")
            self._warn(
                chain, WarningType.BAD_PARAMS,
                f"a chain ended tuning too early to fit a surrogate ({'; '.join(short)}). Its "
                "draws use the exact exploration kernel instead (stat `fallback`): correct, "
                "but it mixes slower and costs more model evaluations. Increase `tune` (to at "
                f"least {self._suggested_tune()} for this model).",
            )
            return
        stuck = chain.paused or self._surrogate_stuck(chain)
        self._refit(chain, final=True)
        if chain.surrogate is None:
            chain.explore_history = self._explore_history(chain)
            self._warn(
                chain, WarningType.BAD_PARAMS,
                f"no surrogate fit succeeded in a chain's {chain.iteration} tuning iterations "
                f"({len(chain.training)} training points; last failure: "
                f"{chain.last_fit_error}). Its draws use the exact exploration kernel instead "
                "(stat `fallback`): correct, but it mixes slower and costs more model "
                "evaluations. Increase `tune`, or check that the model's logp is smooth and "
                "finite near the posterior.",
            )
            return
        if chain.last_fit_error is not None:
            self._warn(
                chain, WarningType.BAD_PARAMS,
                f"the final surrogate fit of a chain failed ({chain.last_fit_error}); its "
                "draws use the surrogate fitted earlier in tuning, which may move the chain "
                "less well. Increase `tune` for more training data.",
            )
        if stuck:
            # A surrogate that stopped moving the chain in tune may do so again in the
            # draws; a fixed share of exact exploration steps keeps the chain exact and
            # moving (a mixture of two kernels that both leave the posterior invariant).
            chain.explore_probability = self._stuck_explore_probability
            chain.explore_history = self._explore_history(chain)
            self._warn(
                chain, WarningType.BAD_ACCEPTANCE,
                f"the surrogate moved a chain in fewer than {self._stuck_acceptance:.0%} of "
                f"its last {self._stuck_window} tuning iterations. "
                f"{self._stuck_explore_probability:.0%} of that chain's draws use the exact "
                "exploration kernel instead (stat `fallback`): correct, but it mixes slower "
                "and costs more model evaluations. Increase `tune`, or `explore_steps` for "
                "a better first surrogate.",
            )
        self._choose_tail_jumps(chain)

    def _suggested_tune(self) -> int:
        """Tuning iterations after which a surrogate is usually fitted and refined."""
        return int(max(1000, 2 * self.explore_steps))

    def _warn(self, chain: ChainState, kind: WarningType, message: str,
              level: str = "warn") -> None:
        """Queue a warning for the next draws' ``warning`` stat (one per draw).

        PyMC logs that stat with the ``pymc`` logger in the parent process, for every
        chain and with any ``cores``; ``level`` is a logging level name ("debug", "info",
        "warn", "error").
        """
        chain.pending_warnings.append(
            SamplerWarning(kind, f"{type(self).__name__}: {message}", level, chain.iteration)
        )

    # Tail jumps (core/tail_jumps.py): with tail_jumps="auto", a chain whose posterior has
    # tails its tuning barely explored gets _tail_jump_probability of its draws as
    # independence proposals, decided on _tail_jump_trials true evaluations when tuning
    # ends. The trials are made only if the surrogate expects the jumps to be accepted as
    # often as the check will ask of the true model (no model evaluation; on the black-box
    # PDE, surrogate 0.022-0.043 against true 0.032-0.039, the 60 solves are then saved;
    # in d >= 20 generally).
    _tail_jump_probability = 0.2
    _tail_jump_trials = 60
    _tail_jump_min_acceptance = 0.05

    def _choose_tail_jumps(self, chain: ChainState) -> None:
        """Set the draws' share of tail jumps (``tail_jumps``): fixed, or measured.

        The trials are model evaluations after the final fit (in ``total_model_evals``,
        in no draw's ``model_evals``) that do not move the chain. A model that raises at
        one of them (a solver that fails far from the data) gets no jumps: the draws would
        meet such points too. Nor does a chain whose surrogate had stopped moving it in
        tuning: its tuning states are no posterior sample to measure tails against (rough
        potential, d = 2: 22 distinct states with a third of the posterior's spread, the
        check said yes, the jumps were accepted 7% of the time and sent the chain where its
        surrogate had no data: ESS 30 against 300 for the other chain).
        """
        states, potentials = self._late_tuning_states(chain)
        if self.tail_jumps == 0 or len(states) <= self.dim:
            return
        chain.tail_jumps = CauchyJumps(chain.whitening)
        if self.tail_jumps != "auto":
            chain.tail_jump_probability = self.tail_jumps
            return
        if chain.explore_probability > 0:
            return
        # From a child stream: a chain the check leaves without jumps draws exactly what
        # it would have drawn with tail_jumps=0.
        proposals = chain.tail_jumps.draw(self.rng.spawn(1)[0], size=self._tail_jump_trials)
        field = self._surrogate_field(chain)
        thinned = states[:: max(1, len(states) // 200)]
        expected = independence_acceptance(
            chain.tail_jumps, thinned, [field(q)[0] for q in thinned],
            proposals, [field(q)[0] for q in proposals],
        )
        if expected < self._tail_jump_min_acceptance:
            return
        try:
            # Not training data: AdaptiveSurrogateHMC would learn from them in the draws.
            values = [
                self._evaluate(chain, q, with_grad=False, record=False).potential
                for q in proposals
            ]
        except ModelEvaluationError:
            return
        chain.tail_jump_check = check = assess_tail_jumps(
            chain.tail_jumps, states, potentials, proposals, values,
            min_acceptance=self._tail_jump_min_acceptance,
        )
        if check.worthwhile:
            chain.tail_jump_probability = self._tail_jump_probability
            self._warn(
                chain, WarningType.CONVERGENCE,
                f"heavy tails (posterior mass {check.mass_beyond:.1g} beyond three times the "
                "95th-percentile distance of a chain's tuning states); "
                f"{self._tail_jump_probability:.0%} of that chain's draws are tail jumps (stat "
                f"`tail_jump`), accepted about {check.acceptance:.0%} of the time.",
                level="info",
            )

    def _jumps_now(self, chain: ChainState) -> bool:
        return (
            chain.frozen
            and chain.tail_jump_probability > 0
            and self.rng.uniform() < chain.tail_jump_probability
        )

    # A surrogate that moves the chain in fewer than _stuck_acceptance of the last
    # _stuck_window steps sends its proposals where the posterior is not (seen on the
    # black-box PDE after a poor early fit: acceptance 0 for the rest of tuning, and the
    # refits, fed only points around the stuck state, never recover).
    _stuck_window = 30
    _stuck_acceptance = 0.05
    _stuck_explore_probability = 0.25

    def _surrogate_stuck(self, chain: ChainState) -> bool:
        moves = chain.recent_moves
        return len(moves) >= self._stuck_window and np.mean(moves) < self._stuck_acceptance

    def _explores_now(self, chain: ChainState) -> bool:
        if chain.surrogate is None:
            return True
        if not chain.frozen:
            return chain.paused
        return chain.explore_probability > 0 and self.rng.uniform() < chain.explore_probability

    # --------------------------------------------------------------- the step
    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list[dict[str, Any]]]:
        start = time.perf_counter()
        chain = self.chain
        q = q0.data.astype(np.float64, copy=False)
        logp_before, grad_before = chain.total_logp_evals, chain.total_grad_evals
        current = self._current_point(chain, q)

        exploring = self._explores_now(chain)
        jumping = not exploring and self._jumps_now(chain)
        if jumping:
            info = independence_transition(
                current, lambda q: self._evaluate(chain, q, with_grad=False),
                chain.tail_jumps, self.rng,
            )
        elif exploring:
            info = self._explore_step(chain, current)
        else:
            info = self._surrogate_step(chain, current)
            chain.recent_moves.append(info.accepted)

        adapting = self.tune and not chain.frozen
        if adapting:
            if exploring and not self.has_gradient:
                chain.explore_adapt.update(info.adapt_stat, True)
            elif not (exploring and chain.surrogate is not None):
                # the step size of surrogate trajectories learns from surrogate steps only
                chain.step_adapt.update(info.adapt_stat, True)
            if not exploring and chain.path_adapt is not None:
                chain.path_adapt.update(info.accept_prob, True)
            if chain.surrogate is None and self.has_gradient:
                chain.metric.update(info.point.q, info.point.grad, True)
            chain.positions.append(info.point.q)
            chain.position_potentials.append(info.point.potential)
            self._after_tune_iteration(chain, info)
        self._after_iteration(chain, info)
        chain.iteration += 1
        chain.current = info.point
        chain.current_key = self._key(info.point.q)

        warning = None
        if info.diverging and not self.tune:
            chain.draw_divergences += 1
            warning = SamplerWarning(
                WarningType.DIVERGENCE,
                "Energy error above max_energy_error or a non-finite energy.",
                "debug",
                chain.iteration,
            )
        if chain.pending_warnings:
            # One warning a draw; a divergence is still counted by the `diverging` stat.
            warning = chain.pending_warnings.popleft()
        # The exact exploration kernel where a surrogate should have moved the chain: in the
        # draws, while a stuck surrogate is set aside, or after a failed fit (not the
        # planned exploration before the first fit).
        fallback = exploring and (
            chain.frozen or chain.paused or chain.last_fit_error is not None
        )
        stats = {
            "accept": info.accept_prob,
            "accepted": float(info.accepted),
            "diverging": bool(info.diverging),
            "energy": info.energy,
            "energy_error": info.energy_error,
            "surrogate_energy_error": info.surrogate_energy_error,
            "step_size": info.step_size,
            "n_steps": info.n_steps,
            "model_logp": -info.point.potential,
            "model_evals": chain.total_logp_evals - logp_before,
            "gradient_evals": chain.total_grad_evals - grad_before,
            "total_model_evals": chain.total_logp_evals,
            "total_gradient_evals": chain.total_grad_evals,
            "training_size": len(chain.training),
            "uses_surrogate": not (exploring or jumping),
            "fallback": fallback,
            "tail_jump": jumping,
            "surrogate_fits": chain.n_fits,
            "diverging_total": chain.draw_divergences,
            "perf_counter_diff": time.perf_counter() - start,
            "perf_counter_start": start,
            "warning": warning,
        }
        return RaveledVars(info.point.q, q0.point_map_info), [stats]

    # ------------------------------------------------------- model evaluation
    def _key(self, q: np.ndarray) -> bytes:
        # Inside a CompoundStep other blocks change between our steps: the cached logp
        # is only valid for the same q *and* the same values of everything else.
        parts = [q.tobytes()]
        parts += [np.asarray(s.get_value(borrow=True)).tobytes() for s in self.shared.values()]
        return b"".join(parts)

    def _current_point(self, chain: ChainState, q: np.ndarray) -> ChainPoint:
        key = self._key(q)
        if chain.current is not None and chain.current_key == key:
            return chain.current
        point = self._evaluate(chain, q, with_grad=self.has_gradient and not chain.frozen)
        if not np.isfinite(point.potential):
            raise SamplingError(
                f"{type(self).__name__}: the model's logp is {-point.potential} at the "
                "starting point of the chain. Check the initial values (model.debug(), "
                "model.point_logps()) or pass `initvals` to pm.sample."
            )
        return point

    def _evaluate(
        self, chain: ChainState, q: np.ndarray, with_grad: bool, record: bool = True
    ) -> ChainPoint:
        """Evaluate the true model at ``q``, count it, and keep it as training data (unless
        ``record`` is False: a diagnostic evaluation, e.g. the heavy-tail check's)."""
        q = self.functions.representable(q)
        try:
            if with_grad:
                logp, grad = self.functions.logp_and_grad(q)
                chain.total_grad_evals += 1
                potential, grad_u = -logp, -grad
            else:
                logp = self.functions.logp(q)
                potential, grad_u = -logp, None
        except Exception as err:
            raise ModelEvaluationError(
                f"{type(self).__name__}: the model's logp raised at sampler iteration "
                f"{chain.iteration} ({'tune' if self.tune else 'draw'} phase) "
                f"at {self._describe(q)}: "
                f"{type(err).__name__}: {err}"
            ) from err
        chain.total_logp_evals += 1
        if potential == -np.inf:
            # Accepted, such a point would absorb the chain: every proposal loses against it.
            raise SamplingError(
                f"{type(self).__name__}: the model's logp is +inf at {self._describe(q)} "
                f"(sampler iteration {chain.iteration}, {'tune' if self.tune else 'draw'} "
                "phase; values of the model's value variables, transformed ones in their "
                "unconstrained space). An infinite density cannot be sampled: the chain "
                "would stay at that point forever. It usually comes from a pm.Potential or a "
                "custom logp returning +inf (e.g. -log(0)) or a density unbounded at a "
                "boundary. Make the model's logp finite there (model.point_logps() at these "
                "values shows which term is infinite)."
            )
        if np.isnan(potential):
            potential = np.inf  # NaN logp is a rejection, like -inf
        point = ChainPoint(q, potential, grad_u)
        if record and self._keeps_training_data(chain) and np.isfinite(potential):
            chain.training.append(q, potential, grad_u, self.context.values())
            self._on_evaluation(chain, point)
        return point

    def _describe(self, q: np.ndarray) -> str:
        """``q`` split into the step's variables, e.g. ``"x = [0.1 2.3], s_log__ = -1.2"``."""
        parts, start = [], 0
        for name, shape in self._layout:
            size = int(np.prod(shape, dtype=int))
            value = np.reshape(q[start:start + size], shape)
            parts.append(f"{name} = {np.array2string(np.asarray(value), precision=4, threshold=8)}")
            start += size
        return ", ".join(parts)

    def _on_evaluation(self, chain: ChainState, point: ChainPoint) -> None:
        """Hook: a new finite model evaluation was added to the training set."""

    def _keeps_training_data(self, chain: ChainState) -> bool:
        return not chain.frozen

    # ------------------------------------------------------------ exploration
    def _explore_step(self, chain: ChainState, current: ChainPoint) -> TransitionInfo:
        """Exact kernels used before a surrogate exists: HMC, or DE-MCz without gradients."""
        if self.has_gradient:
            if current.grad is None:
                current = self._evaluate(chain, current.q, with_grad=True)
            if chain.iteration == 0 and self.tune and self._start_at_mode:
                current = self._climb_to_mode(chain, current)
            return exact_hmc_transition(
                current,
                lambda q: self._evaluate(chain, q, with_grad=True),
                chain.metric,
                chain.step_adapt.current(self.tune and not chain.frozen),
                min(self.path_length, self._explore_path_length),
                self.max_energy_error,
                self.rng,
                max_steps=self._explore_max_steps,
            )
        history = chain.explore_history
        if history is None:
            history = self._explore_history(chain)
        return differential_evolution_transition(
            current,
            lambda q: self._evaluate(chain, q, with_grad=False),
            history,
            # Dual averaging is built for HMC step sizes and overshoots early; a random
            # walk's scale factor (1 is DE-MCz's optimum) never needs to leave [0.01, 3].
            float(np.clip(chain.explore_adapt.current(self.tune and not chain.frozen), 0.01, 3.0)),
            self.rng,
        )

    # Tuning starts with a short quasi-Newton climb (gradient models only).
    _start_at_mode = True
    _mode_iterations = 50

    def _climb_to_mode(self, chain: ChainState, start: ChainPoint) -> ChainPoint:
        """A few L-BFGS iterations toward the mode before the first exploration step.

        Warm-up draws are discarded, so where tuning starts is free to choose. Starting
        near the mode skips the long transient of HMC from a poor initial point (at a tiny
        step with a unit mass matrix), and every evaluation on the way is training data
        near the posterior. Bounded to ``_mode_iterations`` so that a posterior whose
        density is unbounded (a funnel) cannot send the climb far.
        """
        best = [start]

        def potential_and_grad(q):
            point = self._evaluate(chain, q, with_grad=True)
            if np.isfinite(point.potential) and point.potential < best[0].potential:
                best[0] = point
            if not np.isfinite(point.potential):
                return 1e300, np.zeros_like(q)
            return point.potential, point.grad

        scipy.optimize.minimize(
            potential_and_grad, start.q, jac=True, method="L-BFGS-B",
            options={"maxiter": self._mode_iterations, "maxfun": 2 * self._mode_iterations},
        )
        return best[0]

    # Exact trajectories pay one model evaluation a step: exploration only needs to reach
    # and cover the typical set, not antithetic draws.
    _explore_path_length = 1.5
    # At most 32 steps and the mass matrix adapted from the start (after PyMC's discard
    # window): the first iterations, with a unit mass matrix and a tiny step, otherwise
    # spend most of the exploration's evaluations. Measured on the logistic regression
    # (d = 50): tuning cost 3057 -> 1719 evaluations, same ESS.
    _explore_max_steps = 32
    _early_mass_update = True

    def _explore_history(self, chain: ChainState) -> np.ndarray:
        """Past states the differential-evolution jumps are drawn from.

        The second half of the path (past the initial transient, as PyMC's DEMetropolisZ
        draws from its tuning history). While that is short, draws from the prior are
        added, as DE-MC starts from a population: differences of a chain's first few
        states span only the directions it has moved in, and a chain that starts with
        tiny steps then stays confined to them.
        """
        history = self._late_tuning_states(chain)[0]
        if len(history) < 10 * self.dim:
            if chain.prior_draws is None:
                chain.prior_draws = self._draw_prior(10 * self.dim)
            history = np.vstack([chain.prior_draws, history])
        return history

    def _draw_prior(self, n: int) -> np.ndarray:
        """``n`` prior draws of this step's block, raveled in the sampler's (transformed)
        space; empty when some prior cannot be sampled (``pm.Flat``, custom densities)."""
        from pymc.initial_point import make_initial_point_fn

        model = self._model
        try:
            draw = make_initial_point_fn(
                model=model, overrides={rv: "prior" for rv in model.free_RVs},
                default_strategy="prior", return_transformed=True,
            )
            seeds = self.rng.integers(2**31, size=n)
            names = [v.name for v in self.vars]
            rows = [np.concatenate([np.ravel(draw(int(seed))[name]) for name in names]) for seed in seeds]
        except Exception:  # noqa: BLE001 - any prior we cannot draw from: do without
            return np.zeros((0, self.dim))
        rows = np.array(rows, dtype=np.float64)
        return rows[np.all(np.isfinite(rows), axis=1)]

    # ------------------------------------------------------------- surrogate
    def _weight_temperature(self) -> float:
        return max(2.0, self.dim / 4.0)

    def _training_weights(self, potentials: np.ndarray, lowest: float) -> np.ndarray:
        """Least-squares weights ``exp(-(U - lowest) / tau)`` of training points.

        The training set reaches well beyond the typical set (exploration, rejected
        proposals); unweighted, a quadratic-based fit trades accuracy in the typical set,
        where the chain runs, for the tails. ``tau = max(2, d / 4)`` against the typical
        set's spread of about ``sqrt(d / 2)`` in U. Measured on the black-box PDE
        (d = 20, ~900 tune points): error of the surrogate on posterior draws 0.86-0.97
        unweighted, 0.56-0.63 weighted.
        """
        return np.exp(-(np.asarray(potentials) - lowest) / self._weight_temperature())

    def _energy_window(self) -> float:
        # U - min U over the typical set is about chi2_d / 2; keep far more than that.
        return self.dim + 10.0 * np.sqrt(self.dim) + 20.0

    def _enough_data(self, chain: ChainState) -> bool:
        return (
            chain.iteration >= self.explore_steps
            and len(chain.training) >= self._min_training_points()
        )

    def _after_tune_iteration(self, chain: ChainState, info: TransitionInfo) -> None:
        if chain.surrogate is None:
            if self._enough_data(chain) and self._fit_due(chain):
                self._refit(chain, final=False)
            return
        if chain.paused:
            if self._fit_due(chain):
                self._refit(chain, final=False)
            return
        if self._surrogate_stuck(chain):
            chain.paused = True
            return
        chain.accept_since_fit.append(
            info.correction_acceptance
        )
        if self._fit_due(chain):
            if np.mean(chain.accept_since_fit) < self._good_acceptance:
                self._refit(chain, final=False)
            else:  # the surrogate is good: postpone the (costly) refit
                chain.last_fit_iteration = chain.iteration + 1
                chain.accept_since_fit = []

    def _fit_due(self, chain: ChainState) -> bool:
        """Fits (and retries after a failed one) at geometrically spaced iterations."""
        if chain.last_fit_iteration == 0:
            return True
        return chain.iteration + 1 >= self._refit_growth * chain.last_fit_iteration + 50

    # Refit in tune at iterations growing geometrically, unless the surrogate is so good
    # already that the true acceptance is above _good_acceptance.
    _refit_growth = 1.5
    _good_acceptance = 0.9

    def _late_tuning_states(self, chain: ChainState) -> tuple[np.ndarray, np.ndarray]:
        """The second half of the tuning states (past the initial transient) and their
        true potentials: the chain's posterior sample for scales and checks."""
        start = len(chain.positions) // 2
        positions = np.array(chain.positions[start:]).reshape(-1, self.dim)
        return positions, np.array(chain.position_potentials[start:])

    def _posterior_scale(self, chain: ChainState, dense: bool) -> Whitening:
        positions = self._late_tuning_states(chain)[0]
        if len(np.unique(positions, axis=0)) <= self.dim:
            # A chain that has barely moved says nothing about the scale; the spread of
            # what was evaluated near the typical set is a safer guess than a degenerate
            # covariance.
            positions = chain.training.positions[chain.training.relevant(self._energy_window())]
        return Whitening.from_samples(positions, dense=dense and positions.shape[0] > self.dim)

    def _refit(self, chain: ChainState, final: bool) -> None:
        """Re-estimate the posterior scale, the mass matrix and the surrogate."""
        chain.whitening = self._posterior_scale(chain, dense=True)
        chain_scale = chain.whitening if self.dense_mass else self._posterior_scale(chain, dense=False)
        chain.metric = self._metric(chain_scale)
        try:
            surrogate = self._fit_surrogate(chain)
        except (np.linalg.LinAlgError, ValueError) as err:
            # Try again on the refit schedule, not at every iteration.
            chain.last_fit_iteration = chain.iteration + 1
            chain.accept_since_fit = []
            chain.last_fit_error = f"{type(err).__name__}: {err}"
            if not final:  # stop_tuning reports the outcome of the final fit
                self._warn(
                    chain, WarningType.BAD_PARAMS,
                    f"surrogate fit failed at tuning iteration {chain.iteration} ({err}); "
                    "keeping the previous kernel and retrying later.",
                    level="debug",
                )
            return
        chain.last_fit_error = None
        if chain.surrogate is None:
            chain.surrogate_start = chain.iteration
        chain.last_fit_iteration = chain.iteration + 1
        chain.accept_since_fit = []
        chain.recent_moves.clear()
        chain.paused = False
        chain.n_fits += 1
        surrogate, warm_up = self._without_spurious_well(chain, chain_scale, surrogate)
        self._use_surrogate(chain, surrogate)
        self._adapt_to_surrogate(chain, chain_scale, warm_up)

    def _metric(self, scale: Whitening):
        rng = self.rng.spawn(1)[0]
        if scale.dense:
            return QuadPotentialFull(scale.covariance, rng=rng)
        return QuadPotentialDiag(scale.covariance, rng=rng)

    def _warm_up(self, chain: ChainState, chain_scale: Whitening, field,
                 initial_step: float, n_samples: int = 0) -> SurrogateWarmUp:
        """HMC on ``field`` (``q -> (U~, dU~/dq)``) alone with the chain's metric: no
        model evaluation."""
        start = chain.current.q if chain.current is not None else chain_scale.mean
        return warm_up_on_surrogate(
            field, start, chain.metric, self._step_size_adaptation(initial_step),
            self.path_length, self.rng, n_samples=n_samples,
            max_energy_error=self.max_energy_error,
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
        initial_step = chain.step_adapt.current(False)
        n_samples = max(200, 4 * self.dim)
        first = None
        for candidate in itertools.chain([fitted], self._tamer_fits(chain)):
            warm_up = self._warm_up(
                chain, chain_scale, self.context.field(candidate), initial_step, n_samples
            )
            if not self._in_spurious_well(chain, warm_up.potentials):
                return candidate, warm_up
            first = first or (candidate, warm_up)
        return first

    def _tamer_fits(self, chain: ChainState):
        """Successively less flexible fits to the same data (``_tamer_settings``)."""
        for settings in self._tamer_settings:
            try:
                yield self._fit_surrogate(chain, **settings)
            except (np.linalg.LinAlgError, ValueError):
                continue

    #: Settings for ``_fit_surrogate`` after a spurious well, tamest last.
    _tamer_settings: tuple[dict, ...] = ()

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
        """Make ``surrogate`` the chain's (subclasses reset what depends on it)."""
        chain.surrogate = surrogate

    def _adapt_to_surrogate(
        self, chain: ChainState, chain_scale: Whitening, warm_up: SurrogateWarmUp
    ) -> None:
        """Mass matrix and step size from the surrogate's own draws: no model evaluation.

        A chain that explored badly in tuning (a direction it barely moved in) leaves a
        collapsed covariance that would keep it stuck in the draws. Sampling the surrogate
        re-measures the scale; it is trusted within a factor 1000 of the chain's estimate,
        so a surrogate that is wrong far from the data cannot blow the metric up.
        """
        step, samples = warm_up.step_size, warm_up.samples
        if np.all(np.isfinite(samples)) and len(np.unique(samples, axis=0)) > self.dim:
            sampled = Whitening.from_samples(samples, dense=self.dense_mass)
            ratio = np.clip(sampled.covariance / chain_scale.covariance, 1e-3, 1e3) if not self.dense_mass else None
            if ratio is not None:
                sampled = Whitening(sampled.mean, np.sqrt(chain_scale.covariance * ratio))
            chain.metric = self._metric(sampled)
            step = self._warm_up(chain, chain_scale, self._surrogate_field(chain), step).step_size
        chain.step_adapt = self._step_size_adaptation(step)

    def _surrogate_field(self, chain: ChainState):
        """``q -> (U~, dU~/dq)`` the surrogate kernels run on: the chain's surrogate at the
        current context."""
        return self.context.field(chain.surrogate)

    def _after_iteration(self, chain: ChainState, info: TransitionInfo) -> None:
        """Hook: called after every transition, in tune and in the draws."""

    def _fit_surrogate(self, chain: ChainState, **settings):
        raise NotImplementedError

    def _surrogate_step(self, chain: ChainState, current: ChainPoint) -> TransitionInfo:
        raise NotImplementedError

    # ------------------------------------------------------------ PyMC hooks
    @staticmethod
    def competence(var, has_grad):
        if var.dtype in continuous_types:
            return Competence.COMPATIBLE
        return Competence.INCOMPATIBLE

    @staticmethod
    def _progressbar_config(n_chains=1):
        columns = [
            TextColumn("{task.fields[accept]:0.2f}", table_column=Column("Accept", ratio=1)),
            TextColumn("{task.fields[step_size]:0.3f}", table_column=Column("Step size", ratio=1)),
            TextColumn("{task.fields[training_size]}", table_column=Column("Train size", ratio=1)),
            TextColumn("{task.fields[total_model_evals]}", table_column=Column("Model evals", ratio=1)),
            TextColumn("{task.fields[divergences]}", table_column=Column("Divergences", ratio=1)),
        ]
        stats = {
            "accept": [0.0] * n_chains,
            "step_size": [0.0] * n_chains,
            "training_size": [0] * n_chains,
            "total_model_evals": [0] * n_chains,
            "divergences": [0] * n_chains,
        }
        return columns, stats

    @staticmethod
    def _make_progressbar_update_functions():
        def update_stats(stats):
            return {
                "accept": stats["accept"],
                "step_size": stats["step_size"],
                "training_size": stats["training_size"],
                "total_model_evals": stats["total_model_evals"],
                "divergences": stats["diverging_total"],
                "failing": stats["diverging_total"] > 0,
            }

        return (update_stats,)


def _check_positive(name: str, value) -> None:
    if not (np.isscalar(value) and np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number; got {value!r}.")


def _check_open_unit(name: str, value) -> None:
    if not (np.isscalar(value) and 0 < value < 1):
        raise ValueError(f"{name} must lie strictly between 0 and 1; got {value!r}.")
