"""KernelHMC: gradient-free HMC on a kernel exponential family fitted to the chain's own
states (kmc §3-5, Algorithm 1)."""

from __future__ import annotations

import warnings

import numpy as np
from pymc.stats.convergence import WarningType

from pymc_surrogate.core.types import TransitionInfo
from pymc_surrogate.step_methods import stats as _stats
from pymc_surrogate.step_methods.adaptation.kernel_fit import KernelFit
from pymc_surrogate.step_methods.adaptation.training import TrainingPolicy
from pymc_surrogate.step_methods.base import SurrogateStep
from pymc_surrogate.step_methods.settings import kernel_settings
from pymc_surrogate.surrogates.kernel_exp_family import (
    KernelExpFamilyFinite,
    KernelExpFamilyLite,
)

__all__ = ["KernelHMC"]

#: ``adaptation_decay="auto"``: a lite update re-solves an ``n x n`` system (0.1-0.6 s at
#: n = 500-1000, d = 8), so it vanishes like 1/t (about ln t updates); a finite update
#: folds the new states in at O(d m^2) each (3 ms at m = 300, d = 8), so 1/sqrt(t).
AUTO_DECAY = {"lite": 1.0, "finite": 0.5}
#: Told when a pseudo-marginal KernelHMC samples only some of the model's variables.
PARTIAL_PSEUDO_MARGINAL = (
    "KernelHMC(pseudo_marginal=True) samples only some of the model's variables. When "
    "another step changes variables the likelihood estimate depends on, the stored "
    "estimate no longer applies and is recomputed at the new values: the compound sampler "
    "is then not an exact pseudo-marginal scheme. Give KernelHMC every continuous variable "
    "the noisy likelihood depends on."
)


