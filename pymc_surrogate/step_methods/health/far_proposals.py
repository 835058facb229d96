"""Far proposals: model evaluations far from every state the chain had evaluated.

Nothing a surrogate learnt reaches such a point, so a move there is extrapolation, and on a
real solver the evaluation there often fails. This part counts them (stat
``far_proposals``) once the chain has a frame (after its first fit), at every evaluation
but the exact exploration kernels' (whose trajectories evaluate every leapfrog point). The
distance is the largest coordinate of the whitened difference, ``max |L^-1 (q - x)|`` for
the chain's whitening ``x = m + L z``, to the nearest evaluated state, against
``Tuning.far_sd``: the largest coordinate, not the norm, so that the limit means the same
in any dimension. The states' whitened coordinates are kept between evaluations and
recomputed only when the frame changes, so a check costs ``O(n d)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.linalg
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_surrogate.step_methods.part import ChainPart
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["FarProposals"]


@dataclass_state
class FarProposalsState(DataClassState):
    count: int = 0  # the chain's far proposals so far (stat ``far_proposals``)
    frame: Any = None  # the whitening the cached coordinates are in
    inverse: Any = None  # (mean, L^-1) of its block: whitening as one matrix product
    white: Any = None  # the evaluated states in it (a buffer, grown by doubling) ...
    rows: int = 0  # ... of which this many are filled


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
        n = positions.shape[0]
        if whitening is None or n == 0:
            return
        if whitening is not self.frame or n < self.rows:  # a new frame or training set
            self.frame, self.inverse, self.rows = whitening, _inverse(whitening, self.dim), 0
            self.white = np.empty((max(2 * n, 64), self.dim))
        mean, inverse = self.inverse
        if n > self.white.shape[0]:
            self.white = np.vstack([self.white[: self.rows], np.empty((n, self.dim))])
        if n > self.rows:
            self.white[self.rows: n] = (positions[self.rows:, : self.dim] - mean) @ inverse.T
            self.rows = n
        z = (np.asarray(q, dtype=np.float64)[: self.dim] - mean) @ inverse.T
        if np.min(np.max(np.abs(self.white[:n] - z), axis=1)) > self.limit:
            self.count += 1


def _inverse(whitening: Whitening, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, L^-1)`` of the block's coordinates: the leading block of a lower-triangular
    factor is the factor of the leading block of the covariance."""
    mean = whitening.mean[:dim]
    if whitening.dense:
        chol = whitening.chol[:dim, :dim]
        return mean, scipy.linalg.solve_triangular(chol, np.eye(dim), lower=True)
    return mean, np.diag(1.0 / whitening.chol[:dim])
