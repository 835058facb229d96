"""Chain health in the draws: symptoms a user must hear about, each told once per chain.

A step method that runs exact kernels never returns wrong draws, but it can return
*useless* ones in silence: a chain stuck at one point, a chain the surrogate no longer
moves (all fallback), a surrogate whose energy is so far from the model's that nearly every
proposal is rejected, a chain that moves but mixes so slowly that its estimates mean
nothing (the 2-d funnel: R-hat 1.06, min ESS 39 from 2 x 1000 draws, nothing said). Each
symptom becomes one ``SamplerWarning`` naming the chain, what was seen and what to do,
queued here with every other warning of the step for the draws' ``warning`` stat, which
PyMC logs in the main process with any ``cores`` (a ``warnings.warn`` in a worker process
would be lost). Chains that
disagree with each other are PyMC's own R-hat check (``compute_convergence_checks``): one
chain cannot see the others.
"""

from __future__ import annotations

from collections import deque
from dataclasses import field

import numpy as np
from pymc.stats.convergence import SamplerWarning, WarningType
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_surrogate.compat import bulk_ess
from pymc_surrogate.core.types import TransitionInfo
from pymc_surrogate.step_methods.part import ChainPart

__all__ = ["ChainHealth", "centred_variables", "chain_name", "coordinate_names"]

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


@dataclass_state
class HealthState(DataClassState):
    draws: int = 0
    rejected_in_a_row: int = 0
    fallback: int = 0
    surrogate_draws: int = 0
    surrogate_acceptance: float = 0.0  # sum over surrogate draws
    potentials: list = field(default_factory=list)  # true potentials of the draws
    positions: list = field(default_factory=list)  # and their positions
    next_check: int = 100  # draws at which shares are next judged (then doubled)
    told: frozenset = frozenset()  # symptoms already warned about
    divergences: int = 0  # divergent draws
    pending: deque = field(default_factory=deque)  # warnings for the next draws' stat


