"""How KernelHMC fits its surrogate to the chain's history and judges the fit against its
Gaussian base, on the model's own values.

Score matching fits the density of the chain's states, which in tuning are not yet the
posterior's. The model's potentials at tune evaluations the fit did not learn from decide
between the fit and its base alone, choose the base measure (the states' Gaussian or a
quadratic regression of the values) and, with ``temperature="auto"``, the temperature at
which the surrogate rises no faster than the model.
"""

from __future__ import annotations

import copy
from dataclasses import field

import numpy as np
from pymc.step_methods.state import dataclass_state

from pymc_surrogate.step_methods.adaptation.surrogate_fit import (
    SurrogateFit,
    SurrogateFitState,
)
from pymc_surrogate.surrogates.laplace import laplace_from_values, within_trust_region
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["KernelFit", "MAX_TEMPERATURE"]

#: Most tune evaluations a fit is judged on against the base alone (``KernelFit.judge``).
VALUE_CHECK_POINTS = 1000
#: ``temperature="auto"``: how far (nats) above the lowest points a point must be for its
#: rise ratio to count (``_tail_temperature``).
MIN_RISE = 2.0
#: ``temperature="auto"`` where the values cannot judge the fit (a compound step's block):
#: 1.5 widens a Gaussian surrogate by 1.22 (at 1, on PyMC 6, a block next to pm.Slice had
#: the other variable's sd 0.78 of the truth's, z -5.3, in 2 x 1500 draws; with the
#: block's conditional score fitted, next to a Gibbs-sampled Bernoulli, x's ESS in
#: 2 x 2000 draws was 636-3179 at 5 seeds at 1, 2473-3666 at 1.5).
UNJUDGED_TEMPERATURE = 1.5
#: Largest ``temperature="auto"``: a fit four times steeper than the model (a surrogate
#: with half its sd) is tempered to the model's width; beyond, the values say little.
MAX_TEMPERATURE = 4.0


@dataclass_state
class KernelHistoryState(SurrogateFitState):
    """The chain's history the kernel learns from (and the finite form's learner)."""

    states: list = field(default_factory=list)  # surrogate inputs (q, context) of the states
    frozen_start: int | None = None  # first state of the draws' history (past the burn-in)
    fit_end: int = 0  # states seen by the fit being made
    learner_end: int = 0  # states the finite learner has absorbed
    fitted_on: int = 0  # states the current surrogate was fitted to
    updated: bool = False  # this iteration updated the surrogate
    told_failure: bool = False


