"""Counting model evaluations where they happen.

Every benchmark model routes its parameters through :func:`count_evaluations` before they
enter the expensive likelihood term.  The wrapper is an identity :class:`~pytensor.graph.op.Op`
whose ``perform`` increments a counter, so *any* compiled function that needs the likelihood
(``model.compile_logp()``, NUTS's joint logp+gradient function, a step method's own compiled
function, a ``delta_logp`` with two copies of the graph, ...) is counted the same way, whoever
compiled it.  Its gradient is a second counting identity applied to the incoming output
gradient, so every backward pass through the likelihood is counted as well (once per forward
pass, however many copies of the backward graph a function holds).

Semantics of the two counts
---------------------------
``counter.logp``
    Forward passes through the likelihood term: one per call of a compiled function that
    needs the likelihood's value or its gradient.  A gradient-only function
    (``model.compile_dlogp()``) increments ``logp`` too, because a gradient needs the forward
    pass (as an adjoint PDE solve needs the forward solve; here the backward node depends on
    the forward node by construction).  A joint logp+gradient function increments ``logp``
    once, not twice: both share the one forward node.
``counter.grad``
    Backward passes (gradient evaluations) through the likelihood term, at most one per
    forward pass.

Counts are made in the process that evaluates the function: with ``pm.sample(cores>1)`` the
model (and its counter) is copied into worker processes and the parent's counter does not move.
Benchmarks therefore sample with ``cores=1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.gradient import DisconnectedType, disconnected_type

from pymc_surrogate.compat import VJPOp

__all__ = [
    "EvaluationCounter",
    "CountingIdentity",
    "CountingGradIdentity",
    "count_evaluations",
    "ModelInfo",
    "evaluation_counts",
]


class EvaluationCounter:
    """Picklable tally of model evaluations.

    Attributes
    ----------
    logp : int
        Number of forward evaluations of the counted likelihood term.
    grad : int
        Number of gradient (backward) evaluations of the counted likelihood term.
    """

    __slots__ = ("logp", "grad", "_token", "_grad_tokens")

    def __init__(self, logp: int = 0, grad: int = 0) -> None:
        self.logp = int(logp)
        self.grad = int(grad)
        self._token = 0  # id of the latest forward pass; never reset, so ids stay unique
        self._grad_tokens: set[int] = set()  # forward passes whose gradient was counted

    def reset(self) -> None:
        """Set both counts to zero."""
        self.logp = 0
        self.grad = 0
        self._grad_tokens.clear()

    def snapshot(self) -> tuple[int, int]:
        """Return the current ``(logp, grad)`` counts."""
        return self.logp, self.grad

    def _count_forward(self) -> int:
        self.logp += 1
        self._token += 1
        return self._token

    def _count_backward(self, token: int) -> None:
        # Several backward nodes may stem from one forward pass (PyMC differentiates once per
        # value variable and PyTensor cannot always merge the copies): count one per pass.
        if token in self._grad_tokens:
            return
        self.grad += 1
        self._grad_tokens.add(token)
        if len(self._grad_tokens) > 4096:
            self._grad_tokens = {t for t in self._grad_tokens if t > self._token - 1024}

    # __slots__ classes need explicit pickle support.
    def __getstate__(self) -> tuple[int, int, int]:
        return self.logp, self.grad, self._token

    def __setstate__(self, state: tuple[int, int, int]) -> None:
        self.logp, self.grad, self._token = state
        self._grad_tokens = set()

    def __repr__(self) -> str:
        return f"EvaluationCounter(logp={self.logp}, grad={self.grad})"


class CountingIdentity(VJPOp):
    """Identity Op that counts forward evaluations; its gradient counts backward ones.

    ``CountingIdentity(counter)(x)`` returns ``[x, token]``: ``x`` unchanged (a view, no copy)
    and an int64 id of this forward pass.  Its gradient is :class:`CountingGradIdentity`
    applied to the incoming output gradient and to the token, which counts one gradient
    evaluation per forward pass however many copies of the backward node a compiled function
    contains, and which makes every gradient computation run the forward node too.

    Parameters
    ----------
    counter : EvaluationCounter
        Tally to increment on every ``perform``.

    Notes
    -----
    * ``do_constant_folding`` returns False, so even a constant input is evaluated, and
      counted, at run time and never at compile time.
    * Ops are equal when they share the counter (``__props__``; the counter compares by
      identity), so PyTensor may merge two counting nodes on the *same* input into one;
      nodes on different inputs (the two points of a ``delta_logp``) stay separate and count
      separately, as they should.
    """

    __props__ = ("counter",)
    view_map = {0: [0]}

    def __init__(self, counter: EvaluationCounter) -> None:
        self.counter = counter

    def make_node(self, x: Any) -> Apply:
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [x.type(), pt.lscalar()])

    def perform(self, node: Apply, inputs: list[np.ndarray], output_storage: list) -> None:
        token = self.counter._count_forward()
        output_storage[0][0] = inputs[0]
        output_storage[1][0] = np.asarray(token, dtype=np.int64)

    def infer_shape(self, fgraph, node, input_shapes):
        # Lets shape computations bypass the Op (so they are not counted as evaluations).
        return [input_shapes[0], ()]

    def do_constant_folding(self, fgraph, node) -> bool:
        return False

    def connection_pattern(self, node):
        return [[True, False]]

    def vjp(self, inputs, outputs, cotangents):
        g = cotangents[0]
        if isinstance(g.type, DisconnectedType):
            return [g]
        return [CountingGradIdentity(self.counter)(g, outputs[1])]

    def __str__(self) -> str:
        return "CountingIdentity"


class CountingGradIdentity(VJPOp):
    """Identity on a gradient that counts one backward pass per forward token.

    Parameters
    ----------
    counter : EvaluationCounter
        Tally whose ``grad`` field is incremented.
    """

    __props__ = ("counter",)
    view_map = {0: [0]}

    def __init__(self, counter: EvaluationCounter) -> None:
        self.counter = counter

    def make_node(self, g: Any, token: Any) -> Apply:
        g = pt.as_tensor_variable(g)
        token = pt.as_tensor_variable(token)
        return Apply(self, [g, token], [g.type()])

    def perform(self, node: Apply, inputs: list[np.ndarray], output_storage: list) -> None:
        self.counter._count_backward(int(inputs[1]))
        output_storage[0][0] = inputs[0]

    def infer_shape(self, fgraph, node, input_shapes):
        return [input_shapes[0]]

    def do_constant_folding(self, fgraph, node) -> bool:
        return False

    def connection_pattern(self, node):
        return [[True], [False]]

    def vjp(self, inputs, outputs, cotangents):
        # Higher derivatives pass through uncounted.
        return [cotangents[0], disconnected_type()]

    def __str__(self) -> str:
        return "CountingGradIdentity"


def count_evaluations(x: Any, counter: EvaluationCounter) -> pt.TensorVariable:
    """Wrap a parameter tensor so that evaluations depending on it are counted.

    Parameters
    ----------
    x : tensor-like
        Parameter tensor (typically the model's free variable, or a stack of several) that
        feeds the expensive likelihood term.  Wrap all parameters of one likelihood term in
        one call (stack them if needed): separately wrapped tensors count separately.
    counter : EvaluationCounter
        Tally to increment.

    Returns
    -------
    TensorVariable
        ``x`` itself, numerically; use it in place of ``x`` inside the likelihood.
    """
    return CountingIdentity(counter)(x)[0]


@dataclass
class ModelInfo:
    """What a benchmark needs to know about a model beyond the ``pm.Model``.

    Attributes
    ----------
    name : str
        Short name of the model.
    counter : EvaluationCounter
        Tally of likelihood evaluations (see the module docstring for what is counted).
    param_names : list of str
        Names of the sampled variables as they appear in the posterior trace.
    ref_mean, ref_sd : dict of str to ndarray, or None
        Exact (analytic or quadrature) posterior mean and standard deviation per parameter,
        None when not known.
    description : str
        One-paragraph description with the paper reference.
    has_gradient : bool
        Whether the model's logp has a PyTensor gradient.
    extra : dict
        Anything else worth keeping (true parameters, data settings, ...).
    """

    name: str
    counter: EvaluationCounter
    param_names: list[str]
    ref_mean: dict[str, np.ndarray] | None = None
    ref_sd: dict[str, np.ndarray] | None = None
    description: str = ""
    has_gradient: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


def evaluation_counts(info: Any) -> tuple[int, int]:
    """Current ``(logp, grad)`` evaluation counts of a model's info record.

    Works with :class:`ModelInfo` (``info.counter``) and with records that keep
    their counts on a problem object (``info.problem.n_forward`` / ``n_adjoint``, as the
    elliptic PDE model does).

    Parameters
    ----------
    info : object
        The second item returned by a model builder.

    Returns
    -------
    tuple of int
        Forward and gradient evaluation counts so far.

    Raises
    ------
    AttributeError
        If the record exposes no counter.
    """
    counter = getattr(info, "counter", None)
    if counter is not None and hasattr(counter, "logp"):
        return int(counter.logp), int(getattr(counter, "grad", 0))
    problem = getattr(info, "problem", None)
    if problem is not None and hasattr(problem, "n_forward"):
        return int(problem.n_forward), int(getattr(problem, "n_adjoint", 0))
    raise AttributeError(f"{type(info).__name__} exposes no evaluation counter")
