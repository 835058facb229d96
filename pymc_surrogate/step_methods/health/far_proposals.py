"""Far proposals: model evaluations far from every state the chain had evaluated.

Nothing a surrogate learnt reaches such a point, so a move there is extrapolation, and on a
real solver the evaluation there often fails. This part counts them (stat
``far_proposals``), once the chain has a frame (after its first fit): the distance is the
Mahalanobis distance of the frame, ``|L^-1 (q - x)|`` for the chain's whitening
``x = m + L z``, to the nearest evaluated state, against ``Tuning.far_sd``. The states'
whitened coordinates are kept between evaluations and recomputed only when the frame
changes, so a check costs ``O(n d)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_surrogate.step_methods.part import ChainPart
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["FarProposals"]


@dataclass_state
class FarProposalsState(DataClassState):
    count: int = 0  # the chain's far proposals so far (stat ``far_proposals``)
    frame: Any = None  # the whitening the cached coordinates are in
    white: Any = None  # the evaluated states in it, as far as they are whitened


class FarProposals(ChainPart):
    """Counts a chain's model evaluations farther than ``limit`` from every state before.

    Parameters
    ----------
    dim : int
        The block's dimension (a compound step's whitening also holds the other blocks'
        values after it: only its leading block is used).
    limit : float
        ``Tuning.far_sd``.
    """

    _state_class = FarProposalsState

    def __init__(self, dim: int, limit: float):
        self.dim = dim
        self.limit = limit
        self.reset()

    def check(self, q: np.ndarray, positions: np.ndarray, whitening: Whitening | None) -> None:
        """Count ``q`` if it lies far from every row of ``positions`` (no frame: nothing)."""
        if whitening is None or positions.shape[0] == 0:
            return
        if whitening is not self.frame:
            self.frame = whitening
            self.white = None
        frame = self._block(whitening)
        white = self.white if self.white is not None else np.empty((0, self.dim))
        if white.shape[0] > positions.shape[0]:  # a new training set: start again
            white = np.empty((0, self.dim))
        if white.shape[0] < positions.shape[0]:
            white = np.vstack([white, frame.to_white(positions[white.shape[0]:, : self.dim])])
        self.white = white
        z = frame.to_white(np.asarray(q, dtype=np.float64)[None, : self.dim])
        if np.min(np.sum((white - z) ** 2, axis=1)) > self.limit**2:
            self.count += 1

    def _block(self, whitening: Whitening) -> Whitening:
        """The whitening of the block's coordinates: the leading block of a lower-triangular
        factor is the factor of the leading block of the covariance."""
        if whitening.dim == self.dim:
            return whitening
        chol = (whitening.chol[: self.dim, : self.dim] if whitening.dense
                else whitening.chol[: self.dim])
        return Whitening(whitening.mean[: self.dim], chol)
