"""The true model at a point: compiled logp (and gradient), the cache key, counts, errors."""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field

import numpy as np
from pymc.exceptions import SamplingError
from pymc.stats.convergence import WarningType
from pymc.step_methods.state import DataClassState, dataclass_state

from pymc_surrogate.core.types import ChainPoint
from pymc_surrogate.step_methods.evaluation.batch import INFINITE as BATCH_INFINITE
from pymc_surrogate.step_methods.evaluation.model_functions import (
    ModelEvaluationError,
    ModelFunctions,
)
from pymc_surrogate.step_methods.part import ChainPart

__all__ = ["Evaluator", "FailureLog", "ModelEvaluationError", "ModelFailure"]


#: Kinds of failed evaluation (each logged the first time a chain meets it).
RAISED, NAN_LOGP, INFINITE_LOGP, NAN_GRADIENT = "raised", "nan", "+inf", "gradient"
#: Failures in a row, with no point between where the model answered, after which the run
#: stops: the model fails wherever the chain goes (a server that has gone away). A
#: chain at the edge of a failing region has its proposals fail far less often than this
#: (half of them at most near a flat edge: 2^-100).
FAILURES_IN_A_ROW = 100
#: A warning when failures exceed this share of a chain's evaluations, judged from
#: ``next_check`` (50) evaluations on, at each doubling.
FREQUENT_SHARE = 0.1


@dataclass
class FailureLog:
    """Failed model evaluations of the chain (evaluator.py): what was told, the run of them."""

    told: frozenset = frozenset()  # kinds of failure whose first occurrence was logged
    frequent_told: bool = False  # the "frequent failures" warning was given
    next_check: int = 50  # model evaluations at which their share is next judged (doubled)
    raised: int = 0  # the failures that were exceptions (and time-outs)
    in_a_row: int = 0  # failures since the model last answered
    first_in_a_row: tuple | None = None  # the first of them: (where and why, traceback text)


@dataclass
class EvaluationCounts:
    """What the chain's model evaluations have cost (stats)."""

    logp_evals: int = 0
    grad_evals: int = 0
    eval_failures: int = 0  # evaluations that raised or gave NaN / +inf (rejections)


@dataclass_state
class EvaluatorState(DataClassState):
    failures: FailureLog = field(default_factory=FailureLog)  # the chain's failed evaluations
    counts: EvaluationCounts = field(default_factory=EvaluationCounts)


class ModelFailure(Exception):
    """The model's own error, as the text of its traceback (picklable whatever it held)."""


