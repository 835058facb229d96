"""RNS-RMHMC (rns-hmc §3.4): surrogate transitions on a position-dependent metric.

With ``metric="riemannian"`` a network-surrogate step runs its surrogate transitions as
Riemannian HMC (``core/riemannian.py``): the SoftAbs metric of the surrogate's Hessian, its
derivatives from the surrogate's closed-form third derivatives
(``surrogates/curvature.py``), the generalised leapfrog, all in the chain's whitened frame
(``chain.whitening``, the posterior scale of the last fit), where SoftAbs's floor is
scale-free. None of it evaluates the model; the true logp corrects each transition as in
the Euclidean kernel, so the chain stays exact.
"""

from __future__ import annotations

import numpy as np

from pymc_surrogate.core.jitter import jittered_trajectory
from pymc_surrogate.core.riemannian import (
    geometry,
    in_frame,
    riemannian_move,
    riemannian_surrogate_transition,
    tempered3,
)
from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.surrogates.curvature import random_network_derivatives
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["METRICS", "RIEMANNIAN_STATS", "RiemannianTrajectories"]

METRICS = ("euclidean", "riemannian", "riemannian-diagonal")
RIEMANNIAN_STATS = {
    "riemannian": (bool, []),
    "fixed_point_iterations": (np.float64, []),
    "implicit_failures": (np.int64, []),
}


class RiemannianTrajectories:
    """Mixin of the random-network steps: the Riemannian surrogate transition."""

    metric = "euclidean"
    softabs_alpha = 1.0

    def _set_metric(self, metric: str, softabs_alpha: float) -> None:
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}; got {metric!r}.")
        if not (np.isscalar(softabs_alpha) and np.isfinite(softabs_alpha) and softabs_alpha > 0):
            raise ValueError(f"softabs_alpha must be a positive number; got {softabs_alpha!r}.")
        self.metric = metric
        self.softabs_alpha = float(softabs_alpha)
        self._riemann_last = (np.nan, 0)

    @property
    def _riemannian(self) -> bool:
        return self.metric != "euclidean"

    @property
    def _diagonal(self) -> bool:
        return self.metric == "riemannian-diagonal"

    def _check_metric(self) -> None:
        """After the step knows its block: what the Riemannian kernel cannot do."""
        if not self._riemannian:
            return
        if self.correction != "surrogate_transition":
            raise ValueError(
                "metric='riemannian' runs with correction='surrogate_transition' only: the "
                "Hamiltonian correction would need the true model's Riemannian Hamiltonian."
            )
        if self.context.dim:
            raise ValueError(
                "metric='riemannian' needs the step to sample all of the model's continuous "
                "variables (its metric is the whole surrogate's Hessian); it was given a "
                "block of a CompoundStep."
            )

    def _surrogate_step(self, chain: ChainState, current: ChainPoint,
                        record: bool = True) -> TransitionInfo:
        if not self._riemannian:
            return super()._surrogate_step(chain, current, record)
        with_grad = self.has_gradient and not chain.frozen
        temperature = self.coverage.temperature_now(self._tuning_now(chain))
        field = self._riemann_field(chain, temperature)
        current, evaluate = self._model_or_surrogate(chain, current, with_grad, record, field)
        result = riemannian_surrogate_transition(
            current, evaluate, field, self.softabs_alpha, chain.step_adapt.current(self.tune and not chain.frozen),
            self.path_length, self._inner_transitions(chain), self.rng, self.max_energy_error,
            frame=self._riemann_frame(chain), diagonal=self._diagonal,
        )
        self._riemann_last = (result.fixed_point_iterations, result.implicit_failures)
        return result.info

    @staticmethod
    def _riemann_field(chain: ChainState, temperature: float):
        """The chain's surrogate with its Hessian and third derivatives, at ``U~ / T``."""
        surrogate = chain.surrogate
        return tempered3(lambda q: random_network_derivatives(surrogate, q), temperature)

    def _riemann_frame(self, chain: ChainState) -> Whitening:
        """Where the Riemannian moves run: the chain's whitened coordinates.

        SoftAbs floors the metric's eigenvalues at ``1 / alpha``, a curvature in the
        coordinates' units. In the parameters' units that floor stiffened kilpisjarvi's
        intercept (sd 30, curvature 1e-3) a thousandfold: min ESS 15, R-hat 1.20, where
        the Euclidean kernel, whose mass matrix is this scale, was right. In the frame the
        posterior has unit scale, and the floor, the step size and the implicit steps'
        tolerances are relative to it. It changes only at a fit, with the surrogate.
        """
        return chain.whitening if chain.whitening is not None else Whitening.identity(self.dim)

    def _adapt_to_surrogate(self, chain: ChainState, chain_scale, warm_up) -> None:
        super()._adapt_to_surrogate(chain, chain_scale, warm_up)
        if self._riemannian:
            self._riemannian_warm_up(chain, chain_scale.mean)

    def _riemannian_warm_up(self, chain: ChainState, fallback_start: np.ndarray) -> None:
        """The step size for this surrogate: dual averaging over Riemannian moves on it
        alone (no model evaluation), from the Euclidean warm-up's step, then on through
        tuning on the transitions' inner acceptance (``SurrogateStep._adapt``).

        A metric of the local curvature wants another step than the Euclidean one (2-d
        funnel: 0.02-0.08 against 0.18-0.25, at which 784 and 891 inner moves of two
        chains' 1000 draws ended in an implicit step that did not converge), and the draws
        run on the final fit, whose curvature can differ from the fit tuning adapted to (a
        step tuned at acceptance 0.78 left 1531 failed inner moves in one chain's draws).
        """
        adapt = self._step_size_adaptation(chain.step_adapt.current(False))
        frame = self._riemann_frame(chain)
        field = in_frame(self._riemann_field(chain, self.coverage.temperature), frame,
                         self._diagonal)
        start = chain.current.q if chain.current is not None else fallback_start
        geom = geometry(frame.to_white(start), field, self.softabs_alpha)
        for _ in range(self.tuning.riemannian_warm_up):
            eps, steps = jittered_trajectory(adapt.current(True), self.path_length, self.rng,
                                             shortest=0.5)
            move = riemannian_move(geom, field, self.softabs_alpha, eps, steps, self.rng,
                                   max_energy_error=self.max_energy_error)
            adapt.update(move.accept_prob, True)
            geom = move.geom
        chain.step_adapt = self._step_size_adaptation(adapt.current(False))

    def _extra_stats(self, chain: ChainState) -> dict:
        iterations, failures = self._riemann_last
        self._riemann_last = (np.nan, 0)
        return {**super()._extra_stats(chain), "riemannian": self._riemannian,
                "fixed_point_iterations": iterations, "implicit_failures": failures}
