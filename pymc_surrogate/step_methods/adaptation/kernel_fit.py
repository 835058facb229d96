"""How KernelHMC fits its surrogate and judges the fit against its Gaussian base, on the
model's own values.

Score matching fits the density of the chain's states, which in tuning are not yet the
posterior's. The model's potentials at tune evaluations the fit did not learn from decide
between the fit and its base alone, choose the base measure (the states' Gaussian or a
quadratic regression of the values) and, with ``temperature="auto"``, the temperature at
which the surrogate rises no faster than the model.
"""

from __future__ import annotations

import copy

import numpy as np

from pymc_surrogate.surrogates.laplace import laplace_from_values, within_trust_region
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["KernelFit", "MAX_TEMPERATURE"]

#: Most tune evaluations a fit is judged on against the base alone (``_no_worse_than_base``).
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


class KernelFit:
    """Mixin of ``KernelHMC``: the fit, judged against its base; the base; the values."""

    def _fit_surrogate(self, chain, **settings):
        """A new fit (sigma and lam by cross-validation where "auto") to the history."""
        history = self._history(chain)
        dim = self.context.block_dim
        inputs, whitening = self.context.training_inputs(history[:, :dim], history[:, dim:])
        judge = self._out_of_sample(chain)
        whitening = self._base_from_values(chain, whitening, judge)
        surrogate = self._make_surrogate(whitening, self.rng.spawn(1)[0], **settings)
        # No check of the cross-validated score: it is relative to the Gaussian base, so a
        # fit that says nothing beyond it (score >= 0, the largest penalty) is that Gaussian,
        # a proper and usable surrogate, not a flat one.
        fitted = self._no_worse_than_base(chain, surrogate.fit(inputs), judge)
        chain.kernel.fit_end = len(chain.kernel.states)
        chain.kernel.fitted_on = len(history)
        return fitted

    def _no_worse_than_base(self, chain, surrogate, judge=None):
        """``surrogate``, or its Gaussian base alone if ``f`` follows the model worse;
        with ``temperature="auto"``, tempered to the model's values.

        Score matching fits the density of the *states*, and a tuning chain's states are
        not yet the posterior's: on N(0, I), d = 10, with an exact base, cross-validation
        chose sigma 0.58, lam 5, and ``f`` narrowed the surrogate back to the states'
        sliver; one chain never moved (acceptance 0 in 1000 draws). The judge is the
        model's own potentials at tune evaluations out of the fit's sample
        (``_out_of_sample``): the misfit of ``U`` by ``U~ / T`` with ``f`` and without it
        (``_tempered_misfit``; noisy pseudo-marginal values add the same spread to both).
        ``temperature="auto"``: ``_tail_temperature`` (N(0, I), d = 20, exact base: a
        fixed 1.5 gave acceptance 0.34, ESS 96 in 2 x 1000 draws; the rule gives 1).
        ``judge``: ``_out_of_sample(chain)`` if the caller has it.
        """
        positions, potentials = self._out_of_sample(chain) if judge is None else judge
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

    def _base_from_values(self, chain, states: Whitening,
                          judge: tuple) -> Whitening:
        """The whitening, and so the Gaussian base measure: the states' Gaussian or a
        quadratic regression of the tune's model values, whichever follows the model's
        values best (``_out_of_sample``; the quadratic with and without its trust region).

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
        fit = laplace_from_values(chain.training.positions, chain.training.potentials,
                                  trust_region=False)
        for gaussian in (() if fit is None else
                         (within_trust_region(fit, chain.training.positions), fit)):
            try:
                candidates.append(Whitening(gaussian.mean.copy(), gaussian.factor()))
            except (np.linalg.LinAlgError, ValueError):
                continue
        misfits = [_tempered_misfit(0.5 * np.sum(w.to_white(positions) ** 2, axis=1), potentials)[0]
                   for w in candidates]
        return candidates[int(np.argmin(misfits))]

    def _out_of_sample(self, chain):
        """Positions and model potentials of tune evaluations a fit did not learn from
        (the energy window's, at most ``VALUE_CHECK_POINTS``), or ``(None, None)``.

        In sample, a fit follows the states it was fitted to: a spiky ``f`` (lam 5) won
        on N(0, I), d = 20, and one chain then accepted 11%. A compound step's block is
        not judged (its values depend on the other variables).
        """
        if self.context.dim or len(chain.training) < 2:
            return None, None
        keep = self._relevant(chain)
        fitted_states = {row.tobytes() for row in self._history(chain)}
        positions = chain.training.positions
        keep = keep[[positions[i].tobytes() not in fitted_states for i in keep]]
        if keep.size > VALUE_CHECK_POINTS:
            keep = keep[np.linspace(0, keep.size - 1, VALUE_CHECK_POINTS).astype(int)]
        if keep.size < 2:
            return None, None
        return positions[keep], chain.training.potentials[keep]


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
