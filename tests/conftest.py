"""Shared fixtures: models with known posteriors (moment checks: ``tests.reliability.helpers``)."""

import dataclasses

import arviz as az
from threadpoolctl import threadpool_limits

# numpy and scipy each bring an OpenBLAS; on 2 cores their thread pools fight and small
# linear algebra slows down a thousandfold. One thread each is faster and repeatable.
threadpool_limits(1)

# ArviZ 0.23 + numba: mcse(method="sd") fails on vector variables; the numpy path is right.
# (ArviZ 1 has no such switch, and no such failure.)
if hasattr(az, "Numba"):
    az.Numba.disable_numba()
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pytensor.graph.op import Op
from pytensor.graph.basic import Apply


class BlackBoxGaussianLogp(Op):
    """log N(x; mean, cov) as a Python Op with no gradient: the honest black box."""

    __props__ = ()

    def __init__(self, mean, cov):
        self.mean = np.asarray(mean, dtype=float)
        self.prec = np.linalg.inv(cov)
        self.calls = 0

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [pt.dscalar()])

    def perform(self, node, inputs, outputs):
        self.calls += 1
        r = inputs[0] - self.mean
        outputs[0][0] = np.asarray(-0.5 * r @ self.prec @ r)

    # No gradient method: pytensor.grad raises NotImplementedError on PyTensor 2 and 3, and
    # neither warns (PyTensor 3 deprecates overriding ``grad``).


def correlated_gaussian(dim, seed=0, condition=10.0):
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    eig = np.geomspace(1.0, condition, dim)
    cov = (q * eig) @ q.T
    scale = rng.uniform(0.5, 3.0, dim)
    cov = cov * np.outer(scale, scale)
    mean = rng.normal(0, 3, dim)
    return mean, cov


def gaussian_model(mean, cov, black_box=False):
    with pm.Model() as model:
        if black_box:
            x = pm.Flat("x", shape=len(mean), initval=np.asarray(mean) + 0.5)
            pm.Potential("lik", BlackBoxGaussianLogp(mean, cov)(x))
        else:
            pm.MvNormal("x", mean, cov, initval=np.asarray(mean) + 0.5)
    return model


def pytest_collection_modifyitems(config, items):
    """Tag the reliability suite so it can be run on its own.

    ``python -m pytest -m "reliability and not slow"``: its CI part (part of the default run);
    ``python -m pytest -m "reliability and slow"``: the long checks (thorough SBC, d = 50).
    """
    for item in items:
        if "reliability" in item.path.parts:
            item.add_marker(pytest.mark.reliability)


def with_tuning(step_class, **changes):
    """``step_class`` with some of its tuning constants changed (fixed when a step is made:
    its parts keep them)."""
    tuning = dataclasses.replace(step_class.tuning, **changes)
    return type(step_class.__name__, (step_class,), {"tuning": tuning})
