"""The compiled model functions: the backend chosen for a graph holding a Python Op."""

from __future__ import annotations

import logging

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import get_default_mode
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from pymc_surrogate import SurrogateHMC
from pymc_surrogate.step_methods.evaluation import model_functions

NUMBA_DEFAULT = type(get_default_mode().linker).__name__ == "NumbaLinker"  # PyTensor 3


class SquaredNorm(Op):
    """``-|x|^2 / 2`` in numpy: a Python Op with no Numba implementation and no gradient."""

    __props__ = ()

    def make_node(self, x):
        return Apply(self, [pt.as_tensor_variable(x)], [pt.dscalar()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.asarray(-0.5 * np.sum(inputs[0] ** 2))


def _linker(step) -> str:
    return type(step.functions._logp.maker.linker).__name__


def _black_box():
    model = pm.Model()
    with model:
        x = pm.Flat("x", shape=2)
        pm.Potential("lik", SquaredNorm()(x))
    return model


@pytest.mark.skipif(not NUMBA_DEFAULT, reason="PyTensor 2 compiles with C by default")
def test_a_python_op_on_numba_compiles_with_c_and_says_so_once(caplog, monkeypatch):
    monkeypatch.setattr(model_functions, "_TOLD", set())
    with _black_box(), caplog.at_level(logging.INFO, logger="pymc"):
        first, second = SurrogateHMC(), SurrogateHMC()
    assert _linker(first) == _linker(second) != "NumbaLinker"
    told = [r for r in caplog.records if "object mode" in r.getMessage()]
    assert len(told) == 1 and "SquaredNorm" in told[0].getMessage()
    assert first.functions.logp(np.array([1.0, 2.0])) == pytest.approx(-2.5)


@pytest.mark.skipif(not NUMBA_DEFAULT, reason="PyTensor 2 compiles with C by default")
def test_a_pure_pymc_model_and_a_users_mode_are_left_alone():
    # MvNormal's graph holds a Blockwise with no Numba implementation until the rewrites
    # remove it: judged before them, every MvNormal model went to C (and its draws changed)
    with pm.Model():
        pm.MvNormal("x", np.zeros(3), np.eye(3) + 0.5)
        assert _linker(SurrogateHMC()) == "NumbaLinker"
    with _black_box():
        assert _linker(SurrogateHMC(compile_kwargs={"mode": "NUMBA"})) == "NumbaLinker"


def test_nothing_changes_where_numba_is_not_the_default(monkeypatch):
    if NUMBA_DEFAULT:
        monkeypatch.setattr(model_functions, "_object_mode_ops", lambda outputs: set())
    with _black_box():
        step = SurrogateHMC()
    assert _linker(step) == type(get_default_mode().linker).__name__


def test_central_difference_steps_follow_each_coordinates_scale():
    """``difference_scale``: steps of 6e-6 times the coordinate's scale (or ``|q_i|``, if
    larger); unset, 6e-6 times ``max(1, |q_i|)``. The gradient of N(0, diag(1e8, 1e-8))
    is right either way here (a quadratic), and the steps are recorded."""
    from pymc_surrogate import VariationalHMC

    sds = np.array([1e4, 1e-4])
    with pm.Model():
        pm.Normal("x", 0.0, sds, shape=2)
        functions = VariationalHMC(use_gradient="finite_difference").functions
    assert functions.finite_difference and functions.difference_scale is not None
    seen = []
    logp = functions.logp
    functions.logp = lambda q: seen.append(np.array(q)) or logp(q)
    q = np.array([0.5, 0.5]) * sds
    _, grad = functions.logp_and_grad(q)
    np.testing.assert_allclose(grad * sds, -0.5, rtol=1e-6)
    steps = np.abs(seen[0] - q)
    np.testing.assert_allclose(
        steps, model_functions.FINITE_DIFFERENCE_STEP * functions.difference_scale * [1, 0],
        rtol=1e-6, atol=1e-30)
    with _black_box():  # a pm.Flat: no prior scale, the steps of before
        flat = VariationalHMC(use_gradient="finite_difference").functions
    assert flat.difference_scale is None
