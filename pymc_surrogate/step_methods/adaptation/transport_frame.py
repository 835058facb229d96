"""A learned transport frame: the step runs in the reference coordinates ``z`` of a map.

With ``frame="triangular"`` the step's chain lives in ``z``, where ``q = T(z)`` and ``T``
(``surrogates/triangular_map.py``) is fitted to the chain's tuning states so that the
posterior looks close to ``N(0, I)`` there. Everything the step does -- exploration,
surrogate fits, trajectories, tail jumps, and the correction with the true logp -- sees
the target in ``z``,

    pi_z(z) = pi(T(z)) |det J_T(z)|,    U_z(z) = U(T(z)) - log |det J_T(z)|,

through the evaluator (``FramedFunctions``): a chain exact for ``pi_z`` has its image
``T(z)`` exact for the model, and PyMC is handed ``T(z)``. The map is refitted with the
surrogate in tuning and frozen with it for the draws; when a refit changes it, everything
the chain keeps in coordinates (training set, tuning states, current state) is expressed
in the new ones. The evaluation store keeps the model's own coordinates, so chains with
different maps (and later runs) can share it.

Where the capacity choice finds no nonlinearity worth its parameters (every degree 0),
the frame is the model's own coordinates and the step is the affine one.
"""

from __future__ import annotations

import copy

import numpy as np
from pymc.blocking import RaveledVars

from pymc_surrogate.core.types import ChainPoint
from pymc_surrogate.step_methods.evaluation.store import StoredRows
from pymc_surrogate.surrogates.triangular_map import TriangularMap

__all__ = ["FRAMES", "FramedFunctions", "TransportFrame", "frame_setting"]

#: The values of ``frame=``.
FRAMES = ("affine", "triangular")
#: A map is fitted from this many late tuning states per dimension on (fewer: the
#: chain stays in its current frame).
MIN_STATES_PER_DIM = 25


def frame_setting(frame, owner: str) -> TriangularMap | None:
    """The frame estimator ``frame=`` asks for (None: the affine frame)."""
    if isinstance(frame, TriangularMap):
        return frame
    if frame == "affine":
        return None
    if frame == "triangular":
        return TriangularMap()
    raise ValueError(f"{owner}: frame must be one of {FRAMES} or a TriangularMap; got {frame!r}.")


class FramedFunctions:
    """The model's functions as the step sees them: in the chain's reference coordinates.

    ``logp(z) = logp(T(z)) + log |det J_T(z)|`` and its gradient in ``z``; the model's own
    where the chain has no map yet. Everything else is the wrapped functions'.
    """

    def __init__(self, functions, step):
        self._functions = functions
        self._step = step

    def __getattr__(self, name):
        return getattr(self._functions, name)

    def _frame(self):
        return self._step.chain.frame

    def logp(self, z: np.ndarray) -> float:
        frame = self._frame()
        if frame is None:
            return self._functions.logp(z)
        q = frame.forward(z)
        if not np.all(np.isfinite(q)):  # T overflowed: no density the map can carry back
            return -np.inf
        return self._functions.logp(q) - float(frame.pull_back(q[None], np.zeros(1))[1][0])

    def logp_and_grad(self, z: np.ndarray) -> tuple[float, np.ndarray]:
        frame = self._frame()
        if frame is None:
            return self._functions.logp_and_grad(z)
        q = frame.forward(z)
        if not np.all(np.isfinite(q)):
            return -np.inf, np.full(z.shape, np.nan)
        logp, grad = self._functions.logp_and_grad(q)
        _, potential, grad_z = frame.pull_back(q[None], np.array([-logp]), -grad[None])
        return -float(potential[0]), -grad_z[0]