class Evaluator(ChainPart):
    """Evaluates the step's block of the true model and maps its failures to clear errors
    (a part of the step: it owns the chain's ``failures``, a ``FailureLog``, and
    ``counts``, its evaluations' ``EvaluationCounts``).

    Parameters
    ----------
    functions : ModelFunctions
    layout : list of (name, shape)
        The value variables in the raveled ``q``, for error messages.
    owner : str
        The step's class name, for error messages.
    """

    _state_class = EvaluatorState

    def __init__(self, functions: ModelFunctions, layout: list, owner: str, warn=None):
        self.reset()
        self.functions = functions
        self.layout = layout
        self.owner = owner
        #: ``warn(kind, message, level, iteration)``: the step's warning queue (its health
        #: part's), which PyMC logs in the parent process.
        self.warn = warn
        #: The last failed evaluation (q bytes, kind, where, message, traceback text), for
        #: ``check_start``'s error when it was the chain's state.
        self._last_failure = None

    def count_batch(self, n: int) -> None:
        """``n`` model calls made at once on an executor (``ChainEvaluation.evaluate_batch``)."""
        self.counts.logp_evals += n

    def key(self, q: np.ndarray) -> bytes:
        """Cache key of ``q``: inside a CompoundStep other blocks change between our steps,
        so a cached logp is only valid for the same q *and* the same values of the rest."""
        parts = [q.tobytes()]
        parts += [np.asarray(s.get_value(borrow=True)).tobytes()
                  for s in self.functions.shared.values()]
        return b"".join(parts)

    def evaluate(self, chain, q: np.ndarray, with_grad: bool, tune: bool,
                 retry: bool = False) -> ChainPoint:
        """The true potential (and gradient) at ``q``, counted in ``chain``.

        ``retry``: ``q`` is the chain's state (no proposal to reject), where a model that
        raises is tried once more before ``check_start`` stops the run: a transient failure
        (a server's, a solver's flake) then costs one call, not the run.

        A model that raises, or whose logp is NaN or +inf, or whose gradient is not finite,
        is a rejection at ``q`` (potential +inf; :meth:`reject`); ``check_start`` turns one
        at the chain's state into today's clear errors."""
        q = self.functions.representable(q)
        try:
            if with_grad:
                logp, grad = self.functions.logp_and_grad(q)
                self.counts.grad_evals += 1
                self.counts.logp_evals += self.functions.extra_logp_per_gradient
                potential, grad_u = -logp, -grad
            else:
                logp = self.functions.logp(q)
                potential, grad_u = -logp, None
        except MemoryError:
            raise
        except Exception as err:  # noqa: BLE001 - any model failure: a rejection here
            # Kept as text: PyTensor attaches the Apply node (and so the user's Op) to its
            # errors, and once tblib's pickling support is installed (importing
            # dask.distributed does it) a worker process pickles the whole cause chain; an
            # Op that does not pickle then turned our message into "Connection reset by
            # peer" under cores > 1.
            self.counts.logp_evals += 1
            self.counts.grad_evals += int(with_grad)
            if retry:
                self.counts.eval_failures += 1
                return self.evaluate(chain, q, with_grad, tune)
            return self.reject(chain, q, with_grad, tune, RAISED,
                               f"{type(err).__name__}: {err}",
                               "".join(traceback.format_exception(err)))
        self.counts.logp_evals += 1
        if potential == -np.inf:
            return self.reject(chain, q, with_grad, tune, INFINITE_LOGP,
                               "an infinite density, which cannot be sampled: make the "
                               "model's logp finite there (model.point_logps())")
        if np.isnan(potential):
            return self.reject(chain, q, with_grad, tune, NAN_LOGP, "logp = NaN")
        if grad_u is not None and np.isfinite(potential) and not np.all(np.isfinite(grad_u)):
            return self.reject(chain, q, with_grad, tune, NAN_GRADIENT,
                               f"logp = {-potential:.6g} with a non-finite gradient")
        self._answered(chain)
        return ChainPoint(q, potential, grad_u)

    # ----------------------------------------------------------- failures
    def reject(self, chain, q: np.ndarray, with_grad: bool, tune: bool, kind: str,
               message: str, cause: str | None = None) -> ChainPoint:
        """A failed evaluation at ``q``: counted (stat ``eval_failures``), its first
        occurrence of each kind logged (through the chain's pending warnings, which PyMC logs
        in the parent process with any ``cores``), never training data or stored (potential
        +inf: ``ChainEvaluation.keep`` skips it); a rejection wherever it was proposed.

        Stops the run when the chain has found no point where the model answers in
        ``FAILURES_IN_A_ROW`` evaluations (a model that fails everywhere, a server gone)."""
        phase = "tune" if tune else "draw"
        where = f"sampler iteration {chain.iteration} ({phase} phase) at {self.describe(q)}"
        self._last_failure = (q.tobytes(), kind, where, message, cause)
        self.counts.eval_failures += 1
        log = self.failures
        log.in_a_row += 1
        log.raised += kind == RAISED
        if log.first_in_a_row is None:
            log.first_in_a_row = (f"{where}: {message}", cause)
        if log.in_a_row >= FAILURES_IN_A_ROW:
            first, first_cause = log.first_in_a_row
            error = ModelEvaluationError(
                f"{self.owner}: the model's logp failed (raised, or gave NaN / +inf) at each of "
                f"the last {log.in_a_row} points the chain tried, with no point between where "
                f"it answered: the model fails wherever the chain can go. The first of them, "
                f"at {first}"
            )
            raise error from (ModelFailure(first_cause) if first_cause else None)
        if kind not in log.told:
            log.told = log.told | {kind}
            what = {RAISED: "raised", NAN_LOGP: "is NaN", INFINITE_LOGP: "is +inf",
                    NAN_GRADIENT: "has a non-finite gradient"}[kind]
            self._queue(chain, WarningType.BAD_PARAMS,
                        f"the model's logp {what} at {where}: {_first_line(message)}. That point is "
                        "rejected and sampling goes on (Stan's rule); stat `eval_failures` "
                        "counts such evaluations. Told once for each kind of failure.",
                        "info" if kind == NAN_LOGP else "warn")
        self._judge(chain)
        grad = np.full(q.shape, np.nan) if with_grad else None
        return ChainPoint(q, np.inf, grad)

    def from_batch(self, chain, points: np.ndarray, logp: np.ndarray, errors: dict,
                   tune: bool) -> list[ChainPoint]:
        """Points of a batch (``batch_evaluation.evaluate_logp``, already counted in
        ``logp_evals``): a row that failed twice, or whose logp is NaN or +inf, is a
        rejection as in :meth:`evaluate`."""
        out = []
        for row, (q, value) in enumerate(zip(points, logp)):
            message = errors.get(row)
            if message is not None:
                kind = INFINITE_LOGP if message == BATCH_INFINITE else RAISED
                out.append(self.reject(chain, q, False, tune, kind, message))
            elif np.isnan(value):
                out.append(self.reject(chain, q, False, tune, NAN_LOGP, "logp = NaN"))
            else:
                # -inf: outside the support, a rejection but an answer
                self._answered(chain)
                out.append(ChainPoint(q, -float(value) if np.isfinite(value) else np.inf, None))
        return out

    def _answered(self, chain) -> None:
        """The model gave a value (finite, or -inf: outside the support)."""
        log = self.failures
        log.in_a_row, log.first_in_a_row = 0, None
        if self.counts.logp_evals >= log.next_check:
            self._judge(chain)

    def _judge(self, chain) -> None:
        """Warn once when failures are frequent: more than ``FREQUENT_SHARE`` of the chain's
        evaluations, judged at ``FREQUENT_AFTER`` evaluations and each doubling after (a few
        looks, so a model failing one call in 50 is not flagged by chance)."""
        log, counts = self.failures, self.counts
        if log.frequent_told or counts.logp_evals < log.next_check:
            return
        while log.next_check <= counts.logp_evals:
            log.next_check *= 2
        share = counts.eval_failures / max(counts.logp_evals, 1)
        if share > FREQUENT_SHARE:
            log.frequent_told = True
            self._queue(chain, WarningType.BAD_PARAMS,
                        f"the model's logp failed (raised, or gave NaN / +inf) at "
                        f"{counts.eval_failures} of a chain's {counts.logp_evals} evaluations "
                        f"({share:.0%}). Each is a rejected proposal, so the draws stay exact, "
                        "but they cost evaluations and slow mixing. Make the model answer "
                        "there, or, for points outside the posterior's support, return -inf "
                        "(stat `eval_failures` counts them).", "warn")

    def _queue(self, chain, kind, message: str, level: str) -> None:
        if self.warn is not None:
            self.warn(kind, message, level, chain.iteration)

    def check_start(self, point: ChainPoint) -> ChainPoint:
        """``point`` (the chain's state) if its logp is finite, else a clear error: no
        chain can start, or stay, where the model has no density."""
        if np.isfinite(point.potential):
            return point
        failure = self._last_failure
        if failure is not None and failure[0] == point.q.tobytes():
            _, kind, where, message, cause = failure
            if kind == RAISED:
                raise ModelEvaluationError(
                    f"{self.owner}: the model's logp raised at {where}, the chain's state: "
                    f"{message}"
                ) from (ModelFailure(cause) if cause else None)
            if kind == INFINITE_LOGP:
                raise infinite_logp_error(self.owner, where.split(" at ", 1)[1],
                                          where.split(" at ", 1)[0] + ", the chain's state")
        raise SamplingError(
            f"{self.owner}: the model's logp is {-point.potential} at the "
            "starting point of the chain. Check the initial values (model.debug(), "
            "model.point_logps()) or pass `initvals` to pm.sample."
        )

    def describe(self, q: np.ndarray) -> str:
        """``q`` split into the step's variables, e.g. ``"x = [0.1 2.3], s_log__ = -1.2"``."""
        parts, start = [], 0
        for name, shape in self.layout:
            size = int(np.prod(shape, dtype=int))
            value = np.reshape(q[start:start + size], shape)
            parts.append(f"{name} = {np.array2string(np.asarray(value), precision=4, threshold=8)}")
            start += size
        return ", ".join(parts)


def _first_line(message: str) -> str:
    """The model's own message, without PyTensor's report of the Apply node and its inputs."""
    return message.split("\nApply node that caused the error", 1)[0].strip()


def infinite_logp_error(owner: str, described: str, where: str) -> SamplingError:
    """The error for a point where the model's logp is ``+inf`` (``where``: when it was met)."""
    return SamplingError(
        f"{owner}: the model's logp is +inf at {described} ({where}; values of the model's "
        "value variables, transformed ones in their unconstrained space). An infinite "
        "density cannot be sampled: the chain would stay at that point forever. It usually "
        "comes from a pm.Potential or a custom logp returning +inf (e.g. -log(0)) or a "
        "density unbounded at a boundary. Make the model's logp finite there "
        "(model.point_logps() at these values shows which term is infinite)."
    )
