"""Tail jumps: independence proposals from a heavy-tailed density, and when they pay.

HMC with a fixed integration time is not geometrically ergodic on polynomial tails
(Livingstone et al. 2019): far out the force is weak and a trajectory of fixed length
returns slowly. On a surrogate the tails are also the least accurate part (little data,
and what there is weighs little in the fit); where the surrogate is lighter than the
posterior, the exact correction makes tail visits rare and long. Both leave tail
frequencies too low in runs of a few thousand draws, while the chain is exact in the
limit. An independence Metropolis-Hastings step whose proposal density ``g`` is heavier
than the posterior everywhere (``pi / g`` bounded) is uniformly ergodic (Mengersen &
Tweedie 1996): from a tail state it returns to the bulk in a few tries, whatever the
surrogate says. Mixed in with a fixed probability it keeps the chain exact.

Its proposals are independent Cauchy coordinates in the whitened tuning scale, heavier
than any posterior with finite mean along each whitened axis. In high dimension such
proposals are nearly always rejected, and on light tails they are not needed; a short
check (``assess_tail_jumps``) decides whether a chain uses them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.stats

from pymc_surrogate.surrogates.whitening import Whitening

__all__ = [
    "CauchyJumps",
    "TailJumpCheck",
    "assess_tail_jumps",
    "independence_acceptance",
    "mass_beyond",
]


@dataclass(frozen=True)
class CauchyJumps:
    """Independent standard Cauchy coordinates in the whitened space of ``whitening``, each
    cut at ``cut`` (drawn by the inverse of the cut distribution: no rejection).

    The cut keeps every proposal within reach of the states a chain has evaluated: a
    Cauchy coordinate lands beyond 20 sds one time in 30, where the model has never been
    evaluated and a solver often fails. The chain stays exact (an independence proposal
    of any density is), and the tail mass a t(3) posterior has past 20 sds (about 1e-4 a
    coordinate) is still reached by the other moves. (A cut at 10 left the heavy-tail
    check blind to a 3-d t(3).) A cut of the whole
    vector's norm would not do: in d = 100 one draw in 7000 has its norm below 20.
    """

    whitening: Whitening
    cut: float = np.inf

    def draw(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        dim = self.whitening.dim
        shape = (dim,) if size is None else (size, dim)
        if np.isinf(self.cut):
            white = scipy.stats.cauchy.rvs(size=shape, random_state=rng)
        else:
            white = np.tan(np.arctan(self.cut) * rng.uniform(-1.0, 1.0, size=shape))
        return self.whitening.from_white(white)

    def log_density(self, q: np.ndarray) -> np.ndarray:
        """``log g(q)`` up to a constant (it cancels in every ratio); ``-inf`` past the cut."""
        white = self.whitening.to_white(q)
        inside = np.all(np.abs(white) <= self.cut, axis=-1)
        return np.where(inside, np.sum(scipy.stats.cauchy.logpdf(white), axis=-1), -np.inf)

    def distance(self, q: np.ndarray) -> np.ndarray:
        """Whitened distance of the rows of ``q`` from the centre."""
        return np.linalg.norm(self.whitening.to_white(q), axis=-1)

    def log_weights(self, q: np.ndarray, potentials: np.ndarray) -> np.ndarray:
        """``log(pi / g)`` at ``q``, up to a constant; ``-inf`` where ``U`` is not finite."""
        potentials = np.asarray(potentials, dtype=np.float64)
        finite = np.isfinite(potentials)
        out = np.full(potentials.shape, -np.inf)
        out[finite] = -potentials[finite] - self.log_density(np.asarray(q)[finite])
        return out


def independence_acceptance(
    jumps: CauchyJumps, states: np.ndarray, state_potentials: np.ndarray,
    proposals: np.ndarray, proposal_potentials: np.ndarray,
) -> float:
    """Mean acceptance ``min(1, w(y) / w(x))`` over all pairs of posterior states ``x``
    and proposals ``y`` (``w = pi / g``): the acceptance rate of the jumps."""
    log_w_states = jumps.log_weights(states, state_potentials)
    log_w_proposals = jumps.log_weights(proposals, proposal_potentials)
    log_w_states = log_w_states[np.isfinite(log_w_states)]
    if log_w_states.size == 0:
        return 0.0
    log_ratio = log_w_proposals[None, :] - log_w_states[:, None]
    return float(np.mean(np.exp(np.minimum(log_ratio, 0.0))))


def _normalised_weights(
    jumps: CauchyJumps, proposals: np.ndarray, proposal_potentials: np.ndarray
) -> np.ndarray:
    """Self-normalised importance weights ``pi / g`` of the proposals (zeros if none is finite)."""
    log_w = jumps.log_weights(proposals, proposal_potentials)
    if not np.any(np.isfinite(log_w)):
        return np.zeros(log_w.shape)
    weights = np.exp(log_w - np.max(log_w))
    return weights / np.sum(weights)


def mass_beyond(
    jumps: CauchyJumps, proposals: np.ndarray, proposal_potentials: np.ndarray, radius: float,
    weights: np.ndarray | None = None,
) -> float:
    """Self-normalised importance estimate, from proposals of ``jumps``, of the posterior
    mass at whitened distance above ``radius`` (``weights``: the proposals' normalised
    importance weights, if already computed)."""
    if weights is None:
        weights = _normalised_weights(jumps, proposals, proposal_potentials)
    return float(np.sum(weights[jumps.distance(proposals) > radius]))


@dataclass(frozen=True)
class TailJumpCheck:
    """What ``assess_tail_jumps`` measured, and its verdict."""

    acceptance: float  # of the jumps, from the chain's tuning states
    mass_beyond: float  # posterior mass far past the tuning states (``assess_tail_jumps``)
    worthwhile: bool
    weight_ess: float = np.nan  # Kish effective size of the proposals' importance weights


def assess_tail_jumps(
    jumps: CauchyJumps, states: np.ndarray, state_potentials: np.ndarray,
    proposals: np.ndarray, proposal_potentials: np.ndarray, *,
    reach_quantile: float = 0.95, reach_factor: float = 3.0, min_mass: float = 5e-5,
    min_acceptance: float = 0.05, min_weight_ess: float = 5.0,
) -> TailJumpCheck:
    """Whether tail jumps are worth their model evaluations for this posterior.

    ``states`` (posterior draws of tuning, with their ``state_potentials``) have a
    ``reach_quantile`` of whitened distance ``R``; ``proposals`` of ``jumps`` with their
    true potentials give an importance estimate of the posterior mass past
    ``reach_factor * R``. The jumps are worthwhile when that mass is at least ``min_mass``
    (a polynomial tail: about 2e-3 for a Student-t(3), 2e-4 for a t(5); an exponential
    one, or a t(10), about 1e-5; a Gaussian's is below 1e-11 in any dimension) and they
    are accepted at least ``min_acceptance`` of the time (product-Cauchy proposals almost
    never are on light tails in d >= 20). A quantile, not the farthest state: the maximum
    of a heavy-tailed sample is itself so variable that the check missed a t(3) one time
    in three. With 60 proposals and 500 exact draws as the states, over 100 seeds, the
    check says yes for t(3), d = 3: 100%, d = 10: 87%; t(5): 91%; t(10): 0%; Laplace
    (d = 3): 1%; Gaussians (d = 2, 10): 0%.

    The mass estimate is trusted only when the importance weights have a Kish effective
    size of at least ``min_weight_ess``: one proposal that outweighs all others gives a
    "mass" of 0 or 1 whatever the tails (beta-binomial of vhmc §4.1, an exponential tail:
    mass 1 from one far proposal, jumps switched on, and the chains they sent into the
    tail stayed there: x2 mean 54 where the posterior's is 7.9 ± 1.4, for SurrogateHMC
    and VariationalHMC alike).
    """
    reach = float(np.quantile(jumps.distance(states), reach_quantile))
    acceptance = independence_acceptance(
        jumps, states, state_potentials, proposals, proposal_potentials
    )
    weights = _normalised_weights(jumps, proposals, proposal_potentials)
    mass = mass_beyond(jumps, proposals, proposal_potentials, reach_factor * reach, weights)
    # Kish: (sum w)^2 / sum w^2 with sum w = 1 (0 when no weight is finite)
    weight_ess = float(1.0 / np.sum(weights**2)) if np.any(weights) else 0.0
    worthwhile = mass >= min_mass and acceptance >= min_acceptance and weight_ess >= min_weight_ess
    return TailJumpCheck(acceptance, mass, worthwhile, weight_ess)
