"""AdaptiveSurrogateHMC: a surrogate that learns online (rns-hmc §4, Algorithm 4)."""

from __future__ import annotations

import numpy as np

from pymc_surrogate.core.transitions import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods.base import ChainState
from pymc_surrogate.step_methods.surrogate_hmc import SurrogateHMC
from pymc_surrogate.surrogates.online import RecursiveLeastSquares

__all__ = ["AdaptiveSurrogateHMC"]


class AdaptiveSurrogateHMC(SurrogateHMC):
    r"""SurrogateHMC whose surrogate keeps learning (ARNS-HMC).

    The random network is first fitted after the same exploration as SurrogateHMC's (a
    surrogate fitted from a few ``d`` points right after the climb to the mode was cheaper
    on the logistic regression, but its training data then came from surrogate proposals
    alone and missed the tails: on a Student-t(6) coordinate the tail frequency came out
    0.03-0.09 against 0.05, and from values alone it sent the chain astray on the PDE).
    From then on every new model evaluation (accepted and rejected proposals alike)
    updates its output weights online by recursive least squares — ``O(p^2)`` per point for
    ``p`` weights, whatever the number of points seen, and equal to the batch regularised
    least-squares solution on the same data (rns-hmc Proposition 1). The weights that drive
    the trajectories are replaced by the updated ones only with probability
    ``a_t = (t - t0)^{-adaptation_decay}``: ``a_t -> 0`` and ``sum a_t = inf``, the
    diminishing adaptation under which the chain stays ergodic with the exact posterior as
    its limit (Roberts & Rosenthal 2007), while the surrogate keeps improving. During
    tuning the basis itself (whitening, quadratic terms, hidden nodes) is refitted in batch
    as the posterior-scale estimate improves, gradients included when the model has them;
    online updates use the potential values.

    Parameters
    ----------
    adapt_in_draws : bool
        Keep adapting (with vanishing probability) during the draws (default). ``False``
        freezes the surrogate when tuning ends.
    adaptation_decay : float
        Exponent of ``a_t``; in (0, 1] so that ``sum a_t`` diverges. Default 0.5.
    max_hidden : int
        Bound on hidden nodes (smaller than SurrogateHMC's: each online update costs
        ``O(p^2)``).
    **kwargs
        Everything ``SurrogateHMC`` takes.

    Notes
    -----
    Extra stat ``adaptations``: how many times this chain's trajectories switched to newly
    learned weights. Adaptation in the draws makes the chain adaptive MCMC: exact in the
    limit rather than at every finite step, as for any diminishing-adaptation sampler.
    """

    name = "adaptive_surrogate_hmc"
    stats_dtypes_shapes = {
        **SurrogateHMC.stats_dtypes_shapes,
        "adaptations": (np.int64, []),
    }

    def __init__(
        self,
        vars=None,
        *,
        adapt_in_draws: bool = True,
        adaptation_decay: float = 0.5,
        max_hidden: int = 200,
        **kwargs,
    ):
        if not (np.isscalar(adaptation_decay) and 0 < adaptation_decay <= 1):
            raise ValueError(
                "adaptation_decay must lie in (0, 1] so that the adaptation probabilities "
                f"sum to infinity; got {adaptation_decay!r}."
            )
        self.adapt_in_draws = bool(adapt_in_draws)
        self.adaptation_decay = float(adaptation_decay)
        super().__init__(vars, max_hidden=max_hidden, **kwargs)


    def _keeps_training_data(self, chain: ChainState) -> bool:
        return not chain.frozen or self.adapt_in_draws

    def _use_surrogate(self, chain: ChainState, surrogate) -> None:
        super()._use_surrogate(chain, surrogate)
        # The online learner continues the batch fit it starts from, on that fit's basis.
        eq = surrogate.normal_equations_
        chain.learner = RecursiveLeastSquares(eq.gram, eq.rhs, eq.penalty, eq.column_scale)

    def _on_evaluation(self, chain: ChainState, point: ChainPoint) -> None:
        if chain.learner is None:
            return
        # Like the batch fit, learn only where the posterior lives: one far-out rejected
        # proposal, 1e3 above the typical set, would otherwise bend the whole fit.
        lowest = float(np.min(chain.training.potentials))
        if point.potential > lowest + self._energy_window():
            return
        rows = chain.surrogate.value_features(self.context.join(point.q)[None])
        # weighted as the batch fit weighs its points, so the online fit continues it
        root = np.sqrt(self._training_weights(point.potential, chain.weight_reference))
        target = point.potential - chain.surrogate.target_offset_
        chain.learner.update(root * rows, np.array([root * target]))

    def _after_iteration(self, chain: ChainState, info: TransitionInfo) -> None:
        if chain.learner is None or (chain.frozen and not self.adapt_in_draws):
            return
        t = chain.iteration - chain.surrogate_start + 1
        if t > 0 and self.rng.uniform() < t ** (-self.adaptation_decay):
            chain.surrogate = chain.surrogate.with_coefficients(chain.learner.coef, chain.learner)
            chain.n_adaptations += 1

    def astep(self, q0):
        new_q, stats = super().astep(q0)
        stats[0]["adaptations"] = self.chain.n_adaptations
        return new_q, stats
