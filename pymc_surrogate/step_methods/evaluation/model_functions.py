"""The true model's logp (and gradient) compiled for one step's block of variables."""

from __future__ import annotations

import logging

import numpy as np
import pytensor
from pymc.pytensorf import compile as compile_pymc
from pymc.pytensorf import join_nonshared_inputs, make_shared_replacements
from pytensor.gradient import NullTypeGradError

__all__ = ["ModelFunctions", "ModelEvaluationError", "symbolic_gradient"]


class ModelEvaluationError(RuntimeError):
    """The model's logp raised; the message names the sampler iteration and the cause."""


#: Relative step of central differences: the cube root of float64's machine epsilon
#: balances truncation (h^2) against rounding (eps / h).
FINITE_DIFFERENCE_STEP = 6e-6
#: Machine epsilons of ``|logp|`` by which a difference of two logps is taken to be rounded
#: (their last bits; a solver's own tolerance can be far larger).
DIFFERENCE_ROUNDING = 1.0


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
    use_gradient : "auto", True or False
        "auto" detects whether PyTensor can differentiate the logp; ``False`` treats the
        model as a black box even if it could; ``True`` requires the gradient.
    compile_kwargs : dict, optional
    finite_difference : bool
        A model without a symbolic gradient gets one by central differences: ``2 d`` more
        logp evaluations per gradient (``extra_logp_per_gradient``, counted by the caller).
    """

    def __init__(self, model, vars, initial_point, use_gradient="auto", compile_kwargs=None,
                 finite_difference=False):
        compile_kwargs = dict(compile_kwargs or {})
        self.shared = make_shared_replacements(initial_point, vars, model)
        [logp], joined = join_nonshared_inputs(initial_point, [model.logp()], vars, self.shared)
        # The block's values in the model's own precision (float32 under
        # pytensor.config.floatX="float32"): the compiled functions trust their input, so
        # every call casts to it (see ``representable``).
        self.dtype = np.dtype(joined.dtype)
        if self.dtype.kind != "f":
            raise TypeError(
                f"The step's variables {', '.join(v.name for v in vars)} join into a {self.dtype} "
                "vector; a surrogate step samples floating-point variables only."
            )
        grad = symbolic_gradient(logp, joined) if use_gradient is not False else None
        compile_kwargs = compile_mode([logp] if grad is None else [logp, grad], compile_kwargs)
        self._logp = compile_pymc([joined], logp, **compile_kwargs)
        self._logp.trust_input = True

        self.has_gradient = False
        self._logp_and_grad = None
        if use_gradient is not False:
            if grad is None and use_gradient is True:
                raise ValueError(
                    "use_gradient=True but PyTensor cannot differentiate this model's logp "
                    "(an Op without a gradient). Use use_gradient='auto' or False to sample it "
                    "as a black box."
                )
            if grad is not None:
                self._logp_and_grad = compile_pymc([joined], [logp, grad], **compile_kwargs)
                self._logp_and_grad.trust_input = True
                self.has_gradient = True
        #: logp evaluations a gradient costs beyond its own (central differences: 2 d)
        self.extra_logp_per_gradient = 0
        self.finite_difference = bool(finite_difference and not self.has_gradient)
        #: Each coordinate's scale, to which central-difference steps are relative (ones
        #: unless the step sets it, e.g. from the prior's spread: ``difference_scale``).
        self.difference_scale = None
        if self.finite_difference:
            self.has_gradient = True
            self.extra_logp_per_gradient = 2 * int(sum(np.size(initial_point[v.name]) for v in vars))

    def shared_values(self) -> dict:
        """The current values of the variables outside the block, by name (what
        ``ArrayStepShared`` last set)."""
        return {var.name: np.array(shared.get_value(borrow=True))
                for var, shared in self.shared.items()}

    def representable(self, q: np.ndarray) -> np.ndarray:
        """``q`` as float64, rounded to the model's precision: the point the compiled
        functions actually evaluate, so that the chain's state and its logp agree."""
        if self.dtype == np.float64:
            return np.array(q, dtype=np.float64)
        return np.asarray(q, dtype=self.dtype).astype(np.float64)

    def logp(self, q: np.ndarray) -> float:
        return float(self._logp(np.asarray(q, dtype=self.dtype)))

    def logp_and_grad(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        if self.finite_difference:
            return self._central_differences(q)
        logp, grad = self._logp_and_grad(np.asarray(q, dtype=self.dtype))
        return float(logp), np.asarray(grad, dtype=np.float64)

    def _central_differences(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """``logp`` and its gradient by central differences (2 d + 1 evaluations).

        Steps of ``FINITE_DIFFERENCE_STEP`` times the larger of ``|q_i|`` and the
        coordinate's scale (``difference_scale``, 1 where unset): a step of 6e-6 in a
        coordinate whose posterior sd is 1e4 moves the logp by 1e-13, its rounding.
        scipy's ``approx_fprime`` differences forward only (error O(h), not O(h^2))."""
        q = np.asarray(q, dtype=np.float64)
        steps = self._difference_steps(q)
        grad = np.empty(q.size)
        shifted = q.copy()
        for i, h in enumerate(steps):
            shifted[i] = q[i] + h
            upper = self.logp(shifted)
            shifted[i] = q[i] - h
            grad[i] = (upper - self.logp(shifted)) / (2.0 * h)
            shifted[i] = q[i]
        return self.logp(q), grad

    def _difference_steps(self, q: np.ndarray) -> np.ndarray:
        scale = 1.0 if self.difference_scale is None else self.difference_scale
        return FINITE_DIFFERENCE_STEP * np.maximum(scale, np.abs(q))

    def rounding_at(self, point) -> np.ndarray:
        """``difference_rounding`` at a ``ChainPoint`` (its potential is ``-logp``)."""
        return self.difference_rounding(point.q, -point.potential)

    def difference_rounding(self, q: np.ndarray, logp: float) -> np.ndarray:
        """The rounding error of each coordinate of the central-difference gradient at
        ``q`` (where the logp is ``logp``): ``DIFFERENCE_ROUNDING`` machine epsilons of
        ``max(|logp|, 1)`` over the step. A logp of 1e2 rounds to 2e-14, and a step of
        6e-6 turns that into 4e-9 in the gradient: more than the change of a gradient
        whose coordinate has sd 1e3 over a step of 1e-6 (1e-12)."""
        q = np.asarray(q, dtype=np.float64)
        magnitude = max(abs(float(logp)), 1.0) if np.isfinite(logp) else np.inf
        return DIFFERENCE_ROUNDING * np.finfo(np.float64).eps * magnitude / self._difference_steps(q)


#: The sets of Ops already reported by ``compile_mode`` (it says so once for each).
_TOLD: set[str] = set()


def compile_mode(outputs, compile_kwargs: dict) -> dict:
    """``compile_kwargs``, with ``mode="CVM"`` where the default backend is Numba and the
    graph of ``outputs`` holds an Op that Numba can only run in object mode.

    PyTensor 3 compiles with Numba, which runs an Op without a Numba implementation (every
    Python ``Op``: a black-box likelihood, a solver, a model server) through Python in
    object mode, and the graph around it with it. PyMC 6.4 / PyTensor 3.3.8: a logistic
    regression (N = 1e4, d = 50) whose parameters pass through a Python Op, 4.97-5.91 ms a
    logp call under Numba and 0.66-1.14 ms under CVM; the README's small black box,
    12.1-13.1 against 7.2-8.6 us. Pure PyMC models, whose Ops all have Numba
    implementations, keep the default. A ``mode`` the user gives is kept.
    """
    if "mode" in compile_kwargs:
        return compile_kwargs
    slow = _object_mode_ops(outputs)
    if not slow:
        return compile_kwargs
    names = ", ".join(sorted(slow))
    if names not in _TOLD:
        _TOLD.add(names)
        logging.getLogger("pymc").info(
            "The model's graph holds Ops that PyTensor's Numba backend runs in Python "
            f"(object mode): {names}. The step's functions are compiled with the C backend "
            "(mode='CVM'), faster per call; pass compile_kwargs={'mode': ...} to choose."
        )
    return {**compile_kwargs, "mode": "CVM"}


def _object_mode_ops(outputs) -> set[str]:
    """Names of the Ops that the default backend, when it is Numba, would run in object
    mode: those of the graph of ``outputs`` *after* the default mode's rewrites (which
    remove Ops such as a ``Blockwise`` over a constant: MvNormal's graph holds one that no
    compiled function keeps), with no Numba implementation. Empty where the default
    backend is not Numba (PyTensor 2 compiles with C)."""
    from pytensor.compile.mode import get_default_mode
    from pytensor.graph.fg import FunctionGraph

    mode = get_default_mode()
    if type(mode.linker).__name__ != "NumbaLinker":
        return set()
    try:
        import pytensor.link.numba.dispatch  # noqa: F401 - registers every implementation
        from pytensor.link.numba.dispatch.basic import numba_funcify
    except ImportError:  # numba missing: PyTensor falls back itself
        return set()
    fallback = numba_funcify.dispatch(object)

    def slow(nodes) -> set[str]:
        return {type(node.op).__name__ for node in nodes
                if numba_funcify.dispatch(type(node.op)) is fallback}

    fgraph = FunctionGraph(outputs=list(outputs), clone=True)
    if not slow(fgraph.apply_nodes):  # rewriting (0.4 s for an MvNormal) only when needed
        return set()
    mode.excluding("inplace").optimizer.rewrite(fgraph)  # inplace needs a compiled function's aliasing
    return slow(fgraph.apply_nodes)


def symbolic_gradient(logp, wrt):
    """The symbolic gradient, or None if an Op of the model has none.

    Only PyTensor's "no gradient" errors mean a black box: ``NotImplementedError`` (the
    default ``Op.grad``) and ``NullTypeGradError`` (a gradient marked undefined or
    unimplemented). Every other error from ``pytensor.grad`` is a broken gradient (the
    other ``TypeError``: an Op's ``grad`` returning None, an integer or a
    non-Variable): sampling the model as a black box would hide it, so it is raised,
    with the way out.
    """
    try:
        return pytensor.grad(logp, wrt)
    except (NotImplementedError, NullTypeGradError):
        return None
    except TypeError as err:
        raise TypeError(
            f"PyTensor could not build the gradient of the model's logp: {err} "
            "An Op's gradient is broken (this is not the 'no gradient' case, which is "
            "an Op.grad raising NotImplementedError or returning grad_undefined). Fix "
            "that Op's grad, or pass use_gradient=False to sample the model as a black box."
        ) from err