class KernelFit(SurrogateFit):
    """KernelHMC's surrogate family: a kernel exponential family fitted by score matching to
    the chain's history (its states, not the model's values), judged against its Gaussian
    base on the model's values at the tune evaluations it did not learn from.

    Parameters
    ----------
    estimator, learned, policy, context, dim, has_gradient
        As ``SurrogateFit``.
    temperature : float or "auto"
        KernelHMC's ``temperature``.
    adaptation_decay : float
        The vanishing adaptation's ``a_t = t^-adaptation_decay`` (kmc §5).
    """

    weighted = False
    _state_class = KernelHistoryState

    def __init__(self, estimator, learned, policy, context, dim: int, has_gradient: bool,
                 temperature: float | str, adaptation_decay: float):
        # A compound step's block: score matching in the block's coordinates only (the
        # conditional's score), not in the other blocks' values.
        self.adaptation_decay = adaptation_decay
        super().__init__(estimator, learned, policy, context, dim, has_gradient, settings={
            "temperature": 1.0 if temperature == "auto" else temperature,
            "score_dims": dim if context.dim else None})
        self.temperature = temperature
        # Whether the model's values can judge a fit: not a compound step's block, whose
        # values depend on the other variables.
        self.judged = not context.dim

    def history(self) -> np.ndarray:
        """The states the surrogate learns from: the second half of tuning (past the
        initial transient), and in the draws every draw since."""
        start = self.frozen_start if self.frozen_start is not None else len(self.states) // 2
        width = self.context.block_dim + self.context.dim
        return np.array(self.states[start:], dtype=np.float64).reshape(-1, width)

    def fit(self, chain, keep: np.ndarray, rng: np.random.Generator, **settings):
        """A new fit (sigma and lam by cross-validation where "auto") to the history, its
        base and its judgement by the model's values at the rows ``keep``."""
        history, training = self.history(), self.learned.training
        dim = self.context.block_dim
        inputs, whitening = self.context.training_inputs(history[:, :dim], history[:, dim:])
        judge = self.out_of_sample(training, keep, history)
        whitening = self.base(whitening, judge, training)
        surrogate = self.new(whitening, rng.spawn(1)[0], **settings)
        # No check of the cross-validated score: it is relative to the Gaussian base, so a
        # fit that says nothing beyond it (score >= 0, the largest penalty) is that Gaussian,
        # a proper and usable surrogate, not a flat one.
        fitted = self.judge(surrogate.fit(inputs), judge)
        self.fit_end, self.fitted_on = len(self.states), len(history)
        return fitted

    def min_points(self) -> int:
        return self.policy.min_states(self.dim)

    def shortfall(self, chain, explore_steps: int) -> str | None:
        """The fit learns from distinct states, not evaluations: a stuck chain (every state
        the same) has none to learn from however long it tuned."""
        distinct = len(np.unique(self.history(), axis=0))
        if distinct >= self.min_points():
            return None
        stuck = ("; the chain barely moved: check the model's logp near the initial point"
                 if chain.iteration >= explore_steps else "")
        return (f"{distinct} distinct states in the second half of tuning, fewer than the "
                f"{self.min_points()} a fit needs{stuck}")

    def use(self, surrogate) -> None:
        self.learner_end = self.fit_end

    # ------------------------------------------------ the history (kmc §5)
    def freeze_history(self) -> None:
        """Tuning ends: the draws' history starts past the burn-in."""
        self.frozen_start = len(self.states) // 2

    def reframe(self, to_new) -> None:
        """The history in a new frame's coordinates (``to_new(q) -> q``)."""
        if self.states:
            self.states[:] = list(to_new(np.array(self.states)))

    def after_iteration(self, q: np.ndarray, learns: bool, t: int,
                        rng: np.random.Generator) -> None:
        """The chain's new state ``q`` (with the other blocks' values) into the history
        where it ``learns``; then the vanishing adaptation (kmc §5): with probability
        ``a_t``, ``t`` the iterations since the first fit, Algorithm 1's steps 1-4 — the
        same sigma, lam and whitening, more states (the finite form absorbs them online),
        checked at the state and judged on the tune's values (the energy window's rows,
        ``LearnedSurrogate.relevant``). Raises the numerical errors of a failed update."""
        self.updated = False
        if not learns:
            return
        self.states.append(self.context.join(q).astype(np.float64, copy=True))
        learned = self.learned
        if learned.surrogate is None:
            return
        if t <= 0 or rng.uniform() >= t ** (-self.adaptation_decay):
            return
        if self.policy.online:
            learner = self.learner
            if learner is None:
                return
            if self.learner_end < len(self.states):
                learner.partial_fit(np.array(self.states[self.learner_end:]))
                self.learner_end = len(self.states)
            candidate = learner.snapshot()
            fitted_on = candidate.n_samples_seen_
        else:
            current, history = learned.surrogate, self.history()
            candidate = self.new(current.whitening_, rng.spawn(1)[0], sigma=current.sigma_,
                                 lam=current.lam_).fit(history)
            fitted_on = len(history)
        candidate = self.judge(candidate, self.out_of_sample(learned.training, learned.relevant(),
                                                             self.history()))
        value, grad = self.context.field(candidate)(q)
        if not (np.isfinite(value) and np.all(np.isfinite(grad))):
            raise FloatingPointError("the updated surrogate is not finite")
        learned.adopt(candidate)
        self.fitted_on, self.updated = fitted_on, True

    def adaptation_failed(self) -> bool:
        """A failed update: the finite learner is set aside; True the first time (to tell)."""
        if self.policy.online:
            self.learner = None
        self.learned.failed()
        first, self.told_failure = not self.told_failure, True
        return first

    def judge(self, surrogate, judge: tuple):
        """``surrogate``, or its Gaussian base alone if ``f`` follows the model worse;
        with ``temperature="auto"``, tempered to the model's values.

        Score matching fits the density of the *states*, and a tuning chain's states are
        not yet the posterior's: on N(0, I), d = 10, with an exact base, cross-validation
        chose sigma 0.58, lam 5, and ``f`` narrowed the surrogate back to the states'
        sliver; one chain never moved (acceptance 0 in 1000 draws). The judge is the
        model's own potentials at tune evaluations out of the fit's sample
        (``out_of_sample``): the misfit of ``U`` by ``U~ / T`` with ``f`` and without it
        (``_tempered_misfit``; noisy pseudo-marginal values add the same spread to both).
        ``temperature="auto"``: ``_tail_temperature`` (N(0, I), d = 20, exact base: a
        fixed 1.5 gave acceptance 0.34, ESS 96 in 2 x 1000 draws; the rule gives 1).
        """
        positions, potentials = judge
        if positions is None:
            if self.temperature != "auto":
                return surrogate
            unjudged = copy.copy(surrogate)  # a compound step's block: no values to judge by
            unjudged.temperature = UNJUDGED_TEMPERATURE
            return unjudged
        base = surrogate.base_only()

        def judged(candidate):  # misfit and temperature of the untempered fit
            values = np.array([candidate.value_and_grad(q)[0] for q in positions])
            return _tempered_misfit(values * candidate.temperature, potentials,
                                    None if self.temperature == "auto" else self.temperature)

        (misfit_f, t_f), (misfit_0, t_0) = judged(surrogate), judged(base)
        chosen, temperature = (surrogate, t_f) if misfit_f <= misfit_0 else (base, t_0)
        if self.temperature == "auto" and np.isfinite(temperature):
            chosen = copy.copy(chosen)
            chosen.temperature = temperature
        return chosen

    @staticmethod
    def base(states: Whitening, judge: tuple, training) -> Whitening:
        """The whitening, and so the Gaussian base measure: the states' Gaussian or a
        quadratic regression of the tune's model values (``training``: the chain's
        evaluations), whichever follows the model's values at ``judge`` best (the
        quadratic with and without its trust region).

        The states of a short tuning run span a sliver of the posterior (N(0, I) in d = 10
        after 1000 tuning iterations: covariance eigenvalues 0.15-0.7), and a base measure
        that narrow is one score matching cannot widen: the fit learns only where the
        states are. The exact correction then pays (acceptance 0.10-0.32, ESS 24-220 in
        2 x 1000 draws). The potentials the chain evaluated, accepted and rejected, fix a
        quadratic whatever their spread (``laplace_from_values``, the exploration's probe);
        its trust region holds sds to twice the points' spread, which on N(0, I), d = 20,
        left variances of 0.02-0.4 where the unbounded fit was exact. A pseudo-marginal
        chain's values are noisy: the regression averages the noise, and the choice stays
        a function of the chain's history, which is all the vanishing adaptation's
        argument needs. Blocks of a compound step keep the states' whitening.
        """
        positions, potentials = judge
        if positions is None:
            return states
        candidates = [states]
        fit = laplace_from_values(training.positions, training.potentials, trust_region=False)
        for gaussian in (() if fit is None else
                         (within_trust_region(fit, training.positions), fit)):
            try:
                candidates.append(Whitening(gaussian.mean.copy(), gaussian.factor()))
            except (np.linalg.LinAlgError, ValueError):
                continue
        misfits = [_tempered_misfit(0.5 * np.sum(w.to_white(positions) ** 2, axis=1), potentials)[0]
                   for w in candidates]
        return candidates[int(np.argmin(misfits))]

    def out_of_sample(self, training, relevant: np.ndarray, history: np.ndarray) -> tuple:
        """Positions and model potentials of the evaluations in ``training`` at the indices
        ``relevant`` (the energy window's) that are not among the fit's ``history``, at
        most ``VALUE_CHECK_POINTS``; or ``(None, None)``.

        In sample, a fit follows the states it was fitted to: a spiky ``f`` (lam 5) won
        on N(0, I), d = 20, and one chain then accepted 11%.
        """
        if not self.judged or len(training) < 2:
            return None, None
        fitted_states = {row.tobytes() for row in history}
        positions = training.positions
        keep = relevant[[positions[i].tobytes() not in fitted_states for i in relevant]]
        if keep.size > VALUE_CHECK_POINTS:
            keep = keep[np.linspace(0, keep.size - 1, VALUE_CHECK_POINTS).astype(int)]
        if keep.size < 2:
            return None, None
        return positions[keep], training.potentials[keep]


