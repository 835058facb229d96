"""``SurrogateStep``: the template every surrogate step method fills in.

``astep`` is a template method, as PyMC's ``BaseHMC.astep``: pick the phase (exploration,
tail jump or surrogate kernel) → run the kernel → adapt (tune only) → stats. The pieces
live beside it: ``evaluator.py`` (the true model), ``training.py`` (what the surrogate
learns from), ``exploration.py``, ``refit.py``, ``corrections.py``, ``heavy_tails.py``
(tail jumps), ``state.py`` and ``stats.py``. A step class chooses a surrogate
(``_make_surrogate``), a ``TrainingPolicy`` and a correction, and says little else.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np
from pymc.blocking import RaveledVars
from pymc.model import modelcontext
from pymc.stats.convergence import SamplerWarning, WarningType
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence
from pymc.step_methods.hmc.quadpotential import QuadPotentialDiagAdapt
from pymc.step_methods.step_sizes import DualAverageAdaptation
from pymc.util import get_random_generator
from pymc.vartypes import continuous_types

from pymc_surrogate.core.transitions import independence_transition
from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods import stats as _stats
from pymc_surrogate.step_methods.batch_evaluation import refuse_in_a_rerun_script
from pymc_surrogate.step_methods.block_context import BlockContext
from pymc_surrogate.step_methods.corrections import Corrections
from pymc_surrogate.step_methods.coverage import Coverage
from pymc_surrogate.step_methods.defaults import TUNING
from pymc_surrogate.step_methods.draw_bound import DrawBound
from pymc_surrogate.step_methods.evaluator import Evaluator
from pymc_surrogate.step_methods.exploration import Exploration
from pymc_surrogate.step_methods.health import ChainHealth
from pymc_surrogate.step_methods.heavy_tails import TailJumps
from pymc_surrogate.step_methods.model_functions import ModelFunctions
from pymc_surrogate.step_methods.mass_matrix import MassMatrix
from pymc_surrogate.step_methods.refit import Refits
from pymc_surrogate.step_methods.vocabulary import FINITE_DIFFERENCE, gradient_setting
from pymc_surrogate.step_methods.surrogate_tuning import SurrogateTuning
from pymc_surrogate.step_methods.settings import (
    block_variables,
    check_settings,
    exploration_executor,
)
from pymc_surrogate.step_methods.sharing import SharedEvaluations, make_store
from pymc_surrogate.step_methods.state import (
    ChainState,
    ExploreState,
    FitSchedule,
    SurrogateStepState,
)
from pymc_surrogate.step_methods.training import TrainingPolicy, TrainingSet

__all__ = ["SurrogateStep", "ChainState"]


class SurrogateStep(Corrections, Refits, MassMatrix, Coverage, DrawBound, Exploration, TailJumps,
                    ChainHealth, SharedEvaluations, SurrogateTuning, ArrayStepShared):
    """Base class: compiles the true model, runs exploration, keeps training data.

    A subclass sets ``_make_surrogate(whitening, random_state, **settings)`` (a new,
    unfitted object of the ``Surrogate`` protocol, ``surrogates/base.py``) and, if it
    learns otherwise than by batch refits in tune, ``policy`` (a ``TrainingPolicy``).
    See ``SurrogateHMC`` for the parameters.
    """

    name = "surrogate_step"
    default_blocked = True
    _state_class = SurrogateStepState
    stats_dtypes_shapes = _stats.STATS
    policy = TrainingPolicy()
    tuning = TUNING
    #: The logp is a noisy, unbiased likelihood estimate kept at the current state
    #: (``KernelHMC(pseudo_marginal=True)``): its noise, not a move's size, caps the
    #: acceptance, which the exploration (``exploration.py``) and the chain health checks
    #: (``health.py``) then allow for.
    pseudo_marginal = False
    #: The surrogate learns from gradients (VariationalHMC): ``use_gradient`` may then be
    #: "finite_difference", and a model without a gradient needs it.
    learns_from_gradients = False
    #: Where black-box exploration evaluates in batches (``exploration.py``; None: serially).
    explore_executor = None
    explore_tries = 4
    _executor_left_behind = False  # the executor did not travel to this process
    _node_logp_cache = None  # exploration.py: the model as executor workers compile it

    def __init__(
        self, vars=None, *, target_accept: float = 0.8, path_length: float = 2.8,
        dense_mass: bool | str = "auto", explore_steps: int | str = "auto",
        max_energy_error: float = 1000.0, tail_jumps: float | str = "auto",
        use_gradient: bool | str = "auto", store=None, executor=None, explore_tries: int = 4,
        model=None, blocked: bool = True, rng=None, initial_point: dict | None = None,
        compile_kwargs: dict | None = None, **kwargs,
    ):
        owner = type(self).__name__
        refuse_in_a_rerun_script(owner)
        model = modelcontext(model)
        if initial_point is None:
            initial_point = model.initial_point()
        vars = block_variables(model, vars, initial_point, owner)
        use_gradient = gradient_setting(use_gradient, owner, self.learns_from_gradients)
        check_settings(owner, kwargs, target_accept, path_length, max_energy_error,
                       tail_jumps, explore_steps, dense_mass)
        self._model = model
        self.functions = self._model_functions(model, vars, initial_point, use_gradient,
                                               compile_kwargs)
        layout = [(v.name, np.shape(initial_point[v.name])) for v in vars]
        self.evaluator = Evaluator(self.functions, layout, owner)
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
        self.context = BlockContext(self.functions.shared, self.dim, owner)
        self.explore_executor, self.explore_tries = exploration_executor(
            executor, explore_tries, self.context.dim, owner, self.pseudo_marginal)
        # PyMC keeps the constructor's arguments to rebuild the step when unpickling
        # (BlockedStep.__new__, which skips __init__; the state restores the rest): the
        # executor stays out of them, as out of the state.
        newargs = getattr(self, "_BlockedStep__newargs", None)
        if newargs is not None and "executor" in newargs[1]:
            self._BlockedStep__newargs = newargs[0], {**newargs[1], "executor": None}
        self.store = make_store(store, owner)
        self._bind_store(model, vars, store)
        self._note_warm_store()
        self.chain = self._new_chain()

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
        state["_node_logp_cache"] = None
        return state

    def _new_chain(self) -> ChainState:
        initial_step = 0.25 / self.dim**0.25
        metric = QuadPotentialDiagAdapt(
            self.dim, np.zeros(self.dim), np.ones(self.dim), 10,
            early_update=self.tuning.early_mass_update, rng=self.rng.spawn(1)[0],
        )
        return ChainState(
            training=TrainingSet(self.dim, self.context.dim),
            metric=metric,
            step_adapt=self._step_size_adaptation(initial_step),
            explore_adapt=DualAverageAdaptation(1.0, self._explore_target(), 0.05, 0.75, 10),
            explore=ExploreState(recent_moves=deque(maxlen=self.tuning.stuck_window)),
            fits=FitSchedule(recent_corrections=deque(maxlen=self.tuning.inner_window)),
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
        """Freeze the chain: the final fit, then the draws' tail jumps and path length."""
        self.tune = False
        chain = self.chain
        chain.on_surrogate = False  # the first draw evaluates the state tuning left
        if chain.frozen:
            return
        tuned_length = self._tuned_length(chain)
        self._read_shared(chain)  # the final fit sees every chain's tuning
        chain.frozen = True
        fitted = self._final_fit(chain)
        self._count_tuned(chain)
        if fitted:
            self._choose_tail_jumps(chain)
            self._choose_draw_bound(chain)
            self._choose_inner_transitions(chain)
        if tuned_length is not None:  # the final fit restarted the length at the full path
            self._choose_draw_length(chain, tuned_length)

    def _suggested_tune(self) -> int:
        """Tuning iterations after which a surrogate is usually fitted and refined."""
        return int(max(1000, 2 * self.explore_steps))

    def _warn(self, chain: ChainState, kind: WarningType, message: str,
              level: str = "warn") -> None:
        """Queue a warning for the next draws' ``warning`` stat (one per draw).

        PyMC logs that stat with the ``pymc`` logger in the parent process, for every
        chain and with any ``cores``; ``level`` is a logging level name.
        """
        chain.pending_warnings.append(
            SamplerWarning(kind, f"{type(self).__name__}: {message}", level, chain.iteration)
        )

    # --------------------------------------------------------------- the step
    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list[dict[str, Any]]]:
        start = time.perf_counter()
        chain = self.chain
        q = q0.data.astype(np.float64, copy=False)
        logp_before, grad_before = chain.counts.logp_evals, chain.counts.grad_evals
        chain.on_surrogate = self._tunes_on_surrogate(chain)
        current = self._current_point(chain, q)

        # 1. the phase, 2. its kernel
        exploring = self._explores_now(chain)
        jumping = not exploring and self._jumps_now(chain)
        if jumping:
            info = independence_transition(
                current, lambda q: self._evaluate(chain, q, with_grad=False),
                chain.tails.jumps, self.rng,
            )
        elif exploring:
            info = self._explore_step(chain, current)
        else:
            info = self._surrogate_step(chain, current)
            chain.explore.recent_moves.append(info.accepted)

        # 3. adaptation (tune only), then the online policy's hook
        if chain.on_surrogate:
            self._adapt_on_surrogate(chain, info)
        elif self.tune and not chain.frozen:
            self._adapt(chain, info, exploring)
            if exploring:  # after the fit decision, which counts the iterations before this
                self._count_exploration(chain, self._exploration_units())
        self._after_iteration(chain, info)
        chain.iteration += 1
        chain.current, chain.current_approximate = info.point, chain.on_surrogate
        if chain.on_surrogate:  # may evaluate the state, or move the chain back into the support
            self._check_surrogate(chain)
        chain.current_key = self.evaluator.key(chain.current.q)

        # 4. stats (and, in the draws, the chain's health)
        # The exact exploration kernel where a surrogate should have moved the chain: in the
        # draws, while a stuck surrogate is set aside, or after a failed fit (not the
        # planned exploration before the first fit).
        fallback = exploring and (
            chain.frozen or chain.explore.paused or chain.fits.last_error is not None
        )
        warning = None
        if not self.tune:
            self._watch_draw(chain, info, fallback, surrogate=not (exploring or jumping))
            if info.diverging:
                chain.counts.draw_divergences += 1
                warning = SamplerWarning(
                    WarningType.DIVERGENCE,
                    "Energy error above max_energy_error or a non-finite energy.",
                    "debug",
                    chain.iteration,
                )
        if chain.pending_warnings:
            # One warning a draw; a divergence is still counted by the `diverging` stat.
            warning = chain.pending_warnings.popleft()
        stats = {
            "accept": info.accept_prob,
            "accepted": float(info.accepted),
            "diverging": bool(info.diverging),
            "energy": info.energy,
            "energy_error": info.energy_error,
            "surrogate_energy_error": info.surrogate_energy_error,
            "step_size": info.step_size,
            "n_steps": info.n_steps,
            "model_logp": np.nan if chain.current_approximate else -chain.current.potential,
            "model_evals": chain.counts.logp_evals - logp_before,
            "gradient_evals": chain.counts.grad_evals - grad_before,
            "total_model_evals": chain.counts.logp_evals,
            "total_gradient_evals": chain.counts.grad_evals,
            "training_size": len(chain.training),
            "uses_surrogate": not (exploring or jumping),
            "fallback": fallback,
            "tail_jump": jumping,
            "surrogate_fits": chain.counts.fits,
            "failed_fits": chain.counts.failed_fits,
            "eval_failures": chain.counts.eval_failures,
            "diverging_total": chain.counts.draw_divergences,
            "perf_counter_diff": time.perf_counter() - start,
            "perf_counter_start": start,
            "warning": warning,
            **self._coverage_stats(chain, surrogate_step=not (exploring or jumping)),
            **self._extra_stats(chain),
        }
        return RaveledVars(chain.current.q, q0.point_map_info), [stats]

    def _adapt(self, chain: ChainState, info: TransitionInfo, exploring: bool) -> None:
        """Step sizes, path length, mass matrix, tuning trace, and the refit schedule."""
        if exploring and not self.has_gradient:
            chain.explore_adapt.update(info.adapt_stat, True)
            chain.explore.adapted += 1
        elif exploring:
            # Exact HMC adapts its own kernel, before the first fit and in the fallback after
            # it, never the surrogate's (SparseGridHMC's, there from the start): the
            # surrogate trajectories' step size learns from their steps only.
            if chain.surrogate is None or chain.exact_metric is not None:
                metric, step_adapt = self._exact_kernel(chain)
                step_adapt.update(info.adapt_stat, True)
                metric.update(info.point.q, info.point.grad, True)
        else:
            chain.step_adapt.update(info.adapt_stat, True)
        if not exploring and chain.path_adapt is not None:
            chain.path_adapt.update(info.accept_prob, True)
        chain.positions.append(info.point.q)
        chain.position_potentials.append(info.point.potential)
        self._after_tune_iteration(chain, info)

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
        if not np.isfinite(point.potential) and chain.current_approximate and chain.checks.last_good is not None:
            return chain.checks.last_good  # tuning on the surrogate left the chain where the model fails
        return self.evaluator.check_start(point)

    def _evaluate(
        self, chain: ChainState, q: np.ndarray, with_grad: bool, record: bool = True,
        retry: bool = False,
    ) -> ChainPoint:
        """Evaluate the true model at ``q``, count it, and keep it as training data (unless
        ``record`` is False: a diagnostic evaluation, e.g. the heavy-tail check's); ``retry``:
        the chain's state, where a raise is tried once more (evaluator.py)."""
        point = self.evaluator.evaluate(chain, q, with_grad, self.tune, retry=retry)
        self._keep(chain, point, record)
        return point

    def _keep(self, chain: ChainState, point: ChainPoint, record: bool = True) -> None:
        """A finite evaluation goes into the store and, as training data, to the chain."""
        if not np.isfinite(point.potential):
            return
        self._store_evaluation(chain, point)
        if record and self.policy.records(chain.frozen):
            chain.training.append(point.q, point.potential, point.grad, self.context.values())
            self._on_evaluation(chain, point)

    def _on_evaluation(self, chain: ChainState, point: ChainPoint) -> None:
        """Hook: a new finite model evaluation was added to the training set."""

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
