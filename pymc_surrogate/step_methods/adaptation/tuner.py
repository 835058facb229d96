"""``Tuner``: a chain's adaptation in tune, kept apart from the draws' code path.

``update`` after every tuning iteration (the exploration's or the surrogate kernel's step
size and metric, the chain's tuning states, the refit schedule; or, tuning on the
surrogate alone, its checks of the model), ``refit`` in the chain's frame (the map first,
then the surrogate in it), and ``final`` when tuning ends (the fit on all tuning data,
then the draws' tail jumps, lowering of a black box's surrogate and path length): the
``(init, update, final)`` shape of BlackJAX's window adaptation, over the parts' own
states.
"""

from __future__ import annotations

import numpy as np
from pymc.stats.convergence import WarningType

from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods.adaptation.access import ChainAccess
from pymc_surrogate.step_methods.adaptation.surrogate_tuning import SurrogateChecks
from pymc_surrogate.step_methods.adaptation.transport_frame import (
    convert,
    convert_point,
)

__all__ = ["Tuner"]


class Tuner:
    """A chain's adaptation in tune.

    Parameters
    ----------
    refits : Refits
        The surrogate's refits (``refit.py``).
    learned : LearnedSurrogate
        The chain's training data, tuning states and surrogate.
    fit : SurrogateFit
        The step's surrogate family (its own coordinates, if any, follow a new frame).
    frame : Frame
        The chain's coordinates.
    kernel : SurrogateKernel
        The surrogate trajectories (step size, metric, inner moves, path length).
    exploration : Exploration
        The exact warm-up kernels.
    surrogate_tuning : SurrogateTuning
        Tuning on the surrogate alone.
    schedule : RefitSchedule
        When the chain refits; the corrections' acceptances.
    coverage : Coverage
        Whether tuning is tempered.
    sharing : SharedEvaluations
        The other chains' evaluations.
    tails : TailJumps
        The draws' tail jumps.
    draw_bound : DrawBound
        The draws' lowering of a black box's surrogate.
    exact : bool
        Whether the draws are corrected with the true logp (else no draw length to choose).
    """

    def __init__(self, refits, learned, fit, frame, kernel, exploration, surrogate_tuning,
                 schedule, coverage, sharing, tails, draw_bound, exact: bool):
        self.refits, self.learned, self.fit, self.frame = refits, learned, fit, frame
        self.kernel, self.exploration = kernel, exploration
        self.surrogate_tuning, self.schedule = surrogate_tuning, schedule
        self.coverage, self.sharing = coverage, sharing
        self.tails, self.draw_bound, self.exact = tails, draw_bound, exact

    # ------------------------------------------------------------------ update
    def update(self, access: ChainAccess, info: TransitionInfo, exploring: bool) -> None:
        """After an exact tuning iteration: step sizes, path length, mass matrix, the
        tuning states, and the refit schedule."""
        if exploring:
            self.exploration.adapt(info, self.kernel, self.learned.surrogate is not None)
        else:
            self.kernel.adapt(info)
        self.learned.add_state(info.point.q, info.point.potential)
        self.refits.update(access, info)

    def check_surrogate(self, access: ChainAccess, potential) -> None:
        """In tuning on the surrogate alone, the checks of the model at the chain's states
        (``surrogate_tuning.py``; ``potential(q)``: the surrogate's, untempered); back
        inside the support if the surrogate led the chain out."""
        chain = access.chain

        def evaluate(states: np.ndarray) -> list[ChainPoint]:
            if self.exploration.batched:
                return access.evaluate_batch(states)
            return [access.evaluate(states[0], self.exploration.has_gradient)]

        self.surrogate_tuning.check(
            chain.iteration, self.learned, self.schedule, self.coverage.tempers_tuning,
            SurrogateChecks(evaluate, potential, access.move_to, access.refit,
                            lambda message: access.warn(WarningType.BAD_PARAMS, message,
                                                        "info")))

    def read_shared(self, chain) -> None:
        """Add the other chains' new evaluations to the chain's training set (in tuning)."""
        rows = None if chain.frozen else self.sharing.read(self.learned.dim,
                                                           self.learned.context_dim)
        if rows is not None:
            rows = self.frame.rows_in_frame(rows)
            self.learned.add_rows(rows)

    # ------------------------------------------------------------------- refit
    def refit(self, access: ChainAccess) -> None:
        """The frame first (where the step learns one), then the surrogate in it; back to
        the old frame where the surrogate's fit failed (the kept surrogate is in it); none
        where the family says so (``SurrogateFit.prepare_refit``)."""
        if not self.fit.prepare_refit(access):
            return None
        if not self.frame.learned:
            return self.refits.refit(access)
        old = self.frame.map
        states, potentials, _ = convert(*self.refits.late_states(), None, old, None)
        new = self.frame.fitted(states, potentials)
        if new is not old:
            self.reframe(access, old, new)
        failed = self.learned.failed_fits
        self.refits.refit(access)
        if self.learned.failed_fits > failed and new is not old:
            self.reframe(access, new, old)

    def reframe(self, access: ChainAccess, old, new) -> None:
        """Everything the chain keeps in coordinates, from ``old``'s frame to ``new``'s."""
        chain = access.chain
        self.learned.reframe(lambda q, u, g: convert(q, u, g, old, new))
        self.fit.reframe(lambda states: convert(states, np.zeros(len(states)), None, old, new)[0])
        if chain.current is not None:
            access.move_to(convert_point(chain.current, old, new), chain.current_approximate)
        self.surrogate_tuning.reframe(lambda point: convert_point(point, old, new))
        self.frame.use(new)

    # ------------------------------------------------------------------- final
    def final(self, access: ChainAccess, tuned_length: float | None) -> None:
        """Tuning has ended (the chain frozen, every chain's tuning read): the final fit,
        then the draws' tail jumps, lowering and path length (from ``tuned_length``, the
        Hamiltonian correction's length in tuning)."""
        fitted = self.refits.final(access)
        if self.learned.surrogate is not None:
            self.sharing.count_tuned()
        if fitted:
            self._choose_tail_jumps(access)
            self._choose_draw_bound()
            self.kernel.choose_inner(self.schedule.recent_corrections,
                                     lowered=self.draw_bound.bound is not None)
        if tuned_length is not None and self.exact:  # the final fit restarted the length
            self._choose_draw_length(access, tuned_length)

    def _choose_draw_length(self, access: ChainAccess, tuned: float) -> None:
        """The Hamiltonian correction's length for the draws (``kernels/surrogate_kernel.py``)."""
        chain = access.chain
        if chain.current is None:
            return
        start = access.current_point(chain.current.q)
        # Not training data: AdaptiveSurrogateHMC would learn from trajectories at a
        # length the draws may not use.
        self.kernel.choose_draw_length(
            tuned, lambda current: access.surrogate_step(current, record=False), start)
        access.move_to(start, chain.current_approximate)

    def _choose_tail_jumps(self, access: ChainAccess) -> None:
        """The draws' tail jumps, measured on the final fit (``kernels/tail_jumps.py``)."""
        states, potentials = self.refits.late_states()
        # Not training data: AdaptiveSurrogateHMC would learn from them in the draws.
        message = self.tails.choose(
            states, potentials, self.learned.whitening, access.field(),
            lambda q: access.evaluate(q, False, record=False).potential,
            access.raised, access.rng, stalled=self.exploration.probability > 0,
        )
        if message:
            access.warn(WarningType.CONVERGENCE, message, level="info")

    def _choose_draw_bound(self) -> None:
        """The draws' lowering of a black box's surrogate, from the final fit's data."""
        learned = self.learned
        if not self.draw_bound.enabled or learned.surrogate is None:
            return
        keep = self.refits.relevant()
        potentials = learned.training.potentials[keep]
        self.draw_bound.choose(
            learned.surrogate, learned.training.positions[keep], potentials,
            learned.policy.weights(potentials, float(potentials.min()), learned.dim),
        )
