"""Metropolis-Hastings decisions."""

from __future__ import annotations

import numpy as np

__all__ = ["accept_probability", "metropolis_accept", "hamiltonian", "surrogate_transition_log_ratio"]


def accept_probability(log_ratio: float) -> float:
    """``min(1, exp(log_ratio))`` with NaN treated as a certain rejection."""
    if not np.isfinite(log_ratio):
        return 1.0 if log_ratio == np.inf else 0.0
    return float(np.exp(min(0.0, log_ratio)))


def metropolis_accept(log_ratio: float, rng: np.random.Generator) -> tuple[bool, float]:
    """Accept with probability ``min(1, exp(log_ratio))``; returns (accepted, probability)."""
    prob = accept_probability(log_ratio)
    return bool(rng.uniform() < prob), prob


def hamiltonian(potential: float, kinetic: float) -> float:
    """Total energy; NaN becomes +inf so that it is always rejected."""
    h = potential + kinetic
    return h if not np.isnan(h) else np.inf


def surrogate_transition_log_ratio(
    true_start: float, true_end: float, surrogate_start: float, surrogate_end: float
) -> float:
    """Log acceptance ratio of a surrogate transition (Liu 2001 §9.4; delayed acceptance).

    For a move ``x -> x'`` made by any kernel reversible with respect to the surrogate
    density ``exp(-U~)``, accepting with ``pi(x') pi~(x) / (pi(x) pi~(x'))`` leaves the true
    target ``exp(-U)`` invariant. Arguments are potentials (negative log densities).
    """
    log_ratio = -(true_end - true_start) + (surrogate_end - surrogate_start)
    return log_ratio if not np.isnan(log_ratio) else -np.inf
