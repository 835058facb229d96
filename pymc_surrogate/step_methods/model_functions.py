"""The true model's logp (and gradient) compiled for one step's block of variables."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.gradient import NullTypeGradError

from pymc.pytensorf import compile as compile_pymc
from pymc.pytensorf import join_nonshared_inputs, make_shared_replacements

__all__ = ["ModelFunctions", "ModelEvaluationError"]


class ModelEvaluationError(RuntimeError):
    """The model's logp raised; the message names the sampler iteration and the cause."""


class ModelFunctions:
    """Compiled ``logp(q)`` and, where the model has one, ``logp_and_grad(q)``.

    Variables outside the block are PyTensor shared variables (``shared``) that the
    enclosing ``ArrayStepShared`` refreshes before each step, so the functions stay right
    inside a ``CompoundStep``.

    Parameters
    ----------
    model : pymc.Model
    vars : list of value variables
    initial_point : dict
    use_gradient : bool or None
        ``None`` detects whether PyTensor can differentiate the logp; ``False`` treats the
        model as a black box even if it could.
    compile_kwargs : dict, optional
    """

    def __init__(self, model, vars, initial_point, use_gradient=None, compile_kwargs=None):
        compile_kwargs = dict(compile_kwargs or {})
        self.shared = make_shared_replacements(initial_point, vars, model)
        [logp], joined = join_nonshared_inputs(initial_point, [model.logp()], vars, self.shared)
        self._logp = compile_pymc([joined], logp, **compile_kwargs)
        self._logp.trust_input = True

        self.has_gradient = False
        self._logp_and_grad = None
        if use_gradient is None or use_gradient:
            grad = self._try_gradient(logp, joined)
            if grad is None and use_gradient:
                raise ValueError(
                    "use_gradient=True but PyTensor cannot differentiate this model's logp "
                    "(an Op without a gradient). Use use_gradient=None or False to sample it "
                    "as a black box."
                )
            if grad is not None:
                self._logp_and_grad = compile_pymc([joined], [logp, grad], **compile_kwargs)
                self._logp_and_grad.trust_input = True
                self.has_gradient = True

    @staticmethod
    def _try_gradient(logp, joined):
        try:
            return pytensor.grad(logp, joined)
        except (NotImplementedError, NullTypeGradError, TypeError):
            return None

    def logp(self, q: np.ndarray) -> float:
        return float(self._logp(q))

    def logp_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        logp, grad = self._logp_and_grad(q)
        return float(logp), np.asarray(grad, dtype=np.float64)
