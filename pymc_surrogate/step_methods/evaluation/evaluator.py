"""The true model at a point: compiled logp (and gradient), the cache key, counts, errors."""

from __future__ import annotations

import traceback

import numpy as np
from pymc.exceptions import SamplingError

from pymc_surrogate.core.types import ChainPoint
from pymc_surrogate.step_methods.evaluation.model_functions import ModelEvaluationError, ModelFunctions

__all__ = ["Evaluator", "ModelEvaluationError", "ModelFailure"]


class ModelFailure(Exception):
    """The model's own error, as the text of its traceback (picklable whatever it held)."""


class Evaluator:
    """Evaluates the step's block of the true model and maps its failures to clear errors.

    Parameters
    ----------
    functions : ModelFunctions
    layout : list of (name, shape)
        The value variables in the raveled ``q``, for error messages.
    owner : str
        The step's class name, for error messages.
    """

    def __init__(self, functions: ModelFunctions, layout: list, owner: str):
        self.functions = functions
        self.layout = layout
        self.owner = owner

    def key(self, q: np.ndarray) -> bytes:
        """Cache key of ``q``: inside a CompoundStep other blocks change between our steps,
        so a cached logp is only valid for the same q *and* the same values of the rest."""
        parts = [q.tobytes()]
        parts += [np.asarray(s.get_value(borrow=True)).tobytes()
                  for s in self.functions.shared.values()]
        return b"".join(parts)

    def evaluate(self, chain, q: np.ndarray, with_grad: bool, tune: bool) -> ChainPoint:
        """The true potential (and gradient) at ``q``, counted in ``chain``."""
        q = self.functions.representable(q)
        phase = "tune" if tune else "draw"
        failure = None
        try:
            if with_grad:
                logp, grad = self.functions.logp_and_grad(q)
                chain.counts.grad_evals += 1
                chain.counts.logp_evals += self.functions.extra_logp_per_gradient
                potential, grad_u = -logp, -grad
            else:
                logp = self.functions.logp(q)
                potential, grad_u = -logp, None
        except Exception as err:  # noqa: BLE001 - any model failure, reported below
            failure = err
        if failure is not None:
            # Raised outside the handler, with the model's error as text: PyTensor attaches
            # the Apply node (and so the user's Op) to its errors, and once tblib's pickling
            # support is installed (importing dask.distributed does it) a worker process
            # pickles the whole cause chain; an Op that does not pickle then turned our
            # message into "Connection reset by peer" under cores > 1.
            raise ModelEvaluationError(
                f"{self.owner}: the model's logp raised at sampler iteration "
                f"{chain.iteration} ({phase} phase) at {self.describe(q)}: "
                f"{type(failure).__name__}: {failure}"
            ) from ModelFailure("".join(traceback.format_exception(failure)))
        chain.counts.logp_evals += 1
        if potential == -np.inf:
            # Accepted, such a point would absorb the chain: every proposal loses against it.
            raise infinite_logp_error(
                self.owner, self.describe(q), f"sampler iteration {chain.iteration}, {phase} phase"
            )
        if np.isnan(potential):
            potential = np.inf  # NaN logp is a rejection, like -inf
        return ChainPoint(q, potential, grad_u)

    def check_start(self, point: ChainPoint) -> ChainPoint:
        if not np.isfinite(point.potential):
            raise SamplingError(
                f"{self.owner}: the model's logp is {-point.potential} at the "
                "starting point of the chain. Check the initial values (model.debug(), "
                "model.point_logps()) or pass `initvals` to pm.sample."
            )
        return point

    def describe(self, q: np.ndarray) -> str:
        """``q`` split into the step's variables, e.g. ``"x = [0.1 2.3], s_log__ = -1.2"``."""
        parts, start = [], 0
        for name, shape in self.layout:
            size = int(np.prod(shape, dtype=int))
            value = np.reshape(q[start:start + size], shape)
            parts.append(f"{name} = {np.array2string(np.asarray(value), precision=4, threshold=8)}")
            start += size
        return ", ".join(parts)


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