class ChainHealth(ChainPart):
    """Watch the draws, warn once per symptom and chain, and queue the step's warnings.

    Parameters
    ----------
    owner : str
        The step class's name, which begins every message.
    pseudo_marginal : bool
        The logp is a noisy estimate kept at the current state: judged later, and on the
        coordinates only.
    other_samplers : str
        What the advice names as the samplers to use instead.
    coordinates : list of str, optional
        The block's coordinates as the user names them (``"theta[2]"``), to name the
        slowest one.
    centred : dict, optional
        Variables of the block whose distribution depends on a positive parameter of the
        model, by name, with those parameters' names (``centred_variables``): the advice to
        write them non-centred is given for these only.
    """

    _state_class = HealthState

    def __init__(self, owner: str, pseudo_marginal: bool, other_samplers: str,
                 coordinates: list[str] | None = None,
                 centred: dict[str, tuple[str, ...]] | None = None):
        self.owner = owner
        self.pseudo_marginal = pseudo_marginal
        self.other_samplers = other_samplers
        self.coordinates = coordinates
        self.centred = centred or {}
        self.checks = ()  # a step family's own checks (``also_check``)
        self.reset()

    def also_check(self, check) -> None:
        """``check(health, chain_name, iteration)`` runs after each draw's own checks."""
        self.checks = (*self.checks, check)

    def warn(self, kind: WarningType, message: str, level: str, iteration: int) -> None:
        """Queue a warning for the next draws' ``warning`` stat (one per draw); ``level``
        is a logging level name."""
        self.pending.append(SamplerWarning(kind, f"{self.owner}: {message}", level, iteration))

    def next_warning(self) -> SamplerWarning | None:
        return self.pending.popleft() if self.pending else None

    def tell(self, symptom: str, message: str, iteration: int) -> None:
        """Warn about ``symptom`` unless this chain was told already."""
        if symptom in self.told:
            return
        self.told = self.told | {symptom}
        self.warn(WarningType.CONVERGENCE, message, "warn", iteration)

    def at_checkpoint(self) -> bool:
        """Whether the draw just watched was a checkpoint (draws 100, 200, 400, ...)."""
        return self.draws * 2 == self.next_check

    def watch(self, info: TransitionInfo, fallback: bool, surrogate: bool, chain_name: str,
              iteration: int) -> SamplerWarning | None:
        """Record one draw; warn about any symptom newly seen. Returns the draw's debug
        record of a divergence (None: none)."""
        self.draws += 1
        self.rejected_in_a_row = 0 if info.accepted else self.rejected_in_a_row + 1
        self.potentials.append(info.point.potential)
        self.positions.append(info.point.q)
        self.fallback += int(fallback)
        if surrogate:
            self.surrogate_draws += 1
            self.surrogate_acceptance += info.accept_prob
        self._judge(info, chain_name, iteration)
        for check in self.checks:
            check(self, chain_name, iteration)
        if not info.diverging:
            return None
        self.divergences += 1
        return SamplerWarning(
            WarningType.DIVERGENCE,
            "Energy error above max_energy_error or a non-finite energy.", "debug", iteration,
        )

    def _judge(self, info: TransitionInfo, chain_name: str, iteration: int) -> None:
        stuck_draws, ess_draws = ((PSEUDO_MARGINAL_STUCK_DRAWS, PSEUDO_MARGINAL_ESS_CHECK_DRAWS)
                                  if self.pseudo_marginal else (STUCK_DRAWS, ESS_CHECK_DRAWS))
        others = self.other_samplers
        if self.rejected_in_a_row == stuck_draws:
            self.tell(
                "stuck",
                f"{chain_name} has rejected its last {stuck_draws} draws in a row (stuck "
                f"at a point with model logp {-info.point.potential:.6g}); its draws are no "
                f"usable posterior sample. Increase `tune`, or sample this model with {others}.",
                iteration,
            )
        if self.draws < self.next_check:
            return
        self.next_check *= 2
        share = self.fallback / self.draws
        if share > MAX_FALLBACK_SHARE:
            self.tell(
                "fallback",
                f"{share:.0%} of {chain_name}'s first {self.draws} draws used the exact "
                "fallback kernel (stat `fallback`): the surrogate is not moving it. The "
                "draws are exact but mix slowly; check R-hat and ESS. Increase `tune`, or "
                f"sample this model with {others}.",
                iteration,
            )
        if self.surrogate_draws >= FIRST_CHECK:
            acceptance = self.surrogate_acceptance / self.surrogate_draws
            if acceptance < MIN_SURROGATE_ACCEPTANCE:
                self.tell(
                    "surrogate_error",
                    f"the true model accepted {acceptance:.0%} of the surrogate's proposals "
                    f"in {chain_name}'s first {self.draws} draws: its energy is far from "
                    "the model's (stat `surrogate_energy_error`). The draws are exact but "
                    "mix slowly; check R-hat and ESS. Increase `tune` for more training "
                    f"data, or sample this model with {others}.",
                    iteration,
                )
        if self.draws >= ess_draws:
            # the logp and every coordinate: a chain can move along a narrow direction
            # (the logp varies) while a wide one stays frozen (a regression on an
            # uncentred covariate: sd 0.01 of the reference, nothing said)
            # (not the logp of a pseudo-marginal chain: it is the kept noisy estimate, whose
            # trace sticks longer than the state's)
            traces = np.array(self.positions) if self.pseudo_marginal else (
                np.column_stack([self.potentials, np.array(self.positions)]))
            each = [bulk_ess(trace) for trace in traces.T]
            worst = int(np.argmin(each))
            if each[worst] < MIN_CHAIN_ESS:
                self.tell(
                    "low_ess",
                    f"{self._trace_name(worst)} of {chain_name} has an effective sample size "
                    f"of {each[worst]:.0f} in its first {self.draws} draws: it moves, but too "
                    "slowly for its estimates to mean anything (check R-hat and ESS of every "
                    f"variable). Increase `tune` and `draws`, {self._reparameterise()}or "
                    f"sample it with {others}.",
                    iteration,
                )

    def _trace_name(self, index: int) -> str:
        """What the ``index``-th trace of the ESS check is, as the user knows it."""
        if not self.pseudo_marginal:
            if index == 0:
                return "the model logp"
            index -= 1
        if self.coordinates is None or index >= len(self.coordinates):
            return "a coordinate"
        return f"`{self.coordinates[index]}`"

    def _reparameterise(self) -> str:
        """The advice to write a centred hierarchy non-centred, where the block has one."""
        if not self.centred:
            return ""
        names = ", ".join(f"`{name}`" for name in self.centred)
        parents = sorted({parent for given in self.centred.values() for parent in given})
        return (f"write {names} non-centred (a standard normal times its scale plus its "
                f"location: its scale depends on {', '.join(f'`{p}`' for p in parents)}), ")


def coordinate_names(layout: list[tuple[str, tuple]]) -> list[str]:
    """The raveled block's coordinates as the user names them: ``x``, ``theta[2]``."""
    names = []
    for name, shape in layout:
        if len(shape) == 0:
            names.append(name)
        else:
            names.extend(f"{name}[{', '.join(map(str, index))}]" for index in np.ndindex(*shape))
    return names


def centred_variables(model, vars) -> dict[str, tuple[str, ...]]:
    """The block's variables written centred: those whose distribution's scale (its last
    parameter: ``sigma`` of a normal, Student-t or Cauchy, ``cov`` of a multivariate normal)
    depends on another free variable of the model, by name with the names of those
    variables (centred eight schools: ``theta`` on ``tau``; Neal's funnel: ``x`` on ``v``).
    Empty when the graph cannot be read."""
    try:
        from pytensor.graph.traversal import ancestors
    except ImportError:  # PyTensor 2
        from pytensor.graph.basic import ancestors
    free = set(model.free_RVs)
    out = {}
    for value in vars:
        rv = model.values_to_rvs.get(value)
        try:
            scale = rv.owner.op.dist_params(rv.owner)[-1]
            scales = (set(ancestors([scale])) & free) - {rv}
        except Exception:  # noqa: BLE001 - not a plain random variable: no advice
            continue
        if scales:
            out[rv.name] = tuple(sorted(scale.name for scale in scales))
    return out


def chain_name(rng: np.random.Generator) -> str:
    """``"chain 2"`` when PyMC's per-chain generator says which chain this is.

    ``pm.sample`` spawns one generator per chain from its seed, so the first element of the
    spawn key is the chain's index (best effort: a generator handed in by a user, or a
    compound step's share of it, may say otherwise).
    """
    key = getattr(getattr(rng.bit_generator, "seed_seq", None), "spawn_key", ())
    return f"chain {key[0]}" if key else "a chain"
