"""HMC pieces that work on any gradient field: numpy only, pure functions (no PyMC)."""

from pymc_surrogate.core.integrator import leapfrog
from pymc_surrogate.core.transitions import (
    differential_evolution_transition,
    exact_hmc_transition,
    hmc_move,
    independence_transition,
    integrate,
    surrogate_hmc_transition,
    surrogate_transition,
)
from pymc_surrogate.core.types import ChainPoint, HMCMove, Trajectory, TransitionInfo

__all__ = [
    "leapfrog",
    "ChainPoint",
    "TransitionInfo",
    "HMCMove",
    "Trajectory",
    "integrate",
    "hmc_move",
    "exact_hmc_transition",
    "surrogate_hmc_transition",
    "surrogate_transition",
    "differential_evolution_transition",
    "independence_transition",
]
