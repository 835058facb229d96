"""Training arrays as every surrogate's ``fit`` receives them, checked and masked."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["TrainingData"]


class TrainingData(NamedTuple):
    """Positions (n, d), potentials (n,) and gradients (n, g) with what each point has.

    NaN marks an unknown value or gradient: such a point adds only what it has.
    """

    positions: np.ndarray
    potentials: np.ndarray | None
    gradients: np.ndarray | None
    has_value: np.ndarray  # (n,) bool
    has_grad: np.ndarray  # (n,) bool
    n_grad: int  # gradient columns: the first n_grad inputs are differentiated
    weight: np.ndarray  # (n,) sample weights (ones by default)
    usable: np.ndarray  # (n,) bool: finite position, something to fit, positive weight

    @classmethod
    def check(cls, positions, potentials=None, gradients=None, sample_weight=None) -> TrainingData:
        """Validate ``fit``'s arguments (``ValueError`` with the reason)."""
        positions = np.atleast_2d(np.asarray(positions, dtype=np.float64))
        n, dim = positions.shape
        if potentials is None and gradients is None:
            raise ValueError("fit needs potentials, gradients, or both.")
        if n == 0:
            raise ValueError("fit needs at least one training point.")
        # NaN marks an unknown value or gradient: such a point adds only what it has.
        has_value = np.zeros(n, dtype=bool)
        has_grad = np.zeros(n, dtype=bool)
        if potentials is not None:
            potentials = np.asarray(potentials, dtype=np.float64).reshape(n)
            has_value = np.isfinite(potentials)
        n_grad = dim
        if gradients is not None:
            gradients = np.asarray(gradients, dtype=np.float64).reshape(n, -1)
            n_grad = gradients.shape[1]
            if not 0 < n_grad <= dim:
                raise ValueError(
                    f"gradients must have between 1 and {dim} columns (the inputs); got {n_grad}."
                )
            has_grad = np.all(np.isfinite(gradients), axis=1)
        weight_of = np.ones(n)
        if sample_weight is not None:
            weight_of = np.asarray(sample_weight, dtype=np.float64).reshape(n)
            if not np.all(np.isfinite(weight_of) & (weight_of >= 0)):
                raise ValueError("sample_weight must be finite and non-negative.")
        usable = np.all(np.isfinite(positions), axis=1) & (has_value | has_grad) & (weight_of > 0)
        if not np.any(usable):
            raise ValueError("No finite training point to fit the surrogate to.")
        return cls(positions, potentials, gradients, has_value, has_grad, n_grad, weight_of, usable)
