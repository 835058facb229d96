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
    sample,
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


# -------------------------------------------------------------- bad starts, runs
def test_non_finite_start_is_named(step):
    with pm.Model():
        pm.Normal("x", initval=0.0)
        pm.Potential("impossible", pm.math.log(0.0) * 1.0)
        with pytest.raises(Exception, match=r"(?i)start|initial"):
            sample(step(), chains=1, tune=5, draws=5)


def test_no_tuning_warns_and_stays_exact(step, caplog):
    # tune=0: no data to fit a surrogate from. The step must say so (through its `warning`
    # stat, which PyMC logs) and fall back to an exact kernel.
    with pm.Model():
        pm.Normal("x", 0.0, 1.0, shape=2)
        s = step()
        with caplog.at_level(logging.WARNING, logger="pymc"):
            idata = sample(s, tune=0, draws=1500)
    assert [r for r in caplog.records
            if r.levelno >= logging.WARNING and type(s).__name__ in r.getMessage()
            and "Increase `tune`" in r.getMessage()]
    assert_healthy(idata)
    assert not idata.sample_stats["uses_surrogate"].values.any()
    assert idata.sample_stats["fallback"].values.all()
    assert_moments(idata, "x", np.zeros(2), np.ones(2))
