"""Bad settings and bad models raise errors that name the problem.

Settings are checked generically from each class's signature (``registry.init_parameters``):
a negative integer for an integer setting, a negative / NaN / infinite number for a
numeric one, a negative number for an ``"auto"`` one, an unknown option for a string
choice. A new class, or a new setting of an old one, is covered without a new line here;
a setting for which such a value is legal goes in :data:`LEGAL`.
"""

from __future__ import annotations

import logging

import numpy as np
import pymc as pm
import pytest

from tests.reliability.helpers import (
    assert_healthy,
    assert_moments,
    recorded_warnings,
    sample,
    warning_messages,
)
from tests.reliability.registry import STEPS, init_parameters

#: (class name, setting, value) that are legal although the generic rules reject them.
LEGAL: set[tuple[str, str, object]] = set()

# Settings that are not numbers or choices: model plumbing PyMC passes in.
PLUMBING = {"model", "blocked", "rng", "initial_point", "compile_kwargs"}


def invalid_values(cls) -> list[tuple[str, object]]:
    cases = []
    for name, param in init_parameters(cls).items():
        default = param.default
        if name in PLUMBING or default is param.empty or default is None:
            continue
        if isinstance(default, bool):
            continue
        if isinstance(default, (int, np.integer)):
            values = [-1]
        elif isinstance(default, (float, np.floating)):
            values = [-1.0, float("nan"), float("inf")]
        elif default == "auto":
            values = [-1]
        elif isinstance(default, str):
            values = ["no-such-option"]
        else:
            continue
        cases += [(name, v) for v in values if (cls.__name__, name, v) not in LEGAL]
    return cases


SETTING_CASES = [
    pytest.param(entry, name, value, id=f"{entry.id}-{name}={value!r}")
    for entry in STEPS
    for name, value in invalid_values(entry.cls)
]


@pytest.mark.parametrize("entry,name,value", SETTING_CASES)
def test_invalid_setting_is_named(entry, name, value):
    with pm.Model():
        pm.Normal("x", shape=2)
        with pytest.raises(ValueError, match=name):
            entry(**{name: value})


def test_every_class_has_checked_settings():
    # Guards the generic rules above against silently generating nothing.
    for entry in STEPS:
        assert len(invalid_values(entry.cls)) >= 3, entry.id


def test_unknown_keyword_is_named(step):
    with pm.Model():
        pm.Normal("x")
        with pytest.raises(TypeError, match="not_a_setting"):
            step(not_a_setting=1)


# ------------------------------------------------------------------- variables
def test_discrete_variable_is_refused_by_name(step):
    with pm.Model():
        k = pm.Poisson("k", 3.0)
        pm.Normal("x")
        with pytest.raises(ValueError, match=r"\bk\b.*discrete|discrete.*\bk\b"):
            step([k])


def test_model_with_only_discrete_variables_is_named(step):
    with pm.Model():
        pm.Poisson("k", 3.0)
        with pytest.raises(ValueError, match=r"(?i)continuous|discrete"):
            step()


def _foreign_variable():
    with pm.Model():
        return pm.Normal("elsewhere")


@pytest.mark.parametrize("kind", ["other_model", "name", "deterministic", "observed"])
def test_unknown_variable_is_named(step, kind):
    foreign = _foreign_variable()  # created outside: a model opened inside would nest
    with pm.Model():
        x = pm.Normal("x")
        det = pm.Deterministic("doubled", 2 * x)
        obs = pm.Normal("obs", x, 1.0, observed=0.3)
        var, name = {
            "other_model": (foreign, "elsewhere"),
            "name": ("no_such_var", "no_such_var"),
            "deterministic": (det, "doubled"),
            "observed": (obs, "obs"),
        }[kind]
        with pytest.raises(ValueError, match=name):
            step([var])


def test_empty_model_is_named(step):
    with pm.Model():
        with pytest.raises(ValueError, match=r"(?i)variable"):
            step()


def test_zero_size_variable_alone_is_named(step):
    with pm.Model():
        pm.Normal("x", shape=0)
        with pytest.raises(ValueError, match=r"(?i)\bx\b|size|empty|dimension"):
            step()


def test_zero_size_variable_next_to_others_is_harmless(step):
    with pm.Model():
        pm.Normal("x", shape=0)
        pm.Normal("y", 1.0, 2.0)
        idata = sample(step(), tune=400, draws=800)
    assert idata.posterior["x"].shape[-1] == 0
    assert_moments(idata, "y", 1.0, 2.0)


test_zero_size_variable_next_to_others_is_harmless.ci_rotation = 2  # CI: 2 entries


# -------------------------------------------------------------- bad starts, runs
def test_non_finite_start_is_named(step):
    with pm.Model():
        pm.Normal("x", initval=0.0)
        pm.Potential("impossible", pm.math.log(0.0) * 1.0)
        with pytest.raises(Exception, match=r"(?i)start|initial"):
            sample(step(), chains=1, tune=5, draws=5)


