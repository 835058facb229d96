"""Variants of SurrogateHMC measured against issue 36's first line, for ``shared_store.py``.

``python benchmarks/shared_store.py --variant tail_tempering ...`` runs the benchmark with
one of these installed. Each is a change of one method of the step, patched on the class
before sampling (so it reaches the chains' processes only where PyMC forks them: Linux,
PyMC 5); none is part of the package, and each now runs on top of the package's own
lowered black-box draws (``step_methods/adaptation/draw_bound.py``). What each gave, measured before
those, is in benchmarks/notes/design_history.md, "Why line 1 of issue 36 ..." (the metric from 1000 surrogate
draws measured there was a scratch patch, not kept here). Every variant keeps the draws
exact: it changes a fixed field the surrogate kernel runs on, a fixed mixture of exact
kernels, or what tuning evaluates. The ``lcb3`` / ``lcb5`` variants measured there became
the package's ``draw_bound.py`` (capped, with three transitions a draw) and are no longer
here.
"""

from __future__ import annotations

import numpy as np

from pymc_surrogate.step_methods.base import SurrogateStep
from pymc_surrogate.step_methods.adaptation.refit import Refits
from pymc_surrogate.step_methods.adaptation.tuner import Tuner

__all__ = ["VARIANTS", "install"]

_plain_field = SurrogateStep._surrogate_field
_plain_stop = SurrogateStep.stop_tuning


def _after_stop_tuning(extra):
    """``stop_tuning``, then ``extra(step, chain)`` for a chain frozen on a surrogate."""
    def stop_tuning(self):
        _plain_stop(self)
        if self.learned.surrogate is not None and self.chain.frozen:
            extra(self, self.chain)
    SurrogateStep.stop_tuning = stop_tuning


def _draws_field(transform):
    """In the draws, the surrogate field ``transform(chain, field)`` (when it says so)."""
    def _surrogate_field(self, chain):
        field = _plain_field(self, chain)
        return transform(chain, field) if chain.frozen else field
    SurrogateStep._surrogate_field = _surrogate_field


def tail_tempering(quantile: float = 0.95, temperature: float = 1.5) -> None:
    """Above its ``quantile`` over the late tuning states, the draws' surrogate rises
    ``temperature`` times slower."""
    def level(step, chain):
        field = _plain_field(step, chain)
        chain.variant_level = float(np.quantile(
            [field(q)[0] for q in step.refits.late_states()[0]], quantile))

    def transform(chain, field):
        top = getattr(chain, "variant_level", None)
        if top is None:
            return field

        def value_and_grad(q):
            value, grad = field(q)
            if value <= top:
                return value, grad
            return top + (value - top) / temperature, grad / temperature
        return value_and_grad

    _after_stop_tuning(level)
    _draws_field(transform)


def exploration_share(probability: float = 0.1) -> None:
    """A fixed share of the draws on the exact exploration kernel (a mixture of exact
    kernels, as for a chain whose surrogate stalled in tuning)."""
    def share(step, chain):
        if step.exploration.probability == 0:
            step.exploration.freeze(step._model_access(chain), step.rng, probability=probability)
    _after_stop_tuning(share)


def extra_evaluation() -> None:
    """In tuning on a surrogate, one more model evaluation an iteration (training data) at
    the point a surrogate transition alone reaches from the chain's state."""
    plain_update = Tuner.update

    def update(self, access, info, exploring):
        chain = access.chain
        if (self.learned.surrogate is not None and not chain.frozen and not chain.on_surrogate
                and chain.current is not None):
            chain.on_surrogate = True
            try:
                moved = access.surrogate_step(chain.current, record=False)
            finally:
                chain.on_surrogate = False
            access.evaluate(moved.point.q, False, record=True)
        return plain_update(self, access, info, exploring)
    Tuner.update = update


def final_design(points: int = 150, thin: int = 3, tuning_weight: float = 0.3) -> None:
    """Before the final fit, the model at ``points`` states of a chain run on its surrogate
    alone (every ``thin``-th of its transitions: nearly independent draws of the
    surrogate's posterior); the final fit weighs the tuning data ``tuning_weight`` times
    as much as these. Offline (seeds 203-214 of the PDE, 150 true posterior draws added
    to a final fit's training set): the fit's 0.1% error quantile on posterior draws
    -3.6 / -2.2 / -1.9 nats became -2.3 / -1.6 / -1.5."""
    from pymc_surrogate.core.transitions import surrogate_transition
    from pymc_surrogate.core.types import ChainPoint

    plain_final, plain_fit = Refits.final, Refits._fit

    def final(self, access):
        chain = access.chain
        if self.learned.surrogate is not None and chain.current is not None:
            field = self.context.field(self.learned.surrogate)

            def on_surrogate(q):
                value, grad = field(q)[:2]
                return ChainPoint(q, float(value), grad)

            point = on_surrogate(chain.current.q)
            step_size = self.kernel.step_adapt.current(False)
            states = []
            for i in range(points * thin):
                point = surrogate_transition(point, on_surrogate, field, self.kernel.metric, step_size,
                                             self.kernel.path_length, self.kernel.max_energy_error, 1,
                                             access.rng).point
                if (i + 1) % thin == 0:
                    states.append(point.q)
            chain.frozen = False  # so that the evaluations are training data
            start = len(self.learned.training)
            try:
                evaluate = access.model_access().evaluate
                for q in states:
                    evaluate(q, False)
            finally:
                chain.frozen = True
            chain.variant_design = (start, len(self.learned.training))
        return plain_final(self, access)

    def _fit(self, access, **settings):
        chain = access.chain
        design = getattr(chain, "variant_design", None)
        if design is None:
            return plain_fit(self, access, **settings)
        policy = self.fit.policy
        keep = self.relevant()
        factor = np.where((keep >= design[0]) & (keep < design[1]), 1.0, tuning_weight)

        class Policy:
            def __getattr__(_, name):
                return getattr(policy, name)

            @staticmethod
            def weights(u, lowest, dim):
                return policy.weights(u, lowest, dim) * factor

        try:
            self.fit.policy = Policy()
            return plain_fit(self, access, **settings)
        finally:
            self.fit.policy = policy

    Refits.final = final
    Refits._fit = _fit


VARIANTS = {
    "final_design": final_design,
    "tail_tempering": tail_tempering,
    "explore10": exploration_share,
    "extra_evaluation": extra_evaluation,
}


def install(name: str) -> None:
    """Patch the step classes with variant ``name`` (one per process)."""
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}; one of {sorted(VARIANTS)}")
    VARIANTS[name]()
