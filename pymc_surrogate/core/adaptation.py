"""Step-size adaptation that costs no model evaluation."""

from __future__ import annotations

import numpy as np
from pymc.step_methods.step_sizes import DualAverageAdaptation

from pymc_surrogate.core.integrator import Metric, ValueAndGrad, leapfrog
from pymc_surrogate.core.jitter import jittered_trajectory
from pymc_surrogate.core.metropolis import hamiltonian, metropolis_accept

__all__ = ["tune_step_size_on_surrogate"]


def tune_step_size_on_surrogate(
    value_and_grad: ValueAndGrad,
    q0: np.ndarray,
    metric: Metric,
    initial_step: float,
    target_accept: float,
    path_length: float,
    rng: np.random.Generator,
    n_iterations: int = 150,
    max_energy_error: float = 1000.0,
) -> float:
    """Dual-averaging warm-up of HMC on the surrogate alone.

    After a refit the old step size may be far off (a poor early surrogate drives it
    down). For the surrogate-transition correction the step size only matters to the
    inner chain on the surrogate, so it can be tuned there completely, with PyMC's
    ``DualAverageAdaptation`` and no model evaluation; for the Hamiltonian correction it
    is a good starting point for the adaptation on the true acceptance.

    Returns
    -------
    float
        The dual-averaged step size.
    """
    adapt = DualAverageAdaptation(initial_step, target_accept, 0.05, 0.75, 10)
    q = np.asarray(q0, dtype=np.float64)
    potential, grad = value_and_grad(q)
    for _ in range(n_iterations):
        eps, n_steps = jittered_trajectory(adapt.current(True), path_length, rng, shortest=0.5)
        p0 = metric.random()
        h0 = hamiltonian(potential, metric.energy(p0))
        end = leapfrog(q, p0, potential, grad, value_and_grad, metric, eps, n_steps,
                       max_energy_range=max_energy_error)
        prob = 0.0
        if end.finite:
            accepted, prob = metropolis_accept(h0 - hamiltonian(end.potential, metric.energy(end.p)), rng)
            if accepted:
                q, potential, grad = end.q, end.potential, end.grad
        adapt.update(prob, True)
    return float(adapt.current(False))