def _tempered_misfit(fitted: np.ndarray, potentials: np.ndarray,
                     temperature: float | None = None) -> tuple[float, float]:
    """How well ``fitted / T`` follows ``potentials`` up to a level: ``(var(U - U~ / T), T)``.

    ``T`` given, or ``_tail_temperature``'s.
    """
    if not (np.all(np.isfinite(fitted)) and np.all(np.isfinite(potentials))):
        return np.inf, np.nan
    if temperature is None:
        temperature = _tail_temperature(fitted, potentials)
    return float(np.var(potentials - fitted / temperature)), temperature


def _tail_temperature(fitted: np.ndarray, potentials: np.ndarray) -> float:
    """The temperature at which the surrogate rises no faster than the model at any of
    the points evaluated: the largest rise ratio ``dU~ / dU`` from the lowest tenth of the
    points, over points the model puts ``MIN_RISE`` above them, in [1, ``MAX_TEMPERATURE``]
    (never sharpened: a surrogate narrower than the model is what makes the exact
    correction sticky).

    The exact correction's weight ``pi / pi~`` grows without bound where the surrogate
    rises faster than the model: the chain rarely gets there and stays when it does (the
    2-d banana's arms: sds 0.8 of the truth's with every chain agreeing). A least-squares
    slope follows the bulk of the points and missed those arms, as did the 90% quantile
    of the ratios at one of the two seeds of tests/step_methods' banana.
    """
    low = potentials <= np.quantile(potentials, 0.1)
    rise = potentials - potentials[low].mean()
    fitted_rise = fitted - fitted[low].mean()
    far = rise > MIN_RISE
    if not np.any(far):
        return 1.0
    return float(np.clip(np.max(fitted_rise[far] / rise[far]), 1.0, MAX_TEMPERATURE))
