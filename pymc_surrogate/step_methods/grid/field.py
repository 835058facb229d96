"""SparseGridHMC's field: the grid inside the box, and what a chain does outside it.

Inside the box trajectories follow the interpolant; outside, a gradient model's own
potential (blended in over ``BLEND_DEPTH`` box sds) or, for a black box, the grid's
continuation plus a share of exact gradient-free steps (sparse-grid-hmc eq. 3.11). How
much of a chain lies outside the box is watched in tuning and in the draws. With
``exact=False`` (the paper's GHMC-complete, §5) the draws are accepted with this field.
"""

from __future__ import annotations

import numpy as np
import scipy.stats

from pymc_surrogate.core.metropolis import hamiltonian, metropolis_accept
from pymc_surrogate.core.transitions import integrate
from pymc_surrogate.core.types import ChainPoint, TransitionInfo
from pymc_surrogate.step_methods.state import ChainState

__all__ = ["GridField", "OUTSIDE_SHARE"]

#: Box standard deviations over which a gradient model's field passes from the grid's
#: continuation to the model itself outside the box (a continuous potential).
BLEND_DEPTH = 1.0
#: Black boxes: the draws' share of exact gradient-free exploration steps is the share of
#: late tuning states outside the box, ignored below the first (or below three times the
#: share a right box leaves outside, ``_outside_threshold``) and capped at the second.
OUTSIDE_SHARE = (0.05, 0.9)
#: The share of draws outside the box past which a chain is told (health checkpoints).
MAX_OUTSIDE_DRAWS = 0.2
#: Black boxes: a chain is also told when its draws outside the box are this many times
#: the share a box fitting the posterior leaves there, and at least ``OUTSIDE_TOLD_COUNT``.
OUTSIDE_EXCESS = 4.0
OUTSIDE_TOLD_COUNT = 20


