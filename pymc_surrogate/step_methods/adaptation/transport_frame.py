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
from typing import Any

import numpy as np
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_surrogate.core.types import ChainPoint
from pymc_surrogate.step_methods.evaluation.store import StoredRows
from pymc_surrogate.step_methods.part import ChainPart
from pymc_surrogate.surrogates.triangular_map import TriangularMap

__all__ = ["FRAMES", "Frame", "FramedFunctions", "convert", "convert_point", "frame_setting",
           "potential_misfit"]

#: The values of ``frame=`` ("auto": the step's own choice, ``SurrogateStep.default_frame``).
FRAMES = ("auto", "affine", "triangular")
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

    def __init__(self, functions, frame: Frame):
        self._functions = functions
        self._frame_part = frame

    def __getattr__(self, name):
        if name in ("_functions", "_frame_part"):  # not set yet: unpickling
            raise AttributeError(name)
        return getattr(self._functions, name)

    def _frame(self):
        return self._frame_part.map

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


@dataclass_state
class FrameState(DataClassState):
    map: Any = None  # the transport map the chain's coordinates are in (None: the model's)
    returned: Any = None  # the model's coordinates of the last state handed to PyMC


class Frame(ChainPart):
    """The chain's coordinates: the model's own, or the reference coordinates ``z`` of a
    transport map fitted to the chain's tuning states (a part of every ``SurrogateStep``).

    Parameters
    ----------
    estimator : TriangularMap or None
        The map family fitted in tuning (``frame_setting``); None: the affine frame, where
        nothing here acts.
    dim : int
        The step's dimension.
    """

    _state_class = FrameState

    def __init__(self, estimator: TriangularMap | None, dim: int):
        self.estimator = estimator
        self.dim = dim
        self.reset()

    @property
    def learned(self) -> bool:
        """Whether a map is fitted in tuning (``frame="triangular"``)."""
        return self.estimator is not None

    def check(self, owner: str, compound: bool, batched: bool) -> None:
        """Refuse a learned frame where the step cannot run in one."""
        if self.learned and (compound or batched):
            raise ValueError(f"{owner}: frame='triangular' needs the step to sample the "
                             "whole model, one evaluation at a time (no compound step, "
                             "no executor).")

    @property
    def degree(self) -> int:
        """The largest degree of the chain's map (stat ``frame_degree``; 0: affine)."""
        return 0 if self.map is None else int(np.max(self.map.degrees_))

    # ------------------------------------------------------------- the chain's coordinates
    def enter(self, q: np.ndarray, current: ChainPoint | None) -> np.ndarray:
        """The chain's coordinates of the state PyMC hands the step: the ``z`` of the
        state the step returned exactly (a round trip would move it by rounding, and the
        cached logp would be lost)."""
        if self.map is None:
            return q
        if current is not None and self.returned is not None and np.array_equal(q, self.returned):
            return current.q
        return self.map.inverse(q)

    def leave(self, z: np.ndarray, before) -> np.ndarray:
        """The model's coordinates of the state ``z`` (in ``before``'s frame, the one the
        iteration started in), kept to recognise it next iteration."""
        q = z if before is None else before.forward(z)
        self.returned = np.array(q, copy=True)
        return q

    def model_logp(self, point: ChainPoint) -> float:
        """The model's logp at ``point`` (whose potential is the frame's)."""
        if self.map is None:
            return -point.potential
        return -float(self.map.push_forward(point.q[None], np.array([point.potential]))[1][0])

    def fitted(self, states: np.ndarray, potentials: np.ndarray):
        """A map fitted to ``states`` (model coordinates, with their true potentials; NaN
        where unknown), None where it is affine or does not straighten the potential more
        than the affine frame (``potential_misfit``); the current map where there are too
        few states or the fit fails."""
        if not self.learned or states.shape[0] < MIN_STATES_PER_DIM * self.dim:
            return self.map
        try:
            fitted = copy.deepcopy(self.estimator).fit(states)
        except (np.linalg.LinAlgError, ValueError, FloatingPointError):
            return self.map
        if fitted.affine:
            return None
        known = np.isfinite(potentials)
        q, u = states[known], potentials[known]
        # The map is fitted to where the states are; their potentials, which it never saw,
        # tell whether it is a better frame: one in which the potential is closer to
        # quadratic. A map can fit a slow chain's clusters on a flat box, where the
        # potential is constant, and bend it.
        affine = fitted.whitening_.to_white(q[:, fitted.order_])
        z, u_z, _ = fitted.pull_back(q, u)
        if not potential_misfit(z, u_z) < potential_misfit(affine, u):
            return None
        return fitted

    def use(self, new) -> None:
        """Run the chain in ``new``'s coordinates from now on."""
        self.map = new

    # ------------------------------------------------- the store: model coordinates
    def stored(self, point: ChainPoint) -> ChainPoint:
        """``point`` in the model's coordinates, as the store keeps it."""
        return convert_point(point, self.map, None)

    def rows_in_frame(self, rows: StoredRows) -> StoredRows:
        """Rows read from the store, in the chain's coordinates."""
        if self.map is None or rows.potentials.size == 0:
            return rows
        has_grad = bool(np.any(np.isfinite(rows.gradients)))
        q, u, g = convert(rows.positions, rows.potentials,
                          rows.gradients if has_grad else None, None, self.map)
        return rows._replace(positions=q, potentials=u,
                             gradients=g if has_grad else rows.gradients)


def potential_misfit(z: np.ndarray, potential_z: np.ndarray) -> float:
    """How far a potential is from quadratic in the coordinates ``z`` of its states: the
    mean squared residual of its least-squares fit by ``c + b.z + sum_i a_i z_i^2`` over
    them (0 where it is Gaussian with axes along ``z``, or flat). Whitened coordinates
    need no cross terms. NaN where there are too few states for the fit."""
    features = np.column_stack([np.ones(len(z)), z, z**2])
    if len(z) <= features.shape[1]:
        return np.nan
    coef = np.linalg.lstsq(features, potential_z, rcond=None)[0]
    return float(np.mean((potential_z - features @ coef) ** 2))


def convert(q, potentials, grads, old, new):
    """Points (with their potentials and gradients) from ``old``'s coordinates to
    ``new``'s (None: the model's own)."""
    if old is not None:
        q, potentials, grads = old.push_forward(q, potentials, grads)
    if new is not None:
        q, potentials, grads = new.pull_back(q, potentials, grads)
    return q, potentials, grads


def convert_point(point: ChainPoint, old, new) -> ChainPoint:
    """``point`` (with its potential and gradient) from ``old``'s coordinates to ``new``'s."""
    if old is new:
        return point
    grad = None if point.grad is None else point.grad[None]
    q, u, g = convert(point.q[None], np.array([point.potential]), grad, old, new)
    return ChainPoint(q[0], float(u[0]), None if g is None else g[0])
