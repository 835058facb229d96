"""``SurrogateStep``: the template every surrogate step method fills in.

``astep`` is a template method, as PyMC's ``BaseHMC.astep``: pick the phase (exploration,
tail jump or surrogate kernel) → run the kernel → adapt (tune only) → stats. The step owns
its parts (``part.py``; built in ``assembly.py``), each with its chain's state: the store's
chain side and the model's evaluations (``evaluation/``), the warm-up (``warmup/``), the
surrogate kernel and tail jumps (``kernels/``), the adaptation with its tuning path
(``adaptation/``) and chain health (``health/``). A step class chooses its surrogate
family (``_surrogate_fit``: a ``SurrogateFit``), a ``TrainingPolicy`` and a correction.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
from pymc.blocking import RaveledVars
from pymc.stats.convergence import WarningType
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence
from pymc.step_methods.hmc.quadpotential import QuadPotentialDiagAdapt
from pymc.util import get_random_generator
from pymc.vartypes import continuous_types

from pymc_surrogate.core.transitions import independence_transition
from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods import stats as _stats
from pymc_surrogate.step_methods.adaptation.access import ChainAccess
from pymc_surrogate.step_methods.adaptation.coverage import tempered
from pymc_surrogate.step_methods.adaptation.surrogate_fit import SurrogateFit
from pymc_surrogate.step_methods.adaptation.training import TrainingPolicy
from pymc_surrogate.step_methods.adaptation.transport_frame import convert_point
from pymc_surrogate.step_methods.assembly import (
    build_parts,
    chain_access,
    read_settings,
)
from pymc_surrogate.step_methods.evaluation.batch import EXECUTOR_LEFT_BEHIND
from pymc_surrogate.step_methods.evaluation.model_functions import ModelFunctions
from pymc_surrogate.step_methods.health.chain_health import chain_name
from pymc_surrogate.step_methods.part import ChainPart
from pymc_surrogate.step_methods.settings import FINITE_DIFFERENCE, HMCKernel, WarmUp
from pymc_surrogate.step_methods.state import ChainState, SurrogateStepState
from pymc_surrogate.step_methods.tuning import TUNING
from pymc_surrogate.step_methods.warmup.exploration import ModelAccess

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
    #: The logp is a noisy, unbiased estimate kept at the current state
    #: (``KernelHMC(pseudo_marginal=True)``): its noise caps the acceptance.
    pseudo_marginal = False
    #: The draws are corrected with the true logp (False: no model evaluation in the draws).
    exact = True
    #: The surrogate learns from gradients: ``use_gradient`` may be "finite_difference".
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
        settings = read_settings(self, vars, surrogate, kernel, warmup, target_accept,
                                 use_gradient, model, initial_point, compile_kwargs, kwargs)
        super().__init__(settings.vars, self.functions.shared, blocked=blocked, rng=rng)
        build_parts(self, settings, store, executor, frame)  # (assembly.py)

    #: The kernel settings without ``kernel=`` (``settings.HMCKernel``).
    default_kernel = HMCKernel(n_inner=1)
    #: The frame ``frame="auto"`` learns where it can (``adaptation/transport_frame.py``;
    #: the affine one in a compound step, with an executor or a Riemannian metric).
    default_frame = "triangular"

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
        metric = QuadPotentialDiagAdapt(self.dim, np.zeros(self.dim), np.ones(self.dim), 10,
                                        early_update=self.tuning.early_mass_update,
                                        rng=self.rng.spawn(1)[0])
        for part in self._parts():  # a new chain
            part.reset()
        self.kernel.use(metric, initial_step)  # exploration's, until a first fit
        return ChainState()

    def reset_tuning(self, start=None):
        if self.sharing.follow_the_data():  # after ``pm.set_data``: its store emptied
            self.store = self.sharing.store
            self.fit.forget_the_old_data()
        self.chain = self._new_chain()

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
            self._warn(chain, WarningType.BAD_PARAMS, EXECUTOR_LEFT_BEHIND)
        return self.exploration.step(current, self._model_access(chain), self.kernel,
                                     first=chain.iteration == 0 and self.tune,
                                     tuning_now=self._tuning_now(chain), rng=self.rng)

    def _model_access(self, chain: ChainState) -> ModelAccess:
        """What the exploration asks of the model for this chain."""
        return self.evaluations.model_access(
            chain, self.tune, self.explore_executor, self.rng,
            lambda message: self._warn(chain, WarningType.BAD_PARAMS, message))

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
        """Whether the chain learns (or finds a grid's box) from other chains' evaluations:
        not from its own states, nor from a noisy (pseudo-marginal) logp's."""
        return not self.pseudo_marginal and not self.policy.learns_from_states

    def _tuning_now(self, chain: ChainState) -> bool:  # in tuning and still adapting
        return self.tune and not chain.frozen

    def _measures_coverage(self) -> bool:
        """Whether coverage applies (``coverage.py``): not in a compound step's block, nor
        to a grid (the interpolant inside its box, the model outside: a temperature would
        break it at the faces; its coverage is the box's)."""
        return self.context.dim == 0 and not self.policy.designed

    def _surrogate_fit(self) -> SurrogateFit:
        """The step's surrogate family at a refit (``adaptation/surrogate_fit.py``)."""
        return SurrogateFit(self.surrogate, self.learned, self.policy, self.context, self.dim,
                            self.has_gradient)

    def _access(self, chain: ChainState) -> ChainAccess:
        """What the adaptation asks of the step for ``chain`` (``adaptation/access.py``)."""
        return chain_access(self, chain)

    def _move_to(self, chain: ChainState, point: ChainPoint, approximate: bool) -> None:
        """The chain's state is ``point`` (``approximate``: its potential is the surrogate's)."""
        chain.current, chain.current_approximate = point, approximate
        chain.current_key = self.evaluator.key(point.q)

    def _adapted_to_surrogate(self, chain: ChainState, chain_scale) -> None:
        """Hook: a refit has tuned the surrogate kernel's metric and step size."""

    def _surrogate_field(self, chain: ChainState):
        """``q -> (U~, dU~/dq)`` the kernels run on: the surrogate at the current context,
        tempered to cover (coverage.py), lowered where a black box's data thin out
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
        """The current point and the evaluation a surrogate step's correction uses: the
        model's; in tuning on the surrogate alone, ``field``'s (the chain then samples the
        surrogate's posterior)."""
        if chain.on_surrogate:
            def evaluate(q: np.ndarray) -> ChainPoint:
                value, grad = field(q)[:2]
                return ChainPoint(q, float(value), grad)

            return evaluate(current.q), evaluate
        return current, lambda q: self._evaluate(chain, q, with_grad=with_grad, record=record)

    def _warn(self, chain: ChainState, kind: WarningType, message: str,
              level: str = "warn") -> None:
        """Queue a warning for the next draws' ``warning`` stat, which PyMC logs in the
        parent process for any ``cores`` (``level``: a logging level name)."""
        self.health.warn(kind, message, level, chain.iteration)

    # --------------------------------------------------------------- the step
    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list[dict[str, Any]]]:
        start = time.perf_counter()
        chain = self.chain
        before = self.frame.map  # the frame this iteration starts in
        q = self.frame.enter(q0.data.astype(np.float64, copy=False), chain.current)
        counts = self.evaluator.counts
        evals_before = counts.logp_evals, counts.grad_evals
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
        # draws, while a stuck surrogate is set aside, or after a failed fit.
        fallback = exploring and (
            chain.frozen or self.exploration.paused or self.schedule.last_error is not None
        )
        warning = None
        if not self.tune:  # a divergence's debug record
            warning = self.health.watch(info, fallback, not (exploring or jumping),
                                        chain_name(self.rng), chain.iteration)
        # One warning a draw; a divergence is still counted by the `diverging` stat.
        warning = self.health.next_warning() or warning
        stats = {
            **_stats.draw_stats(info, chain, counts, self.learned, evals_before,
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
            self._move_to(chain, convert_point(chain.current, before, self.frame.map),
                          chain.current_approximate)
        if np.isfinite(stats["model_logp"]):
            stats["model_logp"] = self.frame.model_logp(chain.current)
        return RaveledVars(q, q0.point_map_info), [stats]

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
        return (Competence.COMPATIBLE if var.dtype in continuous_types
                else Competence.INCOMPATIBLE)

    @staticmethod
    def _progressbar_config(n_chains=1):
        return _stats.progressbar_config(n_chains)

    @staticmethod
    def _make_progressbar_update_functions():
        return _stats.progressbar_update_functions()
