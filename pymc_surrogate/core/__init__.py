"""HMC pieces that work on any gradient field: leapfrog, Metropolis decisions, transitions."""

from pymc_surrogate.core.integrator import leapfrog
from pymc_surrogate.core.transitions import (
    ChainPoint,
    TransitionInfo,
    differential_evolution_transition,
    exact_hmc_transition,
    independence_transition,
    surrogate_hmc_transition,
    surrogate_transition,
)

__all__ = [
    "leapfrog",
    "ChainPoint",
    "TransitionInfo",
    "exact_hmc_transition",
    "surrogate_hmc_transition",
    "surrogate_transition",
    "differential_evolution_transition",
    "independence_transition",
]
