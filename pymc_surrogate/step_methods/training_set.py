"""Every model evaluation a chain makes, kept as training data for its surrogate."""

from __future__ import annotations

import numpy as np

__all__ = ["TrainingSet"]


class TrainingSet:
    """Growable arrays of positions, potentials and gradients (NaN rows when unknown).

    Parameters
    ----------
    dim : int
    context_dim : int
        Size of the values of everything outside the block (other blocks of a compound
        step) that each evaluation was made at; 0 when the block is the whole model.
    capacity : int
        Initial allocation; doubled as needed (amortised O(1) appends).
    """

    def __init__(self, dim: int, context_dim: int = 0, capacity: int = 256):
        self.dim = dim
        self.context_dim = context_dim
        self.size = 0
        self._positions = np.empty((capacity, dim))
        self._potentials = np.empty(capacity)
        self._gradients = np.empty((capacity, dim))
        self._contexts = np.empty((capacity, context_dim))

    def __len__(self) -> int:
        return self.size

    def append(
        self,
        q: np.ndarray,
        potential: float,
        grad: np.ndarray | None,
        context: np.ndarray | None = None,
    ) -> None:
        if self.size == self._potentials.shape[0]:
            self._grow()
        i = self.size
        self._positions[i] = q
        self._potentials[i] = potential
        self._gradients[i] = np.nan if grad is None else grad
        if self.context_dim:
            self._contexts[i] = context
        self.size += 1

    def _grow(self) -> None:
        new = 2 * self._potentials.shape[0]
        for name in ("_positions", "_potentials", "_gradients", "_contexts"):
            old = getattr(self, name)
            grown = np.empty((new, *old.shape[1:]))
            grown[: self.size] = old[: self.size]
            setattr(self, name, grown)

    @property
    def positions(self) -> np.ndarray:
        return self._positions[: self.size]

    @property
    def potentials(self) -> np.ndarray:
        return self._potentials[: self.size]

    @property
    def contexts(self) -> np.ndarray:
        return self._contexts[: self.size]

    @property
    def gradients(self) -> np.ndarray:
        return self._gradients[: self.size]

    def relevant(self, energy_window: float) -> np.ndarray:
        """Indices of finite points with ``U <= min U + energy_window``.

        Burn-in points far out in the tails can have potentials 1e4 above the typical set;
        left in, they dominate a least-squares fit of a region the chain never revisits.
        """
        potentials = self.potentials
        finite = np.isfinite(potentials)
        if not np.any(finite):
            return np.zeros(0, dtype=int)
        lowest = potentials[finite].min()
        return np.flatnonzero(finite & (potentials <= lowest + energy_window))
