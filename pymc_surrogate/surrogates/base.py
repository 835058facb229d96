"""The protocols every step method relies on: the only way a step touches a surrogate.

Surrogates follow scikit-learn's estimator conventions: hyperparameters in ``__init__``,
``fit`` / ``partial_fit`` learn and return ``self``, learned attributes end with an
underscore. Positions are the surrogate's inputs (the step's block, plus the other blocks'
values inside a compound step); potentials are ``U = -logp``; gradients are ``dU/dq`` and
may cover only the first ``g`` inputs (the block). NaN marks an unknown value or gradient.
"""

from __future__ import annotations

import inspect
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

__all__ = ["Surrogate", "OnlineSurrogate", "DesignedSurrogate", "Domain", "get_params",
           "with_params"]


@runtime_checkable
class Surrogate(Protocol):
    """A cheap numpy model of the potential ``U(q) = -logp(q)``.

    ``fit`` raises ``ValueError`` (or ``numpy.linalg.LinAlgError``) when the data cannot
    give a usable surrogate; the step then keeps its previous kernel and retries later.
    A surrogate fitted to gradients only has an arbitrary level: it should say so with
    ``has_level = False`` (the step then skips checks of the absolute level).
    """

    def fit(
        self,
        positions: np.ndarray,
        potentials: np.ndarray | None = None,
        gradients: np.ndarray | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> Surrogate:
        """Learn from positions (n, d), their potentials (n,) and/or gradients (n, g)."""
        ...

    def value_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """Surrogate potential and its gradient at one position ``q`` of shape (d,)."""
        ...


@runtime_checkable
class OnlineSurrogate(Surrogate, Protocol):
    """A surrogate that keeps learning after ``fit`` (AdaptiveSurrogateHMC, VariationalHMC,
    KernelHMC's finite form).

    Trajectories must run on a surrogate fixed within a transition, and adaptation must
    vanish for the chain to stay exact in the limit: the step runs its trajectories on
    ``snapshot()`` copies and swaps a new one in with a vanishing probability.
    """

    def partial_fit(
        self,
        positions: np.ndarray,
        potentials: np.ndarray | None = None,
        gradients: np.ndarray | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> OnlineSurrogate:
        """Learn from new points on top of everything seen since the last ``fit``."""
        ...

    def snapshot(self) -> Surrogate:
        """A copy with what was learned so far, unaffected by later ``partial_fit``."""
        ...


class Domain(NamedTuple):
    """A box ``lower <= q <= upper`` (in the sampler's unconstrained space)."""

    lower: np.ndarray
    upper: np.ndarray


@runtime_checkable
class DesignedSurrogate(Surrogate, Protocol):
    """A surrogate trained on a design fixed before sampling (SparseGridHMC).

    The step evaluates the true model at ``design(domain)``, calls ``fit`` once with those
    values, and uses the surrogate only where ``contains(q)``; outside, the exact model.
    """

    def design(self, domain: Domain) -> np.ndarray:
        """The nodes (n, d) at which the true potential must be evaluated."""
        ...

    def contains(self, q: np.ndarray) -> bool:
        """Whether ``q`` lies in the domain the surrogate interpolates."""
        ...


def get_params(estimator) -> dict:
    """An estimator's settings: its ``__init__`` arguments, read from the attributes of the
    same names (scikit-learn's convention, which every surrogate here follows)."""
    signature = inspect.signature(type(estimator).__init__)
    return {
        name: getattr(estimator, name)
        for name, parameter in signature.parameters.items()
        if name != "self" and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    }


def with_params(estimator, **changes):
    """A new, unfitted estimator of the same class and settings, with ``changes`` applied
    (scikit-learn's ``clone`` and ``set_params`` in one): what a step fits, from the
    estimator a user gives it, with the inputs only the step knows (its whitening, its
    random stream)."""
    return type(estimator)(**{**get_params(estimator), **changes})
