"""``ChainAccess``: what the adaptation asks of the step for one chain, as closures.

The adaptation's parts (``tuner.py``, ``refit.py``) own their state and are given the
model's evaluations, the surrogate's field and the step's warnings through this, so that
none of them holds the step (as ``ModelAccess`` gives the exploration the model).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from pymc_surrogate.step_methods.state import ChainState
from pymc_surrogate.surrogates.whitening import Whitening

__all__ = ["ChainAccess"]


class ChainAccess(NamedTuple):
    """One chain's view of the step for its adaptation."""

    chain: ChainState
    rng: np.random.Generator
    tune: bool  # the step is in tuning
    refit: Callable[[], None]  # the step's refit (its frame first, a grid built first)
    read_shared: Callable[[], None]  # the other chains' new evaluations into the training set
    warn: Callable[..., None]  # (kind, message, level="warn"): the chain's warning
    model_access: Callable[[], Any]  # the exploration's ``ModelAccess``
    field: Callable[[], Callable]  # the chain's surrogate field the kernels run on
    adapted: Callable[[Whitening], None]  # after the step size: the step's own warm-ups
    evaluate: Callable[..., Any]  # (q, with_grad, record=True): the model, counted
    evaluate_batch: Callable[[np.ndarray], list]  # rows at once on the executor
    current_point: Callable[[np.ndarray], Any]  # the chain's state with its true logp
    surrogate_step: Callable[..., Any]  # (current, record=True): a corrected transition
    move_to: Callable[..., None]  # (point, approximate=False): the chain's state is now it
    raised: Callable[[], int]  # the chain's evaluations that raised so far
