"""Haario's twisted Gaussian ("banana", kmc §6 and App. D.2), with and without a gradient."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from benchmarks.models.counting import EvaluationCounter, ModelInfo, count_evaluations

__all__ = ["make_haario_banana", "haario_banana_logp", "haario_banana_moments"]


def haario_banana_logp(x: np.ndarray, bananicity: float = 0.03, v: float = 100.0) -> np.ndarray:
    """``log pi(x)`` up to a constant, vectorised over the last axis.

    ``x_1 ~ N(0, V)``, ``x_2 + b (x_1^2 - V) ~ N(0, 1)``, ``x_j ~ N(0, 1)`` for ``j >= 3``
    (Haario, Saksman & Tamminen 1999; kmc App. D.2: d = 8, b = 0.03, V = 100).
    """
    x = np.asarray(x, dtype=np.float64)
    twisted = x[..., 1] + bananicity * (x[..., 0] ** 2 - v)
    return -0.5 * (x[..., 0] ** 2 / v + twisted**2 + np.sum(x[..., 2:] ** 2, axis=-1))


def haario_banana_moments(dim: int = 8, bananicity: float = 0.03, v: float = 100.0):
    """Exact mean (0) and sd: ``sqrt(V)``, ``sqrt(1 + 2 b^2 V^2)`` (``Var x_1^2 = 2 V^2``), 1."""
    sd = np.ones(dim)
    sd[0] = np.sqrt(v)
    sd[1] = np.sqrt(1.0 + 2.0 * bananicity**2 * v**2)
    return np.zeros(dim), sd


class HaarioBananaLogp(Op):
    """The banana's log density in numpy: an Op with no gradient (a black box)."""

    __props__ = ("bananicity", "v")

    def __init__(self, bananicity: float, v: float):
        self.bananicity = float(bananicity)
        self.v = float(v)

    def make_node(self, x):
        return Apply(self, [pt.as_tensor_variable(x)], [pt.dscalar()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = np.asarray(haario_banana_logp(inputs[0], self.bananicity, self.v))


def make_haario_banana(
    dim: int = 8, bananicity: float = 0.03, v: float = 100.0, gradient: bool = False
) -> tuple[pm.Model, ModelInfo]:
    """The banana as a ``pm.Potential`` on a flat ``x`` (d,): a black-box Op, or the same
    density in PyTensor (``gradient=True``, for NUTS)."""
    counter = EvaluationCounter()
    with pm.Model() as model:
        x = pm.Flat("x", shape=dim)
        xc = count_evaluations(x, counter)
        if gradient:
            twisted = xc[1] + bananicity * (xc[0] ** 2 - v)
            logp = -0.5 * (xc[0] ** 2 / v + twisted**2 + pt.sum(xc[2:] ** 2))
        else:
            logp = HaarioBananaLogp(bananicity, v)(xc)
        pm.Potential("banana", logp)
    mean, sd = haario_banana_moments(dim, bananicity, v)
    info = ModelInfo(
        name=f"haario_banana{dim}",
        counter=counter,
        param_names=["x"],
        ref_mean={"x": mean},
        ref_sd={"x": sd},
        description=(f"Haario's twisted Gaussian, d = {dim}, b = {bananicity}, V = {v} "
                     f"({'PyTensor, gradient' if gradient else 'black-box Op'}); exact moments."),
        has_gradient=gradient,
        extra={"bananicity": bananicity, "v": v},
    )
    return model, info
