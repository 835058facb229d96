import numpy as np
import pymc as pm
import pytest

from pymc_surrogate import SurrogateHMC
from pymc_surrogate.surrogates import RandomNetworkSurrogate


def _model():
    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 1.0, shape=2)
        pm.Normal("y", x[0] - 0.5 * x[1], 1.0)
    return model


def _set_shared(step, name, value):
    [shared] = [s for var, s in step.functions.shared.items() if var.name == name]
    shared.set_value(np.asarray(value, dtype=shared.dtype))


def test_the_other_blocks_values_are_the_context():
    model = _model()
    with model:
        step = SurrogateHMC([model["x"]])
    context = step.context
    assert (context.block_dim, context.dim) == (2, 1)
    _set_shared(step, "y", 0.7)
    np.testing.assert_allclose(context.join(np.array([1.0, 2.0])), [1.0, 2.0, 0.7])


def test_the_field_is_the_joint_surrogate_at_the_current_context():
    model = _model()
    with model:
        step = SurrogateHMC([model["x"]])
    rng = np.random.default_rng(0)
    joint = rng.standard_normal((200, 3))
    # potential of (x, y): x ~ N(0, I), y | x ~ N(x0 - 0.5 x1, 1)
    resid = joint[:, 2] - joint[:, 0] + 0.5 * joint[:, 1]
    potential = 0.5 * (joint[:, :2] ** 2).sum(1) + 0.5 * resid**2
    surrogate = RandomNetworkSurrogate(n_hidden=0).fit(joint, potential)
    _set_shared(step, "y", 1.5)
    value, grad = step.context.field(surrogate)(np.array([0.2, -0.3]))
    full_value, full_grad = surrogate.value_and_grad(np.array([0.2, -0.3, 1.5]))
    assert value == pytest.approx(full_value)
    np.testing.assert_allclose(grad, full_grad[:2])


def test_a_whole_model_block_has_no_context():
    model = _model()
    with model:
        step = SurrogateHMC()
    assert step.context.dim == 0 and step.context.values() is None


def test_too_large_a_context_is_left_out_with_a_warning():
    with pm.Model() as model:
        x = pm.Normal("x")
        z = pm.Normal("z", x, 1.0, shape=150)
        with pytest.warns(UserWarning, match="150 values"):
            step = SurrogateHMC([x])
    assert step.context.dim == 0
