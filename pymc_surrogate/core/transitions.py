"""One Markov transition each: pure functions over explicit state.

Every kernel here leaves the true posterior ``exp(-U)`` invariant once its inputs are
fixed (surrogate, metric, step size), which is what keeps the samplers exact. Model
evaluations go through the ``evaluate`` callback so the caller can count them and keep
them as training data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

import numpy as np

from pymc_surrogate.core.integrator import Metric, ValueAndGrad, leapfrog
from pymc_surrogate.core.jitter import jittered_trajectory
from pymc_surrogate.core.metropolis import (
    accept_probability,
    hamiltonian,
    metropolis_accept,
    surrogate_transition_log_ratio,
)

__all__ = [
    "ChainPoint",
    "TransitionInfo",
    "Evaluate",
    "exact_hmc_transition",
    "surrogate_hmc_transition",
    "surrogate_transition",
    "differential_evolution_transition",
    "independence_transition",
    "IndependenceProposal",
    "hmc_move",
    "HMCMove",
]


class ChainPoint(NamedTuple):
    """A position with its true potential and (if known) gradient of the potential."""

    q: np.ndarray
    potential: float
    grad: np.ndarray | None


# q -> ChainPoint at q, from the true model (counted and recorded by the caller).
Evaluate = Callable[[np.ndarray], ChainPoint]


class IndependenceProposal(Protocol):
    """A fixed proposal density ``g``: draws, and ``log g`` up to a constant."""

    def draw(self, rng: np.random.Generator) -> np.ndarray: ...

    def log_density(self, q: np.ndarray) -> float: ...


class TransitionInfo(NamedTuple):
    """What a transition did, for stats and adaptation."""

    point: ChainPoint
    accepted: bool
    accept_prob: float
    adapt_stat: float  # the acceptance statistic the step size adapts on
    diverging: bool
    energy: float
    energy_error: float
    surrogate_energy_error: float
    n_steps: int
    step_size: float
    # Acceptance of the true-model correction alone (the surrogate's quality); for
    # kernels with one Metropolis test it equals accept_prob.
    correction_prob: float | None = None


def _nan_to_inf(x: float) -> float:
    return np.inf if np.isnan(x) else x


def exact_hmc_transition(
    current: ChainPoint,
    evaluate_with_grad: Evaluate,
    metric: Metric,
    step_size: float,
    path_length: float,
    max_energy_error: float,
    rng: np.random.Generator,
    max_steps: int = 256,
) -> TransitionInfo:
    """Plain HMC on the true potential; every leapfrog point is a model evaluation."""
    eps, n_steps = jittered_trajectory(step_size, path_length, rng, max_steps=max_steps, shortest=0.5)
    p0 = metric.random()
    h0 = hamiltonian(current.potential, metric.energy(p0))
    last: list[ChainPoint] = []

    def true_field(q: np.ndarray) -> tuple[float, np.ndarray]:
        point = evaluate_with_grad(q)
        last[:] = [point]
        return point.potential, point.grad

    end = leapfrog(
        current.q, p0, current.potential, current.grad, true_field, metric, eps, n_steps,
        max_energy_range=max_energy_error,
    )
    h1 = hamiltonian(end.potential, metric.energy(end.p)) if end.finite else np.inf
    error = _nan_to_inf(h1 - h0)
    accepted, prob = metropolis_accept(-error, rng) if end.finite else (False, 0.0)
    point = last[0] if accepted else current
    return TransitionInfo(
        point, accepted, prob, prob, not end.finite or error > max_energy_error,
        h1 if accepted else h0, error, error, end.n_steps, eps,
    )


def surrogate_hmc_transition(
    current: ChainPoint,
    evaluate: Evaluate,
    surrogate_value_and_grad: ValueAndGrad,
    metric: Metric,
    step_size: float,
    path_length: float,
    max_energy_error: float,
    rng: np.random.Generator,
) -> TransitionInfo:
    """rns-hmc Algorithm 3: leapfrog on the surrogate, accept with the true Hamiltonian.

    The true acceptance pays for both integration and surrogate error. A trajectory that
    diverges on the surrogate is rejected without evaluating the model.

    The step size adapts on the surrogate Hamiltonian's acceptance (``adapt_stat``): the
    integration error is what the step size controls. The surrogate's own error does not
    shrink with the step, and adapting on the true acceptance turned a moderately wrong
    surrogate into a step size collapsing toward zero (d = 50, condition number 1000: step
    1e-4 with 200 steps a trajectory, the chain stuck in place).
    """
    eps, n_steps = jittered_trajectory(step_size, path_length, rng, shortest=0.5)
    p0 = metric.random()
    kinetic0 = metric.energy(p0)
    s_potential, s_grad = surrogate_value_and_grad(current.q)
    end = leapfrog(
        current.q, p0, s_potential, s_grad, surrogate_value_and_grad, metric, eps, n_steps,
        max_energy_range=max_energy_error,
    )
    h0 = hamiltonian(current.potential, kinetic0)
    if not end.finite:
        return TransitionInfo(current, False, 0.0, 0.0, True, h0, np.inf, np.inf, end.n_steps, eps)
    kinetic1 = metric.energy(end.p)
    surrogate_error = _nan_to_inf((end.potential + kinetic1) - (s_potential + kinetic0))
    proposal = evaluate(end.q)
    h1 = hamiltonian(proposal.potential, kinetic1)
    error = _nan_to_inf(h1 - h0)
    accepted, prob = metropolis_accept(-error, rng)
    integration_prob = accept_probability(-surrogate_error)
    return TransitionInfo(
        proposal if accepted else current, accepted, prob, integration_prob,
        error > max_energy_error, h1 if accepted else h0, error, surrogate_error,
        end.n_steps, eps, prob,
    )


class HMCMove(NamedTuple):
    """One Metropolis-adjusted HMC move on a cheap field (the surrogate)."""

    q: np.ndarray
    potential: float
    grad: np.ndarray
    accepted: bool
    accept_prob: float
    diverged: bool
    energy_error: float
    kinetic: float  # kinetic energy at the end of the move (accepted or not)
    n_steps: int
    step_size: float


def hmc_move(
    q: np.ndarray,
    potential: float,
    grad: np.ndarray,
    value_and_grad: ValueAndGrad,
    metric: Metric,
    step_size: float,
    path_length: float,
    max_energy_error: float,
    rng: np.random.Generator,
) -> HMCMove:
    """HMC transition exact for ``exp(-U)`` of ``value_and_grad`` (jittered length and step)."""
    eps, n_steps = jittered_trajectory(step_size, path_length, rng, shortest=0.5)
    p0 = metric.random()
    kinetic0 = metric.energy(p0)
    end = leapfrog(q, p0, potential, grad, value_and_grad, metric, eps, n_steps,
                   max_energy_range=max_energy_error)
    if not end.finite:
        return HMCMove(q, potential, grad, False, 0.0, True, np.inf, kinetic0, end.n_steps, eps)
    kinetic1 = metric.energy(end.p)
    error = _nan_to_inf((end.potential + kinetic1) - (potential + kinetic0))
    accepted, prob = metropolis_accept(-error, rng)
    if accepted:
        return HMCMove(end.q, end.potential, end.grad, True, prob, False, error, kinetic1, end.n_steps, eps)
    return HMCMove(q, potential, grad, False, prob, False, error, kinetic0, end.n_steps, eps)


def surrogate_transition(
    current: ChainPoint,
    evaluate: Evaluate,
    surrogate_value_and_grad: ValueAndGrad,
    metric: Metric,
    step_size: float,
    path_length: float,
    max_energy_error: float,
    n_inner: int,
    rng: np.random.Generator,
) -> TransitionInfo:
    """Surrogate transition (Liu 2001 §9.4; delayed acceptance, Christen & Fox 2005).

    ``n_inner`` HMC transitions exact for the surrogate density move ``x -> x'``; one true
    evaluation at ``x'`` then corrects for the surrogate's error only, so the outer
    acceptance measures how well the surrogate matches the posterior. If the inner chain
    does not move, no model evaluation is needed.
    """
    s_start, s_grad = surrogate_value_and_grad(current.q)
    q, s_potential = current.q, s_start
    probs, n_steps, diverged = [], 0, False
    for _ in range(n_inner):
        move = hmc_move(q, s_potential, s_grad, surrogate_value_and_grad, metric, step_size,
                        path_length, max_energy_error, rng)
        q, s_potential, s_grad = move.q, move.potential, move.grad
        probs.append(move.accept_prob)
        n_steps += move.n_steps
        diverged |= move.diverged
    adapt_stat = float(np.mean(probs))
    if q is current.q:
        # Reported acceptance: the chance the whole transition moves (inner times outer).
        h = hamiltonian(current.potential, move.kinetic)
        return TransitionInfo(current, False, adapt_stat, adapt_stat, diverged, h, 0.0,
                              move.energy_error, n_steps, move.step_size, 1.0)
    proposal = evaluate(q)
    log_ratio = surrogate_transition_log_ratio(
        current.potential, proposal.potential, s_start, s_potential
    )
    accepted, prob = metropolis_accept(log_ratio, rng)
    point = proposal if accepted else current
    return TransitionInfo(
        point, accepted, prob * adapt_stat, adapt_stat, diverged,
        hamiltonian(point.potential, move.kinetic),
        -log_ratio, move.energy_error, n_steps, move.step_size, prob,
    )


def differential_evolution_transition(
    current: ChainPoint,
    evaluate: Evaluate,
    history: np.ndarray,
    scale: float,
    rng: np.random.Generator,
) -> TransitionInfo:
    """Gradient-free exploration: differential evolution (DE-MCz) mixed with a random walk.

    The jump ``gamma (z1 - z2)`` between two past states adapts the proposal to the
    posterior's scale and correlations without any covariance estimate (ter Braak & Vrugt
    2008). Differences of past states only span the directions the chain has already
    moved in, so a third of the steps are isotropic (at the history's mean spread): they
    let the chain open up directions its history has collapsed in. Without two distinct
    past states, an isotropic step of size ``scale / 10``. The mixture is symmetric given
    the history, so Metropolis needs no Hastings term.
    """
    dim = current.q.shape[0]
    spread = float(np.sqrt(np.mean(np.var(history, axis=0)))) if history.shape[0] >= 3 else 0.0
    if spread > 0 and rng.uniform() < 2.0 / 3.0:
        i, j = rng.choice(history.shape[0], size=2, replace=False)
        jump = scale * 2.38 / np.sqrt(2 * dim) * (history[i] - history[j])
        jump += 1e-3 * scale * spread * rng.standard_normal(dim)
    elif spread > 0:
        jump = scale * 2.38 / np.sqrt(dim) * spread * rng.standard_normal(dim)
    else:
        jump = 0.1 * scale * rng.standard_normal(dim)
    proposal = evaluate(current.q + jump)
    error = _nan_to_inf(proposal.potential - current.potential)
    accepted, prob = metropolis_accept(-error, rng)
    point = proposal if accepted else current
    return TransitionInfo(point, accepted, prob, prob, False, point.potential, error, np.nan, 0, scale)


def independence_transition(
    current: ChainPoint,
    evaluate: Evaluate,
    proposal: IndependenceProposal,
    rng: np.random.Generator,
) -> TransitionInfo:
    """Independence Metropolis-Hastings: ``y ~ g`` whatever the current state, accepted
    with ``min(1, w(y) / w(x))``, ``w = exp(-U) / g`` (``core/tail_jumps.py``)."""
    candidate = evaluate(proposal.draw(rng))
    log_ratio = _nan_to_inf(candidate.potential + float(proposal.log_density(candidate.q))) - (
        current.potential + float(proposal.log_density(current.q))
    )
    accepted, prob = metropolis_accept(-log_ratio, rng)
    point = candidate if accepted else current
    return TransitionInfo(
        point, accepted, prob, prob, False, point.potential, log_ratio, np.nan, 0, np.nan
    )
