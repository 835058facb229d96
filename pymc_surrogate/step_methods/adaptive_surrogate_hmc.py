"""AdaptiveSurrogateHMC: a surrogate that learns online (rns-hmc §4, Algorithm 4)."""

from __future__ import annotations

import numpy as np

from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods.adaptation.training import TrainingPolicy
from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.step_methods.surrogate_hmc import SurrogateHMC
from pymc_surrogate.surrogates.random_network import RandomNetworkSurrogate

__all__ = ["AdaptiveSurrogateHMC"]


class AdaptiveSurrogateHMC(SurrogateHMC):
    r"""SurrogateHMC whose surrogate keeps learning online (ARNS-HMC).

    After the first batch fit, every new model evaluation updates the network's output
    weights by recursive least squares (``O(p^2)`` a point, equal to the batch ridge
    solution); the trajectories switch to the updated weights with probability
    ``a_t = (t - t0)^{-adaptation_decay}``.

    Parameters
    ----------
    adapt_in_draws : bool
        Keep adapting, with vanishing probability, in the draws (default); ``False``
        freezes the surrogate when tuning ends (exact at every step).
    adaptation_decay : float
        Exponent of ``a_t``, in (0, 1] so that ``sum a_t`` diverges. Default 0.5.
    surrogate : RandomNetworkSurrogate, optional
        As ``SurrogateHMC``; by default ``RandomNetworkSurrogate(max_hidden=200)``, as each
        online update costs ``O(p^2)`` in the network's ``p`` weights.
    **kwargs
        Everything ``SurrogateHMC`` takes.

    Notes
    -----
    rns-hmc §4, Algorithm 4, Proposition 1. With ``a_t -> 0`` and ``sum a_t = inf`` the
    chain is exact in the limit (diminishing adaptation). Extra stat ``adaptations``.
    How it works: ``docs/design.md``, "The step methods".

    References
    ----------
    .. [1] Zhang, Shahbaba & Zhao (2017), *Statistics and Computing* 27.
    .. [2] Roberts & Rosenthal (2007), "Coupling and ergodicity of adaptive Markov chain
       Monte Carlo algorithms", *J. Appl. Probab.* 44.

    Examples
    --------
    >>> idata = pm.sample(step=AdaptiveSurrogateHMC(), tune=1000)  # inside a model context
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
        **kwargs,
    ):
        if not (np.isscalar(adaptation_decay) and 0 < adaptation_decay <= 1):
            raise ValueError(
                "adaptation_decay must lie in (0, 1] so that the adaptation probabilities "
                f"sum to infinity; got {adaptation_decay!r}."
            )
        self.adapt_in_draws = bool(adapt_in_draws)
        self.policy = TrainingPolicy(refit="online", learn_in_draws=self.adapt_in_draws)
        self.adaptation_decay = float(adaptation_decay)
        super().__init__(vars, **kwargs)

    def default_surrogate(self) -> RandomNetworkSurrogate:
        return RandomNetworkSurrogate(max_hidden=200)

    def _on_evaluation(self, chain: ChainState, point: ChainPoint) -> None:
        try:
            self.fit.learn(point, self.schedule.weight_reference)
        except (np.linalg.LinAlgError, ValueError, FloatingPointError) as err:
            self.refits.online_failed(self._access(chain), err)

    def _after_iteration(self, chain: ChainState, info: TransitionInfo) -> None:
        """The vanishing adaptation: a copy of the learner with probability ``a_t``."""
        if self.fit.learner is None or not self.policy.adapts(chain.frozen):
            return
        t = chain.iteration - self.schedule.first_iteration + 1
        if t > 0 and self.rng.uniform() < t ** (-self.adaptation_decay):
            try:
                candidate = self.fit.snapshot_at(info.point.q)
            except (np.linalg.LinAlgError, ValueError, FloatingPointError) as err:
                self.refits.online_failed(self._access(chain), err)
                return
            self.learned.adopt(candidate)

    def _extra_stats(self, chain: ChainState) -> dict:
        return {**super()._extra_stats(chain), "adaptations": self.learned.adaptations}
