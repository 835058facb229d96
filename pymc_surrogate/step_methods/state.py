"""A chain's identity (``ChainState``) and the step's sampling state: its parts' states.

With ``cores=1`` PyMC reuses the step object for every chain and restores only the fields
of ``_state_class`` between chains: the chain and each part that owns a chain's state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymc.step_methods.compound import StepMethodState
from pymc.step_methods.state import dataclass_state

from pymc_surrogate.core.types import ChainPoint

__all__ = ["ChainState", "SurrogateStepState"]


@dataclass
class ChainState:
    """Where a chain is and in which phase: its state with the true logp cached, and its
    clock. What it has learned is its parts' (``SurrogateStepState``)."""

    current: ChainPoint | None = None  # with its true logp, cached
    current_key: bytes | None = None
    current_approximate: bool = False  # current's potential is the surrogate's (surrogate_tuning.py)
    on_surrogate: bool = False  # this tuning iteration moves on the surrogate alone
    iteration: int = 0
    frozen: bool = False  # tuning has ended


@dataclass_state
class SurrogateStepState(StepMethodState):
    tune: bool
    chain: Any
    tails: Any
    draw_bound: Any
    coverage: Any
    health: Any
    far: Any
    sharing: Any
    surrogate_tuning: Any
    kernel: Any
    exploration: Any
    frame: Any
    schedule: Any
    evaluator: Any
    learned: Any
    fit: Any
