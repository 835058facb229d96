"""The step's side of the evaluation store (``evaluation_store.py``): what goes in, when a
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
"""

from __future__ import annotations

import os

from pymc_surrogate.step_methods.evaluation_store import EvaluationStore, model_key
from pymc_surrogate.step_methods.state import ChainState

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


class SharedEvaluations:
    """Mixin of ``SurrogateStep``: record to and read from ``self.store``."""

    store: EvaluationStore | None = None
    _warm_store: bool = False
    _tuned_store: bool = False

    def _bind_store(self, model, vars, given) -> None:
        """Claim a store the user gave for this model (a step's own needs no key)."""
        if self.store is None or given is None:
            return
        described = ", ".join(f"{v.name}{tuple(v.type.shape)}" for v in vars)
        key = "" if self.store.user_key else model_key(model, vars, model.logp())
        self.store.bind(key, self.dim, self.context.dim, described)

    def _writer(self, chain: ChainState) -> str:
        # Made at a chain's first evaluation: PyMC restores every chain (cores=1) from one
        # initial state, so a name made with it would be every chain's.
        if chain.writer is None:
            chain.writer = EvaluationStore.new_writer()
        return chain.writer

    def _store_evaluation(self, chain: ChainState, point) -> None:
        if self.store is not None:
            self.store.append(self._writer(chain), point.q, point.potential, point.grad,
                              self.context.values() if self.context.dim else None)

    @property
    def _learns_from_store(self) -> bool:
        """A surrogate learnt from model evaluations; never a noisy (pseudo-marginal)
        logp, whose estimates are the chain's own."""
        return (self.store is not None and not self.pseudo_marginal
                and self.policy.source == "evaluations")

    def _reads_store(self, chain: ChainState) -> bool:
        return self._learns_from_store and not chain.frozen

    def _read_shared(self, chain: ChainState) -> int:
        """Add the other chains' new evaluations to the chain's training set."""
        if not self._reads_store(chain):
            return 0
        rows = self.store.read(chain.store_cursor, self._writer(chain), self.dim,
                               self.context.dim)
        chain.training.extend(rows.positions, rows.potentials, rows.gradients, rows.contexts)
        chain.store_cursor = rows.last_id
        return rows.potentials.size

    def _count_exploration(self, chain: ChainState, units: int) -> None:
        """Count a tuning iteration's exploration: 1, or its model calls when batched
        (``exploration.py``), toward ``explore_steps``."""
        chain.explore.units += units
        if self.store is not None:
            self.store.add_explored(units)

    def _note_warm_store(self) -> None:
        """What the store held before this step was made: a full exploration (the step
        fits at once), and a run's finished tuning (it tunes on the surrogate alone,
        ``surrogate_tuning.py``)."""
        self._warm_store = bool(self._learns_from_store
                                and self.store.explored >= self.explore_steps)
        self._tuned_store = self._warm_store and self.store.tuned > 0

    def _count_tuned(self, chain: ChainState) -> None:
        """Tell the store a chain ended tuning with a surrogate."""
        if self._learns_from_store and chain.surrogate is not None:
            self.store.add_tuned()

    def _explored(self, chain: ChainState) -> int:
        """Exploration behind the chain's data: all chains' when they share, once the
        chain has explored its own share."""
        own = chain.explore.units
        if not self._learns_from_store:
            return own
        own_share = self.tuning.own_exploration_share * self.explore_steps
        if not self._warm_store and own < own_share:
            return own
        return max(own, self.store.explored)
