"""``SurrogateStep``: the template every surrogate step method fills in.

``astep`` is a template method, as PyMC's ``BaseHMC.astep``: pick the phase (exploration,
tail jump or surrogate kernel) → run the kernel → adapt (tune only) → stats. The step owns
its parts (``part.py``), each with its chain's state: the evaluation store's chain side
(``evaluation/sharing.py``), the warm-up (``warmup/exploration.py``), the surrogate kernel
and tail jumps (``kernels/``), coverage, the draws' bound and tuning on the surrogate alone
(``adaptation/``), and chain health (``health/``); this module is the glue that hands each
part what it needs from the model and the others, the refits (``adaptation/refit.py``)
included. A step class chooses its surrogate family (``_surrogate_fit``: a ``SurrogateFit``),
a ``TrainingPolicy`` and a correction, and says little else.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
from pymc.blocking import RaveledVars
from pymc.model import modelcontext
from pymc.stats.convergence import SamplerWarning, WarningType
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence
from pymc.step_methods.hmc.quadpotential import QuadPotentialDiagAdapt
from pymc.util import get_random_generator
from pymc.vartypes import continuous_types

from pymc_surrogate.core.transitions import independence_transition
from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods import stats as _stats
from pymc_surrogate.step_methods.adaptation.access import ChainAccess
from pymc_surrogate.step_methods.adaptation.coverage import Coverage, tempered
from pymc_surrogate.step_methods.adaptation.draw_bound import DrawBound
from pymc_surrogate.step_methods.adaptation.learned_surrogate import LearnedSurrogate
from pymc_surrogate.step_methods.adaptation.mass_matrix import MassMatrix
from pymc_surrogate.step_methods.adaptation.refit import Refits
from pymc_surrogate.step_methods.adaptation.refit_schedule import RefitSchedule
from pymc_surrogate.step_methods.adaptation.surrogate_fit import SurrogateFit
from pymc_surrogate.step_methods.adaptation.surrogate_tuning import (
    SurrogateTuning,
)
from pymc_surrogate.step_methods.adaptation.training import TrainingPolicy
from pymc_surrogate.step_methods.adaptation.transport_frame import (
    Frame,
    FramedFunctions,
    convert_point,
    frame_setting,
)
from pymc_surrogate.step_methods.adaptation.tuner import Tuner
from pymc_surrogate.step_methods.evaluation.batch import (
    exploration_executor,
    refuse_in_a_rerun_script,
)
from pymc_surrogate.step_methods.evaluation.block_context import (
    BlockContext,
    block_variables,
)
from pymc_surrogate.step_methods.evaluation.chain_evaluation import ChainEvaluation
from pymc_surrogate.step_methods.evaluation.evaluator import Evaluator
from pymc_surrogate.step_methods.evaluation.model_functions import ModelFunctions
from pymc_surrogate.step_methods.evaluation.sharing import SharedEvaluations, make_store
from pymc_surrogate.step_methods.health.chain_health import (
    ChainHealth,
    centred_variables,
    coordinate_names,
)
from pymc_surrogate.step_methods.health.far_proposals import FarProposals
from pymc_surrogate.step_methods.kernels.surrogate_kernel import SurrogateKernel
from pymc_surrogate.step_methods.kernels.tail_jumps import TailJumps
from pymc_surrogate.step_methods.part import ChainPart
from pymc_surrogate.step_methods.settings import (
    FINITE_DIFFERENCE,
    HMCKernel,
    WarmUp,
    check_settings,
    gradient_setting,
    part_setting,
    surrogate_setting,
)
from pymc_surrogate.step_methods.state import (
    ChainState,
    SurrogateStepState,
)
from pymc_surrogate.step_methods.tuning import TUNING
from pymc_surrogate.step_methods.warmup.exploration import (
    Exploration,
    ModelAccess,
    default_explore_steps,
)
from pymc_surrogate.step_methods.warmup.prior import prior_scale

__all__ = ["SurrogateStep", "ChainState"]


class SurrogateStep(ArrayStepShared):
    """Base class: compiles the true model, runs exploration, keeps training data.

    A subclass names its surrogate family (``surrogate_family``: estimator classes of the
    ``Surrogate`` protocol, ``surrogates/base.py``; the first one's default is the step's
    unless ``default_surrogate`` says otherwise) and, if it learns otherwise than by batch
    refits in tune, ``policy`` (a ``TrainingPolicy``). See ``SurrogateHMC`` for the
    parameters.
    """

    name = "surrogate_step"
    default_blocked = True
    _state_class = SurrogateStepState
    stats_dtypes_shapes = _stats.STATS
    #: The estimator classes ``surrogate=`` takes (empty: the step builds its own).
    surrogate_family: tuple[type, ...] = ()
    policy = TrainingPolicy()
    tuning = TUNING
    #: The logp is a noisy, unbiased likelihood estimate kept at the current state
    #: (``KernelHMC(pseudo_marginal=True)``): its noise, not a move's size, caps the
    #: acceptance, which the exploration (``exploration.py``) and the chain health checks
    #: (``health/chain_health.py``) then allow for.
    pseudo_marginal = False
    #: The draws are corrected with the true logp (False: a step's approximate mode, whose
    #: draws evaluate no model).
    exact = True
    #: The surrogate learns from gradients (VariationalHMC): ``use_gradient`` may then be
    #: "finite_difference", and a model without a gradient needs it.
    learns_from_gradients = False
    #: Where black-box exploration evaluates in batches (``exploration.py``; None: serially).
    explore_executor = None
    explore_tries = 4
    _executor_left_behind = False  # the executor did not travel to this process

    def __init__(
        self, vars=None, *, surrogate=None, kernel: HMCKernel | None = None,
        warmup: WarmUp | None = None, target_accept: float = 0.8,
        use_gradient: bool | str = "auto", store=None,
        executor=None, frame="auto", model=None, blocked: bool = True, rng=None,
        initial_point: dict | None = None, compile_kwargs: dict | None = None, **kwargs,
    ):
        owner = type(self).__name__
        refuse_in_a_rerun_script(owner)
        model = modelcontext(model)
        if initial_point is None:
            initial_point = model.initial_point()
        vars = block_variables(model, vars, initial_point, owner)
        use_gradient = gradient_setting(use_gradient, owner, self.learns_from_gradients)
        self.surrogate = surrogate_setting(surrogate, self.surrogate_family,
                                           self.default_surrogate(), owner, kwargs)
        kernel = part_setting(kernel, HMCKernel, self.default_kernel, owner, "kernel", kwargs)
        warmup = part_setting(warmup, WarmUp, WarmUp(), owner, "warmup", kwargs)
        check_settings(owner, kwargs, target_accept)
        self.check_kernel(kernel)
        self.kernel_settings = kernel
        self._model = model
        self.functions = self._model_functions(model, vars, initial_point, use_gradient,
                                               compile_kwargs)
        layout = [(v.name, np.shape(initial_point[v.name])) for v in vars]
        self.health = ChainHealth(
            owner, self.pseudo_marginal,
            "NUTS (pm.sample() without `step`)" if self.functions.has_gradient
            else "pm.DEMetropolisZ or pm.Slice",
            coordinate_names(layout), centred_variables(model, vars),
        )
        self.evaluator = Evaluator(self.functions, layout, owner, self.health.warn)
        self.dim = int(sum(np.size(initial_point[v.name]) for v in vars))
        self.mass_matrix = MassMatrix(self.tuning, kernel.dense_mass, self.dim)
        self.far = FarProposals(self.dim, self.tuning.far_sd)
        self.target_accept = target_accept
        # none where every draw is a surrogate move (no model evaluation to jump with), nor
        # "auto" on a noisy logp (the check would judge the tails on noisy values)
        no_jumps = not self.exact or (self.pseudo_marginal and kernel.tail_jumps == "auto")
        self.tails = TailJumps(0 if no_jumps else kernel.tail_jumps, self.dim, self.tuning)
        self.kernel = SurrogateKernel(kernel.correction, kernel.n_inner, kernel.path_length,
                                      target_accept, kernel.max_energy_error, self.tuning)
        explore_steps, explore_tries = warmup.steps, warmup.tries
        self.explore_steps = (
            default_explore_steps(self.functions.has_gradient, self.dim)
            if explore_steps == "auto" else int(explore_steps)
        )
        self.tune = True
        super().__init__(vars, self.functions.shared, blocked=blocked, rng=rng)
        self.context = BlockContext(self.functions.shared, self.dim, owner)
        self.learned = LearnedSurrogate(self.dim, self.context.dim, self.policy)
        self.explore_executor, self.explore_tries = exploration_executor(
            executor, explore_tries, self.context.dim, owner, self.pseudo_marginal)
        if isinstance(frame, str) and frame == "auto":  # the learned frame where it can run
            frame = ("affine" if self.context.dim or self.explore_executor is not None
                     or kernel.metric != "euclidean" else self.default_frame)
        self.frame = Frame(frame_setting(frame, owner), self.dim)
        self.frame.check(owner, self.context.dim > 0, self.explore_executor is not None)
        if self.frame.learned:  # the step sees the model in the chain's coordinates
            self.evaluator.functions = FramedFunctions(self.functions, self.frame)
        scale = rounding = None
        if self.functions.finite_difference:
            # Central differences relative to each coordinate's prior sd, where there is one
            scale = prior_scale(model, [v.name for v in self.vars], self.dim)
            self.functions.difference_scale = scale
            rounding = self.functions.rounding_at  # a bound method: the step pickles
        self.exploration = Exploration(
            self.has_gradient, self.dim, kernel.path_length, kernel.max_energy_error,
            self.explore_tries if self.explore_executor is not None else None,
            self.pseudo_marginal, self.tuning, scale, rounding, self.health.coordinates,
        )
        # PyMC keeps the constructor's arguments to rebuild the step when unpickling
        # (BlockedStep.__new__, which skips __init__; the state restores the rest): the
        # executor stays out of them, as out of the state.
        newargs = getattr(self, "_BlockedStep__newargs", None)
        if newargs is not None and "executor" in newargs[1]:
            self._BlockedStep__newargs = newargs[0], {**newargs[1], "executor": None}
        self.store = make_store(store, owner)
        self.sharing = SharedEvaluations(
            self.store, self._learns_from_store(),
            self.explore_steps, self.tuning.own_exploration_share,
        )
        self.sharing.bind(model, vars, store, self.dim, self.context.dim)
        self.surrogate_tuning = SurrogateTuning(
            (self.sharing.tuned or self.exploration.batched) and self.context.dim == 0,
            self.explore_tries if self.exploration.batched else 1, self.tuning,
        )
        measures = self._measures_coverage()
        self.coverage = Coverage(
            measures,
            not self.has_gradient and self.tuning.tune_tempering > 0 and measures
            and self.policy.source == "evaluations",
            self.dim, self.tuning,
        )
        self.draw_bound = DrawBound(
            self.lowers_black_box_draws and not self.has_gradient
            and self.kernel.correction == "surrogate_transition" and self.context.dim == 0,
            self.dim, self.tuning,
        )
        self.evaluations = ChainEvaluation(
            self.evaluator, self.functions, model, self.vars, self.far, self.sharing,
            self.frame, self.context, self.policy, self.learned, owner, self._on_evaluation)
        self.schedule = RefitSchedule(self.tuning)
        self.fit = self._surrogate_fit()
        self.refits = Refits(self.fit, self.learned, self.schedule, self.policy, self.tuning,
                             self.dim, self.context, self.kernel, self.mass_matrix,
                             self.coverage, self.exploration, self.sharing, self.explore_steps)
        self.tuner = Tuner(self.refits, self.learned, self.fit, self.frame, self.kernel,
                           self.exploration, self.surrogate_tuning, self.schedule,
                           self.coverage, self.sharing, self.tails, self.draw_bound,
                           self.exact)
        self.chain = self._new_chain()

    #: The kernel settings without ``kernel=`` (``settings.HMCKernel``).
    default_kernel = HMCKernel(n_inner=1)
    #: The frame ``frame="auto"`` learns where it can (``adaptation/transport_frame.py``;
    #: the affine one in a compound step, with an executor or a Riemannian metric).
    default_frame = "affine"

    def check_kernel(self, kernel: HMCKernel) -> None:
        """Refuse kernel settings this step cannot run (the Euclidean metric only here)."""
        if kernel.metric != "euclidean":
            raise ValueError(
                f"{type(self).__name__} runs its trajectories with a Euclidean metric; "
                f"HMCKernel(metric={kernel.metric!r}) is SurrogateHMC's and "
                "AdaptiveSurrogateHMC's."
            )

    def default_surrogate(self):
        """The estimator fitted when ``surrogate=`` is not given (None: no family)."""
        return self.surrogate_family[0]() if self.surrogate_family else None

    #: Whether this step's draws lower a black box's surrogate (SurrogateHMC's family).
    lowers_black_box_draws = False

    def _model_functions(self, model, vars, initial_point, use_gradient, compile_kwargs):
        """The compiled true model; ``use_gradient="finite_difference"``: central
        differences of the logp, never PyTensor's gradient."""
        if use_gradient == FINITE_DIFFERENCE:
            return ModelFunctions(model, vars, initial_point, False, compile_kwargs,
                                  finite_difference=True)
        return ModelFunctions(model, vars, initial_point, use_gradient, compile_kwargs)

    @property
    def has_gradient(self) -> bool:
        return self.functions.has_gradient

    # ----------------------------------------------------------- chain state
    def __getstate__(self):
        # An executor (a Dask client's, a process pool) need not pickle into PyMC's worker
        # processes; there exploration is serial, and the first exploration step says so.
        state = self.__dict__.copy()
        if state.get("explore_executor") is not None:
            state["explore_executor"], state["_executor_left_behind"] = None, True
        return state

    def _new_chain(self) -> ChainState:
        initial_step = 0.25 / self.dim**0.25
        metric = QuadPotentialDiagAdapt(
            self.dim, np.zeros(self.dim), np.ones(self.dim), 10,
            early_update=self.tuning.early_mass_update, rng=self.rng.spawn(1)[0],
        )
        for part in self._parts():  # a new chain
            part.reset()
        self.kernel.use(metric, initial_step)  # exploration's, until a first fit
        return ChainState()

    def reset_tuning(self, start=None):
        if self.sharing.follow_the_data():
            self._forget_the_old_data()
        self.chain = self._new_chain()

    def _forget_the_old_data(self) -> None:
        """After ``pm.set_data``: drop what was learned from the old data's evaluations
        (``SharedEvaluations.follow_the_data`` has emptied the step's own store)."""
        self.store = self.sharing.store

    def _parts(self):
        """The parts that own a chain's state (``part.py``)."""
        return [getattr(self, f.name) for f in dataclasses.fields(self._state_class)
                if isinstance(getattr(self, f.name, None), ChainPart)]

    def set_rng(self, rng):
        """PyMC 5: ``pm.sample`` hands each chain its own generator before it starts."""
        # Every child stream must follow it, or chains share the metric's momentum draws.
        self.rng = get_random_generator(rng, copy=False)
        self.kernel.metric.set_rng(self.rng.spawn(1)[0])

    def setup_chain(self, rng, tune: int, draws: int) -> None:
        """PyMC 6: replaces ``set_rng`` (which it never calls), in every process."""
        self.set_rng(rng)

    def stop_tuning(self):
        """Freeze the chain: the final fit, then the draws' tail jumps and path length."""
        self.tune = False
        chain = self.chain
        chain.on_surrogate = False  # the first draw evaluates the state tuning left
        if not chain.frozen:
            tuned_length = self.kernel.tuned_length()
            self.tuner.read_shared(chain)  # the final fit sees every chain's tuning
            chain.frozen = True
            self.tuner.final(self._access(chain), tuned_length)

    def _explores_now(self, chain: ChainState) -> bool:
        """Whether this iteration runs the exact exploration kernel (``exploration.py``)."""
        return self.exploration.now(self.learned.surrogate is not None, chain.frozen, self.rng)

    def _explore_step(self, chain: ChainState, current: ChainPoint) -> TransitionInfo:
        """One exact exploration transition (``exploration.py``)."""
        if not self.has_gradient and self._executor_left_behind and chain.iteration == 0:
            self._warn(
                chain, WarningType.BAD_PARAMS,
                "the executor stayed in the parent process (it does not travel to PyMC's "
                "worker processes), so this chain explores one model call at a time. "
                "Sample with cores=1 to explore in batches on the executor.",
            )
        return self.exploration.step(current, self._model_access(chain), self.kernel,
                                     first=chain.iteration == 0 and self.tune,
                                     tuning_now=self._tuning_now(chain), rng=self.rng)

    def _model_access(self, chain: ChainState) -> ModelAccess:
        """What the exploration asks of the model for this chain."""
        return self.evaluations.model_access(
            chain, self.tune, self.explore_executor, self.rng,
            lambda message: self._warn(chain, WarningType.BAD_PARAMS, message))

    def _evaluate_batch(self, chain: ChainState, points: np.ndarray) -> list[ChainPoint]:
        """The true potential at each row of ``points``, at once on ``explore_executor``."""
        return self.evaluations.evaluate_batch(chain, points, self.tune, self.explore_executor)

    def _surrogate_step(self, chain: ChainState, current: ChainPoint,
                        record: bool = True) -> TransitionInfo:
        """One corrected surrogate transition; ``record=False``: its model evaluation is no
        training data (the full-length trials, which are no draws)."""
        tuning_now = self._tuning_now(chain)
        field = self._surrogate_field(chain)
        if self.coverage.tempers(tuning_now):  # tuning only (coverage.py)
            field = tempered(field, self.coverage.tuning_temperature)
        current, evaluate = self._model_or_surrogate(
            chain, current, self.has_gradient and not chain.frozen, record, field)
        return self.kernel.transition(current, evaluate, field, tuning_now, self.rng)

    def _learns_from_store(self) -> bool:
        """Whether the chain learns from the evaluations other chains share: a surrogate
        learnt from model evaluations; never a noisy (pseudo-marginal) logp, whose
        estimates are the chain's own."""
        return not self.pseudo_marginal and self.policy.source == "evaluations"

    def _tuning_now(self, chain: ChainState) -> bool:
        """Whether the chain is in tuning and still adapting."""
        return self.tune and not chain.frozen

    def _measures_coverage(self) -> bool:
        """Whether coverage applies (``coverage.py``): the surrogate is the whole
        model's (a compound step's block has evaluations at other contexts)."""
        return self.context.dim == 0

    def _surrogate_fit(self) -> SurrogateFit:
        """The step's surrogate family at a refit (``adaptation/surrogate_fit.py``)."""
        return SurrogateFit(self.surrogate, self.learned, self.policy, self.context, self.dim,
                            self.has_gradient)

    def _access(self, chain: ChainState) -> ChainAccess:
        """What the adaptation asks of the step for ``chain`` (``adaptation/access.py``)."""
        return ChainAccess(
            chain=chain, rng=self.rng, tune=self.tune,
            refit=lambda: self._refit(chain),
            read_shared=lambda: self.tuner.read_shared(chain),
            warn=lambda kind, message, level="warn": self._warn(chain, kind, message, level),
            model_access=lambda: self._model_access(chain),
            field=lambda: self._surrogate_field(chain),
            adapted=lambda scale: self._adapted_to_surrogate(chain, scale),
            evaluate=lambda q, with_grad, record=True: self._evaluate(chain, q, with_grad,
                                                                      record),
            evaluate_batch=lambda states: self._evaluate_batch(chain, states),
            current_point=lambda q: self._current_point(chain, q),
            surrogate_step=lambda current, record=True: self._surrogate_step(chain, current,
                                                                             record),
            move_to=lambda point, approximate=False: self._move_to(chain, point, approximate),
            raised=lambda: self.evaluator.failures.raised,
        )

    def _move_to(self, chain: ChainState, point: ChainPoint, approximate: bool) -> None:
        """The chain's state is ``point`` (``approximate``: its potential is the surrogate's)."""
        chain.current, chain.current_approximate = point, approximate
        chain.current_key = self.evaluator.key(point.q)

    def _adapted_to_surrogate(self, chain: ChainState, chain_scale) -> None:
        """Hook: a refit has tuned the surrogate kernel's metric and step size."""

    def _surrogate_field(self, chain: ChainState):
        """``q -> (U~, dU~/dq)`` the surrogate kernels run on: the chain's surrogate at the
        current context, at the temperature that makes it cover the posterior
        (coverage.py), in a black box's draws lowered where its data thin out
        (draw_bound.py)."""
        return self.draw_bound.lower(
            tempered(self.context.field(self.learned.surrogate), self.coverage.temperature),
            chain.frozen,
        )

    def _surrogate_potential(self, q: np.ndarray) -> float:
        """The chain's (untempered) surrogate's potential at ``q``."""
        return float(self.context.field(self.learned.surrogate)(q)[0])

    def _model_or_surrogate(self, chain: ChainState, current: ChainPoint, with_grad: bool,
                            record: bool, field):
        """The current point and the evaluation a surrogate step's correction uses.

        The model's; or, in tuning on the surrogate alone, ``field``'s (what the
        trajectories run on), so that the correction accepts what the surrogate kernel
        accepts and the chain samples the surrogate's posterior.
        """
        if chain.on_surrogate:
            def evaluate(q: np.ndarray) -> ChainPoint:
                value, grad = field(q)[:2]
                return ChainPoint(q, float(value), grad)

            return evaluate(current.q), evaluate
        return current, lambda q: self._evaluate(chain, q, with_grad=with_grad, record=record)

    def _warn(self, chain: ChainState, kind: WarningType, message: str,
              level: str = "warn") -> None:
        """Queue a warning for the next draws' ``warning`` stat (one per draw).

        PyMC logs that stat with the ``pymc`` logger in the parent process, for every
        chain and with any ``cores``; ``level`` is a logging level name.
        """
        self.health.warn(kind, message, level, chain.iteration)

    # --------------------------------------------------------------- the step
    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list[dict[str, Any]]]:
        start = time.perf_counter()
        chain = self.chain
        before = self.frame.map  # the frame this iteration starts in
        q = self.frame.enter(q0.data.astype(np.float64, copy=False), chain.current)
        counts = self.evaluator.counts
        logp_before, grad_before = counts.logp_evals, counts.grad_evals
        chain.on_surrogate = self.surrogate_tuning.active(
            self._tuning_now(chain), self.learned.surrogate is not None, self.exploration.paused)
        current = self._current_point(chain, q)

        # 1. the phase, 2. its kernel
        exploring = self._explores_now(chain)
        jumping = not exploring and self.tails.now(chain.frozen, self.rng)
        if jumping:
            info = independence_transition(
                current, lambda q: self._evaluate(chain, q, with_grad=False),
                self.tails.jumps, self.rng,
            )
        elif exploring:
            info = self._explore_step(chain, current)
        else:
            info = self._surrogate_step(chain, current)
            self.exploration.note_move(info.accepted)

        # 3. adaptation (tune only), then the online policy's hook
        if chain.on_surrogate:
            self.surrogate_tuning.after_move(info, chain.current, self.kernel, self.learned)
        elif self.tune and not chain.frozen:
            self.tuner.update(self._access(chain), info, exploring)
            if exploring:  # after the fit decision, which counts the iterations before this
                self.sharing.count_exploration(self.exploration.units)
        self._after_iteration(chain, info)
        chain.iteration += 1
        chain.current, chain.current_approximate = info.point, chain.on_surrogate
        if chain.on_surrogate:  # may evaluate the state, or move the chain back into the support
            self.tuner.check_surrogate(self._access(chain), self._surrogate_potential)
        chain.current_key = self.evaluator.key(chain.current.q)

        # 4. stats (and, in the draws, the chain's health)
        # The exact exploration kernel where a surrogate should have moved the chain: in the
        # draws, while a stuck surrogate is set aside, or after a failed fit (not the
        # planned exploration before the first fit).
        fallback = exploring and (
            chain.frozen or self.exploration.paused or self.schedule.last_error is not None
        )
        warning = None
        if not self.tune:  # a divergence's debug record
            warning = self._watch_draw(chain, info, fallback,
                                       surrogate=not (exploring or jumping))
        # One warning a draw; a divergence is still counted by the `diverging` stat.
        warning = self.health.next_warning() or warning
        stats = {
            **_stats.draw_stats(info, chain, counts, self.learned,
                                counts.logp_evals - logp_before,
                                counts.grad_evals - grad_before,
                                surrogate=not (exploring or jumping), fallback=fallback,
                                jumping=jumping, divergences=self.health.divergences,
                                far_proposals=self.far.count, frame_degree=self.frame.degree,
                                warning=warning, start=start),
            **self.coverage.stats(not (exploring or jumping), self._tuning_now(chain)),
            **self._extra_stats(chain),
        }
        if not self.frame.learned:
            return RaveledVars(chain.current.q, q0.point_map_info), [stats]
        q = self.frame.leave(chain.current.q, before)
        if self.frame.map is not before:  # a refit in this iteration: the state is in the old frame
            chain.current = convert_point(chain.current, before, self.frame.map)
            chain.current_key = self.evaluator.key(chain.current.q)
        if np.isfinite(stats["model_logp"]):
            stats["model_logp"] = self.frame.model_logp(chain.current)
        return RaveledVars(q, q0.point_map_info), [stats]

    def _watch_draw(self, chain: ChainState, info: TransitionInfo, fallback: bool,
                    surrogate: bool) -> SamplerWarning | None:
        """The draw's chain health (``health/chain_health.py``); a divergence's debug record."""
        return self.health.watch(info, fallback, surrogate, self._chain_name(),
                                 chain.iteration)

    def _chain_name(self) -> str:
        """``"chain 2"`` when PyMC's per-chain generator says which chain this is.

        ``pm.sample`` spawns one generator per chain from its seed, so the first element
        of the spawn key is the chain's index (best effort: a generator handed in by a
        user, or a compound step's share of it, may say otherwise).
        """
        key = getattr(getattr(self.rng.bit_generator, "seed_seq", None), "spawn_key", ())
        return f"chain {key[0]}" if key else "a chain"

    def _after_iteration(self, chain: ChainState, info: TransitionInfo) -> None:
        """Hook: called after every transition, in tune and in the draws."""

    def _extra_stats(self, chain: ChainState) -> dict[str, Any]:
        """Hook: a subclass's own stats (declared in its ``stats_dtypes_shapes``)."""
        return {}

    # ------------------------------------------------------- model evaluation
    def _current_point(self, chain: ChainState, q: np.ndarray) -> ChainPoint:
        if (chain.current is not None and chain.current_key == self.evaluator.key(q)
                and (chain.on_surrogate or not chain.current_approximate)):
            return chain.current
        with_grad = self.has_gradient and not chain.frozen
        point = self._evaluate(chain, q, with_grad=with_grad, retry=True)
        last_good = self.surrogate_tuning.last_good
        if not np.isfinite(point.potential) and chain.current_approximate and last_good is not None:
            return last_good  # tuning on the surrogate left the chain where the model fails
        return self.evaluator.check_start(point)

    def _evaluate(
        self, chain: ChainState, q: np.ndarray, with_grad: bool, record: bool = True,
        retry: bool = False, count_far: bool = True,
    ) -> ChainPoint:
        """The true model at ``q``, counted and kept (``evaluation/chain_evaluation.py``)."""
        return self.evaluations.evaluate(chain, q, with_grad, self.tune, record, retry, count_far)

    def _on_evaluation(self, chain: ChainState, point: ChainPoint) -> None:
        """Hook: a new finite model evaluation was added to the training set."""

    # ------------------------------------------------------------- the frame
    def _refit(self, chain: ChainState) -> None:
        """Hook: a refit (``Tuner.refit``: the frame first, then the surrogate in it)."""
        self.tuner.refit(self._access(chain))

    # ------------------------------------------------------------ PyMC hooks
    @staticmethod
    def competence(var, has_grad):
        if var.dtype in continuous_types:
            return Competence.COMPATIBLE
        return Competence.INCOMPATIBLE

    @staticmethod
    def _progressbar_config(n_chains=1):
        return _stats.progressbar_config(n_chains)

    @staticmethod
    def _make_progressbar_update_functions():
        return _stats.progressbar_update_functions()
