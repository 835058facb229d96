"""The rest of the model, as seen by one block of a CompoundStep."""

from __future__ import annotations

import warnings

import numpy as np
from pymc.util import get_value_vars_from_user_vars
from pymc.vartypes import continuous_types

from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["BlockContext", "block_variables"]


class BlockContext:
    """The values of the variables outside a step's block, as extra surrogate inputs.

    Inside a ``CompoundStep`` the block's potential is a conditional that moves with the
    other blocks. A surrogate of the block alone, fitted to evaluations made at many of
    their values, fits none of the conditionals and the chain sticks (acceptance ~1% on a
    3-d Gaussian in two blocks). So the surrogate models the joint potential ``U(q, c)``,
    ``c`` the other blocks' values, from values and ``dU/dq``, and trajectories run on
    ``q -> U(q, c)`` at the current ``c``: a valid proposal for the conditional, exact
    after the correction. With more than ``max_size`` values that surrogate would be too
    big to fit, and the context is left out (with a warning).

    Parameters
    ----------
    shared : dict
        The PyTensor shared variables holding the other value variables, which PyMC's
        ``ArrayStepShared`` refreshes before each step.
    block_dim : int
    owner : str
        The step's name, for the warning.
    max_size : int
    """

    def __init__(self, shared: dict, block_dim: int, owner: str, max_size: int = 100):
        self._shared = list(shared.values())
        self.block_dim = block_dim
        size = int(sum(np.size(s.get_value(borrow=True)) for s in self._shared))
        if size > max_size:
            warnings.warn(
                f"{owner}: the rest of the model has {size} values, more than {max_size}; "
                "the surrogate ignores them and, in a CompoundStep, models the block's "
                "potential averaged over them, which can mix slowly. Give this step more of "
                "the continuous variables.",
                UserWarning,
                stacklevel=4,
            )
            size = 0
        self.dim = size

    def values(self) -> np.ndarray | None:
        """The current values of everything outside the block, raveled (None if unused)."""
        if not self.dim:
            return None
        return np.concatenate(
            [np.ravel(s.get_value(borrow=True)).astype(np.float64) for s in self._shared]
        )

    def join(self, q: np.ndarray) -> np.ndarray:
        """The surrogate's input for the block's value ``q`` at the current context."""
        return q if not self.dim else np.concatenate([q, self.values()])

    def field(self, surrogate):
        """``q -> (U~, dU~/dq)`` of the block, for trajectories at the current context."""
        if not self.dim:
            return surrogate.value_and_grad
        dim = self.block_dim
        # One input buffer per trajectory, context filled once: the leapfrog loop only
        # writes q into it (the surrogate does not keep its input).
        joint = np.concatenate([np.zeros(dim), self.values()])

        def value_and_grad(q: np.ndarray) -> tuple[float, np.ndarray]:
            joint[:dim] = q
            value, grad = surrogate.value_and_grad(joint)
            return value, grad[:dim]

        return value_and_grad

    def training_inputs(self, positions: np.ndarray, contexts: np.ndarray):
        """Surrogate inputs for training rows, and their whitening.

        The whitening is the spread of the training points, not of the chain's states: an
        exploration that mixed badly leaves states that span a sliver of the posterior (on
        the black-box PDE, 1/700 of its variance in one direction), and features and the
        curvature floor scaled to that sliver wreck the fit. The context is whitened on
        its own, so that the block's partial gradients stay usable.
        """
        scale = Whitening.from_samples(positions, dense=positions.shape[0] > self.block_dim)
        if not self.dim:
            return positions, scale
        whitening = Whitening.block_diagonal(scale, Whitening.from_samples(contexts, dense=False))
        return np.hstack([positions, contexts]), whitening


def block_variables(model, vars, initial_point: dict, owner: str) -> list:
    """The value variables of the step's block: continuous, with at least one entry."""
    if vars is None:
        vars = model.continuous_value_vars
    else:
        vars = get_value_vars_from_user_vars(vars, model)
        repeated = sorted({v.name for v in vars if sum(w is v for w in vars) > 1})
        if repeated:
            raise ValueError(
                f"{owner}: vars names {', '.join(repeated)} more than once; give each "
                "variable once."
            )
    if not vars:
        discrete_names = [v.name for v in model.value_vars if v.dtype not in continuous_types]
        raise ValueError(
            f"{owner} needs continuous variables, and this model has none"
            + (f" (its free variables {', '.join(discrete_names)} are discrete; sample them "
               "with pm.Metropolis or pm.CategoricalGibbsMetropolis)." if discrete_names else ".")
        )
    if sum(int(np.size(initial_point[v.name])) for v in vars) == 0:
        raise ValueError(
            f"{owner}: the variables {', '.join(v.name for v in vars)} have no "
            "entries (size 0); there is nothing to sample."
        )
    discrete = [v.name for v in vars if v.dtype not in continuous_types]
    if discrete:
        raise ValueError(
            f"{owner} samples continuous variables only, but "
            f"{', '.join(discrete)} {'is' if len(discrete) == 1 else 'are'} discrete. "
            "Assign discrete variables to another step, e.g. "
            f"pm.sample(step=[{owner}([...continuous...]), pm.Metropolis([...])])."
        )
    return vars
