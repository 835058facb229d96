"""``ChainEvaluation``: a chain's model evaluations as the step makes them.

Each evaluation is counted and its failures handled (``evaluator.py``), a proposal far from
every evaluated state noted (``health/far_proposals.py``), and a finite one kept: in the
store, in the model's coordinates (``sharing.py``), and as the chain's training data where
the step learns from it, the online learners told (``on_evaluation``). Batches run on the
exploration's executor (``batch.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pymc_surrogate.core.types import ChainPoint
from pymc_surrogate.step_methods.evaluation.batch import _NodeLogp, evaluate_logp
from pymc_surrogate.step_methods.warmup.exploration import ModelAccess
from pymc_surrogate.step_methods.warmup.prior import draw_prior

__all__ = ["ChainEvaluation"]


class ChainEvaluation:
    """The step's model evaluations for a chain: counted, checked, kept.

    Parameters
    ----------
    evaluator : Evaluator
        Evaluates the model (in the chain's frame) and counts and reports failures.
    functions : ModelFunctions
        The model in its own coordinates (batches: an executor implies the affine frame).
    model, vars
        What executor workers compile (``_NodeLogp``).
    far : FarProposals
        Counts proposals far from every evaluated state.
    sharing : SharedEvaluations
        The store, which keeps every finite evaluation.
    frame : Frame
        The chain's frame: the store keeps model coordinates.
    context : BlockContext
        A compound step's other blocks' values, stored with each row.
    policy : TrainingPolicy
        Whether an evaluation is training data.
    learned : LearnedSurrogate
        The chain's training data (and the scale far proposals are measured in).
    owner : str
        The step's class name, for messages.
    on_evaluation : callable
        ``(chain, point)``: a new training point (the online learners' hook).
    """

    def __init__(self, evaluator, functions, model, vars, far, sharing, frame, context,
                 policy, learned, owner: str, on_evaluation: Callable):
        self.evaluator = evaluator
        self.learned = learned
        self.functions = functions
        self.model, self.vars = model, vars
        self.far = far
        self.sharing = sharing
        self.frame = frame
        self.context = context
        self.policy = policy
        self.owner = owner
        self.on_evaluation = on_evaluation
        self._node_logp = None  # the model as workers compile it, pickled once

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_node_logp"] = None
        return state

    def evaluate(self, chain, q: np.ndarray, with_grad: bool, tune: bool, record: bool = True,
                 retry: bool = False, count_far: bool = True) -> ChainPoint:
        """The true model at ``q``, counted and kept as training data (unless ``record``
        is False: a diagnostic evaluation, e.g. the heavy-tail check's); ``retry``: the
        chain's state, where a raise is tried once more (``evaluator.py``)."""
        if count_far and not retry:
            self.far.check(q, self.learned.training.positions, self.learned.whitening)
        point = self.evaluator.evaluate(chain, q, with_grad, tune, retry=retry)
        self.keep(chain, point, record)
        return point

    def evaluate_batch(self, chain, points: np.ndarray, tune: bool,
                       executor) -> list[ChainPoint]:
        """The true potential at each row of ``points``, evaluated at once on
        ``executor``, counted and kept as ``evaluate`` keeps one."""
        points = np.array([self.functions.representable(q) for q in points])
        for q in points:
            self.far.check(q, self.learned.training.positions, self.learned.whitening)
        if self._node_logp is None:
            self._node_logp = _NodeLogp.from_model(self.model, self.vars, self.owner)
        result = evaluate_logp(points, self.functions, self.model, self.vars,
                               executor=executor, progressbar=False, owner=self.owner,
                               node_logp=self._node_logp)
        self.evaluator.count_batch(points.shape[0])
        # A row that failed twice, NaN or +inf: a rejection there (evaluator.py)
        out = self.evaluator.from_batch(chain, points, result.logp, result.errors, tune)
        for point in out:
            self.keep(chain, point)
        return out

    def model_access(self, chain, tune: bool, executor, rng: np.random.Generator,
                     warn: Callable[[str], None]) -> ModelAccess:
        """What the exploration asks of the model for ``chain`` (``warmup/exploration.py``)."""
        return ModelAccess(
            # exploration's exact kernels are not counted as far proposals: an exact HMC
            # trajectory evaluates every leapfrog point, and checking each against a
            # training set that keeps them all made a fallback-heavy run quadratic
            evaluate=lambda q, with_grad: self.evaluate(chain, q, with_grad, tune,
                                                        count_far=False),
            diagnose=lambda q: self.evaluator.evaluate(chain, q, True, tune),
            evaluate_batch=lambda points: self.evaluate_batch(chain, points, tune, executor),
            # the chain's state: a raise is tried once more, and no rejection there
            evaluate_state=lambda q: self.evaluator.check_start(
                self.evaluate(chain, q, True, tune, retry=True)),
            late_states=lambda: self.learned.late_states()[0],
            draw_prior=lambda n: self.draw_prior(n, rng),
            training=self.learned.training,
            warn=warn,
        )

    def draw_prior(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws that seed the exploration's population (``warmup/prior.py``)."""
        return draw_prior(self.model, [v.name for v in self.vars],
                          self.learned.dim, n, rng)

    def keep(self, chain, point: ChainPoint, record: bool = True) -> None:
        """A finite evaluation goes into the store and, as training data, to the chain."""
        if not np.isfinite(point.potential):
            return
        self.sharing.record(self.frame.stored(point),
                            self.context.values() if self.context.dim else None)
        if record and self.policy.records(chain.frozen):
            self.learned.add_point(point, self.context.values())
            self.on_evaluation(chain, point)
