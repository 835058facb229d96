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
tuning, fixed in the draws. A defensive mixture component was measured and left out.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_surrogate.compat import pareto_khat
from pymc_surrogate.step_methods.part import ChainPart
from pymc_surrogate.step_methods.tuning import Tuning

__all__ = ["Coverage", "tempered"]


def tempered(field, temperature: float):
    """``q -> (U~/T, dU~/T)`` of a field ``q -> (U~, dU~)`` (the field itself at T = 1)."""
    if temperature == 1.0:
        return field
    cool = 1.0 / temperature

    def value_and_grad(q: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = field(q)
        return cool * value, cool * grad

    return value_and_grad


@dataclass_state
class CoverageState(DataClassState):
    temperature: float = 1.0  # the surrogate's, chosen at each fit
    khat: float = np.nan  # at temperature 1: how narrow the fit itself is
    tempered_khat: float = np.nan  # at the chosen temperature


class Coverage(ChainPart):
    """Each new surrogate's coverage of the posterior, and the temperature that makes it cover.

    Parameters
    ----------
    measures : bool
        Whether coverage applies: the surrogate is the whole model's (a compound step's
        block has evaluations at other contexts) and the draws are corrected.
    tempers_tuning : bool
        Whether the surrogate steps of tuning run tempered (a black box learnt from its
        evaluations; see ``tempers``).
    dim : int
        The block's dimension.
    tuning : Tuning
        ``coverage*`` and ``tune_tempering``.
    """

    _state_class = CoverageState

    def __init__(self, measures: bool, tempers_tuning: bool, dim: int, tuning: Tuning):
        self.measures = measures
        self.tempers_tuning = tempers_tuning
        self.dim = dim
        self.tuning = tuning
        self.reset()

    def tempers(self, tuning_now: bool) -> bool:
        """Whether a surrogate step now runs tempered, ``U~ / T_tune`` (in tuning only).

        A surrogate is fitted to what the chain evaluated, and the chain evaluates only
        where the surrogate proposes: a fit too high in a region the exploration missed
        (an arm of a banana that a random walk did not reach) is never corrected, and the
        frozen surrogate of the draws visits it too rarely, with no sign in R-hat
        (black-box banana, SurrogateHMC: right at 3 of 10 seeds, 3 wrong in silence). So
        in tuning the surrogate steps of a black box run on ``U~ / T``: still exact for
        the posterior (the test uses the same ``U~ / T``), their proposals reach where the
        fit is a few nats too high, every one is evaluated and kept, and the next refit
        learns from it; the draws run at ``T = 1``, with a step size adapted again on the
        final fit. Every step of tuning, not every other one: alternating gave 4 of 10.
        Not with a gradient (exploration is then exact HMC, which reaches the arms), nor for
        the learners from chain states or a design (KernelHMC, SparseGridHMC), nor in a
        compound step's block. When tuning moves on the surrogate alone
        (``surrogate_tuning.py``) the chain samples ``U~ / T`` itself, and the states it
        evaluates reach as far.
        """
        return tuning_now and self.tempers_tuning

    @property
    def tuning_temperature(self) -> float:
        """``T_tune = 1 + tune_tempering / d``: the tempered typical set about
        ``tune_tempering / 2`` nats above the posterior's, so the test still accepts."""
        return 1.0 + self.tuning.tune_tempering / self.dim

    def temperature_now(self, tuning_now: bool) -> float:
        """The temperature a surrogate step runs at now."""
        if self.tempers(tuning_now):
            return self.temperature * self.tuning_temperature
        return self.temperature

    def choose(self, field: Callable, points: np.ndarray, potentials: np.ndarray,
               tune: bool) -> str | None:
        """The temperature for the surrogate ``field`` just fitted, from the evaluations
        near the typical set (``points``, their true ``potentials``; no model evaluation).
        Returns a warning for the draws' fit when even the hottest temperature leaves it
        narrower than the posterior."""
        self.reset()
        if not (self.tuning.coverage and self.measures):
            return None
        if len(points) < self.tuning.coverage_min_points:
            return None
        fitted = np.array([field(q)[0] for q in points])
        if not np.all(np.isfinite(fitted)):
            return None
        khat = None  # at the first temperature tried (1): the fit's own narrowness
        for temperature in self.tuning.coverage_temperatures:
            tempered_khat = pareto_khat(fitted / temperature - potentials)
            khat = tempered_khat if khat is None else khat
            # NaN: PSIS fitted no tail (weights of a few distinct values): no evidence
            if not tempered_khat > self.tuning.coverage_khat:
                break
        self.temperature, self.khat, self.tempered_khat = temperature, khat, tempered_khat
        if tune or not tempered_khat > self.tuning.coverage_khat:  # NaN: never
            return None
        return (
            f"the surrogate is narrower than the posterior where a chain has evaluated "
            f"the model: the Pareto k of its weights exp(U~ - U) is {tempered_khat:.2f} "
            f"even tempered at T = {temperature:g} (above {self.tuning.coverage_khat}; "
            "stats `coverage_khat`, `surrogate_temperature`). The draws are exact but "
            "may visit the tails too rarely: check R-hat, ESS and the tails, or "
            "increase `tune`."
        )

    def stats(self, surrogate_step: bool, tuning_now: bool) -> dict[str, float]:
        temperature = self.temperature_now(tuning_now) if surrogate_step else self.temperature
        return {"surrogate_temperature": temperature, "coverage_khat": self.khat}
