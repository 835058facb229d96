"""Tail jumps in the draws: whether a chain gets them, and when one is made.

The kernels and the check are in ``core/tail_jumps.py``; this part is the policy around
them and owns what it chose for the chain.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_surrogate.core.tail_jumps import (
    CauchyJumps,
    assess_tail_jumps,
    independence_acceptance,
)
from pymc_surrogate.step_methods.part import ChainPart
from pymc_surrogate.step_methods.tuning import Tuning
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["TailJumps"]


@dataclass_state
class TailJumpsState(DataClassState):
    jumps: Any = None  # CauchyJumps in the chain's frame (None: no jumps)
    probability: float = 0.0  # the draws' share of tail jumps
    check: Any = None  # TailJumpCheck of the "auto" trials (None: none)


class TailJumps(ChainPart):
    """The draws' independence Cauchy jumps (``tail_jumps``): their share, fixed or measured.

    Parameters
    ----------
    setting : "auto" or float
        The share of draws that are tail jumps, or "auto": measured when tuning ends.
    dim : int
        The block's dimension.
    tuning : Tuning
        The trial count, the acceptance a jump needs, and the share "auto" gives.
    """

    _state_class = TailJumpsState

    def __init__(self, setting: float | str, dim: int, tuning: Tuning):
        self.setting = setting if setting == "auto" else float(setting)
        self.dim = dim
        self.tuning = tuning
        self.reset()

    def choose(self, states: np.ndarray, potentials: np.ndarray, whitening: Whitening,
               field: Callable, evaluate: Callable, raised: Callable[[], int],
               rng: np.random.Generator, stalled: bool) -> str | None:
        """Set the draws' share of tail jumps; return a message for the user, if any.

        ``states`` and ``potentials`` are the chain's late tuning states (NaN: a move on
        the surrogate alone), ``field`` the draws' surrogate, ``evaluate(q)`` the true
        potential (no training data; a failure is a rejection), ``raised()`` how many of
        the chain's evaluations have raised so far, ``stalled`` whether the surrogate had stopped moving
        the chain in tuning. The trials are model evaluations after the final fit (in
        ``total_model_evals``, in no draw's ``model_evals``) that do not move the chain. A
        model that raises at one of them (a solver that fails far from the data) gets no
        jumps: the draws would meet such points too. Nor does a stalled chain: its tuning
        states are no posterior sample to measure tails against (rough potential, d = 2:
        22 distinct states with a third of the posterior's spread, the check said yes, the
        jumps were accepted 7% of the time and sent the chain where its surrogate had no
        data: ESS 30 against 300 for the other chain).
        """
        known = np.isfinite(potentials)  # not the moves on the surrogate alone
        states, potentials = states[known], potentials[known]
        if self.setting == 0 or len(states) <= self.dim:
            return None
        self.jumps = CauchyJumps(whitening, cut=self.tuning.far_sd)
        if self.setting != "auto":
            self.probability = self.setting
            return None
        if stalled:
            return None
        # From a child stream: a chain the check leaves without jumps draws exactly what
        # it would have drawn with tail_jumps=0.
        proposals = self.jumps.draw(rng.spawn(1)[0], size=self.tuning.tail_jump_trials)
        thinned = states[:: max(1, len(states) // 200)]
        expected = independence_acceptance(
            self.jumps, thinned, [field(q)[0] for q in thinned],
            proposals, [field(q)[0] for q in proposals],
        )
        if expected < self.tuning.tail_jump_min_acceptance:
            return None
        before, values = raised(), []
        for q in proposals:
            values.append(evaluate(q))
            if raised() > before:  # a model that raises out there: no jumps
                return None
        self.check = check = assess_tail_jumps(
            self.jumps, states, potentials, proposals, values,
            min_acceptance=self.tuning.tail_jump_min_acceptance,
        )
        if not check.worthwhile:
            return None
        self.probability = self.tuning.tail_jump_probability
        return (
            f"heavy tails (posterior mass {check.mass_beyond:.1g} beyond three times the "
            "95th-percentile distance of a chain's tuning states); "
            f"{self.tuning.tail_jump_probability:.0%} of that chain's draws are tail jumps (stat "
            f"`tail_jump`), accepted about {check.acceptance:.0%} of the time."
        )

    def now(self, frozen: bool, rng: np.random.Generator) -> bool:
        """Whether this draw is a tail jump (never in tuning)."""
        return frozen and self.probability > 0 and rng.uniform() < self.probability
