"""SparseGridHMC's field: the grid inside the box, and what a chain does outside it.

Inside the box trajectories follow the interpolant; outside, a gradient model's own
potential (blended in over ``BLEND_DEPTH`` box sds) or, for a black box, the grid's
continuation plus a share of exact gradient-free steps (sparse-grid-hmc eq. 3.11). How
much of a chain lies outside the box is watched in tuning and in the draws. With
``exact=False`` (the paper's GHMC-complete, §5) the draws are accepted with this field.

Outside the box a black box has no model of its potential: the interpolant's continuation
pulls trajectories back at the box's scale, whatever the posterior does there (a box of
+-0.4 sd: draws with sd 0.69 of the posterior's). In tuning, every iteration that starts
outside the box is an exploration step (DE-MCz on the true model); in the draws, a fixed
share of iterations is (the share of late tuning states outside the box,
``OUTSIDE_SHARE``): a mixture of two exact kernels whose weights do not depend on the
state, so the chain stays exact.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.stats

from pymc_surrogate.core.metropolis import hamiltonian, metropolis_accept
from pymc_surrogate.core.transitions import integrate
from pymc_surrogate.core.types import ChainPoint, TransitionInfo

__all__ = ["GridPotential", "OUTSIDE_SHARE", "POOR_MOVE_RATE", "ghmc_complete_transition",
           "outside_states_message", "poor_moves_message", "short_tuning_message"]

#: Box standard deviations over which a gradient model's field passes from the grid's
#: continuation to the model itself outside the box (a continuous potential).
BLEND_DEPTH = 1.0
#: Black boxes: the draws' share of exact gradient-free exploration steps is the share of
#: late tuning states outside the box, ignored below the first (or below three times the
#: share a right box leaves outside, ``_outside_threshold``) and capped at the second.
OUTSIDE_SHARE = (0.05, 0.9)
#: Below this acceptance of grid trajectories in late tuning, a chain is told its grid
#: does not follow the model (measured: a rough potential 0.14-0.16, a banana 0.75).
POOR_MOVE_RATE = 0.3
#: The share of draws outside the box past which a chain is told (health checkpoints).
MAX_OUTSIDE_DRAWS = 0.2
#: Black boxes: a chain is also told when its draws outside the box are this many times
#: the share a box fitting the posterior leaves there, and at least ``OUTSIDE_TOLD_COUNT``.
OUTSIDE_EXCESS = 4.0
OUTSIDE_TOLD_COUNT = 20


class GridPotential:
    """SparseGridHMC's potential and its box: a part of the step, reading the grid that
    ``GridPrecompute`` owns.

    Where the model is needed (a gradient model outside the box, the tilt in a compound
    step, a black box's potential outside the box in GHMC-complete), the step hands in
    ``evaluate(q, with_grad) -> ChainPoint``: the chain's model evaluation, counted but
    not kept as training data.

    Parameters
    ----------
    precompute : GridPrecompute
        The grid and its box's Gaussian.
    context : BlockContext
        A compound step's other blocks (the tilt).
    functions : ModelFunctions
        The model, for the box's checks.
    evaluator : Evaluator
        Keys of points (the tilt's cache).
    has_gradient : bool
        A gradient model is itself outside the box; a black box has the continuation.
    k : float
        The box's half-width in sds of its Gaussian.
    far_sd : float
        ``Tuning.far_sd``: box sds out past which a trajectory diverges unevaluated.
    """

    def __init__(self, precompute, context, functions, evaluator, has_gradient: bool,
                 k: float, far_sd: float):
        self.precompute = precompute
        self.context = context
        self.functions = functions
        self.evaluator = evaluator
        self.has_gradient = has_gradient
        self.k = k
        self.far_sd = far_sd
        self.dim = precompute.dim
        self.tilt_cache = None  # ``context_tilt``'s (key, slope)

    @property
    def grid(self):
        return self.precompute.grid

    @property
    def box(self):
        return self.precompute.box

    def field(self, evaluate: Callable, model_outside: bool = True) -> Callable:
        """eq. 3.11: the interpolant inside the domain, the true model outside (a black box,
        or ``model_outside=False``: the grid's continuation, ``continuation``)."""
        grid = self.grid  # every chain's surrogate (also at the first fit, before it is set)
        tilt = self.context_tilt(evaluate)
        if self.has_gradient and model_outside:
            def outside(q):
                return self.blend_to_model(evaluate, q, tilt)
        else:
            def outside(q):
                return self.continuation(q, tilt)

        # Untilted (outside a CompoundStep, the usual case): the grid's own function in the
        # leapfrog loop, no extra call a step.
        inside = grid.value_and_grad if tilt is None else (
            lambda q: _tilted(grid.value_and_grad(q), q, tilt))

        def value_and_grad(q: np.ndarray) -> tuple[float, np.ndarray]:
            if grid.contains(q):
                return inside(q)
            return outside(q)

        return value_and_grad

    def context_tilt(self, evaluate: Callable) -> tuple[np.ndarray, np.ndarray, float] | None:
        """In a CompoundStep with a gradient, the grid's potential tilted to the other
        blocks' current values: ``U~(q) + g . (q - m) + h``, ``m`` the box's centre,
        ``g = dU/dq(m | now) - dU~/dq(m)`` and ``h = U(m | now) - U~(m)``.

        The grid interpolates the block's potential at the other blocks' values when it
        was built; as they move, the conditional moves with them, and trajectories on the
        grid alone keep proposing where the conditional was. Where the other blocks shift
        the conditional (a Gaussian's, exactly) the tilt moves the grid with it; the level
        ``h`` makes it meet the model, which is the field outside the box (without it a
        chain that left the box is let back in only with probability ``exp(-h)``). It
        depends on the other blocks' values only, not on the chain's state, so the
        corrected chain stays exact; it costs one model gradient at ``m`` per step after
        they moved. None outside a CompoundStep, and for a black box (no gradient).
        """
        if not self.context.dim or not self.has_gradient or self.grid is None:
            return None
        centre = self.box.mean
        key = (self.evaluator.key(centre), id(self.grid))
        if self.tilt_cache is None or self.tilt_cache[0] != key:
            point = evaluate(centre, True)
            value, grad = self.grid.value_and_grad(centre)
            slope, level = point.grad - grad, point.potential - value
            finite = np.all(np.isfinite(slope)) and np.isfinite(level)
            self.tilt_cache = (key, (slope, float(level)) if finite
                               else (np.zeros_like(centre), 0.0))
        slope, level = self.tilt_cache[1]
        return slope, centre, level

    def blend_to_model(self, evaluate: Callable, q: np.ndarray,
                       tilt=None) -> tuple[float, np.ndarray]:
        """Outside the box, a gradient model's own potential, reached smoothly.

        The interpolant and the model differ at the box's faces by the interpolation error;
        switching from one to the other there puts a jump in the potential that no step
        size integrates (pde d = 20 with its adjoint: trajectories crossing the faces drove
        the step size to 5e-4 and the chains out of the box, 256 model gradients a tuning
        iteration for 600 iterations). Within ``BLEND_DEPTH`` box standard deviations of
        the box the field blends from the face's continuation to the model (smoothstep
        weight), so the potential is continuous; beyond, it is the model's, out to
        ``far_sd`` box sds, past which a trajectory diverges without evaluating the
        model: on arma11 a tuning trajectory reached 53 sds from every evaluated state
        (a solver there would likely fail; the box holds the posterior to ``k`` sds).
        """
        box = self.box
        transform = self.grid.transform
        u = q if transform is None else transform.to_box(q)
        out = (u - np.clip(u, box.lower, box.upper)) / box.sd
        distance = float(np.sqrt(out @ out))
        if distance > self.far_sd:
            return np.inf, np.zeros_like(q)
        point = evaluate(q, True)
        depth = distance / BLEND_DEPTH
        if depth >= 1.0 or not np.isfinite(point.potential):
            return point.potential, point.grad
        value, grad = self.continuation(q, tilt)
        weight, slope = depth * depth * (3.0 - 2.0 * depth), 6.0 * depth * (1.0 - depth)
        gap = point.potential - value
        grad_depth_u = out / (box.sd * max(depth, 1e-300) * BLEND_DEPTH**2)
        grad_depth = grad_depth_u if transform is None else transform.gradient_from_box(grad_depth_u)
        return (value + weight * gap,
                grad + weight * (point.grad - grad) + slope * gap * grad_depth)

    def model_potential(self, q: np.ndarray) -> float:
        """``U(q)`` for the box's checks; inf where the model is not finite or raises."""
        try:
            with np.errstate(all="ignore"):
                value = -float(self.functions.logp(q))
        except Exception:  # noqa: BLE001 - a check, not a draw
            return np.inf
        return value if np.isfinite(value) else np.inf

    def tuning_start(self, q: np.ndarray) -> np.ndarray:
        """Where tuning starts from PyMC's initial point ``q``: the box's centre (the
        Laplace mean, a mode estimate) where ``q`` is outside the box and the model is
        lower there, as the skeleton's climb to the mode starts it. From an initial point
        far outside the box a black box's chain crawled on the continuation (conjugate
        regression: step size 1e-4, never in the box in 1800 iterations). Not where the
        model says the centre is less probable than the start (a banana's probe put it at
        beta = (9, 7.5), where chains that started crawled: R-hat 3); the step does not
        ask for a box given as bounds, whose centre need not be near the posterior."""
        if not self.grid.contains(q) and self.centre_is_higher(q):
            return self.box.mean.copy()
        return q

    def centre_is_higher(self, q: np.ndarray) -> bool:
        """Whether the model is lower at the box's centre than at ``q``."""
        centre = self.model_potential(self.box.mean)
        return bool(np.isfinite(centre) and centre < self.model_potential(q))

    def continuation(self, q: np.ndarray, tilt=None) -> tuple[float, np.ndarray]:
        """Outside the box: the interpolant at the nearest face point plus the box
        Gaussian's rise beyond the face, ``k |o| + o^2 / 2`` per box sd ``o`` out.

        A continuous potential with its exact gradient: along the face, the interpolant's
        own slope; outward, the Gaussian's. (The face's linear extension, ``U~(face) +
        grad U~(face) . (q - face)``, jumps wherever the face point crosses a grid cell, by
        the change of gradient times the distance out: the warm-up's chain on the
        banana's far arm drove the step size to 5e-5 and 250 model gradients a draw.)
        """
        grid, box = self.grid, self.box
        transform = grid.transform
        u = q if transform is None else transform.to_box(q)
        face = np.clip(u, box.lower, box.upper)
        q_face = face if transform is None else transform.from_box(face)
        value, grad = grid.value_and_grad(q_face)
        out = (u - face) / box.sd
        grad_u = grad if transform is None else grad @ transform.axes
        grad_u = np.where(out == 0.0, grad_u, (self.k + np.abs(out)) * np.sign(out) / box.sd)
        grad_q = grad_u if transform is None else transform.gradient_from_box(grad_u)
        rise = value + float(np.sum(self.k * np.abs(out) + 0.5 * out * out))
        return _tilted((rise, grad_q), q, tilt)

    def grid_potential(self, q: np.ndarray, evaluate: Callable,
                       field_value: float | None = None) -> float:
        """GHMC-complete's potential: the interpolant inside, the true one outside."""
        if self.grid.contains(q):
            return self.grid.value_and_grad(q)[0]
        if self.has_gradient and field_value is not None:
            return field_value  # the field outside: the model, blended in near the faces
        return evaluate(q, False).potential

    # ------------------------------------------------------------ the box's share
    def outside_threshold(self) -> float:
        """The late tuning share outside the box that calls for exploration in the draws.

        A box of ``+-k`` sd around the right Gaussian leaves ``1 - (1 - 2 Phi(-k))^d`` of
        it outside: 0.8% in d = 3, 2.7% in d = 10 at k = 3. The former 2% threshold sat
        below that from d = 8 on, and in d = 3 autocorrelated tuning states passed it by
        chance (a 3-d Gaussian black box whose box held 99.3% of the draws, as a right
        box does, ran 1.6% of them on DE-MCz). Boxes too small to trust leave far more
        outside (a box of +-0.4 sd: 70% and more; the funnel 23-45%).
        """
        return max(OUTSIDE_SHARE[0], 3.0 * self.right_box_share())

    def outside_share(self, states: np.ndarray) -> float:
        """The share of ``states`` (the late tuning states) outside the box."""
        if len(states) == 0:
            return 0.0
        return float(np.mean([not self.grid.contains(q) for q in states]))

    def right_box_share(self) -> float:
        """The share of a Gaussian outside a box of ``+-k`` of its sds: 0.54% in d = 2,
        2.7% in d = 10 at k = 3."""
        return 1.0 - (1.0 - 2.0 * scipy.stats.norm.sf(self.k)) ** self.dim

    def outside_draws_limit(self, draws: int) -> float:
        """The share of draws outside the box past which a chain is told.

        A gradient model's chain outside the box runs on the model itself: told past
        ``MAX_OUTSIDE_DRAWS``. A black box has there only the grid's continuation, which
        rises at the box Gaussian's rate whatever the posterior does, and a chain leaves
        the box about as rarely as the continuation says: on a 2-d banana (x2 - x1^2 / 2
        ~ N(0, 1)) whose arms reach past the Laplace box (4% of the posterior outside),
        the draws held 2.4-3.6% outside, and x2's sd came out 0.88-0.91 of the truth at
        4 of 6 seeds with no other sign; a box that fits (correlated Gaussians) held
        0.5-1.1% outside, 0.54% expected. Told at ``OUTSIDE_EXCESS`` times the right
        box's share and ``OUTSIDE_TOLD_COUNT`` draws.
        """
        if self.has_gradient:
            return MAX_OUTSIDE_DRAWS
        return min(MAX_OUTSIDE_DRAWS, max(OUTSIDE_EXCESS * self.right_box_share(),
                                          OUTSIDE_TOLD_COUNT / max(draws, 1)))

    def watch(self, health, chain_name: str, iteration: int) -> None:
        """At the chain-health checkpoints (draws 100, 200, 400, ...), tell how much of the
        chain lies outside the box where that is too much (``outside_message``)."""
        if health.at_checkpoint() and self.grid is not None:
            message = self.outside_message(health.positions, health.draws, chain_name)
            if message:
                health.tell("outside_box", message, iteration)

    def stats(self, point: ChainPoint | None, approximate: bool) -> dict:
        """SparseGridHMC's own stats: ``approximate`` (GHMC-complete's draws, whose
        ``model_logp`` is unknown) and ``in_domain`` (the state is in the box)."""
        inside = point is not None and self.grid is not None and self.grid.contains(point.q)
        stats = {"approximate": approximate, "in_domain": inside}
        if approximate:
            stats["model_logp"] = np.nan
        return stats

    def outside_message(self, positions, draws: int, chain_name: str) -> str | None:
        """What a chain is told when too many of its first ``draws`` draws (``positions``)
        lie outside the box (None: not too many).

        Tuning can miss it: on the 2-d funnel the late tuning states were 3-9% outside the
        box and the draws 23-45%, with v's sd 0.75 of the truth's in one chain and nothing
        said. Outside the box the grid is no model of the posterior.
        """
        outside = float(np.mean([not self.grid.contains(q) for q in positions]))
        if outside <= self.outside_draws_limit(draws):
            return None
        return (
            f"{outside:.1%} of {chain_name}'s first {draws} draws lie "
            f"outside the grid's box (a box that fits the posterior leaves about "
            f"{self.right_box_share():.1%}), where the grid is no model of the posterior "
            "(a funnel, heavy tails, curved arms, a box from a poor Laplace approximation): "
            "the draws are exact but mix poorly there and may come out too narrow; check "
            "R-hat, ESS and the tails. Widen the box (domain=GridBox(k=...) with a larger k, "
            "or GridBox(bounds=...) / GridBox(mean=..., cov=...)), or sample this model "
            "with SurrogateHMC."
        )

    def move_rate_in_box(self, states: np.ndarray) -> float | None:
        """How often the late tuning iterations (``states``) that started inside the box
        moved the chain (the corrected grid trajectories' acceptance); None if fewer than
        20 did."""
        starts = [i for i in range(1, len(states)) if self.grid.contains(states[i - 1])]
        if len(starts) < 20:
            return None
        return float(np.mean([np.any(states[i] != states[i - 1]) for i in starts]))


def poor_moves_message(moves: float) -> str:
    """Why a chain whose grid trajectories the model rarely accepted may not mix."""
    return (f"the model accepted {moves:.0%} of a chain's grid trajectories in the second "
            "half of tuning: the interpolant does not follow the model's potential there "
            "(a potential rough or noisy at the grid's spacing, which the method assumes "
            "smooth, or a grid too coarse for the dimension). The draws stay exact but "
            "may not mix: check R-hat and ESS, or use SurrogateHMC, whose regression "
            "smooths what a grid interpolates.")


def short_tuning_message(tuned: int, first_refit: int, suggested: int) -> str:
    """Why a chain that ended tuning before its first re-adaptation on the grid may mix poorly."""
    return (f"a chain ended tuning after {tuned} iterations, too early to adapt its step "
            f"size and mass matrix on the grid (from iteration {first_refit} on): its draws "
            "run on the grid with the first guesses, which stays exact but may mix "
            f"poorly. Increase `tune` (to at least {suggested}).")


def outside_states_message(share: float, probability: float) -> str:
    """Why a black box's chain with many tuning states outside the box explores in the draws."""
    return (f"{share:.0%} of a chain's late tuning states lie outside the grid's box, "
            f"where a black box has no model of the posterior: "
            f"{probability:.0%} of its draws use the exact gradient-free "
            "exploration kernel (stat `fallback`), which is correct but mixes slowly. "
            "Widen the box (domain=GridBox(k=...) with a larger k, or GridBox(bounds=...) "
            "/ GridBox(mean=..., cov=...) that cover the posterior).")


def ghmc_complete_transition(current: ChainPoint, field: Callable,
                             potential_at: Callable[[np.ndarray, float], float], kernel,
                             rng: np.random.Generator) -> TransitionInfo:
    """GHMC-complete (sparse-grid-hmc §5, ``exact=False``): a trajectory on ``field``
    accepted with ``potential_at(q, field value)``, the grid's inside its box."""
    value, grad = field(current.q)
    end, kinetic0, kinetic1, eps = integrate(
        current.q, value, grad, field, kernel.metric, kernel.step_adapt.current(False),
        kernel.path_length, kernel.max_energy_error, rng,
    )
    h0 = hamiltonian(current.potential, kinetic0)
    if not end.finite:
        return TransitionInfo(point=current, accepted=False, accept_prob=0.0,
                              adapt_stat=0.0, diverging=True, energy=h0,
                              energy_error=np.inf, n_steps=end.n_steps, step_size=eps)
    potential = potential_at(end.q, end.potential)
    error = hamiltonian(potential, kinetic1) - h0
    error = np.inf if np.isnan(error) else error
    accepted, prob = metropolis_accept(-error, rng=rng)
    point = ChainPoint(end.q, potential, None) if accepted else current
    return TransitionInfo(
        point=point, accepted=accepted, accept_prob=prob, adapt_stat=prob,
        diverging=error > kernel.max_energy_error,
        energy=hamiltonian(potential, kinetic1) if accepted else h0, energy_error=error,
        surrogate_energy_error=error, n_steps=end.n_steps, step_size=eps,
    )


def _tilted(field_value: tuple[float, np.ndarray], q: np.ndarray,
            tilt: tuple[np.ndarray, np.ndarray, float] | None) -> tuple[float, np.ndarray]:
    """``(U, dU/dq)`` plus ``g . (q - m) + h`` of ``tilt = (g, m, h)``."""
    if tilt is None:
        return field_value
    value, grad = field_value
    slope, centre, level = tilt
    return value + float(slope @ (q - centre)) + level, grad + slope