def test_no_tuning_warns_and_stays_exact(step, caplog):
    # tune=0: no data to fit a surrogate from (SparseGridHMC: no warm-up to build its grid
    # from). The step must say so (through its `warning` stat, which PyMC logs) and stay
    # exact, on the exact fallback kernel.
    with pm.Model():
        pm.Normal("x", 0.0, 1.0, shape=2)
        s = step()
        with caplog.at_level(logging.WARNING, logger="pymc"):
            idata = sample(s, tune=0, draws=1500)
    assert [r for r in caplog.records
            if r.levelno >= logging.WARNING and type(s).__name__ in r.getMessage()
            and "Increase `tune`" in r.getMessage()]
    assert_healthy(idata)
    uses = idata.sample_stats["uses_surrogate"].values
    fallback = idata.sample_stats["fallback"].values
    assert not uses.any()
    assert fallback.all()
    assert_moments(idata, "x", np.zeros(2), np.ones(2))


test_no_tuning_warns_and_stays_exact.ci_rotation = 3  # CI: 3 entries


# ------------------------------------------------------------- infinite density
def test_infinite_logp_at_a_proposal_is_a_rejection_and_named(step):
    # logp = +inf past x = 1.5: accepted, such a point would absorb the chain (every
    # proposal loses against it). At a proposal it is a rejection (Stan's rule), counted in
    # stat `eval_failures` and logged with the values; the run goes on.
    import pytensor.tensor as pt

    with pm.Model():
        x = pm.Normal("x", 0.0, 1.0, shape=2)
        pm.Potential("spike", pt.switch(pt.gt(x[0], 1.5), np.inf, 0.0))
        with recorded_warnings() as caught:
            idata = sample(step(), chains=1, tune=300, draws=300)
    assert idata.posterior["x"].values[..., 0].max() <= 1.5
    assert idata.sample_stats["eval_failures"].values[0, -1] > 0
    assert warning_messages(caught, "logp is +inf at"), warning_messages(caught)


def test_infinite_logp_at_the_start_is_named(step):
    # At the chain's starting point +inf still stops sampling with the values and the fix.
    import pytensor.tensor as pt
    from pymc.exceptions import SamplingError

    with pm.Model():
        x = pm.Normal("x", 0.0, 1.0, shape=2, initval=np.array([2.0, 0.0]))
        pm.Potential("spike", pt.switch(pt.gt(x[0], 1.5), np.inf, 0.0))
        with pytest.raises(SamplingError, match=r"(?s)logp is \+inf at x = \[.*finite"):
            sample(step(), chains=1, tune=300, draws=300)


# ----------------------------------------------------------------- precision
def test_float32_model_samples_in_its_own_precision(step):
    import pytensor

    with pytensor.config.change_flags(floatX="float32"):
        with pm.Model():
            pm.Normal("x", 1.0, 2.0, shape=2)
            s = step()
            idata = sample(s, tune=500, draws=1000)
    assert idata.posterior["x"].dtype == np.float32
    assert_healthy(idata)
    # the chain's states are float32 values: the draw's logp is reused, not re-evaluated.
    # Evaluations with a gradient are trajectory points (SparseGridHMC outside its box);
    # the value-only ones are the proposal's and, if the state were re-evaluated, its own.
    stats = idata.sample_stats
    assert (stats["model_evals"].values - stats["gradient_evals"].values).max() <= 1
    assert_moments(idata, "x", np.ones(2), np.full(2, 2.0))


# ------------------------------------------------------------------ gradients
def _op_with_grad(grad):
    """``-x^2 / 2`` summed, as an Op whose ``grad`` is ``grad(inputs, output_grads)``."""
    import pytensor.tensor as pt
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op

    class Custom(Op):
        __props__ = ()

        def make_node(self, x):
            return Apply(self, [pt.as_tensor_variable(x)], [pt.dscalar()])

        def perform(self, node, inputs, outputs):
            outputs[0][0] = np.asarray(-0.5 * np.sum(inputs[0] ** 2))

    Custom.grad = lambda self, inputs, output_grads: grad(inputs, output_grads)
    return Custom()


def _not_implemented(inputs, output_grads):
    raise NotImplementedError("no gradient")


def _undefined(inputs, output_grads):
    from pytensor.gradient import grad_undefined

    return [grad_undefined(None, 0, inputs[0], "no gradient")]


def _returns_none(inputs, output_grads):
    return [None]  # a bug: PyTensor asks for grad_undefined or zeros


@pytest.mark.parametrize("grad", [_not_implemented, _undefined], ids=["not_implemented", "undefined"])
def test_an_op_without_gradient_is_a_black_box(step, grad):
    with pm.Model():
        x = pm.Flat("x", shape=2, initval=np.zeros(2))
        pm.Potential("lik", _op_with_grad(grad)(x))
        if step.cls.learns_from_gradients:
            # a step that learns from gradients refuses it, naming the opt-in, which works
            with pytest.raises(ValueError, match="finite_difference"):
                step()
            assert step(use_gradient="finite_difference").functions.finite_difference
        else:
            assert not step().has_gradient


def test_a_broken_gradient_is_not_taken_for_a_black_box(step):
    with pm.Model():
        x = pm.Flat("x", shape=2, initval=np.zeros(2))
        pm.Potential("lik", _op_with_grad(_returns_none)(x))
        with pytest.raises(TypeError, match=r"(?s)returned None.*use_gradient=False"):
            step()
        # the way out the message gives works
        if step.cls.learns_from_gradients:
            assert step(use_gradient="finite_difference").functions.finite_difference
        else:
            assert not step(use_gradient=False).has_gradient
