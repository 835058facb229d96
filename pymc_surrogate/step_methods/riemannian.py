"""RNS-RMHMC (rns-hmc §3.4): surrogate transitions on a position-dependent metric.

With ``metric="riemannian"`` a network-surrogate step runs its surrogate transitions as
Riemannian HMC (``core/riemannian.py``): the SoftAbs metric of the surrogate's Hessian, its
derivatives from the surrogate's closed-form third derivatives
(``surrogates/curvature.py``), the generalised leapfrog. None of it evaluates the model;
the true logp corrects each transition as in the Euclidean kernel, so the chain stays exact.
"""

from __future__ import annotations

import numpy as np

from pymc_surrogate.core.jitter import jittered_trajectory
from pymc_surrogate.core.riemannian import (
    geometry,
    riemannian_move,
    riemannian_surrogate_transition,
    tempered3,
)
from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.surrogates.curvature import random_network_derivatives

__all__ = ["METRICS", "RIEMANNIAN_STATS", "RiemannianTrajectories"]

METRICS = ("euclidean", "riemannian")
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

    def _check_metric(self) -> None:
        """After the step knows its block: what the Riemannian kernel cannot do."""
        if self.metric != "riemannian":
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
        if self.metric != "riemannian":
            return super()._surrogate_step(chain, current, record)
        with_grad = self.has_gradient and not chain.frozen
        temperature = chain.coverage.temperature
        if self._tempers_now(chain):  # tuning only (coverage.py)
            temperature *= self._tuning_temperature()
        field = self._riemann_field(chain, temperature)
        result = riemannian_surrogate_transition(
            current, lambda q: self._evaluate(chain, q, with_grad=with_grad, record=record),
            field, self.softabs_alpha, self._riemann_step_size(chain),
            self.path_length, self._inner_transitions(chain), self.rng, self.max_energy_error,
        )
        self._riemann_last = (result.fixed_point_iterations, result.implicit_failures)
        return result.info

    @staticmethod
    def _riemann_field(chain: ChainState, temperature: float):
        """The chain's surrogate with its Hessian and third derivatives, at ``U~ / T``."""
        surrogate = chain.surrogate
        return tempered3(lambda q: random_network_derivatives(surrogate, q), temperature)

    def _riemann_step_size(self, chain: ChainState) -> float:
        """The Riemannian kernel's own step size, dual-averaged on its inner acceptance
        through tuning. It starts at the Euclidean warm-up's and is not reset by it: a
        metric of the local curvature wants another step (2-d funnel: 0.02-0.08 where the
        Euclidean warm-up gave 0.18-0.25, at which 784 and 891 inner moves of the two
        chains' 1000 draws ended in an implicit step that did not converge)."""
        if chain.riemann_step is None:
            chain.riemann_step = self._step_size_adaptation(chain.step_adapt.current(False))
        return chain.riemann_step.current(self.tune and not chain.frozen)

    def _adapt(self, chain: ChainState, info: TransitionInfo, exploring: bool) -> None:
        if self.metric == "riemannian" and not exploring and chain.riemann_step is not None:
            chain.riemann_step.update(info.adapt_stat, True)
        super()._adapt(chain, info, exploring)

    def _adapt_to_surrogate(self, chain: ChainState, chain_scale, warm_up) -> None:
        super()._adapt_to_surrogate(chain, chain_scale, warm_up)
        if self.metric == "riemannian":
            self._riemannian_warm_up(chain, chain_scale.mean)

    def _riemannian_warm_up(self, chain: ChainState, fallback_start: np.ndarray) -> None:
        """Dual-average the Riemannian step size on the new surrogate alone (no model
        evaluation): the draws run on the final fit, whose curvature can differ from the
        fit tuning adapted to (2-d funnel: a step tuned at acceptance 0.78 left 1531 failed
        inner moves in one chain's 1000 draws on the final fit)."""
        start = chain.riemann_step.current(False) if chain.riemann_step is not None else (
            chain.step_adapt.current(False))
        adapt = self._step_size_adaptation(start)
        field = self._riemann_field(chain, chain.coverage.temperature)
        geom = geometry(chain.current.q if chain.current is not None else fallback_start,
                        field, self.softabs_alpha)
        for _ in range(self.tuning.riemannian_warm_up):
            eps, steps = jittered_trajectory(adapt.current(True), self.path_length, self.rng,
                                             shortest=0.5)
            move = riemannian_move(geom, field, self.softabs_alpha, eps, steps, self.rng,
                                   max_energy_error=self.max_energy_error)
            adapt.update(move.accept_prob, True)
            geom = move.geom
        chain.riemann_step = self._step_size_adaptation(adapt.current(False))

    def _extra_stats(self, chain: ChainState) -> dict:
        iterations, failures = self._riemann_last
        self._riemann_last = (np.nan, 0)
        return {**super()._extra_stats(chain), "riemannian": self.metric == "riemannian",
                "fixed_point_iterations": iterations, "implicit_failures": failures}
