"""Coverage: whether the surrogate is narrower than the posterior, and the temperature that
makes it cover.

Every kernel here is exact, but a surrogate transition moves the chain by proposals from
the surrogate density ``pi~``, weighted by ``w = pi / pi~ = exp(U~ - U)``. Where ``pi~``
falls faster than ``pi`` (a Gaussian base fitted too tight, an arm the exploration barely
reached) ``w`` is unbounded: the chain enters that region rarely and leaves it slowly, its
draws come out narrow, and its ESS does not show it. The tail of ``w`` is measured as
importance sampling measures it, by the Pareto ``k`` of the weights (ArviZ's PSIS), on
every evaluation near the typical set (``TrainingPolicy.energy_window``), not only the
chain's states: a chain on a narrow surrogate rarely visits where it is narrow, so its
states hide it (a surrogate with 0.6 of a Gaussian's sd: ``k`` 0.4-2 on the late states,
above 8 on the evaluations, which reach past the posterior's bulk). The surrogate is
tempered, ``U~ / T``, at the smallest ``T`` of ``Tuning.coverage_temperatures`` that brings
``k`` to ``Tuning.coverage_khat``; exact at any ``T`` (the inner kernels leave
``exp(-U~/T)`` invariant and the test uses the same ``U~/T``). Chosen at every fit in
tuning, fixed in the draws. A defensive mixture component was measured and left out
(docs/design.md, "Coverage").
"""

from __future__ import annotations

import numpy as np
from pymc.stats.convergence import WarningType

from pymc_surrogate.compat import pareto_khat
from pymc_surrogate.step_methods.state import ChainState, CoverageState

__all__ = ["Coverage", "CoverageState", "tempered"]


def tempered(field, temperature: float):
    """``q -> (U~/T, dU~/T)`` of a field ``q -> (U~, dU~)`` (the field itself at T = 1)."""
    if temperature == 1.0:
        return field
    cool = 1.0 / temperature

    def value_and_grad(q: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = field(q)
        return cool * value, cool * grad

    return value_and_grad


class Coverage:
    """Mixin of ``SurrogateStep``: measure each new surrogate's coverage and temper it."""

    def _measures_coverage(self) -> bool:
        """Whether coverage applies: the surrogate is the whole model's (a compound step's
        block has evaluations at other contexts) and the draws are corrected."""
        return self.context.dim == 0

    def _choose_coverage(self, chain: ChainState) -> None:
        """Set ``chain.coverage`` for the surrogate just fitted (no model evaluation)."""
        chain.coverage = CoverageState()
        if not (self.tuning.coverage and self._measures_coverage()):
            return
        keep = chain.training.relevant(self.policy.energy_window(self.dim))
        if len(keep) < self.tuning.coverage_min_points:
            return
        points, potentials = chain.training.positions[keep], chain.training.potentials[keep]
        field = self.context.field(chain.surrogate)
        fitted = np.array([field(q)[0] for q in points])
        if not np.all(np.isfinite(fitted)):
            return
        khat = None  # at the first temperature tried (1): the fit's own narrowness
        for temperature in self.tuning.coverage_temperatures:
            tempered_khat = pareto_khat(fitted / temperature - potentials)
            khat = tempered_khat if khat is None else khat
            # NaN: PSIS fitted no tail (weights of a few distinct values): no evidence
            if not tempered_khat > self.tuning.coverage_khat:
                break
        chain.coverage = CoverageState(temperature, khat, tempered_khat)
        if not self.tune and tempered_khat > self.tuning.coverage_khat:  # NaN: never
            self._warn(
                chain, WarningType.CONVERGENCE,
                f"the surrogate is narrower than the posterior where a chain has evaluated "
                f"the model: the Pareto k of its weights exp(U~ - U) is {tempered_khat:.2f} "
                f"even tempered at T = {temperature:g} (above {self.tuning.coverage_khat}; "
                "stats `coverage_khat`, `surrogate_temperature`). The draws are exact but "
                "may visit the tails too rarely: check R-hat, ESS and the tails, or "
                "increase `tune`.",
            )

    def _coverage_stats(self, chain: ChainState) -> dict[str, float]:
        return {"surrogate_temperature": chain.coverage.temperature,
                "coverage_khat": chain.coverage.khat}
