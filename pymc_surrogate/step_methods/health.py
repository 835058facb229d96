"""Chain health in the draws: symptoms a user must hear about, each told once per chain.

A step method that runs exact kernels never returns wrong draws, but it can return
*useless* ones in silence: a chain stuck at one point, a chain the surrogate no longer
moves (all fallback), a surrogate whose energy is so far from the model's that nearly every
proposal is rejected, a chain that moves but mixes so slowly that its estimates mean
nothing (the 2-d funnel: R-hat 1.06, min ESS 39 from 2 x 1000 draws, nothing said). Each
symptom becomes one ``SamplerWarning`` naming the chain, what was seen and what to do; PyMC logs it in the main process with any ``cores``. Chains that
disagree with each other are PyMC's own R-hat check (``compute_convergence_checks``): one
chain cannot see the others.
"""

from __future__ import annotations

import numpy as np
from pymc.stats.convergence import WarningType

from pymc_surrogate.compat import bulk_ess
from pymc_surrogate.core.types import TransitionInfo
from pymc_surrogate.step_methods.state import ChainState

__all__ = ["ChainHealth"]

#: Consecutive rejected draws that make a chain "stuck" (at acceptance 0.2, the chance of
#: this many in a row is 2e-10).
STUCK_DRAWS = 100
#: Surrogate draws needed before their acceptance is judged (shares are judged at draw
#: 100 and every doubling after: ``HealthRecord.next_check``).
FIRST_CHECK = 100
#: Share of draws on the exact fallback kernel above which the surrogate is not working.
MAX_FALLBACK_SHARE = 0.5
#: Mean acceptance of the surrogate kernel's correction below which the surrogate is poor.
MIN_SURROGATE_ACCEPTANCE = 0.1
#: Draws after which a chain's effective sample size is judged ...
ESS_CHECK_DRAWS = 400
#: ... and the bulk ESS (of its logp or any coordinate) below which its estimates are unreliable (an
#: MCSE needs about 100 over all chains: Vehtari et al. 2021; a quarter of that per chain).
MIN_CHAIN_ESS = 25.0
#: A pseudo-marginal chain (a noisy likelihood estimate kept at the current state) sticks
#: where its estimate is high by chance, so it is judged later: at var log L^ about 1.6,
#: near the noise that is optimal (Doucet, Pitt, Deligiannidis & Kohn 2015), correct
#: chains had rejection runs of 90-190 draws and a bulk ESS of 0.04-0.07 a draw (K = 2
#: random effects, 5 seeds of 2 x 8000, all right), which the limits above flagged in
#: every run; a chain that moved for none of its 8000 draws had both.
PSEUDO_MARGINAL_STUCK_DRAWS = 1000
PSEUDO_MARGINAL_ESS_CHECK_DRAWS = 800  # a checkpoint: draws 100, 200, 400, 800, ...


class ChainHealth:
    """Mixin of ``SurrogateStep``: watch the draws and warn once per symptom and chain."""

    def _chain_name(self) -> str:
        """``"chain 2"`` when PyMC's per-chain generator says which chain this is.

        ``pm.sample`` spawns one generator per chain from its seed, so the first element
        of the spawn key is the chain's index (best effort: a generator handed in by a
        user, or a compound step's share of it, may say otherwise).
        """
        key = getattr(getattr(self.rng.bit_generator, "seed_seq", None), "spawn_key", ())
        return f"chain {key[0]}" if key else "a chain"

    def _watch_draw(self, chain: ChainState, info: TransitionInfo, fallback: bool,
                    surrogate: bool) -> None:
        """Record one draw; warn about any symptom newly seen."""
        record = chain.health
        record.draws += 1
        record.rejected_in_a_row = 0 if info.accepted else record.rejected_in_a_row + 1
        record.potentials.append(info.point.potential)
        record.positions.append(info.point.q)
        record.fallback += int(fallback)
        if surrogate:
            record.surrogate_draws += 1
            record.surrogate_acceptance += info.accept_prob
        stuck_draws, ess_draws = ((PSEUDO_MARGINAL_STUCK_DRAWS, PSEUDO_MARGINAL_ESS_CHECK_DRAWS)
                                  if self.pseudo_marginal else (STUCK_DRAWS, ESS_CHECK_DRAWS))
        if record.rejected_in_a_row == stuck_draws:
            self._tell(
                chain, "stuck",
                f"{self._chain_name()} has rejected its last {stuck_draws} draws in a row (stuck "
                f"at a point with model logp {-info.point.potential:.6g}); its draws are no "
                "usable posterior sample. Increase `tune`, or sample this model with "
                f"{self._other_samplers()}.",
            )
        if record.draws < record.next_check:
            return
        record.next_check *= 2
        share = record.fallback / record.draws
        if share > MAX_FALLBACK_SHARE:
            self._tell(
                chain, "fallback",
                f"{share:.0%} of {self._chain_name()}'s first {record.draws} draws used the exact "
                "fallback kernel (stat `fallback`): the surrogate is not moving it. The "
                "draws are exact but mix slowly; check R-hat and ESS. Increase `tune`, or "
                f"sample this model with {self._other_samplers()}.",
            )
        if record.surrogate_draws >= FIRST_CHECK:
            acceptance = record.surrogate_acceptance / record.surrogate_draws
            if acceptance < MIN_SURROGATE_ACCEPTANCE:
                self._tell(
                    chain, "surrogate_error",
                    f"the true model accepted {acceptance:.0%} of the surrogate's proposals "
                    f"in {self._chain_name()}'s first {record.draws} draws: its energy is far from "
                    "the model's (stat `surrogate_energy_error`). The draws are exact but "
                    "mix slowly; check R-hat and ESS. Increase `tune` for more training "
                    f"data, or sample this model with {self._other_samplers()}.",
                )
        if record.draws >= ess_draws:
            # the logp and every coordinate: a chain can move along a narrow direction
            # (the logp varies) while a wide one stays frozen (a regression on an
            # uncentred covariate: sd 0.01 of the reference, nothing said)
            # (not the logp of a pseudo-marginal chain: it is the kept noisy estimate, whose
            # trace sticks longer than the state's)
            traces = np.array(record.positions) if self.pseudo_marginal else (
                np.column_stack([record.potentials, np.array(record.positions)]))
            ess = min(bulk_ess(trace) for trace in traces.T)
            if ess < MIN_CHAIN_ESS:
                self._tell(
                    chain, "low_ess",
                    f"the model logp or a coordinate of {self._chain_name()} has an effective "
                    f"sample size of {ess:.0f} in its first {record.draws} draws: it moves, but too slowly "
                    "for its estimates to mean anything (check R-hat and ESS of every "
                    "variable). Increase `tune` and `draws`, reparameterise the model (e.g. "
                    f"non-centred), or sample it with {self._other_samplers()}.",
                )

    def _tell(self, chain: ChainState, symptom: str, message: str) -> None:
        if symptom in chain.health.told:
            return
        chain.health.told = chain.health.told | {symptom}
        self._warn(chain, WarningType.CONVERGENCE, message)

    def _other_samplers(self) -> str:
        if self.has_gradient:
            return "NUTS (pm.sample() without `step`)"
        return "pm.DEMetropolisZ or pm.Slice"

