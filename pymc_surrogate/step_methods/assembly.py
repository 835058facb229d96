"""How a step is made: its settings read, its parts built and handed to each other.

``SurrogateStep.__init__`` reads the settings (``read_settings``: the model compiled,
nothing evaluated) before PyMC's constructor and builds the parts (``build_parts``) after
it, in the order in which each needs the ones before. ``chain_access`` is what the
adaptation is handed of the step for one chain (``adaptation/access.py``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from pymc.model import modelcontext

from pymc_surrogate.step_methods.adaptation.access import ChainAccess
from pymc_surrogate.step_methods.adaptation.coverage import Coverage
from pymc_surrogate.step_methods.adaptation.draw_bound import DrawBound
from pymc_surrogate.step_methods.adaptation.learned_surrogate import LearnedSurrogate
from pymc_surrogate.step_methods.adaptation.mass_matrix import MassMatrix
from pymc_surrogate.step_methods.adaptation.refit import Refits
from pymc_surrogate.step_methods.adaptation.refit_schedule import RefitSchedule
from pymc_surrogate.step_methods.adaptation.surrogate_tuning import SurrogateTuning
from pymc_surrogate.step_methods.adaptation.transport_frame import (
    Frame,
    FramedFunctions,
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
from pymc_surrogate.step_methods.evaluation.sharing import SharedEvaluations, make_store
from pymc_surrogate.step_methods.health.chain_health import (
    ChainHealth,
    centred_variables,
    coordinate_names,
)
from pymc_surrogate.step_methods.health.far_proposals import FarProposals
from pymc_surrogate.step_methods.kernels.surrogate_kernel import SurrogateKernel
from pymc_surrogate.step_methods.kernels.tail_jumps import TailJumps
from pymc_surrogate.step_methods.settings import (
    HMCKernel,
    WarmUp,
    check_settings,
    gradient_setting,
    part_setting,
    surrogate_setting,
)
from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.step_methods.warmup.exploration import (
    Exploration,
    default_explore_steps,
)
from pymc_surrogate.step_methods.warmup.prior import prior_scale

__all__ = ["StepSettings", "read_settings", "build_parts", "chain_access"]


class StepSettings(NamedTuple):
    """What the constructor read, for the parts built after PyMC's constructor."""

    model: Any
    vars: list
    initial_point: dict
    kernel: HMCKernel
    warmup: WarmUp


def read_settings(step, vars, surrogate, kernel, warmup, target_accept, use_gradient, model,
                  initial_point, compile_kwargs, kwargs: dict) -> StepSettings:
    """Check every setting, and compile the model (``step.functions``)."""
    owner = type(step).__name__
    refuse_in_a_rerun_script(owner)
    model = modelcontext(model)
    if initial_point is None:
        initial_point = model.initial_point()
    vars = block_variables(model, vars, initial_point, owner)
    use_gradient = gradient_setting(use_gradient, owner, step.learns_from_gradients)
    step.surrogate = surrogate_setting(surrogate, step.surrogate_family,
                                       step.default_surrogate(), owner, kwargs)
    kernel = part_setting(kernel, HMCKernel, step.default_kernel, owner, "kernel", kwargs)
    warmup = part_setting(warmup, WarmUp, WarmUp(), owner, "warmup", kwargs)
    check_settings(owner, kwargs, target_accept)
    step.check_kernel(kernel)
    step.kernel_settings, step.target_accept, step._model = kernel, target_accept, model
    step.functions = step._model_functions(model, vars, initial_point, use_gradient,
                                           compile_kwargs)
    return StepSettings(model, vars, initial_point, kernel, warmup)


