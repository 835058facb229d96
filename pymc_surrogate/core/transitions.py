"""One Markov transition each: pure functions over explicit state.

Every kernel here leaves the true posterior ``exp(-U)`` invariant once its inputs are
fixed (surrogate, metric, step size), which is what keeps the samplers exact. Model
evaluations go through the ``evaluate`` callback so the caller can count them and keep
them as training data. The HMC kernels share one skeleton, ``integrate`` (jittered path,
fresh momentum, leapfrog); ``hmc_move`` adds the Metropolis test on the field it ran on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
from scipy.special import logsumexp

from pymc_surrogate.core.integrator import Metric, ValueAndGrad, leapfrog
from pymc_surrogate.core.jitter import jittered_trajectory
from pymc_surrogate.core.metropolis import (
    accept_probability,
    hamiltonian,
    metropolis_accept,
    surrogate_transition_log_ratio,
)
from pymc_surrogate.core.types import ChainPoint, HMCMove, Trajectory, TransitionInfo

__all__ = [
    "ChainPoint",
    "TransitionInfo",
    "HMCMove",
    "Trajectory",
    "Evaluate",
    "IndependenceProposal",
    "integrate",
    "hmc_move",
    "exact_hmc_transition",
    "surrogate_hmc_transition",
    "surrogate_only_transition",
    "surrogate_transition",
    "correct_surrogate_move",
    "differential_evolution_jump",
    "differential_evolution_transition",
    "multiple_try_transition",
    "independence_transition",
]

# q -> ChainPoint at q, from the true model (counted and recorded by the caller).
Evaluate = Callable[[np.ndarray], ChainPoint]


class IndependenceProposal(Protocol):
    """A fixed proposal density ``g``: draws, and ``log g`` up to a constant."""

    def draw(self, rng: np.random.Generator) -> np.ndarray: ...

    def log_density(self, q: np.ndarray) -> float: ...


def _nan_to_inf(x: float) -> float:
    return np.inf if np.isnan(x) else x


def integrate(
    q: np.ndarray, potential: float, grad: np.ndarray, value_and_grad: ValueAndGrad,
    metric: Metric, step_size: float, path_length: float, max_energy_error: float,
    rng: np.random.Generator, max_steps: int = 256,
) -> Trajectory:
    """The HMC skeleton: a jittered step and integration time (independent of the state,
    so exact), a fresh momentum, and leapfrog on ``value_and_grad`` from ``q``."""
    eps, n_steps = jittered_trajectory(step_size, path_length, rng, max_steps=max_steps, shortest=0.5)
    p0 = metric.random()
    kinetic0 = metric.energy(p0)
    end = leapfrog(q, p0, potential, grad, value_and_grad, metric, eps, n_steps,
                   max_energy_range=max_energy_error)
    return Trajectory(end, kinetic0, metric.energy(end.p) if end.finite else np.inf, eps)


def hmc_move(
    q: np.ndarray, potential: float, grad: np.ndarray, value_and_grad: ValueAndGrad,
    metric: Metric, step_size: float, path_length: float, max_energy_error: float,
    rng: np.random.Generator, max_steps: int = 256,
) -> HMCMove:
    """HMC transition exact for ``exp(-U)`` of ``value_and_grad``."""
    path = integrate(q, potential, grad, value_and_grad, metric, step_size, path_length,
                     max_energy_error, rng, max_steps)
    end, kinetic0, kinetic1, eps = path
    if not end.finite:
        return HMCMove(q, potential, grad, False, 0.0, True, np.inf, kinetic0, end.n_steps, eps)
    error = _nan_to_inf((end.potential + kinetic1) - (potential + kinetic0))
    accepted, prob = metropolis_accept(-error, rng)
    if accepted:
        return HMCMove(end.q, end.potential, end.grad, True, prob, False, error, kinetic1, end.n_steps, eps)
    return HMCMove(q, potential, grad, False, prob, False, error, kinetic0, end.n_steps, eps)


def exact_hmc_transition(
    current: ChainPoint, evaluate_with_grad: Evaluate, metric: Metric, step_size: float,
    path_length: float, max_energy_error: float, rng: np.random.Generator, max_steps: int = 256,
) -> TransitionInfo:
    """Plain HMC on the true potential; every leapfrog point is a model evaluation."""
    last: list[ChainPoint] = []

    def true_field(q: np.ndarray) -> tuple[float, np.ndarray]:
        point = evaluate_with_grad(q)
        last[:] = [point]
        return point.potential, point.grad

    move = hmc_move(current.q, current.potential, current.grad, true_field, metric, step_size,
                    path_length, max_energy_error, rng, max_steps)
    return TransitionInfo(
        point=last[0] if move.accepted else current, accepted=move.accepted,
        accept_prob=move.accept_prob, adapt_stat=move.accept_prob,
        diverging=move.diverged or move.energy_error > max_energy_error,
        energy=hamiltonian(move.potential, move.kinetic), energy_error=move.energy_error,
        surrogate_energy_error=move.energy_error, n_steps=move.n_steps, step_size=move.step_size,
    )


def surrogate_only_transition(
    current: ChainPoint, value_and_grad: ValueAndGrad, metric: Metric, step_size: float,
    path_length: float, max_energy_error: float, rng: np.random.Generator,
) -> TransitionInfo:
    """HMC accepted with the surrogate's own energy: exact for ``exp(-U~)``, not for the
    model (an approximate mode's draws; the point's potential is the surrogate's)."""
    value, grad = value_and_grad(current.q)
    move = hmc_move(current.q, value, grad, value_and_grad, metric, step_size, path_length,
                    max_energy_error, rng)
    return TransitionInfo(
        point=ChainPoint(move.q, move.potential, None), accepted=move.accepted,
        accept_prob=move.accept_prob, adapt_stat=move.accept_prob,
        diverging=move.diverged, energy=hamiltonian(move.potential, move.kinetic),
        energy_error=move.energy_error, surrogate_energy_error=move.energy_error,
        n_steps=move.n_steps, step_size=move.step_size,
    )


def surrogate_hmc_transition(
    current: ChainPoint, evaluate: Evaluate, surrogate_value_and_grad: ValueAndGrad,
    metric: Metric, step_size: float, path_length: float, max_energy_error: float,
    rng: np.random.Generator,
) -> TransitionInfo:
    """rns-hmc Algorithm 3: leapfrog on the surrogate, accept with the true Hamiltonian.

    The true acceptance pays for both integration and surrogate error. A trajectory that
    diverges on the surrogate is rejected without evaluating the model. The step size
    adapts on the surrogate Hamiltonian's acceptance (``adapt_stat``): the integration
    error is what the step size controls (docs/design.md, "Trajectories").
    """
    s_potential, s_grad = surrogate_value_and_grad(current.q)
    end, kinetic0, kinetic1, eps = integrate(
        current.q, s_potential, s_grad, surrogate_value_and_grad, metric, step_size,
        path_length, max_energy_error, rng,
    )
    h0 = hamiltonian(current.potential, kinetic0)
    if not end.finite:
        return TransitionInfo(
            point=current, accepted=False, accept_prob=0.0, adapt_stat=0.0, diverging=True,
            energy=h0, energy_error=np.inf, surrogate_energy_error=np.inf,
            n_steps=end.n_steps, step_size=eps,
        )
    surrogate_error = _nan_to_inf((end.potential + kinetic1) - (s_potential + kinetic0))
    proposal = evaluate(end.q)
    h1 = hamiltonian(proposal.potential, kinetic1)
    error = _nan_to_inf(h1 - h0)
    accepted, prob = metropolis_accept(-error, rng)
    return TransitionInfo(
        point=proposal if accepted else current, accepted=accepted, accept_prob=prob,
        adapt_stat=accept_probability(-surrogate_error), diverging=error > max_energy_error,
        energy=h1 if accepted else h0, energy_error=error,
        surrogate_energy_error=surrogate_error, n_steps=end.n_steps, step_size=eps,
        correction_prob=prob,
    )


def surrogate_transition(
    current: ChainPoint, evaluate: Evaluate, surrogate_value_and_grad: ValueAndGrad,
    metric: Metric, step_size: float, path_length: float, max_energy_error: float,
    n_inner: int, rng: np.random.Generator,
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
    inner = dict(adapt_stat=adapt_stat, diverging=diverged, n_steps=n_steps,
                 surrogate_energy_error=move.energy_error, step_size=move.step_size)
    return correct_surrogate_move(current, evaluate, None if q is current.q else q,
                                  s_start, s_potential, move.kinetic, inner, rng)


def correct_surrogate_move(
    current: ChainPoint, evaluate: Evaluate, q: np.ndarray | None, s_start: float,
    s_end: float, kinetic: float, inner: dict, rng: np.random.Generator,
) -> TransitionInfo:
    """The surrogate transition's one test with the true potential: the inner chain, exact
    for the surrogate, moved from ``current`` (surrogate potential ``s_start``) to ``q``
    (``s_end``; None: it did not move, and no model evaluation is needed). ``inner``: the
    inner moves' ``adapt_stat``, ``diverging``, ``n_steps``, ``surrogate_energy_error``
    and ``step_size``, whichever kernel made them (Euclidean or Riemannian HMC)."""
    adapt_stat = inner["adapt_stat"]
    if q is None:
        # Reported acceptance: the chance the whole transition moves (inner times outer).
        return TransitionInfo(
            point=current, accepted=False, accept_prob=adapt_stat,
            energy=hamiltonian(current.potential, kinetic), energy_error=0.0,
            correction_prob=1.0, **inner,
        )
    proposal = evaluate(q)
    log_ratio = surrogate_transition_log_ratio(current.potential, proposal.potential, s_start, s_end)
    accepted, prob = metropolis_accept(log_ratio, rng)
    point = proposal if accepted else current
    return TransitionInfo(
        point=point, accepted=accepted, accept_prob=prob * adapt_stat,
        energy=hamiltonian(point.potential, kinetic), energy_error=-log_ratio,
        correction_prob=prob, **inner,
    )


def differential_evolution_jump(history: np.ndarray, scale: float, dim: int,
                                rng: np.random.Generator,
                                isotropic_share: float = 1.0 / 3.0) -> np.ndarray:
    """One DE-MCz jump, symmetric and independent of the current state given the history.

    The jump ``gamma (z1 - z2)`` between two past states adapts the proposal to the
    posterior's scale and correlations without any covariance estimate (ter Braak & Vrugt
    2008). Differences of past states only span the directions the chain has already
    moved in, so a share of the steps (``isotropic_share``) are uncorrelated Gaussian
    steps, each coordinate's at the history's spread in that coordinate: they let the
    chain open up directions its history has collapsed in; a history that spans every
    direction needs none. The small noise added to a difference is per coordinate too.
    Steps at one spread for all coordinates (their mean) were a random walk's death on a
    badly scaled posterior: with sds 1e4 and 1e-4, every step moved the narrow coordinate
    by about 1e7 of its sds. Without two distinct past states, a step of size
    ``scale / 10`` in every coordinate.
    """
    spread = _coordinate_spread(history) if history.shape[0] >= 3 else None
    if spread is not None and rng.uniform() < 1.0 - isotropic_share:
        i, j = rng.choice(history.shape[0], size=2, replace=False)
        jump = scale * 2.38 / np.sqrt(2 * dim) * (history[i] - history[j])
        return jump + 1e-3 * scale * spread * rng.standard_normal(dim)
    if spread is not None:
        return scale * 2.38 / np.sqrt(dim) * spread * rng.standard_normal(dim)
    return 0.1 * scale * rng.standard_normal(dim)


def _coordinate_spread(history: np.ndarray) -> np.ndarray | None:
    """Each coordinate's sd over ``history``, those without spread given the geometric
    mean of the others'; None when no coordinate has any."""
    sd = np.sqrt(np.var(history, axis=0))
    spread = np.isfinite(sd) & (sd > 0)
    if not np.any(spread):
        return None
    return np.where(spread, sd, np.exp(np.mean(np.log(sd[spread]))))


def differential_evolution_transition(
    current: ChainPoint, evaluate: Evaluate, history: np.ndarray, scale: float,
    rng: np.random.Generator, isotropic_share: float = 1.0 / 3.0,
) -> TransitionInfo:
    """Gradient-free exploration: differential evolution (DE-MCz) mixed with a random walk
    (``differential_evolution_jump``). The jump is symmetric given the history, so
    Metropolis needs no Hastings term."""
    jump = differential_evolution_jump(history, scale, current.q.shape[0], rng, isotropic_share)
    proposal = evaluate(current.q + jump)
    error = _nan_to_inf(proposal.potential - current.potential)
    return _metropolis_on_potential(current, proposal, error, rng, step_size=scale)


def multiple_try_transition(
    current: ChainPoint, evaluate_batch: Callable[[np.ndarray], list], draw_jump,
    n_tries: int, rng: np.random.Generator, step_size: float = np.nan,
) -> TransitionInfo:
    """Multiple-try Metropolis (Liu, Liang & Wong 2000, JASA 95) for a symmetric jump.

    ``n_tries`` proposals ``y_k = x + jump_k`` are evaluated at once (``evaluate_batch``:
    an ``(n, d)`` array to ``ChainPoint`` s, e.g. on an executor); one, ``y``, is chosen with
    probability proportional to ``exp(-U(y_k))``; ``n_tries - 1`` reference points
    ``y + jump`` are evaluated at once, and with ``x`` they make the reference set ``r``;
    ``y`` is accepted with ``min(1, sum exp(-U(y_k)) / sum exp(-U(r_k)))``. With weights
    ``pi(y)`` and a symmetric jump distribution that does not depend on the state
    (``draw_jump(rng)``) this is the original scheme, and the chain keeps ``exp(-U)``
    invariant. Two rounds of model calls an iteration, ``2 n_tries - 1`` calls in all.
    """
    dim = current.q.shape[0]
    tries = current.q + np.array([draw_jump(rng) for _ in range(n_tries)]).reshape(n_tries, dim)
    proposals = evaluate_batch(tries)
    log_w = -np.array([_nan_to_inf(p.potential) for p in proposals])
    if not np.any(np.isfinite(log_w)):
        return _metropolis_on_potential(current, proposals[0], np.inf, rng, step_size)
    chosen = proposals[int(rng.choice(n_tries, p=np.exp(log_w - logsumexp(log_w))))]
    references = chosen.q + np.array([draw_jump(rng) for _ in range(n_tries - 1)]).reshape(-1, dim)
    log_r = -np.array([_nan_to_inf(p.potential) for p in evaluate_batch(references)]
                      + [current.potential])
    error = float(logsumexp(log_r) - logsumexp(log_w))  # minus the log acceptance ratio
    return _metropolis_on_potential(current, chosen, error, rng, step_size)


def independence_transition(
    current: ChainPoint, evaluate: Evaluate, proposal: IndependenceProposal,
    rng: np.random.Generator,
) -> TransitionInfo:
    """Independence Metropolis-Hastings: ``y ~ g`` whatever the current state, accepted
    with ``min(1, w(y) / w(x))``, ``w = exp(-U) / g`` (``core/tail_jumps.py``)."""
    candidate = evaluate(proposal.draw(rng))
    log_ratio = _nan_to_inf(candidate.potential + float(proposal.log_density(candidate.q))) - (
        current.potential + float(proposal.log_density(current.q))
    )
    return _metropolis_on_potential(current, candidate, log_ratio, rng, step_size=np.nan)


def _metropolis_on_potential(
    current: ChainPoint, candidate: ChainPoint, error: float, rng: np.random.Generator,
    step_size: float,
) -> TransitionInfo:
    """Accept ``candidate`` with ``min(1, exp(-error))`` (a proposal without momentum)."""
    accepted, prob = metropolis_accept(-error, rng)
    point = candidate if accepted else current
    return TransitionInfo(
        point=point, accepted=accepted, accept_prob=prob, adapt_stat=prob, diverging=False,
        energy=point.potential, energy_error=error, step_size=step_size,
    )
