"""``ChainPart``: a part of a surrogate step that owns one chain's state.

A step is composed of parts (evaluation, warm-up, kernel, adaptation, health), each an
object with settings fixed when the step is made and a chain's state that only the part's
own methods change. The state is the attributes its ``_state_class`` names: PyMC
snapshots and restores them between chains (``cores=1`` reuses one step object for every
chain), as it does the step-size adapter and the potential of a NUTS step.
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import MISSING, fields

from pymc.step_methods.state import DataClassState, WithSamplingState

__all__ = ["ChainPart"]


class ChainPart(WithSamplingState):
    """Base of the parts: ``reset`` starts a new chain's state from the defaults."""

    _state_class: type[DataClassState]

    def reset(self) -> None:
        """The state of a chain that has not started."""
        for field in fields(self._state_class):
            default = (field.default_factory() if field.default_factory is not MISSING
                       else field.default)
            setattr(self, field.name, default)

    # Copied whole, not field by field as PyMC copies its own: a field may hold an object
    # with a sampling state of its own whose class changes within a chain (a diagonal mass
    # matrix replaced by a dense one), which PyMC's copy would restore into the wrong class.
    @property
    def sampling_state(self) -> DataClassState:
        return self._state_class(**{field.name: deepcopy(getattr(self, field.name))
                                    for field in fields(self._state_class)})

    @sampling_state.setter
    def sampling_state(self, state: DataClassState) -> None:
        for field in fields(self._state_class):
            setattr(self, field.name, deepcopy(getattr(state, field.name)))
