"""A black-box PyTensor Op solving an initial-value problem with ``scipy.integrate.solve_ivp``.

Shared by the ODE posteriors (:mod:`~benchmarks.posteriordb.lotka_volterra`,
:mod:`~benchmarks.posteriordb.one_comp_mm_elim_abs`).  The Op has no gradient on purpose:
it stands for the expensive simulators the package targets, so a model built on it has none.
Not a posterior module (listed in ``_NOT_POSTERIORS`` of :mod:`benchmarks.posteriordb`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from scipy.integrate import solve_ivp

__all__ = ["MAX_RHS_CALLS", "ODESolution"]

#: Default right-hand-side budget per solve (the output is unusable beyond it): it bounds the
#: cost of far-out proposals.  At the posteriors here a solve takes a few hundred calls.
MAX_RHS_CALLS = 50_000


class _Budget(Exception):
    pass


class _BudgetedRHS:
    """``rhs(t, y, params, *args)`` as ``f(t, y)`` with a call budget (picklable)."""

    def __init__(
        self, rhs: Callable[..., Sequence[float]], params: tuple[float, ...],
        args: tuple[float, ...], budget: int,
    ) -> None:
        self.rhs, self.params, self.args = rhs, params, args
        self.calls, self.budget = 0, budget

    def __call__(self, t: float, y: np.ndarray) -> Sequence[float]:
        self.calls += 1
        if self.calls > self.budget:
            raise _Budget
        return self.rhs(t, y, self.params, *self.args)


class ODESolution(Op):
    """States ``y[n, k]`` at ``times`` from parameters ``params`` and initial state ``y0``.

    The Op takes two float64 vectors, ``params`` and ``y0`` (the state at ``t0``), and
    returns a ``(len(times), n_states)`` matrix.  It defines no ``grad``: PyTensor cannot
    differentiate a model built on it.

    Parameters
    ----------
    rhs : callable
        ``rhs(t, y, params, *args) -> sequence of float``, the time derivative; ``params``
        is a tuple of Python floats.  A module-level function, so that the Op pickles and
        compares equal across rebuilds (it is one of ``__props__``).
    times : sequence of float
        Output times (> ``t0``, increasing).
    n_states : int
        Length of the state vector.
    t0 : float
        Initial time.
    args : tuple of float
        Constant data passed to ``rhs`` after ``params``.
    rtol, atol : float
        ``solve_ivp`` tolerances.
    method : str
        ``solve_ivp`` method.
    max_rhs_calls : int
        Right-hand-side budget per solve; beyond it the output is zeros.

    Notes
    -----
    The outputs are meant for a log scale (lognormal likelihoods): failed or over-budget
    solves, non-finite inputs, and non-positive or non-finite states all come out as 0, so
    that ``log(y)`` is ``-inf`` and the point is rejected (as Stan rejects a failed solve).
    """

    __props__ = ("rhs", "times", "n_states", "t0", "args", "rtol", "atol", "method",
                 "max_rhs_calls")

    def __init__(
        self,
        rhs: Callable[..., Sequence[float]],
        times: Sequence[float],
        n_states: int,
        t0: float = 0.0,
        args: Sequence[float] = (),
        rtol: float = 1e-8,
        atol: float = 1e-8,
        method: str = "LSODA",
        max_rhs_calls: int = MAX_RHS_CALLS,
    ) -> None:
        self.rhs = rhs
        self.times = tuple(float(t) for t in times)
        self.n_states = int(n_states)
        self.t0 = float(t0)
        self.args = tuple(float(a) for a in args)
        self.rtol, self.atol = float(rtol), float(atol)
        self.method = str(method)
        self.max_rhs_calls = int(max_rhs_calls)

    def make_node(self, params: Any, y0: Any) -> Apply:
        params = pt.as_tensor_variable(params, dtype="float64")
        y0 = pt.as_tensor_variable(y0, dtype="float64")
        return Apply(self, [params, y0], [pt.dmatrix()])

    def solve(self, params: np.ndarray, y0: np.ndarray) -> np.ndarray:
        """The solution as a ``(len(times), n_states)`` array, zeros where it is unusable."""
        out = np.zeros((len(self.times), self.n_states))
        if not (np.all(np.isfinite(params)) and np.all(np.isfinite(y0))):
            return out
        rhs = _BudgetedRHS(
            self.rhs, tuple(float(p) for p in np.ravel(params)), self.args, self.max_rhs_calls
        )
        try:
            sol = solve_ivp(
                rhs,
                (self.t0, self.times[-1]),
                np.asarray(y0, dtype=float),
                method=self.method,
                t_eval=self.times,
                rtol=self.rtol,
                atol=self.atol,
            )
        except _Budget:
            return out
        if not sol.success or sol.y.shape[1] != len(self.times):
            return out
        y = sol.y.T
        return np.where(np.isfinite(y) & (y > 0), y, 0.0)

    def perform(self, node: Apply, inputs: list[np.ndarray], outputs: list) -> None:
        outputs[0][0] = self.solve(inputs[0], inputs[1])

    def __str__(self) -> str:  # the default would print the function's address
        return f"{type(self).__name__}{{{getattr(self.rhs, '__name__', self.rhs)}}}"

    def infer_shape(self, fgraph, node, input_shapes):
        return [(len(self.times), self.n_states)]