def build_parts(step, settings: StepSettings, store, executor, frame) -> None:
    """The step's parts, each given the settings and the parts it works with."""
    owner, (model, vars, initial_point, kernel, warmup) = type(step).__name__, settings
    functions, tuning = step.functions, step.tuning
    layout = [(v.name, np.shape(initial_point[v.name])) for v in vars]
    step.health = ChainHealth(
        owner, step.pseudo_marginal,
        "NUTS (pm.sample() without `step`)" if functions.has_gradient
        else "pm.DEMetropolisZ or pm.Slice",
        coordinate_names(layout), centred_variables(model, vars),
    )
    step.dim = dim = int(sum(np.size(initial_point[v.name]) for v in vars))
    step.mass_matrix = MassMatrix(tuning, kernel.dense_mass, dim)
    step.far = FarProposals(dim, tuning.far_sd)
    # none where every draw is a surrogate move (no model evaluation to jump with), nor
    # "auto" on a noisy logp (the check would judge the tails on noisy values)
    no_jumps = not step.exact or (step.pseudo_marginal and kernel.tail_jumps == "auto")
    step.tails = TailJumps(0 if no_jumps else kernel.tail_jumps, dim, tuning)
    step.kernel = SurrogateKernel(kernel.correction, kernel.n_inner, kernel.path_length,
                                  step.target_accept, kernel.max_energy_error, tuning)
    step.explore_steps = (default_explore_steps(functions.has_gradient, dim)
                          if warmup.steps == "auto" else int(warmup.steps))
    step.tune = True
    step.context = context = BlockContext(functions.shared, dim, owner)
    step.learned = LearnedSurrogate(dim, context.dim, step.policy)
    step.explore_executor, step.explore_tries = exploration_executor(
        executor, warmup.tries, context.dim, owner, step.pseudo_marginal)
    batched = step.explore_executor is not None
    if isinstance(frame, str) and frame == "auto":  # the learned frame where it can run
        frame = ("affine" if context.dim or batched or kernel.metric != "euclidean"
                 else step.default_frame)
    step.frame = Frame(frame_setting(frame, owner), dim)
    step.frame.check(owner, context.dim > 0, batched)
    # in a learned frame the step sees the model in the chain's coordinates
    step.evaluator = Evaluator(FramedFunctions(functions, step.frame) if step.frame.learned
                               else functions, layout, owner, step.health.warn)
    scale = rounding = None
    if functions.finite_difference:
        # Central differences relative to each coordinate's prior sd, where there is one
        scale = prior_scale(model, [v.name for v in step.vars], dim)
        functions.difference_scale = scale
        rounding = functions.rounding_at  # a bound method: the step pickles
    step.exploration = Exploration(
        functions.has_gradient, dim, kernel.path_length, kernel.max_energy_error,
        step.explore_tries if batched else None, step.pseudo_marginal, tuning, scale,
        rounding, step.health.coordinates,
    )
    # PyMC keeps the constructor's arguments to rebuild the step when unpickling
    # (BlockedStep.__new__, which skips __init__; the state restores the rest): the
    # executor stays out of them, as out of the state.
    newargs = getattr(step, "_BlockedStep__newargs", None)
    if newargs is not None and "executor" in newargs[1]:
        step._BlockedStep__newargs = newargs[0], {**newargs[1], "executor": None}
    step.store = make_store(store, owner)
    step.sharing = SharedEvaluations(step.store, step._learns_from_store(),
                                     step.explore_steps, tuning.own_exploration_share)
    step.sharing.bind(model, vars, store, dim, context.dim, owner)
    step.surrogate_tuning = SurrogateTuning(
        (step.sharing.tuned or step.exploration.batched) and context.dim == 0,
        step.explore_tries if step.exploration.batched else 1, tuning,
    )
    measures = step._measures_coverage()
    step.coverage = Coverage(
        measures,
        not functions.has_gradient and tuning.tune_tempering > 0 and measures
        and step.policy.source == "evaluations",
        dim, tuning,
    )
    step.draw_bound = DrawBound(
        step.lowers_black_box_draws and not functions.has_gradient
        and step.kernel.correction == "surrogate_transition" and context.dim == 0,
        dim, tuning,
    )
    step.evaluations = ChainEvaluation(
        step.evaluator, functions, model, step.vars, step.far, step.sharing, step.frame,
        context, step.policy, step.learned, owner, step._on_evaluation)
    step.schedule = RefitSchedule(tuning)
    step.fit = step._surrogate_fit()
    step.refits = Refits(step.fit, step.learned, step.schedule, step.policy, tuning, dim,
                         context, step.kernel, step.mass_matrix, step.coverage,
                         step.exploration, step.sharing, step.explore_steps)
    step.tuner = Tuner(step.refits, step.learned, step.fit, step.frame, step.kernel,
                       step.exploration, step.surrogate_tuning, step.schedule, step.coverage,
                       step.sharing, step.tails, step.draw_bound, step.exact)
    step.chain = step._new_chain()


def chain_access(step, chain: ChainState) -> ChainAccess:
    """What the adaptation asks of ``step`` for ``chain``, as closures."""
    return ChainAccess(
        chain=chain, rng=step.rng, tune=step.tune,
        refit=lambda: step._refit(chain),
        read_shared=lambda: step.tuner.read_shared(chain),
        warn=lambda kind, message, level="warn": step._warn(chain, kind, message, level),
        model_access=lambda: step._model_access(chain),
        field=lambda: step._surrogate_field(chain),
        adapted=lambda scale: step._adapted_to_surrogate(chain, scale),
        evaluate=lambda q, with_grad, record=True: step._evaluate(chain, q, with_grad, record),
        evaluate_batch=lambda states: step.evaluations.evaluate_batch(
            chain, states, step.tune, step.explore_executor),
        current_point=lambda q: step._current_point(chain, q),
        surrogate_step=lambda current, record=True: step._surrogate_step(chain, current,
                                                                         record),
        move_to=lambda point, approximate=False: step._move_to(chain, point, approximate),
        raised=lambda: step.evaluator.failures.raised,
    )
