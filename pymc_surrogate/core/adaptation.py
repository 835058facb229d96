"""Step-size adaptation that costs no model evaluation."""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

from pymc_surrogate.core.integrator import Metric, ValueAndGrad
from pymc_surrogate.core.transitions import hmc_move

__all__ = ["StepSizeAdaptation", "SurrogateWarmUp", "warm_up_on_surrogate"]


class StepSizeAdaptation(Protocol):
    """What the warm-up needs of a step-size adaptation; PyMC's ``DualAverageAdaptation``
    satisfies it (the step methods pass one in: ``core`` does not import PyMC)."""

    def current(self, tune: bool) -> float: ...

    def update(self, accept_stat: float, tune: bool) -> None: ...


class SurrogateWarmUp(NamedTuple):
    """What a warm-up on the surrogate found."""

    step_size: float  # dual-averaged after the adaptation phase
    samples: np.ndarray  # (n_samples, d) draws of the surrogate density at that step size
    potentials: np.ndarray  # (n_samples,) the surrogate's potential at each draw


def warm_up_on_surrogate(
    value_and_grad: ValueAndGrad,
    q0: np.ndarray,
    metric: Metric,
    adapt: StepSizeAdaptation,
    path_length: float,
    rng: np.random.Generator,
    n_adapt: int = 150,
    n_samples: int = 0,
    max_energy_error: float = 1000.0,
) -> SurrogateWarmUp:
    """HMC on the surrogate alone: dual-averaged step size, then optional draws.

    After a refit the old step size may be far off (a poor early surrogate drives it
    down), and the chain's own tuning history may have collapsed in a direction it
    failed to explore. Both can be mended on the surrogate, with PyMC's
    ``DualAverageAdaptation`` (``adapt``, fresh from the caller) and no model evaluation: both corrections adapt the step
    size on the surrogate's own acceptance, so this is where the adaptation starts from.

    Returns
    -------
    SurrogateWarmUp
        The step size, and ``n_samples`` draws of the surrogate density (for a scale
        estimate) with their surrogate potentials.
    """
    q = np.asarray(q0, dtype=np.float64)
    potential, grad = value_and_grad(q)
    samples = np.empty((n_samples, q.size))
    potentials = np.empty(n_samples)
    for i in range(n_adapt + n_samples):
        tuning = i < n_adapt
        move = hmc_move(q, potential, grad, value_and_grad, metric, adapt.current(tuning),
                        path_length, max_energy_error, rng)
        q, potential, grad = move.q, move.potential, move.grad
        if tuning:
            adapt.update(move.accept_prob, True)
        else:
            samples[i - n_adapt], potentials[i - n_adapt] = q, potential
    return SurrogateWarmUp(float(adapt.current(False)), samples, potentials)