class GridField:
    """Mixin of ``SparseGridHMC``: the potential outside the box and the chain there."""

    _tilt_cache = None  # ``_context_tilt``'s (key, slope)

    def _surrogate_field(self, chain: ChainState, model_outside: bool = True):
        """eq. 3.11: the interpolant inside the domain, the true model outside (a black box,
        or ``model_outside=False``: the grid's continuation, ``_continuation``)."""
        grid = self.grid_  # every chain's surrogate (also at the first fit, before it is set)
        tilt = self._context_tilt(chain)
        if self.has_gradient and model_outside:
            def outside(q):
                return self._blend_to_model(chain, q, tilt)
        else:
            def outside(q):
                return self._continuation(q, tilt)

        # Untilted (outside a CompoundStep, the usual case): the grid's own function in the
        # leapfrog loop, no extra call a step.
        inside = grid.value_and_grad if tilt is None else (
            lambda q: _tilted(grid.value_and_grad(q), q, tilt))

        def value_and_grad(q: np.ndarray) -> tuple[float, np.ndarray]:
            if grid.contains(q):
                return inside(q)
            return outside(q)

        return value_and_grad

    def _context_tilt(self, chain: ChainState) -> tuple[np.ndarray, np.ndarray] | None:
        """In a CompoundStep with a gradient, the grid's potential tilted to the other
        blocks' current values: ``U~(q) + g . (q - m)``, ``m`` the box's centre and
        ``g = dU/dq(m | now) - dU~/dq(m)``.

        The grid interpolates the block's potential at the other blocks' values when it
        was built; as they move, the conditional moves with them, and trajectories on the
        grid alone kept proposing where the conditional was: x ~ N(0, I) beside y | x ~
        N(x1 - x2 / 2, 1) under Metropolis had per-chain ESS 20 of 1500 and x's mean 4
        MCSE off. Where the other blocks shift the conditional (a Gaussian's, exactly)
        the tilt moves the grid with it. It depends on the other blocks' values only, not
        on the chain's state, so the corrected chain stays exact; it costs one model
        gradient at ``m`` per step after they moved. None outside a CompoundStep, and for
        a black box (no gradient to tilt by).
        """
        if not self.context.dim or not self.has_gradient or self.grid_ is None:
            return None
        centre = self.box_.mean
        key = (self.evaluator.key(centre), id(self.grid_))
        if self._tilt_cache is None or self._tilt_cache[0] != key:
            point = self._evaluate(chain, centre, with_grad=True, record=False)
            slope = point.grad - self.grid_.value_and_grad(centre)[1]
            self._tilt_cache = (key, (slope if np.all(np.isfinite(slope))
                                      else np.zeros_like(centre)))
        return self._tilt_cache[1], centre

    def _blend_to_model(self, chain: ChainState, q: np.ndarray,
                        tilt=None) -> tuple[float, np.ndarray]:
        """Outside the box, a gradient model's own potential, reached smoothly.

        The interpolant and the model differ at the box's faces by the interpolation error;
        switching from one to the other there puts a jump in the potential that no step
        size integrates (pde d = 20 with its adjoint: trajectories crossing the faces drove
        the step size to 5e-4 and the chains out of the box, 256 model gradients a tuning
        iteration for 600 iterations). Within ``BLEND_DEPTH`` box standard deviations of
        the box the field blends from the face's continuation to the model (smoothstep
        weight), so the potential is continuous; beyond, it is the model's, out to
        ``Tuning.far_sd`` box sds, past which a trajectory diverges without evaluating the
        model: on arma11 a tuning trajectory reached 53 sds from every evaluated state
        (a solver there would likely fail; the box holds the posterior to ``k`` sds).
        """
        transform = self.grid_.transform
        u = q if transform is None else transform.to_box(q)
        out = (u - np.clip(u, self.box_.lower, self.box_.upper)) / self.box_.sd
        distance = float(np.sqrt(out @ out))
        if distance > self.tuning.far_sd:
            return np.inf, np.zeros_like(q)
        point = self._evaluate(chain, q, with_grad=True, record=False)
        depth = distance / BLEND_DEPTH
        if depth >= 1.0 or not np.isfinite(point.potential):
            return point.potential, point.grad
        value, grad = self._continuation(q, tilt)
        weight, slope = depth * depth * (3.0 - 2.0 * depth), 6.0 * depth * (1.0 - depth)
        gap = point.potential - value
        grad_depth_u = out / (self.box_.sd * max(depth, 1e-300) * BLEND_DEPTH**2)
        grad_depth = grad_depth_u if transform is None else transform.gradient_from_box(grad_depth_u)
        return (value + weight * gap,
                grad + weight * (point.grad - grad) + slope * gap * grad_depth)

    def _potential(self, q: np.ndarray) -> float:
        """``U(q)`` for the box's checks; inf where the model is not finite or raises."""
        try:
            with np.errstate(all="ignore"):
                value = -float(self.functions.logp(q))
        except Exception:  # noqa: BLE001 - a check, not a draw
            return np.inf
        return value if np.isfinite(value) else np.inf

    def _centre_is_higher(self, q: np.ndarray) -> bool:
        centre = self._potential(self.box_.mean)
        return bool(np.isfinite(centre) and centre < self._potential(q))

    def _continuation(self, q: np.ndarray, tilt=None) -> tuple[float, np.ndarray]:
        """Outside the box: the interpolant at the nearest face point plus the box
        Gaussian's rise beyond the face, ``k |o| + o^2 / 2`` per box sd ``o`` out.

        A continuous potential with its exact gradient: along the face, the interpolant's
        own slope; outward, the Gaussian's. (The face's linear extension, ``U~(face) +
        grad U~(face) . (q - face)``, jumps wherever the face point crosses a grid cell, by
        the change of gradient times the distance out: the warm-up's chain on the
        banana's far arm drove the step size to 5e-5 and 250 model gradients a draw.)
        """
        grid = self.grid_
        transform = grid.transform
        u = q if transform is None else transform.to_box(q)
        face = np.clip(u, self.box_.lower, self.box_.upper)
        q_face = face if transform is None else transform.from_box(face)
        value, grad = grid.value_and_grad(q_face)
        out = (u - face) / self.box_.sd
        grad_u = grad if transform is None else grad @ transform.axes
        grad_u = np.where(out == 0.0, grad_u, (self.k + np.abs(out)) * np.sign(out) / self.box_.sd)
        grad_q = grad_u if transform is None else transform.gradient_from_box(grad_u)
        rise = value + float(np.sum(self.k * np.abs(out) + 0.5 * out * out))
        return _tilted((rise, grad_q), q, tilt)

    def _explores_now(self, chain: ChainState) -> bool:
        """A black box's gradient-free fallback outside the box (the paper's "outside the
        domain").

        Outside the box a black box has no model of its potential: the interpolant's
        continuation pulls trajectories back at the box's scale, whatever the posterior
        does there (a box of +-0.4 sd: draws with sd 0.69 of the posterior's). In tuning,
        every iteration that starts outside the box is an exploration step (DE-MCz on the
        true model); in the draws, a fixed share of iterations is (the share of late tuning
        states outside the box, ``OUTSIDE_SHARE``): a mixture of two exact kernels whose
        weights do not depend on the state, so the chain stays exact.
        """
        if self.has_gradient or self._approximate(chain) or chain.frozen or self.grid_ is None:
            return super()._explores_now(chain)
        return super()._explores_now(chain) or not self.grid_.contains(self._q_now)

    def _outside_threshold(self) -> float:
        """The late tuning share outside the box that calls for exploration in the draws.

        A box of ``+-k`` sd around the right Gaussian leaves ``1 - (1 - 2 Phi(-k))^d`` of
        it outside: 0.8% in d = 3, 2.7% in d = 10 at k = 3. The former 2% threshold sat
        below that from d = 8 on, and in d = 3 autocorrelated tuning states passed it by
        chance (a 3-d Gaussian black box whose box held 99.3% of the draws, as a right
        box does, ran 1.6% of them on DE-MCz). Boxes too small to trust leave far more
        outside (a box of +-0.4 sd: 70% and more; the funnel 23-45%).
        """
        return max(OUTSIDE_SHARE[0], 3.0 * self._right_box_share())

    def _outside_share(self, chain: ChainState) -> float:
        """The share of the late tuning states outside the box."""
        states = self.refits.late_states(chain)[0]
        if len(states) == 0:
            return 0.0
        return float(np.mean([not self.grid_.contains(q) for q in states]))

    def _watch_draw(self, chain: ChainState, info: TransitionInfo, fallback: bool,
                    surrogate: bool):
        """The skeleton's chain health, and how much of the chain lies outside the box, at
        the same checkpoints (draws 100, 200, 400, ...).

        Tuning can miss it: on the 2-d funnel the late tuning states were 3-9% outside the
        box and the draws 23-45%, with v's sd 0.75 of the truth's in one chain and nothing
        said. Outside the box the grid is no model of the posterior.
        """
        divergence = super()._watch_draw(chain, info, fallback, surrogate)
        record = self.health
        if not record.at_checkpoint() or self.grid_ is None:
            return divergence
        outside = float(np.mean([not self.grid_.contains(q) for q in record.positions]))
        if outside > self._outside_draws_limit(record.draws):
            self.health.tell(
                "outside_box",
                f"{outside:.1%} of {self._chain_name()}'s first {record.draws} draws lie "
                f"outside the grid's box (a box that fits the posterior leaves about "
                f"{self._right_box_share():.1%}), where the grid is no model of the posterior "
                "(a funnel, heavy tails, curved arms, a box from a poor Laplace approximation): "
                "the draws are exact but mix poorly there and may come out too narrow; check "
                "R-hat, ESS and the tails. Widen the box (domain=GridBox(k=...) with a larger k, "
                "or GridBox(bounds=...) / GridBox(mean=..., cov=...)), or sample this model "
                "with SurrogateHMC.",
                chain.iteration,
            )
        return divergence

    def _right_box_share(self) -> float:
        """The share of a Gaussian outside a box of ``+-k`` of its sds: 0.54% in d = 2,
        2.7% in d = 10 at k = 3."""
        return 1.0 - (1.0 - 2.0 * scipy.stats.norm.sf(self.k)) ** self.dim

    def _outside_draws_limit(self, draws: int) -> float:
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
        return min(MAX_OUTSIDE_DRAWS, max(OUTSIDE_EXCESS * self._right_box_share(),
                                          OUTSIDE_TOLD_COUNT / max(draws, 1)))

    def _move_rate_in_box(self, chain: ChainState) -> float | None:
        """How often the late tuning iterations that started inside the box moved the
        chain (the corrected grid trajectories' acceptance); None if fewer than 20 did."""
        states = self.refits.late_states(chain)[0]
        starts = [i for i in range(1, len(states)) if self.grid_.contains(states[i - 1])]
        if len(starts) < 20:
            return None
        return float(np.mean([np.any(states[i] != states[i - 1]) for i in starts]))

    # ------------------------------------------------------- GHMC-complete (exact=False)
    def _approximate(self, chain: ChainState) -> bool:
        return not self.exact and chain.frozen

    def _grid_potential(self, chain: ChainState, q: np.ndarray,
                        field_value: float | None = None) -> float:
        """GHMC-complete's potential: the interpolant inside, the true one outside."""
        if self.grid_.contains(q):
            return self.grid_.value_and_grad(q)[0]
        if self.has_gradient and field_value is not None:
            return field_value  # the field outside: the model, blended in near the faces
        return self._evaluate(chain, q, with_grad=False, record=False).potential

    def _surrogate_step(self, chain: ChainState, current: ChainPoint,
                        record: bool = True) -> TransitionInfo:
        if not self._approximate(chain):
            return super()._surrogate_step(chain, current, record)
        field = self._surrogate_field(chain)
        value, grad = field(current.q)
        end, kinetic0, kinetic1, eps = integrate(
            current.q, value, grad, field, self.kernel.metric,
            self.kernel.step_adapt.current(False),
            self.kernel.path_length, self.kernel.max_energy_error, self.rng,
        )
        h0 = hamiltonian(current.potential, kinetic0)
        if not end.finite:
            return TransitionInfo(point=current, accepted=False, accept_prob=0.0,
                                  adapt_stat=0.0, diverging=True, energy=h0,
                                  energy_error=np.inf, n_steps=end.n_steps, step_size=eps)
        potential = self._grid_potential(chain, end.q, end.potential)
        error = hamiltonian(potential, kinetic1) - h0
        error = np.inf if np.isnan(error) else error
        accepted, prob = metropolis_accept(-error, rng=self.rng)
        point = ChainPoint(end.q, potential, None) if accepted else current
        return TransitionInfo(
            point=point, accepted=accepted, accept_prob=prob, adapt_stat=prob,
            diverging=error > self.kernel.max_energy_error,
            energy=hamiltonian(potential, kinetic1) if accepted else h0, energy_error=error,
            surrogate_energy_error=error, n_steps=end.n_steps, step_size=eps,
        )


def _tilted(field_value: tuple[float, np.ndarray], q: np.ndarray,
            tilt: tuple[np.ndarray, np.ndarray] | None) -> tuple[float, np.ndarray]:
    """``(U, dU/dq)`` plus the linear term ``g . (q - m)`` of ``tilt = (g, m)``."""
    if tilt is None:
        return field_value
    value, grad = field_value
    slope, centre = tilt
    return value + float(slope @ (q - centre)), grad + slope