class KernelHMC(SurrogateStep):
    r"""Gradient-free HMC on a kernel exponential family learnt from the chain's states
    (KMC), exactly corrected; safe for pseudo-marginal (noisy) likelihoods.

    The surrogate of the potential is an infinite-dimensional exponential family fitted by
    score matching to where the chain has been: no logp values and no gradients are
    learnt from. Tuning explores with a gradient-free random walk (DE-MCz) until enough
    distinct states exist, fits the surrogate (bandwidth and regulariser by
    cross-validation), and then runs trajectories on it; every proposal is accepted or
    rejected with the model's logp.

    Parameters
    ----------
    vars : list of continuous variables, optional (default: all of the model's)
    surrogate : KernelExpFamilyLite or KernelExpFamilyFinite, optional
        The kernel exponential family fitted to the chain's states, with its settings.
        ``KernelExpFamilyLite`` (kmc Prop. 1; default ``KernelExpFamilyLite(max_points=1000)``):
        a Gaussian kernel centred on a sub-sample of at most ``max_points`` states (a fit
        costs ``O(d n^3)``); its gradient vanishes away from the data, so trajectories
        there degrade to a random walk. ``KernelExpFamilyFinite`` (Prop. 2): ``n_features``
        random Fourier features, updated online with every state (``O(d m^2)`` a state).
        Their ``sigma`` and ``lam`` (length scale in whitened coordinates, regulariser;
        "auto": the cross-validated score-matching objective at every batch fit) and
        ``base_scale``: the sd of the fit's Gaussian base measure in whitened coordinates
        (``None`` drops it: the paper's form, where the lite density is improper and the
        surrogate transition's inner chain and step-size warm-up can drift off). The step
        sets their whitening, ``random_state``, ``temperature`` and, in a compound step,
        ``score_dims``.
    temperature : float or "auto"
        The trajectories run on the fitted log density divided by it (>= 1). A surrogate
        narrower than the posterior makes the exact correction sticky (its weight
        ``pi / pi~`` grows without bound in the tails), a wider one lowers the
        acceptance, the more so the higher the dimension (a Gaussian tempered by 1.5:
        acceptance about 0.6 in d = 10, 0.4 in d = 20). "auto" (default): the largest
        ratio of the fit's rise to the model's at the tune's evaluations, within
        [1, ``MAX_TEMPERATURE``] (``_tail_temperature``): 1 for a surrogate that follows
        the model, more for one steeper than it anywhere evaluated; 1.5 for a block of a
        compound step, whose values cannot judge the fit. A block's surrogate has the
        other blocks' values as inputs, and score matching fits the score in the block's
        coordinates only (the surrogate's ``score_dims``, set by the step): the
        conditional's, which is what its trajectories use.
    adapt_in_draws : bool
        ``True`` (default): the surrogate keeps learning from the draws' states with
        vanishing probability ``a_t``. ``False``: frozen when tuning ends.
    adaptation_decay : float or "auto"
        ``a_t = t^{-adaptation_decay}``, ``t`` the iterations since the first fit; in
        (0, 1] so that ``sum a_t`` diverges. "auto": 1 for lite, 0.5 for finite.
    pseudo_marginal : bool
        The model's logp is the log of a noisy, unbiased likelihood estimate (an Op that
        draws random numbers: importance sampling, particle filters, ABC). The current
        state's estimate is then never recomputed (it is not, either, by default: see
        Notes); the ``"auto"`` tail-jump check, which would judge tails on noisy values,
        is off; the exploration's DE-MCz scale is tuned toward acceptance 0.07 (a
        pseudo-marginal random walk's optimum), the chain health checks allow for the
        noise's long rejection runs, no chain falls back to exploration for them; and
        ``use_gradient=True`` is refused.
    kernel : HMCKernel, optional
        As ``SurrogateHMC``; default ``HMCKernel(n_inner=1)``. Its correction
        ``"surrogate_transition"`` (default; the surrogate's level cancels in it) or
        ``"hamiltonian"`` (the paper's: one trajectory accepted with the true Hamiltonian).
    use_gradient : "auto", True or False
        "auto" (default): ``True`` if the model has a gradient, as the other step methods,
        except with ``pseudo_marginal=True``. ``True``: exact HMC explores before the
        first fit (the surrogate still learns from states only, never from gradients).
        ``False``: the model is a black box whatever it is (DE-MCz explores; on the
        suite's 2-d ridge regression it stayed where it started).
    frame : {"auto", "affine", "triangular"} or TriangularMap
        As ``SurrogateHMC`` (the kernel fits the states where a curved posterior is close
        to a Gaussian).
    **kwargs
        ``warmup``, ``target_accept``, ``store``, ``executor``, ``model``,
        ``rng``, ``initial_point``, ``compile_kwargs``, ``blocked`` as ``SurrogateHMC``.

    Notes
    -----
    kmc §3-5, Algorithm 1, Propositions 1-2. What holds for exactness:

    * Every transition leaves the posterior invariant *given* the surrogate (whatever its
      ``temperature`` and base), the mass matrix and the step size it runs with: leapfrog with any position-dependent force is
      reversible and volume preserving, and the end point is accepted with the model's
      logp (``correction``). Nothing in a transition depends on the surrogate changing.
    * ``adapt_in_draws=False``: the kernel is fixed from the first draw on, so the draws
      are an ordinary (non-adaptive) Markov chain with the posterior as its stationary
      law.
    * ``adapt_in_draws=True``: the surrogate is refitted to the history (states only;
      sigma, lam, whitening, mass matrix and step size stay fixed) with probability
      ``a_t -> 0``, so the kernels change less and less (diminishing adaptation,
      Roberts & Rosenthal 2007, Thm 1); ``sum a_t = inf`` keeps it learning forever. That
      gives convergence of the marginal law and a weak law of large numbers *if*
      containment also holds (e.g. a compact state space, or kernels that are uniformly
      geometrically ergodic: kmc Prop. 3 for lite in d = 1); it is not proved in general.
      Use ``adapt_in_draws=False`` where that matters.
    * Pseudo-marginal (Andrieu & Roberts 2009): a chain state is the pair (position, its
      likelihood estimate); the estimate at the current state is kept with it and used in
      every later acceptance until a proposal is accepted, so the chain is exact for the
      posterior of the exact likelihood. The same holds for the surrogate transition (the
      inner kernel does not use the estimate) and for explicit tail jumps
      (``HMCKernel(tail_jumps=...)``, an independence proposal). Nothing re-evaluates the current state: the cached logp is
      keyed by the position and the values of every variable outside the step's block.
      Inside a ``CompoundStep`` whose other steps change variables the estimate depends
      on, that key changes and the estimate is recomputed at the new values (it has to:
      the stored one is for other values), and the compound sampler is then not an exact
      pseudo-marginal scheme (a warning says so at construction). The tuning-end trials of
      ``correction="hamiltonian"`` evaluate proposals from the current state but restore
      the state and its estimate before the draws.

    Stats beyond ``SurrogateHMC``'s: ``adaptations`` (surrogate updates so far),
    ``adapted`` (this iteration), ``kernel_sigma``, ``kernel_lam``,
    ``kernel_temperature``; ``training_size`` is the number of states the current surrogate
    was fitted to.

    References
    ----------
    .. [1] Strathmann, Sejdinovic, Livingstone, Szabo & Gretton (2015), "Gradient-free
       Hamiltonian Monte Carlo with efficient kernel exponential families", NeurIPS.
    .. [2] Andrieu & Roberts (2009), "The pseudo-marginal approach for efficient Monte
       Carlo computations", *Ann. Statist.* 37.
    .. [3] Roberts & Rosenthal (2007), "Coupling and ergodicity of adaptive Markov chain
       Monte Carlo algorithms", *J. Appl. Probab.* 44.

    Examples
    --------
    >>> idata = pm.sample(step=KernelHMC(), tune=1000)  # inside a model context
    >>> idata = pm.sample(step=KernelHMC(pseudo_marginal=True))  # a noisy likelihood Op
    """

    name = "kernel_hmc"
    surrogate_family = (KernelExpFamilyLite, KernelExpFamilyFinite)
    stats_dtypes_shapes = {
        **_stats.STATS,
        "adaptations": (np.int64, []),
        "adapted": (bool, []),
        "kernel_sigma": (np.float64, []),
        "kernel_lam": (np.float64, []),
        "kernel_temperature": (np.float64, []),
    }

    def __init__(
        self,
        vars=None,
        *,
        temperature: float | str = "auto",
        adapt_in_draws: bool = True,
        adaptation_decay: float | str = "auto",
        pseudo_marginal: bool = False,
        use_gradient: bool | str = "auto",
        **kwargs,
    ):
        if "form" in kwargs:
            raise TypeError(
                "KernelHMC's form is the surrogate it is given: surrogate=KernelExpFamilyFinite() "
                "for the finite form, KernelExpFamilyLite() (the default) for the lite one "
                "(from pymc_surrogate.surrogates).")
        self.form = ("finite" if isinstance(kwargs.get("surrogate"), KernelExpFamilyFinite)
                     else "lite")
        (self.temperature, self.adapt_in_draws, self.adaptation_decay, self.pseudo_marginal,
         use_gradient) = kernel_settings(temperature, adapt_in_draws, adaptation_decay,
                                         pseudo_marginal, use_gradient, AUTO_DECAY[self.form])
        self.policy = TrainingPolicy(
            source="chain_states", refit="online" if self.form == "finite" else "geometric",
            learn_in_draws=self.adapt_in_draws,
        )
        super().__init__(vars, use_gradient=use_gradient, **kwargs)
        if self.pseudo_marginal and self.functions.shared:
            warnings.warn(PARTIAL_PSEUDO_MARGINAL, UserWarning, stacklevel=2)

    def default_surrogate(self) -> KernelExpFamilyLite:
        return KernelExpFamilyLite(max_points=1000)

    def stop_tuning(self):
        if not self.chain.frozen:
            self.fit.freeze_history()
        super().stop_tuning()

    def _surrogate_fit(self) -> KernelFit:
        """Score matching to the chain's history, judged by the model's values."""
        return KernelFit(self.surrogate, self.learned, self.policy, self.context, self.dim,
                         self.has_gradient, self.temperature, self.adaptation_decay)

    def _after_iteration(self, chain, info: TransitionInfo) -> None:
        """Keep the new state; with probability ``a_t`` refit the surrogate to the history."""
        try:
            self.fit.after_iteration(info.point.q, not chain.frozen or self.adapt_in_draws,
                                     chain.iteration - self.schedule.first_iteration + 1,
                                     self.rng)
        except (np.linalg.LinAlgError, ValueError, FloatingPointError) as err:
            if self.fit.adaptation_failed():
                self._warn(
                    chain, WarningType.BAD_PARAMS,
                    f"an update of the surrogate from the chain's states failed ({err}); "
                    "keeping the last good surrogate (stat `failed_fits`). The draws stay "
                    "exact.",
                    level="info" if self.tune else "warn",
                )

    def _extra_stats(self, chain) -> dict:
        surrogate = self.learned.surrogate
        return {
            "training_size": self.fit.fitted_on if surrogate is not None else 0,
            "adaptations": self.learned.adaptations,
            "adapted": self.fit.updated,
            "kernel_sigma": getattr(surrogate, "sigma_", np.nan),
            "kernel_lam": getattr(surrogate, "lam_", np.nan),
            "kernel_temperature": getattr(surrogate, "temperature", np.nan),
        }
