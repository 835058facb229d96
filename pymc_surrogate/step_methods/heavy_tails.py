"""Tail jumps in the draws: whether a chain gets them, and when one is made.

The kernels and the check are in ``core/tail_jumps.py``; this is the policy around them.
"""

from __future__ import annotations

import numpy as np
from pymc.stats.convergence import WarningType

from pymc_surrogate.core.tail_jumps import (
    CauchyJumps,
    assess_tail_jumps,
    independence_acceptance,
)
from pymc_surrogate.step_methods.state import ChainState

__all__ = ["TailJumps"]


class TailJumps:
    """Mixin of ``SurrogateStep``: tail jumps (``tail_jumps``)."""

    def _choose_tail_jumps(self, chain: ChainState) -> None:
        """Set the draws' share of tail jumps (``tail_jumps``): fixed, or measured.

        The trials are model evaluations after the final fit (in ``total_model_evals``,
        in no draw's ``model_evals``) that do not move the chain. A model that raises at
        one of them (a solver that fails far from the data) gets no jumps: the draws would
        meet such points too. Nor does a chain whose surrogate had stopped moving it in
        tuning: its tuning states are no posterior sample to measure tails against (rough
        potential, d = 2: 22 distinct states with a third of the posterior's spread, the
        check said yes, the jumps were accepted 7% of the time and sent the chain where its
        surrogate had no data: ESS 30 against 300 for the other chain).
        """
        states, potentials = self._late_tuning_states(chain)
        known = np.isfinite(potentials)  # not the moves on the surrogate alone (surrogate_tuning.py)
        states, potentials = states[known], potentials[known]
        if self.tail_jumps == 0 or len(states) <= self.dim:
            return
        chain.tails.jumps = CauchyJumps(chain.whitening)
        if self.tail_jumps != "auto":
            chain.tails.probability = self.tail_jumps
            return
        if chain.explore.probability > 0:
            return
        # From a child stream: a chain the check leaves without jumps draws exactly what
        # it would have drawn with tail_jumps=0.
        proposals = chain.tails.jumps.draw(self.rng.spawn(1)[0], size=self.tuning.tail_jump_trials)
        field = self._surrogate_field(chain)
        thinned = states[:: max(1, len(states) // 200)]
        expected = independence_acceptance(
            chain.tails.jumps, thinned, [field(q)[0] for q in thinned],
            proposals, [field(q)[0] for q in proposals],
        )
        if expected < self.tuning.tail_jump_min_acceptance:
            return
        # Not training data: AdaptiveSurrogateHMC would learn from them in the draws.
        raised, values = chain.failures.raised, []
        for q in proposals:
            values.append(self._evaluate(chain, q, with_grad=False, record=False).potential)
            if chain.failures.raised > raised:  # a model that raises out there: no jumps
                return
        chain.tails.check = check = assess_tail_jumps(
            chain.tails.jumps, states, potentials, proposals, values,
            min_acceptance=self.tuning.tail_jump_min_acceptance,
        )
        if check.worthwhile:
            chain.tails.probability = self.tuning.tail_jump_probability
            self._warn(
                chain, WarningType.CONVERGENCE,
                f"heavy tails (posterior mass {check.mass_beyond:.1g} beyond three times the "
                "95th-percentile distance of a chain's tuning states); "
                f"{self.tuning.tail_jump_probability:.0%} of that chain's draws are tail jumps (stat "
                f"`tail_jump`), accepted about {check.acceptance:.0%} of the time.",
                level="info",
            )

    def _jumps_now(self, chain: ChainState) -> bool:
        return (
            chain.frozen
            and chain.tails.probability > 0
            and self.rng.uniform() < chain.tails.probability
        )
