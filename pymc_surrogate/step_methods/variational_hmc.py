"""VariationalHMC: a score-matching surrogate that learns online (vhmc §3.2-3.4, Algorithm 2)."""

from __future__ import annotations

import warnings

import numpy as np
from pymc.step_methods.compound import Competence
from pymc.vartypes import continuous_types

from pymc_surrogate.core.transitions import surrogate_only_transition
from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods import stats as _stats
from pymc_surrogate.step_methods.adaptation.score_fit import ScoreFit
from pymc_surrogate.step_methods.adaptation.training import TrainingPolicy
from pymc_surrogate.step_methods.base import SurrogateStep
from pymc_surrogate.step_methods.evaluation.model_functions import ModelFunctions
from pymc_surrogate.step_methods.settings import FINITE_DIFFERENCE, variational_settings
from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.surrogates.score_network import (
    ScoreNetworkSurrogate,
)

__all__ = ["VariationalHMC"]

#: Refused: a model with no gradient and no ``use_gradient="finite_difference"``.
NO_GRADIENT = (
    "VariationalHMC learns from the gradient of the model's logp, and this model has none "
    "PyTensor can compute (an Op without a gradient, or use_gradient=False). Sample it with "
    "the gradient-free SurrogateHMC or AdaptiveSurrogateHMC, or pass "
    "use_gradient='finite_difference' (central differences: {evaluations} more logp "
    "evaluations per training point)."
)
#: Told with ``exact=False``.
FREE_FORM = (
    "VariationalHMC(exact=False): after tuning, the draws are HMC on the surrogate alone, "
    "with no model evaluation; they follow the surrogate, not the model, and are only as "
    "good as its fit (stat `approximate`). Use exact=True for draws of the exact posterior."
)


