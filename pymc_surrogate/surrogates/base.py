"""The protocol every surrogate of the potential follows."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["PotentialSurrogate"]


@runtime_checkable
class PotentialSurrogate(Protocol):
    """A cheap numpy model of the potential ``U(q) = -logp(q)``.

    Surrogates follow scikit-learn's convention: hyperparameters in ``__init__``,
    ``fit`` learns from a batch of training data and returns ``self``, and learned
    attributes end with an underscore. Surrogates that learn online also provide
    ``partial_fit``.
    """

    def fit(
        self,
        positions: np.ndarray,
        potentials: np.ndarray | None = None,
        gradients: np.ndarray | None = None,
    ) -> PotentialSurrogate:
        """Learn from positions (n, d), their potentials (n,) and/or gradients (n, d)."""
        ...

    def value_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """Surrogate potential and its gradient at one position ``q`` of shape (d,)."""
        ...