class TransportFrame:
    """Mixin of a ``SurrogateStep`` (before it in the bases): the step in a learned frame.

    The step sets ``frame_estimator`` (None: the affine frame, and nothing here acts) and
    calls ``_use_frame`` at the end of its ``__init__``.
    """

    frame_estimator: TriangularMap | None = None

    def _use_frame(self) -> None:
        if self.frame_estimator is None:
            return
        owner = type(self).__name__
        if self.context.dim or self.explore_executor is not None:
            raise ValueError(f"{owner}: frame='triangular' needs the step to sample the "
                             "whole model, one evaluation at a time (no compound step, "
                             "no executor).")
        self.evaluator.functions = FramedFunctions(self.functions, self)

    # ------------------------------------------------------------- the step
    def astep(self, q0: RaveledVars):
        if self.frame_estimator is None:
            return super().astep(q0)
        chain = self.chain
        before = chain.frame
        if before is not None:
            # the state this step returned: its z exactly (a round trip would move it by
            # rounding, and the cached logp would be lost)
            if chain.frame_returned is not None and np.array_equal(q0.data, chain.frame_returned):
                z = chain.current.q
            else:
                z = before.inverse(q0.data.astype(np.float64))
            q0 = RaveledVars(z, q0.point_map_info)
        out, stats = super().astep(q0)
        q = out.data if before is None else before.forward(out.data)
        after = chain.frame
        if after is not before:  # a refit in this iteration: its state is in the old frame
            chain.current = _convert_point(chain.current, before, after)
            chain.current_key = self.evaluator.key(chain.current.q)
        if after is not None and np.isfinite(stats[0]["model_logp"]):
            stats[0]["model_logp"] = -float(after.push_forward(
                chain.current.q[None], np.array([chain.current.potential]))[1][0])
        chain.frame_returned = np.array(q, copy=True)
        return RaveledVars(q, out.point_map_info), stats

    def _refit(self, chain) -> None:
        if self.frame_estimator is None:
            return super()._refit(chain)
        old = chain.frame
        new = self._fit_frame(chain, old)
        if new is not old:
            self._reframe(chain, old, new)
        failed = chain.counts.failed_fits
        super()._refit(chain)
        if chain.counts.failed_fits > failed and new is not old:
            self._reframe(chain, new, old)  # the kept surrogate is in the old frame

    def _fit_frame(self, chain, old):
        """A map fitted to the chain's late tuning states (in the model's coordinates);
        None where it is affine; ``old`` where there are too few states or the fit fails."""
        states = self._late_tuning_states(chain)[0]
        if states.shape[0] < MIN_STATES_PER_DIM * self.dim:
            return old
        if old is not None:
            states = old.forward(states)
        try:
            fitted = copy.deepcopy(self.frame_estimator).fit(states)
        except (np.linalg.LinAlgError, ValueError, FloatingPointError):
            return old
        return None if fitted.affine else fitted

    def _reframe(self, chain, old, new) -> None:
        """Express everything the chain keeps in coordinates in ``new``'s (from ``old``'s)."""
        training = chain.training
        n = len(training)
        if n:
            grads = training.gradients
            has_grad = bool(np.any(np.isfinite(grads)))
            q, u, g = _convert(training.positions, training.potentials,
                               grads if has_grad else None, old, new)
            training._positions[:n], training._potentials[:n] = q, u
            if has_grad:
                training._gradients[:n] = g
        if chain.positions:
            states = np.array(chain.positions)
            potentials = np.array(chain.position_potentials, dtype=np.float64)
            q, u, _ = _convert(states, potentials, None, old, new)
            chain.positions[:] = list(q)
            chain.position_potentials[:] = list(u)
        if chain.current is not None:
            chain.current = _convert_point(chain.current, old, new)
            chain.current_key = self.evaluator.key(chain.current.q)
        if self.surrogate_tuning.last_good is not None:
            self.surrogate_tuning.last_good = _convert_point(self.surrogate_tuning.last_good,
                                                             old, new)
        chain.frame = new

    # ------------------------------------------------- the store: model coordinates
    def _stored_point(self, chain, point: ChainPoint) -> ChainPoint:
        if chain.frame is None:
            return point
        return _convert_point(point, chain.frame, None)

    def _rows_in_frame(self, chain, rows: StoredRows) -> StoredRows:
        if chain.frame is None or rows.potentials.size == 0:
            return rows
        has_grad = bool(np.any(np.isfinite(rows.gradients)))
        q, u, g = _convert(rows.positions, rows.potentials,
                           rows.gradients if has_grad else None, None, chain.frame)
        return rows._replace(positions=q, potentials=u,
                             gradients=g if has_grad else rows.gradients)


def _convert(q, potentials, grads, old, new):
    """Points (with their potentials and gradients) from ``old``'s coordinates to
    ``new``'s (None: the model's own)."""
    if old is not None:
        q, potentials, grads = old.push_forward(q, potentials, grads)
    if new is not None:
        q, potentials, grads = new.pull_back(q, potentials, grads)
    return q, potentials, grads


def _convert_point(point: ChainPoint, old, new) -> ChainPoint:
    if old is new:
        return point
    grad = None if point.grad is None else point.grad[None]
    q, u, g = _convert(point.q[None], np.array([point.potential]), grad, old, new)
    return ChainPoint(q[0], float(u[0]), None if g is None else g[0])