class VariationalHMC(SurrogateStep):
    r"""HMC on a random network fitted by score matching, learning online (VHMC).

    The surrogate learns from the gradients of the potential at every point the chain
    evaluates, not from values: its output weights are the regularised score-matching
    fit, updated online one gradient at a time (vhmc Proposition 1, equal to the batch
    fit), and a Laplace approximation at the mode is blended in while the data are few.
    Learning stops at the stopping time ``t0`` (the end of tuning by default); the draws
    then run on the fixed surrogate and, by default, are corrected with the true logp.

    Parameters
    ----------
    vars : list of continuous variables, optional (default: all of the model's)
    exact : bool
        ``True`` (default): every draw is accepted with the true model logp (one model
        evaluation a draw); the chain targets the exact posterior. ``False``: the paper's
        free-form variational mode: the draws are HMC on the surrogate alone, with no
        model evaluation; they follow the surrogate, not the model (a warning, and the
        stat ``approximate``).
    use_gradient : "auto", True, False or "finite_difference"
        Where the training gradients come from: "auto" (default) or ``True``, the model's
        (a model without one raises); "finite_difference", central differences of the logp
        (``2 d`` more logp evaluations per training point, counted in ``model_evals``), the
        way to sample a black box. ``gradient="model"`` / ``gradient="finite_difference"``
        of earlier releases still work, with a ``FutureWarning``.
    surrogate : ScoreNetworkSurrogate, optional
        The score-matching network with its settings: random softplus nodes
        (``n_hidden``), the ridge penalty of their weights (``alpha``; "auto": generalised
        cross-validation at each batch fit), the Laplace blend ``mu_t = 1 - exp(-t /
        tau)`` over the ``t`` gradients learnt, its quadratic base and bound on its
        nodes; e.g. ``surrogate=ScoreNetworkSurrogate(tau=50)``. Its defaults by default.
        The step sets its Laplace term, whitening and ``random_state``.
    t0 : "tune" or int
        Stopping time: learning stops after this many tuning iterations (or when tuning
        ends, whichever is first).
    stop_error : float, optional
        Stop learning earlier, once the running relative score error of new points,
        measured before they are learnt, falls below this (e.g. 0.01).
    kernel : HMCKernel, optional
        As ``SurrogateHMC``: the trajectories on the surrogate and their correction;
        default ``HMCKernel(n_inner=1)``.
    **kwargs
        Everything ``SurrogateHMC`` takes: ``warmup``, ``target_accept``,
        ``store``, ``executor``, ``frame``, ``model``, ``rng``, ``initial_point``,
        ``compile_kwargs``, ``blocked``.

    Notes
    -----
    vhmc §3.2-3.4, Algorithm 2, Proposition 1. The Laplace mode and Hessian are the
    L-BFGS climb's end after Newton steps with a finite-difference Hessian of the model's
    gradient (``exploration.py``); if that fails, the tuning states' mean and covariance
    (one warning). The network has a quadratic base in whitened coordinates beside the
    paper's nodes (``docs/design.md``). Stats beyond ``SurrogateHMC``'s: ``approximate``,
    ``learning``, ``score_error``, ``laplace_weight``.

    References
    ----------
    .. [1] Zhang, Shahbaba & Zhao (2017), "Variational Hamiltonian Monte Carlo via score
       matching", *Bayesian Analysis* 13.
    .. [2] Hyvärinen (2005), "Estimation of non-normalized statistical models by score
       matching", *JMLR* 6.

    Examples
    --------
    >>> idata = pm.sample(step=VariationalHMC(), tune=1000)  # inside a model context
    """

    name = "variational_hmc"
    learns_from_gradients = True
    policy = TrainingPolicy(refit="online", learn_in_draws=False)
    stats_dtypes_shapes = {
        **_stats.STATS,
        "approximate": (bool, []),
        "learning": (bool, []),
        "score_error": (np.float64, []),
        "laplace_weight": (np.float64, []),
    }

    surrogate_family = (ScoreNetworkSurrogate,)

    def __init__(
        self,
        vars=None,
        *,
        exact: bool = True,
        t0: int | str = "tune",
        stop_error: float | None = None,
        **kwargs,
    ):
        self.exact, self.t0, self.stop_error, gradient = variational_settings(
            exact, t0, stop_error, kwargs.pop("gradient", None))
        # the old gradient="finite_difference": differences only where PyTensor has no gradient
        self._difference_if_needed = gradient == FINITE_DIFFERENCE
        super().__init__(vars, **kwargs)
        if not self.has_gradient:
            raise ValueError(NO_GRADIENT.format(evaluations=2 * self.dim))
        if not self.exact:
            warnings.warn(FREE_FORM, UserWarning, stacklevel=2)

    @staticmethod
    def competence(var, has_grad):
        """PyMC's automatic assignment: continuous variables of models with a gradient
        (a black box needs the explicit ``use_gradient="finite_difference"``)."""
        if var.dtype in continuous_types and has_grad:
            return Competence.COMPATIBLE
        return Competence.INCOMPATIBLE

    def _model_functions(self, model, vars, initial_point, use_gradient, compile_kwargs):
        if use_gradient == FINITE_DIFFERENCE or not self._difference_if_needed:
            return super()._model_functions(model, vars, initial_point, use_gradient, compile_kwargs)
        return ModelFunctions(model, vars, initial_point, use_gradient, compile_kwargs,
                              finite_difference=True)

    # ------------------------------------------------------------ the surrogate
    def _surrogate_fit(self) -> ScoreFit:
        """The score network with its Laplace term (vhmc §3.4)."""
        return ScoreFit(self.surrogate, self.learned, self.policy, self.context, self.dim,
                        self.has_gradient, self.t0, self.stop_error, self.exploration,
                        self.frame, self.health)

    # ---------------------------------------------------------- online learning
    def _on_evaluation(self, chain: ChainState, point: ChainPoint) -> None:
        try:
            self.fit.learn(point, self.schedule.weight_reference)
        except (np.linalg.LinAlgError, ValueError, FloatingPointError) as err:
            self.refits.online_failed(self._access(chain), err)

    def _after_iteration(self, chain: ChainState, info: TransitionInfo) -> None:
        if not chain.frozen:
            self.fit.follow(chain.iteration)

    def _measures_coverage(self) -> bool:
        # The free-form mode samples the surrogate itself: a temperature would change its target.
        return self.exact and super()._measures_coverage()

    # ------------------------------------------------- the free-form variational mode
    def _current_point(self, chain: ChainState, q: np.ndarray) -> ChainPoint:
        if self.exact or not chain.frozen or self.learned.surrogate is None:
            return super()._current_point(chain, q)
        if chain.current is not None and chain.current_key == self.evaluator.key(q):
            return chain.current
        return ChainPoint(q, self._surrogate_field(chain)(q)[0], None)

    def _surrogate_step(self, chain: ChainState, current: ChainPoint,
                        record: bool = True) -> TransitionInfo:
        if self.exact or not chain.frozen:
            return super()._surrogate_step(chain, current, record)
        # vhmc Algorithm 2 after t0: Metropolis with the surrogate's own energy (stat
        # `model_logp`, `lp` in ArviZ, is NaN in these draws).
        return surrogate_only_transition(
            current, self._surrogate_field(chain), self.kernel.metric,
            self.kernel.step_adapt.current(False), self.kernel.path_length,
            self.kernel.max_energy_error, self.rng)

    def stop_tuning(self):
        super().stop_tuning()
        if not self.exact:
            self.exploration.never_in_draws()  # no exact fallback: no model evaluation

    def _extra_stats(self, chain: ChainState) -> dict:
        return self.fit.stats(self.exact, chain.frozen)
