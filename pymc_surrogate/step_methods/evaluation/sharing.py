"""The step's side of the evaluation store (``evaluation/store.py``): what goes in, when a
chain reads the other chains' evaluations, and how much exploration counts as enough.

Every finite model evaluation goes into the store. In tuning, before each decision to fit
and before each fit, a chain that learns from evaluations adds the rows other chains (and
earlier runs) wrote since it last looked. Exploration iterations are counted in the store
too: a chain's first fit waits for ``explore_steps`` of them from all chains together, not
from itself alone, and for ``own_exploration_share`` of them from its own start, so that
the pooled data hold every chain's region even when chains run one after the other (chains
that all fit on the first chain's exploration would all miss what it missed, and R-hat
could no longer tell). A store that already held ``explore_steps`` of exploration when
the step was made (a kept file of an earlier run) is trusted as it is: a rerun fits at once.
A store that also held a finished tuning (``EvaluationStore.tuned``, counted when a chain
ends tuning with a surrogate) lets the rerun tune on the surrogate alone
(``surrogate_tuning.py``); a killed run's store does not, as its surrogate had not yet been
refined by tuning's corrections.
In the draws nothing is read: each chain's surrogate is frozen, so its kernel, and the
draws' exactness, do not depend on the other chains.
The store holds one posterior's evaluations: a chain that starts after ``pm.set_data``
changed the model's data starts the step's own store afresh, and refuses one the user gave.
"""

from __future__ import annotations

import logging
import os

from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_surrogate.step_methods.evaluation.store import (
    EvaluationStore,
    StoredRows,
    StoreMismatchError,
    data_fingerprint,
    model_data,
    model_key,
)
from pymc_surrogate.step_methods.part import ChainPart

__all__ = ["SharedEvaluations", "make_store"]


def make_store(store, owner: str) -> EvaluationStore | None:
    """The step's store from its ``store`` argument (see ``SurrogateHMC``)."""
    if store is None:
        return EvaluationStore(per_process=True)
    if store is False:
        return None
    if isinstance(store, EvaluationStore):
        return store
    if isinstance(store, str | os.PathLike):
        return EvaluationStore(store)
    raise TypeError(
        f"{owner}: store must be None (temporary, shared by the chains run in this "
        "process), a path (an SQLite file kept after the run), an EvaluationStore "
        "(EvaluationStore() to share across processes), or False (each chain learns "
        f"alone); got {type(store).__name__}."
    )


@dataclass_state
class SharingState(DataClassState):
    writer: str | None = None  # the chain's name in the store
    cursor: int = 0  # the last store row it has read
    explored: int = 0  # its own exploration: iterations, or model calls when batched


class SharedEvaluations(ChainPart):
    """A chain's side of the evaluation store: what it writes, reads and has explored.

    Parameters
    ----------
    store : EvaluationStore or None
        The step's store (``make_store``); None: each chain learns alone.
    learns_from_store : bool
        Whether the surrogate learns from model evaluations that other chains may share:
        never a noisy (pseudo-marginal) logp, whose estimates are the chain's own.
    explore_steps : int
        Exploration iterations before a first fit, counted over every chain sharing.
    own_share : float
        The share of them a chain explores itself before it counts the others'.
    """

    _state_class = SharingState

    def __init__(self, store: EvaluationStore | None, learns_from_store: bool,
                 explore_steps: int, own_share: float):
        self.store = store
        self.learns = store is not None and learns_from_store
        self.explore_steps = explore_steps
        self.own_share = own_share
        # What the store held before this step was made: a full exploration (the step
        # fits at once), and a run's finished tuning (it tunes on the surrogate alone,
        # ``surrogate_tuning.py``).
        self.warm = bool(self.learns and store.explored >= explore_steps)
        self.tuned = self.warm and store.tuned > 0
        self.reset()

    def bind(self, model, vars, given, dim: int, context_dim: int, owner: str) -> None:
        """Claim a store the user gave for this model (a step's own needs no key), say what
        a kept file holds from earlier runs, and note the model's data, which
        ``follow_the_data`` compares with at each chain's start."""
        graph = model.logp()
        self.data = model_data(graph)
        self.fingerprint = data_fingerprint(self.data)
        self.given = self.store is not None and given is not None
        if not self.given:
            return
        described = ", ".join(f"{v.name}{tuple(v.type.shape)}" for v in vars)
        key = "" if self.store.user_key else model_key(model, vars, graph)
        self.store.bind(key, dim, context_dim, described)
        if self.store.kept and len(self.store):
            logging.getLogger("pymc").info(self.reused(owner))

    def reused(self, owner: str) -> str:
        """What a kept store brings to this run, and what the run does with it."""
        store = self.store
        held = (f"{owner}: the store {store.path!r} holds {len(store)} evaluations of this "
                f"model from earlier runs, with {store.explored} of the {self.explore_steps} "
                "exploration steps")
        if not self.learns:
            return held + "; this step learns from its own chain only and does not read them."
        if self.tuned:
            return held + (f" and the tuning of {store.tuned} chain(s): the chains fit at "
                           "once and tune on the surrogate alone.")
        if self.warm:
            return held + ": the chains fit at once."
        return held + ": they are training data, and the exploration goes on to the rest."

    def follow_the_data(self) -> bool:
        """Whether the model's data changed (``pm.set_data``) since the step last sampled.

        The step's own store is then replaced by an empty one: its evaluations are of the
        posterior with the old data, and a surrogate trained on them is one of another
        posterior. A store the user gave is refused, as it would mix two posteriors'
        evaluations under one model's key."""
        now = data_fingerprint(self.data)
        if now == self.fingerprint:
            return False
        if self.given:
            where = f"the file {self.store.path!r}" if self.store.kept else "the step's store"
            raise StoreMismatchError(
                f"The model's data changed (pm.set_data) since this step was made, and {where} "
                "holds evaluations of the posterior with the old data. Make a new step for the "
                "new data, with a store of its own (another path, or store=None)."
            )
        self.fingerprint = now
        if self.store is not None:
            self.store = EvaluationStore(per_process=True)
        return True

    def _writer(self) -> str:
        # Made at a chain's first evaluation: PyMC restores every chain (cores=1) from one
        # initial state, so a name made with it would be every chain's.
        if self.writer is None:
            self.writer = EvaluationStore.new_writer()
        return self.writer

    def record(self, point, context) -> None:
        """Keep a finite evaluation (``context``: the block's context, or None)."""
        if self.store is not None:
            self.store.append(self._writer(), point.q, point.potential, point.grad, context)

    def read(self, dim: int, context_dim: int) -> StoredRows | None:
        """The other chains' evaluations since the last read (None: the chain learns alone)."""
        if not self.learns:
            return None
        rows = self.store.read(self.cursor, self._writer(), dim, context_dim)
        self.cursor = rows.last_id
        return rows

    def count_exploration(self, units: int) -> None:
        """Count a tuning iteration's exploration: 1, or its model calls when batched
        (``exploration.py``), toward ``explore_steps``."""
        self.explored += units
        if self.store is not None:
            self.store.add_explored(units)

    def count_tuned(self) -> None:
        """Tell the store a chain ended tuning with a surrogate."""
        if self.learns:
            self.store.add_tuned()

    def exploration(self) -> int:
        """Exploration behind the chain's data: all chains' when they share, once the
        chain has explored its own share."""
        if not self.learns:
            return self.explored
        if not self.warm and self.explored < self.own_share * self.explore_steps:
            return self.explored
        return max(self.explored, self.store.explored)
